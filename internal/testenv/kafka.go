package testenv

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka starts an in-process kfake broker on a free loopback port for one test
// and returns its seed addresses. The broker is closed when the test ends.
// Options are passed through to kfake (for example kfake.SeedTopics).
func Kafka(t testing.TB, opts ...kfake.Opt) []string {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.Ports(0)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testenv: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}
