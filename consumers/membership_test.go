package consumers_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/testenv"
)

// Ready follows the member's place in its group: failing, with the group's
// name, before a first join while no broker answers; passing once the group
// joined; failing again once the broker is gone for longer than the grace
// (the client's session ends, as when it is kicked out); passing after it
// rejoined the returning broker; failing after Run returned.
func TestReadyFollowsGroupMembership(t *testing.T) {
	const group, topic = "membership-group", "membership-in"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close() // nothing listens there until the broker starts
	seeds := []string{addr.String()}
	startBroker := func() *kfake.Cluster {
		t.Helper()
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(addr.Port),
			kfake.SeedTopics(2, topic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}

	r := newRunner(t, seeds, consumers.Config{
		Group: group, Topics: []string{topic},
		Handler:         func(context.Context, *consumers.Message) error { return nil },
		MembershipGrace: time.Millisecond,
		// A short session, so that the client notices the broker left soon.
		ClientOpts: []kgo.Opt{kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)},
	})
	stop := start(t, r)
	ctx := context.Background()

	notReady := func(what, want string) {
		t.Helper()
		var last error
		testenv.Eventually(t, 60*time.Second, what, func() bool {
			last = r.Ready(ctx)
			return last != nil && strings.Contains(last.Error(), want)
		})
		if !strings.Contains(last.Error(), group) {
			t.Fatalf("readiness error does not name the group: %v", last)
		}
	}
	ready := func(what string) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, what, func() bool { return r.Ready(ctx) == nil })
	}

	notReady("not ready before the first join", "has not joined yet")
	notReady("the readiness error before the first join says why", "connect to broker "+addr.String())
	c := startBroker()
	ready("ready once the group joined")

	c.Close()
	notReady("not ready once the broker has been gone for longer than the grace", "out of the group")

	startBroker()
	ready("ready after rejoining the returning broker")

	stop()
	notReady("not ready after Run returned", "stopped")
}
