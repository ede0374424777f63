package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// subcommands are the names run's `switch cmd` handles, read from main.go
// itself, plus the ones main dispatches before run (actions) and help.
func subcommands(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"actions", "help"}
	for name := range sandboxMains {
		names = append(names, name)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "run" {
			return true
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			sw, ok := n.(*ast.SwitchStmt)
			if !ok {
				return true
			}
			if id, ok := sw.Tag.(*ast.Ident); !ok || id.Name != "cmd" {
				return true
			}
			for _, st := range sw.Body.List {
				for _, e := range st.(*ast.CaseClause).List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						names = append(names, s)
					}
				}
			}
			return false
		})
		return false
	})
	if len(names) < 15 {
		t.Fatalf("found only %v in run's switch", names)
	}
	slices.Sort(names)
	return names
}

// Every subcommand answers --help, -h and `help SUBCOMMAND` with its usage
// on stdout and success, before anything is loaded, connected or started:
// the configuration here is invalid (any command that went further would
// fail on it), every address is one nothing listens on and every data
// directory is an empty temporary one that must stay empty. A command that
// started a server instead would never return.
func TestHelpOfEverySubcommandHasNoSideEffects(t *testing.T) {
	data := t.TempDir()
	t.Setenv("CONSUMER_MAX_ATTEMPTS", "lots")
	for _, k := range []string{"BROKER_DATA_DIR", "BLOB_DIR", "SANDBOX_DATA_DIR"} {
		t.Setenv(k, filepath.Join(data, k))
	}
	names := subcommands(t)
	var listed []string
	for _, c := range commands {
		listed = append(listed, c.name())
	}
	slices.Sort(listed)
	if !slices.Equal(listed, names) {
		t.Fatalf("the command table lists %v, run handles %v", listed, names)
	}
	var top strings.Builder
	if err := run([]string{"help"}, &top, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !strings.Contains(top.String(), "\n  "+name) {
			t.Errorf("'proliferate help' does not list %s", name)
		}
		for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}, {name, "sub", "--help"}, {name, "--flag=x", "-help"}} {
			var out, errOut strings.Builder
			done := make(chan error, 1)
			go func() { done <- run(args, &out, &errOut) }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%v: %v", args, err)
					continue
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%v did not return: it runs instead of printing its usage", args)
			}
			want := "Usage: proliferate " + name
			if !strings.HasPrefix(out.String(), want) {
				t.Errorf("%v printed %q, want it to start with %q", args, out.String(), want)
			}
			if errOut.Len() > 0 {
				t.Errorf("%v wrote to stderr: %q", args, errOut.String())
			}
		}
	}
	if entries, err := os.ReadDir(data); err != nil || len(entries) > 0 {
		t.Fatalf("help created %v (%v)", entries, err)
	}
	// An unknown command's help is a usage error, like the command itself.
	if err := run([]string{"help", "launch"}, &strings.Builder{}, &strings.Builder{}); err == nil {
		t.Fatal("help of an unknown command succeeded")
	} else if _, ok := err.(usageError); !ok {
		t.Fatalf("help launch: %v", err)
	}
}

// The actions command, dispatched before run, answers --help the same way.
func TestActionsHelp(t *testing.T) {
	var out, errOut strings.Builder
	c := &actionsCLI{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"list", "--help"}, {"run", "-h"}} {
		out.Reset()
		if code := c.run(t.Context(), args); code != exitOK || !strings.HasPrefix(out.String(), "Usage: proliferate actions") {
			t.Errorf("actions %v: exit %d, %q", args, code, out.String())
		}
	}
}
