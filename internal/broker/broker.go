// Package broker runs the embedded Kafka broker used in development and by
// `proliferate broker`: franz-go's kfake, a real Kafka-protocol server, with its
// partitions, groups and producer ids persisted in a data directory.
//
// kfake itself does not lock its data directory, does not apply retention on its
// own and reports a busy port as a bare listen error; this package adds those
// three so a second `make run` cannot corrupt the first one's data.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Options configure Start.
type Options struct {
	// Addr is the listen address, host:port. Port 0 picks a free port.
	Addr string
	// DataDir persists the broker's state; empty keeps everything in memory.
	DataDir string
	// RetentionInterval is how often topic retention (retention.ms/bytes) is
	// applied; zero disables it.
	RetentionInterval time.Duration
	// Partitions is the default partition count for auto-created topics.
	Partitions int
	Logger     *slog.Logger
}

// Broker is a running embedded broker.
type Broker struct {
	cluster *kfake.Cluster
	lock    *os.File
	stop    chan struct{}
	done    chan struct{}
	log     *slog.Logger
	closed  sync.Once
}

// ErrDataDirLocked means another process is using the data directory.
var ErrDataDirLocked = errors.New("broker data directory is in use by another process")

// ErrAddrInUse means the listen address is taken.
var ErrAddrInUse = errors.New("broker listen address is already in use")

// Start locks the data directory, loads any persisted state and starts
// listening. Close it to persist and release the directory.
func Start(opts Options) (*Broker, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Broker{stop: make(chan struct{}), done: make(chan struct{}), log: log}
	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ClusterID("proliferate-dev"),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			ln, err := net.Listen(network, opts.Addr)
			if err != nil {
				if errors.Is(err, syscall.EADDRINUSE) {
					return nil, fmt.Errorf("%w: %s (another broker or program listens there; stop it or set BROKER_ADDR)", ErrAddrInUse, opts.Addr)
				}
				return nil, fmt.Errorf("listen on %s: %w", opts.Addr, err)
			}
			return ln, nil
		}),
	}
	if opts.Partitions > 0 {
		kopts = append(kopts, kfake.DefaultNumPartitions(opts.Partitions))
	}
	if opts.DataDir != "" {
		lock, err := lockDir(opts.DataDir)
		if err != nil {
			return nil, err
		}
		b.lock = lock
		kopts = append(kopts, kfake.DataDir(opts.DataDir))
	}
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		b.unlock()
		return nil, fmt.Errorf("start embedded broker: %w", err)
	}
	b.cluster = c
	go b.retain(opts.RetentionInterval)
	return b, nil
}

// Addr is the address clients connect to.
func (b *Broker) Addr() string { return b.cluster.ListenAddrs()[0] }

// ApplyRetention deletes records past their topic's retention now.
func (b *Broker) ApplyRetention() { b.cluster.ApplyRetention() }

// Close stops the broker, persists its state and releases the data directory.
// Closing twice is harmless.
func (b *Broker) Close() {
	b.closed.Do(func() {
		close(b.stop)
		<-b.done
		b.cluster.Close()
		b.unlock()
	})
}

func (b *Broker) retain(every time.Duration) {
	defer close(b.done)
	if every <= 0 {
		<-b.stop
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.cluster.ApplyRetention()
		}
	}
}

// lockDir takes an exclusive flock on DIR/.lock, recording our pid in it. The
// kernel releases the lock when the process dies, so a SIGKILLed broker never
// leaves a stale lock behind.
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create broker data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (held by pid %s)", ErrDataDirLocked, dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

func (b *Broker) unlock() {
	if b.lock != nil {
		_ = syscall.Flock(int(b.lock.Fd()), syscall.LOCK_UN)
		b.lock.Close()
		b.lock = nil
	}
}

// Run starts the broker and blocks until ctx ends, then closes it.
func Run(ctx context.Context, opts Options) error {
	b, err := Start(opts)
	if err != nil {
		return err
	}
	b.log.Info("embedded kafka broker listening", "addr", b.Addr(), "data_dir", opts.DataDir)
	<-ctx.Done()
	b.Close()
	return nil
}
