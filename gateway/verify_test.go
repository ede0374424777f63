package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/gateway/tools"
	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/evidence"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/runs/query"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

// verifyWorld is the env world (bubblewrap sandbox, real OpenCode, the
// scripted model) whose gateway stores verify's evidence in a filesystem
// blob store of the test.
type verifyWorld struct {
	*envWorld
	store   *evidence.Store
	blobDir string
}

func newVerifyWorld(t *testing.T) *verifyWorld {
	t.Helper()
	ew := newEnvWorld(t, 0)
	dir := filepath.Join(t.TempDir(), "blobs")
	fs, err := blobstore.Filesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	vw := &verifyWorld{envWorld: ew, store: &evidence.Store{Pool: ew.w.api.Deps.Pool, Blobs: fs}, blobDir: dir}
	ew.g.srv.Tools().Register(tools.VerifyTool(tools.Deps{Evidence: vw.store}))
	return vw
}

// blobs lists the files of the blob store.
func (vw *verifyWorld) blobs(t *testing.T) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(vw.blobDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// invokeVerify calls verify as the gateway's tool route does (the
// registry, idempotent by tool_call_id, with the session's hub as runtime).
func (vw *verifyWorld) invokeVerify(t *testing.T, sid, callID string, args any) tools.Result {
	t.Helper()
	sess, err := vw.w.store.Get(t.Context(), "", sid)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(args)
	res, _, err := vw.g.srv.Tools().Invoke(t.Context(), tools.Verify, tools.Call{Session: sess, ToolCallID: callID, Args: raw,
		Runtime: func(ctx context.Context) (tools.Runtime, error) { return vw.g.hubs.Hub(ctx, sid) }})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The agent (real OpenCode in the bubblewrap sandbox, scripted model)
// writes a test report and a screenshot and calls verify: both files are
// stored in the blob store with their sniffed types, sizes and hashes and
// listed on the session; a path leading out of the workspace fails the
// agent's tool call with a clear message and stores nothing.
func TestVerifyUploadsEvidenceFromTheAgent(t *testing.T) {
	vw := newVerifyWorld(t)
	sid := vw.session(t)
	st, c := dialWS(t, vw.g, sid, vw.token, false)
	if st != 101 {
		t.Fatal(st)
	}
	f := readFrames(c)
	if err := vw.sim.Register("verify-ok", llmsim.Script{Turns: []llmsim.Turn{
		{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: json.RawMessage(`{"command":"mkdir -p out && printf 'PASS 12 tests\\n' > out/test-results.txt && printf '\\211PNG\\r\\n\\032\\nfake-image' > out/home.png && ln -s /etc/hostname out/rc","description":"write evidence"}`)}}},
		{ToolCalls: []llmsim.ToolCall{{Name: "verify", Input: json.RawMessage(`{"paths":["out/test-results.txt","out/home.png"],"summary":"All 12 tests pass; the home page renders."}`)}}},
		{ToolCalls: []llmsim.ToolCall{{Name: "verify", Input: json.RawMessage(`{"paths":["out/test-results.txt","out/rc"],"summary":"sneaky"}`)}}},
		{Text: "done"},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteJSON(map[string]string{"type": "prompt", "content": "[[script:verify-ok]] prove it"}); err != nil {
		t.Fatal(err)
	}
	var ends []map[string]any
	f.wait(t, "two verify tool_end frames", func(typ string, m map[string]any) bool {
		if typ == protocol.MsgToolEnd && m["tool"] == tools.Verify {
			ends = append(ends, m)
		}
		return len(ends) == 2
	})
	if r, _ := ends[0]["result"].(string); ends[0]["status"] != "completed" || !strings.Contains(r, "Uploaded 2 file(s)") {
		t.Fatalf("verify: %v", ends[0])
	}
	if e, _ := ends[1]["error"].(string); ends[1]["status"] != "error" || !strings.Contains(e, `"out/rc" leads out of the workspace`) {
		t.Fatalf("verify of a link out of the workspace: %v", ends[1])
	}
	f.wait(t, "message_complete", func(typ string, _ map[string]any) bool { return typ == protocol.MsgMessageComplete })

	items, err := vw.store.ListSession(t.Context(), vw.orgID, sid)
	if err != nil || len(items) != 2 {
		t.Fatalf("evidence %+v %v", items, err)
	}
	want := []struct{ path, ct, data string }{
		{"out/test-results.txt", "text/plain; charset=utf-8", "PASS 12 tests\n"},
		{"out/home.png", "image/png", "\x89PNG\r\n\x1a\nfake-image"},
	}
	for i, it := range items {
		_, data, err := vw.store.Open(t.Context(), vw.orgID, sid, it.ID)
		if err != nil || it.Path != want[i].path || it.ContentType != want[i].ct || string(data) != want[i].data ||
			it.SizeBytes != int64(len(want[i].data)) || it.SHA256 != sha(want[i].data) || it.Summary != "All 12 tests pass; the home page renders." {
			t.Errorf("evidence %d: %+v %q %v", i, it, data, err)
		}
	}
	if n := len(vw.blobs(t)); n != 2 {
		t.Fatalf("%d blobs stored, want 2", n)
	}
}

// Bad verify calls fail with a precise result (error code and message
// naming the path) and store nothing: paths out of the workspace (".."
// absolute, a link to the sandbox's home, a link to /etc), a directory, a
// missing file, too many files, a file over 5 MiB and files over 20 MiB
// together. A call retried with the same tool_call_id is stored once, with
// the first answer and the first bytes, even after the file changed; in a
// run's session it is listed on the run's detail.
func TestVerifyRefusesBadInputAndStoresEachCallOnce(t *testing.T) {
	vw := newVerifyWorld(t)
	// An automation run's session: its evidence is also the run's.
	auto := runstest.Automation(t, vw.w.api.Deps.Pool, vw.orgID)
	runID := queuedRun(t, vw.w, vw.orgID, auto)
	sid := sessionstest.New(t, vw.w.api.Deps.Pool, vw.orgID, sessionstest.Options{SessionType: "automation", ClientType: "automation",
		ConfigurationID: vw.cfgID, AutomationID: auto, RunID: runID})
	vw.sandboxExec(t, sid, `set -e
mkdir -p out "$HOME/.proliferate"
printf 'report v1\n' > out/report.txt
printf 'token=abc\n' > "$HOME/.proliferate/env.json"
ln -s "$HOME/.proliferate/env.json" out/env-link
ln -s /etc/passwd out/passwd
head -c 5300000 /dev/zero > out/big.bin
for i in 1 2 3 4 5; do head -c 4800000 /dev/urandom > out/part$i.bin; done`)

	many := make([]string, evidence.MaxFiles+1)
	for i := range many {
		many[i] = "out/report.txt"
	}
	for name, c := range map[string]struct {
		args any
		code string
		msg  string
	}{
		"dotdot":         {map[string]any{"paths": []string{"../etc/passwd"}, "summary": "x"}, tools.VerifyOutside, "leaves the workspace"},
		"absolute":       {map[string]any{"paths": []string{"/etc/passwd"}, "summary": "x"}, tools.VerifyOutside, "is absolute"},
		"home link":      {map[string]any{"paths": []string{"out/report.txt", "out/env-link"}, "summary": "x"}, tools.VerifyOutside, `"out/env-link" leads out`},
		"etc link":       {map[string]any{"paths": []string{"out/passwd"}, "summary": "x"}, tools.VerifyOutside, "leads out"},
		"directory":      {map[string]any{"paths": []string{"out"}, "summary": "x"}, tools.VerifyNotRegular, "not a regular file"},
		"missing":        {map[string]any{"paths": []string{"out/none.txt"}, "summary": "x"}, tools.VerifyNotFound, "no such file"},
		"too many":       {map[string]any{"paths": many, "summary": "x"}, tools.VerifyTooMany, "at most 10 files"},
		"too large":      {map[string]any{"paths": []string{"out/big.bin"}, "summary": "x"}, tools.VerifyTooLarge, "larger than 5 MiB"},
		"total too big":  {map[string]any{"paths": []string{"out/part1.bin", "out/part2.bin", "out/part3.bin", "out/part4.bin", "out/part5.bin"}, "summary": "x"}, tools.VerifyTotalTooLarge, "more than 20 MiB"},
		"none":           {map[string]any{"paths": []string{}, "summary": "x"}, tools.VerifyInvalid, "at least one"},
		"duplicate path": {map[string]any{"paths": []string{"out/report.txt", "out/./report.txt"}, "summary": "x"}, tools.VerifyInvalid, "listed twice"},
		"unknown field":  {map[string]any{"paths": []string{"out/report.txt"}, "folder": "out"}, tools.VerifyInvalid, "unknown field"},
		"long summary":   {map[string]any{"paths": []string{"out/report.txt"}, "summary": strings.Repeat("x", evidence.MaxSummary+1)}, tools.VerifyInvalid, "summary"},
	} {
		res := vw.invokeVerify(t, sid, "bad-"+strings.ReplaceAll(name, " ", "-"), c.args)
		if res.Success || res.Data["error"] != c.code || !strings.Contains(res.Result, c.msg) {
			t.Errorf("%s: %+v, want error %s mentioning %q", name, res, c.code, c.msg)
		}
	}
	if items, err := vw.store.ListSession(t.Context(), vw.orgID, sid); err != nil || len(items) != 0 || len(vw.blobs(t)) != 0 {
		t.Fatalf("a refused call stored evidence: %+v %v, blobs %v", items, err, vw.blobs(t))
	}

	args := map[string]any{"paths": []string{"out/report.txt"}, "summary": "the report"}
	first := vw.invokeVerify(t, sid, "dup", args)
	if !first.Success || first.Data["count"] != 1 {
		t.Fatalf("%+v", first)
	}
	vw.sandboxExec(t, sid, `printf 'report v2\n' > out/report.txt`)
	again := vw.invokeVerify(t, sid, "dup", args)
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(again)
	if string(a) != string(b) {
		t.Fatalf("the retry answered %s, the first call %s", b, a)
	}
	items, err := vw.store.ListSession(t.Context(), vw.orgID, sid)
	if err != nil || len(items) != 1 || len(vw.blobs(t)) != 1 {
		t.Fatalf("evidence after a retried call: %+v %v, blobs %v", items, err, vw.blobs(t))
	}
	if _, data, err := vw.store.Open(t.Context(), vw.orgID, sid, items[0].ID); err != nil || string(data) != "report v1\n" {
		t.Fatalf("stored %q %v", data, err)
	}
	d, err := (&query.Store{Pool: vw.w.api.Deps.Pool, Codec: vw.w.codec}).Get(t.Context(), vw.orgID, runID)
	if err != nil || len(d.Evidence) != 1 || d.Evidence[0].ID != items[0].ID || items[0].RunID == nil || *items[0].RunID != runID {
		t.Fatalf("the run's evidence %+v (%v), item %+v", d.Evidence, err, items[0])
	}
	// Another organization sees none of it.
	if _, _, err := vw.store.Open(t.Context(), vw.w.api.NewUser(t).OrgID, sid, items[0].ID); err != evidence.ErrNotFound {
		t.Fatalf("another organization: %v", err)
	}
}
