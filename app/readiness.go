package app

// Readiness. Each role builder declares, explicitly, the checks of what it
// needs to do its job (the ready* methods below); the process's /readyz runs
// those of every role it runs, so `dev` checks the union. Opening a
// connection registers nothing: a role that opens Redis only because a
// shared constructor does is not made unready by Redis.
//
// Check names: postgres, redis, kafka (one metadata round trip covering
// every topic the process's roles produce to directly), blobstore, sandbox,
// group:<name> (a consumer group's membership), and outbox (the relay's,
// registered by RelayRole).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/llmproxy"
)

// Readiness check names.
const (
	CheckPostgres  = "postgres"
	CheckRedis     = "redis"
	CheckKafka     = "kafka"
	CheckBlobStore = "blobstore"
	CheckSandbox   = "sandbox"
	// CheckGroupPrefix + a consumer group's name is that group's check.
	CheckGroupPrefix = "group:"
)

// readyPostgres: the role reads or writes Postgres (a pool connection
// answers a ping). OpenPostgres must have run.
func (a *App) readyPostgres() {
	pool := a.Pool
	a.Checks.Add(CheckPostgres, func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		return nil
	})
}

// readyRedis: the role needs Redis (PING answers). OpenRedis must have run.
func (a *App) readyRedis() {
	rdb := a.Redis
	a.Checks.Add(CheckRedis, func(ctx context.Context) error {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		return nil
	})
}

// kafkaReadiness is the state of the process's kafka check.
type kafkaReadiness struct {
	mu     sync.Mutex
	cl     *kgo.Client
	topics []string // sorted, unique
	dial   dialErrors
}

// dialErrors remembers the readiness client's last failed connection, so a
// check that got no answer can say why.
type dialErrors struct {
	mu   sync.Mutex
	err  error
	when time.Time
}

var _ kgo.HookBrokerConnect = (*dialErrors)(nil)

func (d *dialErrors) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.err, d.when = fmt.Errorf("connect to %s: %w", net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))), err), time.Now()
	}
}

// since is the last connection error after t, if any.
func (d *dialErrors) since(t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil && !d.when.Before(t) {
		return d.err
	}
	return nil
}

// readinessClient is the process's Kafka client for readiness (and the
// connectivity check of OpenKafka), created on first use.
func (a *App) readinessClient() (*kgo.Client, error) {
	a.kafkaReady.mu.Lock()
	defer a.kafkaReady.mu.Unlock()
	if a.kafkaReady.cl != nil {
		return a.kafkaReady.cl, nil
	}
	cl, err := a.NewKafkaClient("readiness", kgo.WithHooks(&a.kafkaReady.dial))
	if err != nil {
		return nil, err
	}
	a.kafkaReady.cl = cl
	return cl, nil
}

// readyKafka: the role produces to these topics itself (not through the
// outbox). The kafka check sends one Metadata request for every topic the
// process's roles named to a broker (a real round trip, not the client's
// cached view) and fails unless each topic exists and every partition has
// a leader, that is, unless a produce to any of them could succeed now.
func (a *App) readyKafka(topicNames ...string) error {
	cl, err := a.readinessClient()
	if err != nil {
		return err
	}
	a.kafkaReady.mu.Lock()
	for _, t := range topicNames {
		if !slices.Contains(a.kafkaReady.topics, t) {
			a.kafkaReady.topics = append(a.kafkaReady.topics, t)
		}
	}
	slices.Sort(a.kafkaReady.topics)
	a.kafkaReady.mu.Unlock()
	a.Checks.Add(CheckKafka, func(ctx context.Context) error {
		a.kafkaReady.mu.Lock()
		names := slices.Clone(a.kafkaReady.topics)
		a.kafkaReady.mu.Unlock()
		return kafkaTopicsReady(ctx, cl, names, &a.kafkaReady.dial)
	})
	return nil
}

// kafkaTopicsReady asks a broker for the metadata of names. It gives up a
// tenth of its time before ctx's deadline, to say why it got no answer.
func kafkaTopicsReady(ctx context.Context, cl *kgo.Client, names []string, dial *dialErrors) error {
	start := time.Now()
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-time.Until(dl)/10))
		defer cancel()
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, n := range names {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		if ctx.Err() != nil {
			err = errors.New("no answer from the brokers")
			if last := dial.since(start); last != nil {
				err = fmt.Errorf("no answer from the brokers (%w)", last)
			}
		}
		return fmt.Errorf("metadata request for %s: %w", strings.Join(names, ","), err)
	}
	if len(resp.Brokers) == 0 {
		return errors.New("metadata: the cluster reports no brokers")
	}
	var problems []string
	seen := map[string]bool{}
	for _, t := range resp.Topics {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		}
		seen[name] = true
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			hint := ""
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				hint = " (`proliferate topics ensure` creates it)"
			}
			problems = append(problems, fmt.Sprintf("topic %s: %v%s", name, err, hint))
			continue
		}
		if len(t.Partitions) == 0 {
			problems = append(problems, fmt.Sprintf("topic %s has no partitions", name))
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil && !errors.Is(err, kerr.ReplicaNotAvailable) {
				problems = append(problems, fmt.Sprintf("topic %s partition %d: %v", name, p.Partition, err))
			} else if p.Leader < 0 {
				problems = append(problems, fmt.Sprintf("topic %s partition %d has no leader", name, p.Partition))
			}
		}
	}
	for _, n := range names {
		if !seen[n] {
			problems = append(problems, fmt.Sprintf("topic %s: missing from the metadata response", n))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// readyBlobStore: the role puts or gets blobs. The check writes one small
// probe object the first time it runs (proving the store takes writes with
// these credentials), then reads it back on every run.
func (a *App) readyBlobStore(store blobstore.Store) {
	var (
		mu  sync.Mutex
		ref string
	)
	a.Checks.Add(CheckBlobStore, func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if ref == "" {
			r, err := store.Put(ctx, "_readiness/probe", []byte("ok\n"), "text/plain")
			if err != nil {
				return err
			}
			ref = r
		}
		if _, err := store.Get(ctx, ref); err != nil {
			if errors.Is(err, blobstore.ErrNotFound) {
				ref = "" // removed under us: write it again next time
			}
			return err
		}
		return nil
	})
}

// readySandboxDir: the local sandbox provider keeps workspaces and
// snapshots under dir; the check creates and removes a file there (a full
// or read-only volume fails it).
func (a *App) readySandboxDir(dir string) {
	a.Checks.Add(CheckSandbox, func(ctx context.Context) error {
		f, err := os.CreateTemp(dir, ".readiness-*")
		if err != nil {
			return fmt.Errorf("sandbox data dir: %w", err)
		}
		name := f.Name()
		err = f.Close()
		if rmErr := os.Remove(name); err == nil {
			err = rmErr
		}
		if err != nil {
			return fmt.Errorf("sandbox data dir: %w", err)
		}
		return ctx.Err()
	})
}

// readyGroup: the consumer group's member must be in its group (see
// consumers.Runner.Ready).
func (a *App) readyGroup(name string, check func(context.Context) error) {
	a.Checks.Add(CheckGroupPrefix+name, check)
}

// readyLLMKeys: the role issues or revokes per-session LLM keys. The
// built-in proxy's keys are in Postgres and revocations are broadcast
// through Redis; LiteLLM's admin API is not checked.
func (a *App) readyLLMKeys(keys llmkeys.Issuer) {
	if _, ok := keys.(*llmproxy.Keys); ok {
		a.readyRedis()
	}
}
