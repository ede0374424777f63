package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/config"
)

func TestBadConfigIsAPreciseErrorNotAPanic(t *testing.T) {
	t.Setenv("CONSUMER_MAX_ATTEMPTS", "lots")
	t.Setenv("KAFKA_BROKERS", "nohostport")
	var out, errOut strings.Builder
	err := run([]string{"config"}, &out, &errOut)
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("want a config error, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{`CONSUMER_MAX_ATTEMPTS="lots": must be an integer`, `KAFKA_BROKERS="nohostport": "nohostport": must be host:port`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

func TestConfigCommandRedactsSecrets(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://app:s3cret-pw@db:5432/p")
	var out strings.Builder
	if err := run([]string{"config"}, &out, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "s3cret-pw") {
		t.Fatal("config printed a password")
	}
	if !strings.Contains(out.String(), "postgres://app:REDACTED@db:5432/p") {
		t.Fatalf("config output:\n%s", out.String())
	}
}

func TestUnknownCommandsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"launch"}, {"migrate", "sideways"}, {"topics", "shred"}, {"worker", "--nope"}} {
		err := run(args, &strings.Builder{}, &strings.Builder{})
		var u usageError
		if !errors.As(err, &u) {
			t.Errorf("%v: want a usage error, got %v", args, err)
		}
	}
}

func TestWorkerRejectsUnknownGroup(t *testing.T) {
	err := run([]string{"worker", "--groups=bogus"}, &strings.Builder{}, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), `unknown consumer group "bogus"`) {
		t.Fatalf("got %v", err)
	}
}

func TestTopicsListAndDocsNeedNoCluster(t *testing.T) {
	var out strings.Builder
	if err := run([]string{"topics", "list"}, &out, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "runs.lifecycle") || !strings.Contains(out.String(), "dlq.billing-ledger") {
		t.Fatalf("topics list:\n%s", out.String())
	}
}
