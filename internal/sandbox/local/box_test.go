package local_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// TestBox: commands run inside one box share its home, its processes and
// its loopback, without capabilities and under the seccomp filter; a port inside is reached from outside; a forwarded host
// address is reached from inside; the host's files are not visible.
func TestBox(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	boxes, err := local.NewBoxes(t.TempDir(), bin, "")
	if err != nil {
		t.Fatal(err)
	}
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "hello from the host")
			c.Close()
		}
	}()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	tpl := t.TempDir()
	if err := os.WriteFile(filepath.Join(tpl, "tool"), []byte("template file"), 0o644); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(t.TempDir(), "home")
	b, err := boxes.Start(local.BoxOptions{HomeDir: home, Home: "/home/user",
		ReadOnly: map[string]string{"/opt/tpl": tpl}, Forward: []string{host.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	run := func(script string) string {
		t.Helper()
		c := b.Command(t.Context(), []string{"/bin/sh", "-c", script}, "/home/user", []string{"PATH=/usr/bin:/bin", "HOME=/home/user"})
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", script, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("pwd; id -u; echo hi > f; cat /opt/tpl/tool; echo; awk '/^(Cap(Eff|Bnd)|Seccomp):/ {print $2}' /proc/self/status"); got != "/home/user\n1000\ntemplate file\n0000000000000000\n0000000000000000\n2" {
		t.Fatalf("got %q", got)
	}
	if data, err := os.ReadFile(filepath.Join(home, "f")); err != nil || string(data) != "hi\n" {
		t.Fatalf("home file: %q %v", data, err)
	}
	if got := run("cat " + secret + " 2>&1 || echo refused"); !strings.Contains(got, "refused") {
		t.Fatalf("host file visible: %q", got)
	}
	if got := run("socat -u TCP:" + host.Addr().String() + " STDOUT"); got != "hello from the host" {
		t.Fatalf("forward: %q", got)
	}
	// A long-lived listener started by one command, reached from outside.
	srv := b.Command(context.Background(), []string{"socat", "TCP-LISTEN:7000,bind=127.0.0.1,fork,reuseaddr", "SYSTEM:echo pong"}, "/home/user", []string{"PATH=/usr/bin:/bin"})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		c, err := b.DialPort(t.Context(), 7000)
		if err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if line == "pong\n" {
			break
		}
	}
	if got := run("ps -e -o comm= | sort | tr '\\n' ' '"); strings.Contains(got, "go") {
		t.Fatalf("host processes visible: %q", got)
	}
	b.Stop()
	_ = srv.Wait()
}
