package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/sessions"
)

// sessionArgs parses what every session client takes: --gateway, --token
// (default $PROLIFERATE_TOKEN) and the session id.
func sessionArgs(name string, cfg *config.Config, args []string, stderr io.Writer) (gateway, token, session string, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	gw := fs.String("gateway", cfg.GatewayPublicURL, "gateway base URL")
	tok := fs.String("token", os.Getenv("PROLIFERATE_TOKEN"), "access token or API key (default $PROLIFERATE_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return "", "", "", usageError{err.Error()}
	}
	if fs.NArg() != 1 || *tok == "" {
		return "", "", "", usageError{name + " needs a session id and a token: proliferate " + name + " --token $TOK SESSION_ID"}
	}
	return *gw, *tok, fs.Arg(0), nil
}

// chatInitTimeout bounds the wait for a (re)connected stream's init frame
// before the first line is sent on it.
const chatInitTimeout = 30 * time.Second

// chat connects to a session's WebSocket stream: each line read from stdin
// is a prompt ("/cancel", "/status", "/snapshot" send those messages);
// streamed tokens are printed as they come and every other server message
// as one JSON line.
//
// A paused session closes its streams (close code 4000), and connecting
// again resumes it: when the stream has ended that way, or after the
// client's own reconnection attempts gave up, the next line reconnects
// first (with the client's backoff, bounded: 1 s doubling to 30 s, 10
// attempts) and is sent once the gateway has attached it. A session that
// has ended for good (stopped, failed), or credentials the gateway refuses,
// end the chat.
func chat(ctx context.Context, cfg *config.Config, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	gateway, token, session, err := sessionArgs("chat", cfg, args, stderr)
	if err != nil {
		return err
	}
	cs := newChatSession(client.New(gateway, token), session, stdout)
	if err := cs.connect(ctx); err != nil {
		return err
	}
	defer cs.close()
	lines := bufio.NewScanner(stdin)
	for lines.Scan() {
		line := strings.TrimSpace(lines.Text())
		if line == "" {
			continue
		}
		conn, err := cs.live(ctx)
		if err != nil {
			if fatal(ctx, err) {
				return err
			}
			cs.print(fmt.Sprintf("\n[error: %v; the next line tries again]\n", err))
			continue
		}
		switch line {
		case "/cancel":
			err = conn.Cancel()
		case "/status":
			err = conn.Send(protocol.ClientMessage{Type: protocol.ClientGetStatus})
		case "/snapshot":
			err = conn.Send(protocol.ClientMessage{Type: protocol.ClientSaveSnapshot})
		default:
			err = conn.Prompt(line)
		}
		if err != nil {
			cs.print(fmt.Sprintf("\n[error: %v]\n", err))
		}
	}
	return lines.Err()
}

// chatSession is chat's connection to one session, replaced by a new one
// when it ended resumably.
type chatSession struct {
	c       *client.Client
	session string
	out     *bufio.Writer

	mu   sync.Mutex // guards out and conn
	conn *client.Conn
}

// errSessionOver: the session is stopped or failed; no line can resume it.
var errSessionOver = errors.New("the session has ended")

func newChatSession(c *client.Client, session string, stdout io.Writer) *chatSession {
	return &chatSession{c: c, session: session, out: bufio.NewWriter(stdout)}
}

func (cs *chatSession) print(s string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	fmt.Fprint(cs.out, s)
	_ = cs.out.Flush()
}

func (cs *chatSession) onMessage(inits chan struct{}) func(client.Message) {
	return func(m client.Message) {
		switch m.Type {
		case protocol.MsgToken:
			var t protocol.TokenMessage
			if m.Decode(&t) == nil {
				cs.print(t.Token)
			}
		case protocol.MsgMessageComplete:
			cs.print("\n[message_complete]\n")
		default:
			var v map[string]any
			if json.Unmarshal(m.Raw, &v) == nil {
				if m.Type == protocol.MsgInit {
					delete(v, "messages") // the history can be long
				}
				b, _ := json.Marshal(v)
				cs.print("\n" + string(b) + "\n")
			}
			if m.Type == protocol.MsgInit {
				select {
				case inits <- struct{}{}:
				default:
				}
			}
		}
	}
}

func (cs *chatSession) onDisconnect(err error) {
	var ce *websocket.CloseError
	if errors.As(err, &ce) && ce.Code == protocol.CloseSessionEnded {
		return // watch says what became of the session
	}
	cs.print(fmt.Sprintf("\n[disconnected: %v; reconnecting]\n", err))
}

// connect opens a stream (retrying per the client's policy) and waits for
// the gateway to attach it (its init frame), so that a line sent next is
// not lost on a socket the gateway is closing.
func (cs *chatSession) connect(ctx context.Context) error {
	inits := make(chan struct{}, 1)
	conn, err := cs.c.Connect(ctx, cs.session, client.Handler{
		OnMessage:    cs.onMessage(inits),
		OnDisconnect: cs.onDisconnect,
	})
	if err != nil {
		return err
	}
	cs.mu.Lock()
	cs.conn = conn
	cs.mu.Unlock()
	t := time.NewTimer(chatInitTimeout)
	defer t.Stop()
	select {
	case <-inits:
	case <-conn.Done():
		return conn.Err()
	case <-t.C: // send anyway; the client reconnects if the gateway dropped it
	case <-ctx.Done():
		return ctx.Err()
	}
	go cs.watch(ctx, conn)
	return nil
}

// watch tells the person when the stream ends for good, and whether the
// next line resumes the session.
func (cs *chatSession) watch(ctx context.Context, conn *client.Conn) {
	<-conn.Done()
	err := conn.Err()
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return
	}
	if errors.Is(err, client.ErrSessionEnded) {
		if st, ended := cs.ended(ctx); ended {
			cs.print(fmt.Sprintf("\n[session %s: nothing to resume]\n", st))
		} else {
			cs.print(fmt.Sprintf("\n[session %s; the next line resumes it]\n", st))
		}
		return
	}
	cs.print(fmt.Sprintf("\n[disconnected: %v; the next line reconnects]\n", err))
}

// ended asks the gateway what became of the session.
func (cs *chatSession) ended(ctx context.Context) (status string, ended bool) {
	s, err := cs.c.Info(ctx, cs.session)
	if err != nil {
		return "closed", false // unknown: let the next line try
	}
	return s.Status, s.Status == sessions.StatusStopped || s.Status == sessions.StatusFailed
}

// live returns the current stream, first reconnecting when it ended
// resumably.
func (cs *chatSession) live(ctx context.Context) (*client.Conn, error) {
	cs.mu.Lock()
	conn := cs.conn
	cs.mu.Unlock()
	select {
	case <-conn.Done():
	default:
		return conn, nil
	}
	err := conn.Err()
	if fatal(ctx, err) {
		return nil, err
	}
	if errors.Is(err, client.ErrSessionEnded) {
		if st, ended := cs.ended(ctx); ended {
			return nil, fmt.Errorf("%w (%s)", errSessionOver, st)
		}
	}
	cs.print("\n[reconnecting]\n")
	if err := cs.connect(ctx); err != nil {
		return nil, err
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.conn, nil
}

// fatal: the chat cannot go on (the context ended, the session ended, or
// the gateway refuses the credentials or does not know the session).
func fatal(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, errSessionOver) {
		return true
	}
	return errors.Is(err, client.ErrUnauthorized) || errors.Is(err, client.ErrForbidden) || errors.Is(err, client.ErrNotFound)
}

func (cs *chatSession) close() {
	cs.mu.Lock()
	conn := cs.conn
	cs.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
}
