package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/config"
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

// chat connects to a session's WebSocket stream: each line read from stdin
// is a prompt ("/cancel", "/status", "/snapshot" send those messages);
// streamed tokens are printed as they come and every other server message
// as one JSON line.
func chat(ctx context.Context, cfg *config.Config, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	gateway, token, session, err := sessionArgs("chat", cfg, args, stderr)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(stdout)
	var mu sync.Mutex
	print := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprint(out, s)
		_ = out.Flush()
	}
	c := client.New(gateway, token)
	conn, err := c.Connect(ctx, session, client.Handler{
		OnMessage: func(m client.Message) {
			switch m.Type {
			case hub.MsgToken:
				var t hub.TokenMessage
				if m.Decode(&t) == nil {
					print(t.Token)
				}
			case hub.MsgMessageComplete:
				print("\n[message_complete]\n")
			default:
				var v map[string]any
				if json.Unmarshal(m.Raw, &v) == nil {
					if m.Type == hub.MsgInit {
						delete(v, "messages") // the history can be long
					}
					b, _ := json.Marshal(v)
					print("\n" + string(b) + "\n")
				}
			}
		},
		OnDisconnect: func(err error) { print(fmt.Sprintf("\n[disconnected: %v; reconnecting]\n", err)) },
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	lines := bufio.NewScanner(stdin)
	for lines.Scan() {
		line := strings.TrimSpace(lines.Text())
		var err error
		switch line {
		case "":
			continue
		case "/cancel":
			err = conn.Cancel()
		case "/status":
			err = conn.Send(hub.ClientMessage{Type: hub.ClientGetStatus})
		case "/snapshot":
			err = conn.Send(hub.ClientMessage{Type: hub.ClientSaveSnapshot})
		default:
			err = conn.Prompt(line)
		}
		if err != nil {
			print(fmt.Sprintf("\n[error: %v]\n", err))
		}
	}
	select {
	case <-conn.Done():
		return conn.Err()
	default:
		return lines.Err()
	}
}
