package config

import (
	"strings"
	"testing"
)

// Every role that serves ops endpoints has its own default port; dev keeps
// 9464; OPS_ADDR, when set, wins for every role; the docs list the table.
func TestOpsAddrPerRole(t *testing.T) {
	cfg, err := LoadFrom(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]string{}
	for _, rp := range OpsPorts() {
		if other, dup := seen[rp.Port]; dup {
			t.Fatalf("%s and %s share ops port %d", rp.Role, other, rp.Port)
		}
		seen[rp.Port] = rp.Role
		if !strings.Contains(Markdown(), "| `proliferate "+rp.Role+"` | `"+cfg.OpsAddrFor(rp.Role)+"` |") {
			t.Errorf("docs lack the ops address of %s", rp.Role)
		}
	}
	if got := cfg.OpsAddrFor("dev"); got != "127.0.0.1:9464" {
		t.Fatalf("dev: %s", got)
	}
	if got := cfg.OpsAddrFor("no-such-role"); got != "127.0.0.1:0" {
		t.Fatalf("unknown role: %s", got)
	}
	set, err := LoadFrom(func(k string) (string, bool) { return "0.0.0.0:9999", k == "OPS_ADDR" })
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"dev", "api", "worker"} {
		if got := set.OpsAddrFor(role); got != "0.0.0.0:9999" {
			t.Fatalf("OPS_ADDR set, %s: %s", role, got)
		}
	}
	if _, err := LoadFrom(func(k string) (string, bool) { return "9464", k == "OPS_ADDR" }); err == nil || !strings.Contains(err.Error(), "must be host:port") {
		t.Fatalf("OPS_ADDR=9464: %v", err)
	}
}
