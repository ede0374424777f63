package hub

import (
	"errors"
	"sync"
)

// ErrSlowClient is returned by SocketClient.Send when the client's queue
// would exceed its byte budget.
var ErrSlowClient = errors.New("hub: client too slow")

// FrameWriter writes whole frames to one connection (a WebSocket text
// message per call). WriteFrame may block; it is only ever called from the
// SocketClient's writer goroutine.
type FrameWriter interface {
	WriteFrame(msg []byte) error
	// CloseWith sends a close frame with code and reason (best effort) and
	// closes the connection. It is called once, from its own goroutine,
	// possibly while WriteFrame is blocked: it must unblock it.
	CloseWith(code int, reason string) error
}

// BatchWriter is a FrameWriter that can write several frames at once
// (WebSocketWriter: one system call). The SocketClient hands it every
// frame queued while its previous write was in flight.
type BatchWriter interface {
	FrameWriter
	WriteFrames(msgs [][]byte) error
}

// SocketClient is a Client with a bounded outbound queue drained by one
// writer goroutine: Send never blocks; it fails with ErrSlowClient when the
// bytes queued but not yet written would exceed maxBytes (the slow-consumer
// rule). Close stops the writer and closes the connection with the code.
type SocketClient struct {
	w        FrameWriter
	maxBytes int

	mu      sync.Mutex
	queue   [][]byte
	queued  int
	closed  bool
	wake    chan struct{}
	done    chan struct{}
	closeFn sync.Once
}

// NewSocketClient starts the writer goroutine. maxBytes <= 0 means 1 MiB.
func NewSocketClient(w FrameWriter, maxBytes int) *SocketClient {
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	c := &SocketClient{w: w, maxBytes: maxBytes, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go c.run()
	return c
}

// Send enqueues msg (msg must not be modified afterwards).
func (c *SocketClient) Send(msg []byte) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if c.queued+len(msg) > c.maxBytes {
		c.mu.Unlock()
		return ErrSlowClient
	}
	c.queue = append(c.queue, msg)
	c.queued += len(msg)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// Queued returns the bytes enqueued but not yet written.
func (c *SocketClient) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queued
}

// Close discards the queue and closes the connection with code and reason
// without waiting (idempotent).
func (c *SocketClient) Close(code int, reason string) {
	c.closeFn.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.queue = nil
		c.queued = 0
		c.mu.Unlock()
		select {
		case c.wake <- struct{}{}:
		default:
		}
		go func() { _ = c.w.CloseWith(code, reason) }()
	})
}

// Done is closed when the writer goroutine has exited.
func (c *SocketClient) Done() <-chan struct{} { return c.done }

func (c *SocketClient) run() {
	defer close(c.done)
	var batch [][]byte
	for range c.wake {
		for {
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				return
			}
			batch, c.queue = c.queue, batch[:0]
			c.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			if bw, ok := c.w.(BatchWriter); ok && len(batch) > 1 {
				n := 0
				for _, m := range batch {
					n += len(m)
				}
				err := bw.WriteFrames(batch)
				clear(batch)
				if err != nil {
					c.Close(1011, "write failed")
					continue
				}
				c.mu.Lock()
				c.queued -= n
				c.mu.Unlock()
				continue
			}
			for i, m := range batch {
				if err := c.w.WriteFrame(m); err != nil {
					c.Close(1011, "write failed")
					break
				}
				c.mu.Lock()
				c.queued -= len(m)
				c.mu.Unlock()
				batch[i] = nil
			}
		}
	}
}
