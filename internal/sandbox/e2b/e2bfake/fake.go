// Package e2bfake is a local stand-in for E2B that speaks its wire
// format: the control plane (POST/GET/DELETE /sandboxes, /v2/sandboxes,
// pause, connect, resume, timeout, snapshots, DELETE /templates/{id};
// X-API-Key; E2B's {"code","message"} errors and status codes), envd in
// every sandbox (process.Process over Connect RPC with the JSON codec,
// /files) and the sandboxes' ports, all on one loopback listener that
// routes by Host ({port}-{sandboxID}.{domain}, as E2B's proxy does) or by
// the E2b-Sandbox-Id / E2b-Sandbox-Port headers the SDK sends.
//
// Each sandbox is a local.Box: a bubblewrap sandbox of this host with its
// own namespaces and home (/home/user), so what runs "remotely" is as
// contained as the isolated local provider's agents. The fake's sandboxes
// reach no network but the loopback addresses of Options.Forward (the
// tests' gateway and scripted LLM: the fake's "internet"). Pause stops the
// box and keeps its home (E2B's filesystem-only pause: processes do not
// survive it); connect and resume start a new box on that home. A
// snapshot (POST /sandboxes/{id}/snapshots) copies the home; creating a
// sandbox from it copies it back.
//
// PortURL gives a plain http://127.0.0.1:N URL per sandbox port (a
// listener that sets the Host header and goes through the same routing),
// for clients that cannot resolve {port}-{id}.{domain} (the gateway's
// agent client).
package e2bfake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// Home is the sandboxes' home (E2B's user "user").
const Home = "/home/user"

// Template is what a template's sandboxes hold beyond the host's system
// view: host paths bound read-only at inside paths.
type Template struct {
	ReadOnly map[string]string
}

// Options configures the fake.
type Options struct {
	// APIKey is the only key accepted (X-API-Key).
	APIKey string
	// Domain is the sandbox domain; default "e2b.local".
	Domain string
	// Dir holds the sandboxes' homes and snapshots.
	Dir string
	// Boxes starts the sandboxes.
	Boxes *local.Boxes
	// Templates by id.
	Templates map[string]Template
	// Forward are the host loopback addresses every sandbox reaches.
	Forward []string
	Logger  *slog.Logger
}

// Server is a running fake.
type Server struct {
	opts Options
	srv  *httptest.Server
	log  *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	snapshots map[string]string // snapshot id → home copy dir
	faults    []*fault
	ports     map[string]*httptest.Server // "id/port" → listener
	calls     map[string]int              // "METHOD /path-pattern" → count
}

type fault struct {
	method, prefix string
	status, times  int
	retryAfter     string
}

type fakeSandbox struct {
	id, templateID string
	metadata       map[string]string
	envVars        map[string]string
	token          string
	home           string
	startedAt      time.Time
	endAt          time.Time
	autoPause      bool
	state          string
	box            *local.Box
	timer          *time.Timer
	procs          map[uint32]*proc
	network        *network
}

// network is E2B's SandboxNetworkConfig: allowOut (IPs, CIDRs, domains)
// wins over denyOut (IPs, CIDRs). The fake applies it to Options.Forward
// (its only reachable addresses), by IP.
type network struct {
	AllowOut []string `json:"allowOut"`
	DenyOut  []string `json:"denyOut"`
}

func matchIP(entries []string, ip net.IP) bool {
	for _, e := range entries {
		if _, cidr, err := net.ParseCIDR(e); err == nil && cidr.Contains(ip) {
			return true
		}
		if x := net.ParseIP(e); x != nil && x.Equal(ip) {
			return true
		}
	}
	return false
}

// forwards are the Options.Forward addresses the sandbox's rules allow.
func (s *Server) forwards(sb *fakeSandbox) []string {
	if sb.network == nil {
		return s.opts.Forward
	}
	var out []string
	for _, addr := range s.opts.Forward {
		host, _, _ := net.SplitHostPort(addr)
		ip := net.ParseIP(host)
		if ip.IsLoopback() {
			// E2B denies by public CIDRs; the fake's loopback "internet"
			// counts as 0.0.0.0/0.
			ip = net.IPv4(8, 8, 8, 8)
			if matchIP(sb.network.AllowOut, net.ParseIP(host)) {
				out = append(out, addr)
				continue
			}
		}
		if matchIP(sb.network.AllowOut, ip) || !matchIP(sb.network.DenyOut, ip) {
			out = append(out, addr)
		}
	}
	return out
}

// New starts a fake on a loopback listener.
func New(opts Options) (*Server, error) {
	if opts.APIKey == "" || opts.Dir == "" || opts.Boxes == nil {
		return nil, errors.New("e2bfake: APIKey, Dir and Boxes are required")
	}
	if opts.Domain == "" {
		opts.Domain = "e2b.local"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: log, sandboxes: map[string]*fakeSandbox{}, snapshots: map[string]string{},
		ports: map[string]*httptest.Server{}, calls: map[string]int{}}
	for _, d := range []string{"sandboxes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s, nil
}

// URL is the control plane's base URL (and the listener every host of
// the domain resolves to).
func (s *Server) URL() string { return s.srv.URL }

// Addr is the listener's address.
func (s *Server) Addr() string { return s.srv.Listener.Addr().String() }

// Domain is the sandbox domain.
func (s *Server) Domain() string { return s.opts.Domain }

// PortURL returns a loopback URL that reaches port of sandbox id through
// the fake's host routing.
func (s *Server) PortURL(id string, port int) string {
	key := id + "/" + strconv.Itoa(port)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.ports[key]; ok {
		return p.URL
	}
	host := fmt.Sprintf("%d-%s.%s", port, id, s.opts.Domain)
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Host = host
		s.serve(w, r)
	}))
	s.ports[key] = p
	return p.URL
}

// FailNext makes the next times control-plane requests of method whose
// path starts with prefix answer status (E2B's error body), with a
// Retry-After of retryAfter when not empty.
func (s *Server) FailNext(method, prefix string, status, times int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{method: method, prefix: prefix, status: status, times: times, retryAfter: retryAfter})
}

// Calls is how many control-plane requests of method with exactly path
// the fake received.
func (s *Server) Calls(method, path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method+" "+path]
}

// State is a sandbox's state ("running", "paused") or "" when unknown.
func (s *Server) State(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return sb.state
	}
	return ""
}

// HomeDir is the host directory of a sandbox's home.
func (s *Server) HomeDir(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return sb.home
	}
	return ""
}

// Close kills every sandbox and stops the listeners.
func (s *Server) Close() {
	s.mu.Lock()
	all := slices.Collect(maps.Values(s.sandboxes))
	ports := slices.Collect(maps.Values(s.ports))
	s.mu.Unlock()
	for _, sb := range all {
		s.stopBox(sb)
	}
	for _, p := range ports {
		p.CloseClientConnections()
		p.Close()
	}
	s.srv.CloseClientConnections()
	s.srv.Close()
}

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeError writes E2B's error body.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

var hostRE = regexp.MustCompile(`^(\d+)-([a-z0-9]+)\.(.+)$`)

// serve routes: a sandbox host or the sandbox headers go to the sandbox's
// port (envd on 49983); everything else is the control plane.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if m := hostRE.FindStringSubmatch(host); m != nil && m[3] == s.opts.Domain {
		port, _ := strconv.Atoi(m[1])
		s.servePort(w, r, m[2], port)
		return
	}
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port, err := strconv.Atoi(r.Header.Get("E2b-Sandbox-Port"))
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid E2b-Sandbox-Port")
			return
		}
		s.servePort(w, r, id, port)
		return
	}
	s.serveAPI(w, r)
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-API-Key") != s.opts.APIKey {
		writeError(w, http.StatusUnauthorized, "Invalid API key, it must start with 'e2b_' prefix and be followed by 40 hexadecimal characters")
		return
	}
	s.mu.Lock()
	s.calls[r.Method+" "+r.URL.Path]++
	for i, f := range s.faults {
		if f.method == r.Method && strings.HasPrefix(r.URL.Path, f.prefix) {
			f.times--
			if f.times <= 0 {
				s.faults = slices.Delete(s.faults, i, i+1)
			}
			s.mu.Unlock()
			if f.retryAfter != "" {
				w.Header().Set("Retry-After", f.retryAfter)
			}
			writeError(w, f.status, "injected failure")
			return
		}
	}
	s.mu.Unlock()

	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/sandboxes":
		s.create(w, r)
	case r.Method == http.MethodGet && (r.URL.Path == "/sandboxes" || r.URL.Path == "/v2/sandboxes"):
		s.list(w, r)
	case len(parts) == 2 && parts[0] == "sandboxes" && r.Method == http.MethodGet:
		s.get(w, parts[1])
	case len(parts) == 2 && parts[0] == "sandboxes" && r.Method == http.MethodDelete:
		s.kill(w, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == http.MethodPost:
		switch parts[2] {
		case "pause":
			s.pause(w, parts[1])
		case "connect":
			s.connect(w, r, parts[1], false)
		case "resume":
			s.connect(w, r, parts[1], true)
		case "timeout":
			s.setTimeout(w, r, parts[1])
		case "snapshots":
			s.snapshot(w, parts[1])
		default:
			writeError(w, http.StatusNotFound, "not found")
		}
	case len(parts) == 2 && parts[0] == "templates" && r.Method == http.MethodDelete:
		s.deleteTemplate(w, parts[1])
	default:
		writeError(w, http.StatusNotFound, "not found")
	}
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TemplateID string            `json:"templateID"`
		Timeout    *int              `json:"timeout"`
		AutoPause  bool              `json:"autoPause"`
		Secure     bool              `json:"secure"`
		Metadata   map[string]string `json:"metadata"`
		EnvVars    map[string]string `json:"envVars"`
		Network    *network          `json:"network"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	if req.TemplateID == "" {
		writeError(w, http.StatusBadRequest, "templateID is required")
		return
	}
	timeout := 15
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if timeout < 0 || timeout > 24*3600 {
		writeError(w, http.StatusBadRequest, "timeout must be between 0 and 86400 seconds")
		return
	}
	s.mu.Lock()
	_, isTemplate := s.opts.Templates[req.TemplateID]
	snapDir, isSnapshot := s.snapshots[req.TemplateID]
	s.mu.Unlock()
	if !isTemplate && !isSnapshot {
		writeError(w, http.StatusNotFound, fmt.Sprintf("template '%s' not found", req.TemplateID))
		return
	}
	id := "i" + randomID(10)
	sb := &fakeSandbox{id: id, templateID: req.TemplateID, metadata: req.Metadata, envVars: req.EnvVars, network: req.Network,
		home: filepath.Join(s.opts.Dir, "sandboxes", id), autoPause: req.AutoPause, procs: map[uint32]*proc{}}
	if req.Secure {
		sb.token = randomID(16)
	}
	if isSnapshot {
		if err := copyDir(snapDir, sb.home); err != nil {
			writeError(w, http.StatusInternalServerError, "restore snapshot: "+err.Error())
			return
		}
	}
	if err := s.startBox(sb); err != nil {
		writeError(w, http.StatusInternalServerError, "start sandbox: "+err.Error())
		return
	}
	s.mu.Lock()
	s.sandboxes[id] = sb
	s.setTimer(sb, time.Duration(timeout)*time.Second)
	s.mu.Unlock()
	s.log.Info("e2bfake: sandbox created", "sandbox_id", id, "template", req.TemplateID)
	writeJSON(w, http.StatusCreated, s.info(sb))
}

// templateOf returns the template a sandbox was created from (a snapshot's
// sandboxes keep the template of the snapshotted one).
func (s *Server) templateOf(sb *fakeSandbox) Template {
	if t, ok := s.opts.Templates[sb.templateID]; ok {
		return t
	}
	for _, t := range s.opts.Templates { // snapshots: the only template
		return t
	}
	return Template{}
}

func (s *Server) startBox(sb *fakeSandbox) error {
	box, err := s.opts.Boxes.Start(local.BoxOptions{HomeDir: sb.home, Home: Home,
		ReadOnly: s.templateOf(sb).ReadOnly, Forward: s.forwards(sb)})
	if err != nil {
		return err
	}
	sb.box = box
	sb.state = "running"
	sb.startedAt = time.Now().UTC()
	return nil
}

// stopBox stops the sandbox's box and processes (caller may hold no lock).
func (s *Server) stopBox(sb *fakeSandbox) {
	s.mu.Lock()
	box := sb.box
	sb.box = nil
	procs := slices.Collect(maps.Values(sb.procs))
	sb.procs = map[uint32]*proc{}
	if sb.timer != nil {
		sb.timer.Stop()
	}
	s.mu.Unlock()
	if box != nil {
		box.Stop()
	}
	for _, p := range procs {
		p.wait()
	}
}

// setTimer (s.mu held) ends the sandbox after d: killed, or paused with
// autoPause.
func (s *Server) setTimer(sb *fakeSandbox, d time.Duration) {
	if sb.timer != nil {
		sb.timer.Stop()
	}
	sb.endAt = time.Now().UTC().Add(d)
	sb.timer = time.AfterFunc(d, func() {
		s.log.Info("e2bfake: sandbox timeout", "sandbox_id", sb.id, "auto_pause", sb.autoPause)
		if sb.autoPause {
			s.stopBox(sb)
			s.mu.Lock()
			sb.state = "paused"
			s.mu.Unlock()
			return
		}
		s.remove(sb.id)
	})
}

func (s *Server) info(sb *fakeSandbox) map[string]any {
	return map[string]any{"templateID": sb.templateID, "sandboxID": sb.id, "clientID": "fake",
		"envdVersion": "0.2.0", "envdAccessToken": sb.token, "domain": s.opts.Domain}
}

func (s *Server) detail(sb *fakeSandbox) map[string]any {
	d := map[string]any{"templateID": sb.templateID, "sandboxID": sb.id, "clientID": "fake",
		"startedAt": sb.startedAt.Format(time.RFC3339Nano), "endAt": sb.endAt.Format(time.RFC3339Nano),
		"envdVersion": "0.2.0", "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024,
		"metadata": sb.metadata, "state": sb.state}
	if sb.metadata == nil {
		d["metadata"] = map[string]string{}
	}
	return d
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	var want url.Values
	if m := r.URL.Query().Get("metadata"); m != "" {
		var err error
		if want, err = url.ParseQuery(m); err != nil {
			writeError(w, http.StatusBadRequest, "invalid metadata query")
			return
		}
	}
	states := []string{"running", "paused"}
	if r.URL.Path == "/sandboxes" {
		states = []string{"running"}
	}
	if st := r.URL.Query().Get("state"); st != "" {
		states = strings.Split(st, ",")
	}
	s.mu.Lock()
	out := []map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(s.sandboxes)) {
		sb := s.sandboxes[id]
		ok := slices.Contains(states, sb.state)
		for k := range want {
			if sb.metadata[k] != want.Get(k) {
				ok = false
			}
		}
		if ok {
			out = append(out, s.detail(sb))
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) lookup(w http.ResponseWriter, id string) *fakeSandbox {
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox \"%s\" doesn't exist or you don't have access to it", id))
	}
	return sb
}

func (s *Server) get(w http.ResponseWriter, id string) {
	if sb := s.lookup(w, id); sb != nil {
		s.mu.Lock()
		d := s.detail(sb)
		if sb.token != "" { // SandboxDetail has it, ListedSandbox not
			d["envdAccessToken"] = sb.token
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, d)
	}
}

func (s *Server) remove(id string) bool {
	s.mu.Lock()
	sb := s.sandboxes[id]
	delete(s.sandboxes, id)
	s.mu.Unlock()
	if sb == nil {
		return false
	}
	s.stopBox(sb)
	_ = os.RemoveAll(sb.home)
	return true
}

func (s *Server) kill(w http.ResponseWriter, id string) {
	if !s.remove(id) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox \"%s\" doesn't exist or you don't have access to it", id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) pause(w http.ResponseWriter, id string) {
	sb := s.lookup(w, id)
	if sb == nil {
		return
	}
	s.mu.Lock()
	if sb.state != "running" {
		s.mu.Unlock()
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox \"%s\" is already paused", id))
		return
	}
	sb.state = "paused"
	s.mu.Unlock()
	s.stopBox(sb)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) connect(w http.ResponseWriter, r *http.Request, id string, resume bool) {
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || (!resume && req.Timeout == nil) {
		writeError(w, http.StatusBadRequest, "timeout is required")
		return
	}
	timeout := 15
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	sb := s.lookup(w, id)
	if sb == nil {
		return
	}
	s.mu.Lock()
	state := sb.state
	s.mu.Unlock()
	if state == "running" {
		if resume {
			writeError(w, http.StatusConflict, fmt.Sprintf("sandbox \"%s\" is already running", id))
			return
		}
		s.mu.Lock()
		if time.Until(sb.endAt) < time.Duration(timeout)*time.Second { // connect only extends
			s.setTimer(sb, time.Duration(timeout)*time.Second)
		}
		info := s.info(sb)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, info)
		return
	}
	if err := s.startBox(sb); err != nil {
		writeError(w, http.StatusInternalServerError, "resume sandbox: "+err.Error())
		return
	}
	s.mu.Lock()
	s.setTimer(sb, time.Duration(timeout)*time.Second)
	info := s.info(sb)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, info)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, id string) {
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Timeout == nil || *req.Timeout < 0 {
		writeError(w, http.StatusBadRequest, "timeout is required")
		return
	}
	sb := s.lookup(w, id)
	if sb == nil {
		return
	}
	s.mu.Lock()
	s.setTimer(sb, time.Duration(*req.Timeout)*time.Second)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) snapshot(w http.ResponseWriter, id string) {
	sb := s.lookup(w, id)
	if sb == nil {
		return
	}
	snapID := randomID(10) + ":default"
	dir := filepath.Join(s.opts.Dir, "snapshots", strings.TrimSuffix(snapID, ":default"))
	if err := copyDir(sb.home, dir); err != nil {
		writeError(w, http.StatusInternalServerError, "snapshot: "+err.Error())
		return
	}
	s.mu.Lock()
	s.snapshots[snapID] = dir
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"snapshotID": snapID, "names": []string{"fake/" + snapID}})
}

func (s *Server) deleteTemplate(w http.ResponseWriter, id string) {
	s.mu.Lock()
	dir, ok := s.snapshots[id]
	delete(s.snapshots, id)
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("template '%s' not found", id))
		return
	}
	_ = os.RemoveAll(dir)
	w.WriteHeader(http.StatusNoContent)
}

// copyDir copies a directory tree (cp -a: modes, links).
func copyDir(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	out, err := exec.Command("cp", "-a", "--", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// running returns a running sandbox's box, or writes E2B's proxy answer
// for a sandbox that is not running (502).
func (s *Server) running(w http.ResponseWriter, id string) (*fakeSandbox, *local.Box) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	var box *local.Box
	if sb != nil {
		box = sb.box
	}
	s.mu.Unlock()
	if box == nil {
		writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": 502})
		return nil, nil
	}
	return sb, box
}

func (s *Server) servePort(w http.ResponseWriter, r *http.Request, id string, port int) {
	sb, box := s.running(w, id)
	if sb == nil {
		return
	}
	if port == 49983 {
		s.serveEnvd(w, r, sb, box)
		return
	}
	proxyTo(w, r, box, port)
}

// DialContextFor returns a dial function that connects every address to
// the fake's listener (for clients that use the {port}-{id}.{domain}
// hosts).
func (s *Server) DialContextFor() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, s.Addr())
	}
}
