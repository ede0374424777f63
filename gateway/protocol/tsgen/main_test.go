package main

import (
	"os"
	"testing"
)

// TestTypeScriptIsCurrent: the dashboard's protocol types are generated
// from the Go package.
func TestTypeScriptIsCurrent(t *testing.T) {
	want, err := Generate("..")
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("../../../web/src/protocol.ts")
	if err != nil || string(have) != string(want) {
		t.Fatal("web/src/protocol.ts is stale: run `go run ./gateway/protocol/tsgen > web/src/protocol.ts` and commit the result")
	}
}
