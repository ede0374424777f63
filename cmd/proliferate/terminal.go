package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/gorilla/websocket"
	"golang.org/x/term"

	"github.com/proliferate/proliferate/internal/config"
)

// terminal opens a shell in a session's sandbox through the gateway's
// terminal WebSocket (/proxy/{sid}/{token}/terminal): stdin goes in as
// keystrokes (raw mode when stdin is a terminal), output comes back on
// stdout, and the window size follows the local terminal (SIGWINCH).
func terminal(ctx context.Context, cfg *config.Config, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	gateway, token, session, err := sessionArgs("terminal", cfg, args, stderr)
	if err != nil {
		return err
	}
	u, err := url.Parse(strings.TrimRight(gateway, "/"))
	if err != nil {
		return usageError{"invalid --gateway: " + err.Error()}
	}
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	cols, rows := 80, 24
	in, isTTY := stdin.(*os.File)
	isTTY = isTTY && term.IsTerminal(int(in.Fd()))
	if isTTY {
		if w, h, err := term.GetSize(int(in.Fd())); err == nil {
			cols, rows = w, h
		}
	}
	base := strings.TrimRight(u.EscapedPath(), "/")
	u.RawPath = base + "/proxy/" + url.PathEscape(session) + "/" + url.PathEscape(token) + "/terminal"
	if u.Path, err = url.PathUnescape(u.RawPath); err != nil {
		return usageError{"invalid --gateway path"}
	}
	u.RawQuery = fmt.Sprintf("cols=%d&rows=%d", cols, rows)
	conn, resp, err := websocket.DefaultDialer.DialContext(ctx, u.String(), nil)
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			return fmt.Errorf("terminal: %s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		return fmt.Errorf("terminal: %w", err)
	}
	defer conn.Close()
	if isTTY {
		old, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return fmt.Errorf("terminal: raw mode: %w", err)
		}
		defer func() { _ = term.Restore(int(in.Fd()), old) }()
	}

	var wmu sync.Mutex
	write := func(typ int, b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return conn.WriteMessage(typ, b)
	}
	if isTTY {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if w, h, err := term.GetSize(int(in.Fd())); err == nil {
					b, _ := json.Marshal(map[string]any{"type": "resize", "cols": w, "rows": h})
					_ = write(websocket.TextMessage, b)
				}
			}
		}()
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := stdin.Read(buf)
			if n > 0 && write(websocket.BinaryMessage, buf[:n]) != nil {
				return
			}
			if err != nil {
				// End of input: let the shell finish what it was given.
				_ = write(websocket.BinaryMessage, []byte("exit\n"))
				return
			}
		}
	}()
	for {
		typ, b, err := conn.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) && ce.Code == websocket.CloseNormalClosure {
				return nil
			}
			return fmt.Errorf("terminal: %w", err)
		}
		if typ == websocket.BinaryMessage {
			if _, err := stdout.Write(b); err != nil {
				return err
			}
		}
	}
}
