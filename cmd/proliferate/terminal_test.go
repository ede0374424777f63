package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/internal/config"
)

// The terminal client speaks the gateway's terminal protocol: it dials
// /proxy/{sid}/{token}/terminal with a window size, sends stdin as binary
// keystrokes (and "exit" at the end of input), prints binary output, and
// ends quietly on a normal close.
func TestTerminalClientSpeaksTheProtocol(t *testing.T) {
	var gotPath, gotQuery string
	var keys strings.Builder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotQuery = r.URL.EscapedPath(), r.URL.RawQuery
		up := websocket.Upgrader{}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			typ, b, err := c.ReadMessage()
			if err != nil {
				return
			}
			if typ != websocket.BinaryMessage {
				t.Errorf("frame type %d, want binary", typ)
			}
			keys.Write(b)
			if strings.Contains(keys.String(), "exit\n") {
				_ = c.WriteMessage(websocket.BinaryMessage, []byte("42\r\n"))
				_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "shell exited"))
				return
			}
		}
	}))
	defer srv.Close()
	cfg := &config.Config{GatewayPublicURL: srv.URL}
	var out, errOut strings.Builder
	err := terminal(context.Background(), cfg, []string{"--token", "tok/en", "sess-1"}, strings.NewReader("echo $((6*7))\n"), &out, &errOut)
	if err != nil {
		t.Fatalf("terminal: %v (%s)", err, errOut.String())
	}
	if gotPath != "/proxy/sess-1/tok%2Fen/terminal" || gotQuery != "cols=80&rows=24" {
		t.Fatalf("dialed %s?%s", gotPath, gotQuery)
	}
	if keys.String() != "echo $((6*7))\nexit\n" {
		t.Fatalf("keystrokes %q", keys.String())
	}
	if out.String() != "42\r\n" {
		t.Fatalf("output %q", out.String())
	}
	if err := terminal(context.Background(), cfg, []string{"sess-1"}, strings.NewReader(""), &out, &errOut); err == nil {
		t.Fatal("no token accepted")
	}
}
