package e2bfake

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/creack/pty"

	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// proc is a process started through envd.
type proc struct {
	pid   uint32
	tag   string
	cfg   processConfig
	cmd   *exec.Cmd
	stdin io.WriteCloser // nil without stdin
	ptmx  *os.File       // nil without a pty

	mu     sync.Mutex
	sink   func(event map[string]any) // the Start stream, nil once it left
	done   chan struct{}
	outErr sync.WaitGroup // output readers
}

func (p *proc) emit(ev map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sink != nil {
		p.sink(ev)
	}
}

func (p *proc) wait() { <-p.done }

func (p *proc) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// connectError writes a Connect unary error.
func connectError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}

func (s *Server) serveEnvd(w http.ResponseWriter, r *http.Request, sb *fakeSandbox, box *local.Box) {
	if sb.token != "" && r.Header.Get("X-Access-Token") != sb.token {
		if strings.HasPrefix(r.URL.Path, "/process.") {
			connectError(w, http.StatusUnauthorized, "unauthenticated", "invalid access token")
		} else {
			writeError(w, http.StatusUnauthorized, "invalid access token")
		}
		return
	}
	switch {
	case r.URL.Path == "/health":
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/files" && r.Method == http.MethodGet:
		s.download(w, r, sb)
	case r.URL.Path == "/files" && r.Method == http.MethodPost:
		s.upload(w, r, sb)
	case r.URL.Path == "/process.Process/Start" && r.Method == http.MethodPost:
		s.start(w, r, sb, box)
	case strings.HasPrefix(r.URL.Path, "/process.Process/") && r.Method == http.MethodPost:
		s.processUnary(w, r, sb, strings.TrimPrefix(r.URL.Path, "/process.Process/"))
	default:
		writeError(w, http.StatusNotFound, "not found")
	}
}

// hostPath maps a sandbox path (absolute, or relative to the home) to the
// host; only the home is writable and visible through /files here.
func hostPath(sb *fakeSandbox, p string) (string, error) {
	if !path.IsAbs(p) {
		p = path.Join(Home, p)
	}
	p = path.Clean(p)
	rel, ok := strings.CutPrefix(p, Home)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return "", fmt.Errorf("path '%s' is outside the fake's writable home", p)
	}
	return filepath.Join(sb.home, filepath.FromSlash(rel)), nil
}

func (s *Server) download(w http.ResponseWriter, r *http.Request, sb *fakeSandbox) {
	p := r.URL.Query().Get("path")
	hp, err := hostPath(sb, p)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	root, err := os.OpenRoot(sb.home)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer root.Close()
	rel, _ := filepath.Rel(sb.home, hp)
	data, err := root.ReadFile(rel)
	switch {
	case errors.Is(err, os.ErrNotExist):
		writeError(w, http.StatusNotFound, fmt.Sprintf("path '%s' does not exist", p))
	case err != nil:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("path '%s': %v", p, err))
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(data)
	}
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request, sb *fakeSandbox) {
	p := r.URL.Query().Get("path")
	var data []byte
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		part, err := mr.NextPart()
		if err != nil || part.FormName() != "file" {
			writeError(w, http.StatusBadRequest, "multipart body without a file part")
			return
		}
		if p == "" {
			p = part.FileName()
		}
		if data, err = io.ReadAll(part); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	case "application/octet-stream":
		var err error
		if data, err = io.ReadAll(r.Body); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	default:
		writeError(w, http.StatusBadRequest, "unsupported content type")
		return
	}
	hp, err := hostPath(sb, p)
	if err != nil || p == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid path '%s'", p))
		return
	}
	root, err := os.OpenRoot(sb.home)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer root.Close()
	rel, _ := filepath.Rel(sb.home, hp)
	if err := root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := root.WriteFile(rel, data, 0o644); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("path '%s': %v", p, err))
		return
	}
	full := path.Join(Home, filepath.ToSlash(rel))
	writeJSON(w, http.StatusOK, []map[string]string{{"path": full, "name": path.Base(full), "type": "file"}})
}

// start serves process.Process/Start: a server stream of enveloped JSON
// events (start, data…, end), then the end-of-stream message. The
// process outlives the stream.
func (s *Server) start(w http.ResponseWriter, r *http.Request, sb *fakeSandbox, box *local.Box) {
	streamErr := func(code, msg string) {
		w.Header().Set("Content-Type", "application/connect+json")
		w.WriteHeader(http.StatusOK)
		writeEnvelope(w, 0x02, map[string]any{"error": map[string]string{"code": code, "message": msg}})
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/connect+json" {
		connectError(w, http.StatusUnsupportedMediaType, "unknown", "unsupported content type "+ct)
		return
	}
	var head [5]byte
	if _, err := io.ReadFull(r.Body, head[:]); err != nil {
		streamErr("invalid_argument", "missing envelope")
		return
	}
	msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(r.Body, msg); err != nil {
		streamErr("invalid_argument", "short message")
		return
	}
	var req struct {
		Process processConfig `json:"process"`
		PTY     *struct {
			Size struct{ Cols, Rows uint16 } `json:"size"`
		} `json:"pty"`
		Tag   string `json:"tag"`
		Stdin *bool  `json:"stdin"`
	}
	if err := json.Unmarshal(msg, &req); err != nil || req.Process.Cmd == "" {
		streamErr("invalid_argument", "invalid start request")
		return
	}
	env := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": Home, "USER": "user", "LANG": "C.UTF-8"}
	maps.Copy(env, sb.envVars)
	maps.Copy(env, req.Process.Envs)
	var envList []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envList = append(envList, k+"="+env[k])
	}
	cwd := Home
	if req.Process.Cwd != nil && *req.Process.Cwd != "" {
		cwd = *req.Process.Cwd
	}
	if hp, err := hostPath(sb, cwd); err == nil {
		if st, err := os.Stat(hp); err != nil || !st.IsDir() {
			streamErr("invalid_argument", fmt.Sprintf("cwd '%s' does not exist", cwd))
			return
		}
	}
	cmd := box.Command(context.Background(), append([]string{req.Process.Cmd}, req.Process.Args...), cwd, envList)
	p := &proc{tag: req.Tag, cfg: req.Process, cmd: cmd, done: make(chan struct{})}

	w.Header().Set("Content-Type", "application/connect+json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var wmu sync.Mutex
	streamDone := make(chan struct{})
	p.sink = func(ev map[string]any) {
		wmu.Lock()
		defer wmu.Unlock()
		select {
		case <-streamDone:
			return
		default:
		}
		writeEnvelope(w, 0, map[string]any{"event": ev})
		if flusher != nil {
			flusher.Flush()
		}
	}
	detach := func() {
		p.mu.Lock()
		p.sink = nil
		p.mu.Unlock()
		wmu.Lock()
		select {
		case <-streamDone:
		default:
			close(streamDone)
		}
		wmu.Unlock()
	}

	var err error
	readers := []struct {
		r   io.Reader
		key string
	}{}
	if req.PTY != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		p.ptmx, err = pty.StartWithAttrs(cmd, &pty.Winsize{Cols: req.PTY.Size.Cols, Rows: req.PTY.Size.Rows}, cmd.SysProcAttr)
		if err == nil {
			readers = append(readers, struct {
				r   io.Reader
				key string
			}{p.ptmx, "pty"})
			p.stdin = p.ptmx
		}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var stdout, stderr io.ReadCloser
		if stdout, err = cmd.StdoutPipe(); err == nil {
			if stderr, err = cmd.StderrPipe(); err == nil {
				if req.Stdin == nil || *req.Stdin {
					p.stdin, err = cmd.StdinPipe()
				}
				if err == nil {
					err = cmd.Start()
				}
			}
		}
		readers = append(readers, struct {
			r   io.Reader
			key string
		}{stdout, "stdout"}, struct {
			r   io.Reader
			key string
		}{stderr, "stderr"})
	}
	if err != nil {
		detach()
		writeEnvelope(w, 0x02, map[string]any{"error": map[string]string{"code": "internal", "message": "start: " + err.Error()}})
		return
	}
	p.pid = uint32(cmd.Process.Pid)
	s.mu.Lock()
	if sb.box != box { // paused or killed meanwhile
		s.mu.Unlock()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	} else {
		sb.procs[p.pid] = p
		s.mu.Unlock()
	}
	p.emit(map[string]any{"start": map[string]any{"pid": p.pid}})
	for _, rd := range readers {
		p.outErr.Add(1)
		go func() {
			defer p.outErr.Done()
			br := bufio.NewReaderSize(rd.r, 32<<10)
			buf := make([]byte, 32<<10)
			for {
				n, err := br.Read(buf)
				if n > 0 {
					p.emit(map[string]any{"data": map[string]any{rd.key: append([]byte(nil), buf[:n]...)}})
				}
				if err != nil {
					return
				}
			}
		}()
	}
	go func() {
		if p.ptmx == nil {
			p.outErr.Wait() // pipes drained before Wait closes them
		}
		werr := cmd.Wait()
		if p.ptmx != nil {
			_ = p.ptmx.Close()
			p.outErr.Wait()
		}
		end := map[string]any{"exitCode": 0, "exited": true, "status": "exit status 0"}
		var exitErr *exec.ExitError
		switch {
		case werr == nil:
		case errors.As(werr, &exitErr):
			end["exitCode"] = exitErr.ExitCode()
			end["status"] = exitErr.String()
			if st, ok := exitErr.Sys().(syscall.WaitStatus); ok && st.Signaled() {
				end["exited"] = false
				end["error"] = exitErr.String()
			}
		default:
			end["exited"] = false
			end["error"] = werr.Error()
		}
		s.mu.Lock()
		if sb.procs[p.pid] == p {
			delete(sb.procs, p.pid)
		}
		s.mu.Unlock()
		p.emit(map[string]any{"end": end})
		close(p.done)
	}()
	select {
	case <-p.done:
		wmu.Lock()
		writeEnvelope(w, 0x02, map[string]any{})
		wmu.Unlock()
	case <-r.Context().Done():
	}
	detach()
}

func writeEnvelope(w io.Writer, flags byte, v any) {
	data, _ := json.Marshal(v)
	var head [5]byte
	head[0] = flags
	binary.BigEndian.PutUint32(head[1:], uint32(len(data)))
	_, _ = w.Write(head[:])
	_, _ = w.Write(data)
}

// processUnary serves the unary methods of process.Process (JSON codec).
func (s *Server) processUnary(w http.ResponseWriter, r *http.Request, sb *fakeSandbox, method string) {
	var req struct {
		Process *struct {
			PID uint32 `json:"pid"`
			Tag string `json:"tag"`
		} `json:"process"`
		Signal string `json:"signal"`
		Input  *struct {
			Stdin []byte `json:"stdin"`
			PTY   []byte `json:"pty"`
		} `json:"input"`
		PTY *struct {
			Size struct{ Cols, Rows uint16 } `json:"size"`
		} `json:"pty"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		connectError(w, http.StatusBadRequest, "invalid_argument", "invalid request: "+err.Error())
		return
	}
	if method == "List" {
		s.mu.Lock()
		out := []map[string]any{}
		for _, pid := range slices.Sorted(maps.Keys(sb.procs)) {
			p := sb.procs[pid]
			e := map[string]any{"config": p.cfg, "pid": p.pid}
			if p.tag != "" {
				e["tag"] = p.tag
			}
			out = append(out, e)
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"processes": out})
		return
	}
	if req.Process == nil {
		connectError(w, http.StatusBadRequest, "invalid_argument", "process selector is required")
		return
	}
	s.mu.Lock()
	var p *proc
	for _, q := range sb.procs {
		if (req.Process.PID != 0 && q.pid == req.Process.PID) || (req.Process.Tag != "" && q.tag == req.Process.Tag) {
			p = q
		}
	}
	s.mu.Unlock()
	if p == nil {
		connectError(w, http.StatusNotFound, "not_found", "process not found")
		return
	}
	switch method {
	case "SendSignal":
		switch req.Signal {
		case "SIGNAL_SIGKILL":
			p.signal(syscall.SIGKILL)
		case "SIGNAL_SIGTERM":
			p.signal(syscall.SIGTERM)
		default:
			connectError(w, http.StatusBadRequest, "invalid_argument", "unknown signal")
			return
		}
	case "SendInput":
		if req.Input == nil || p.stdin == nil {
			connectError(w, http.StatusBadRequest, "failed_precondition", "process has no stdin")
			return
		}
		data := req.Input.Stdin
		if p.ptmx != nil {
			data = req.Input.PTY
		}
		if _, err := p.stdin.Write(data); err != nil {
			connectError(w, http.StatusBadRequest, "failed_precondition", err.Error())
			return
		}
	case "CloseStdin":
		if p.ptmx != nil || p.stdin == nil {
			connectError(w, http.StatusBadRequest, "failed_precondition", "process has no closable stdin")
			return
		}
		_ = p.stdin.Close()
	case "Update":
		if p.ptmx == nil || req.PTY == nil {
			connectError(w, http.StatusBadRequest, "failed_precondition", "process has no pty")
			return
		}
		if err := pty.Setsize(p.ptmx, &pty.Winsize{Cols: req.PTY.Size.Cols, Rows: req.PTY.Size.Rows}); err != nil {
			connectError(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
	default:
		connectError(w, http.StatusNotFound, "unimplemented", "unknown method "+method)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

// proxyTo forwards an HTTP request (WebSocket upgrades included) to a
// port on the box's loopback; a closed port is E2B's 502.
func proxyTo(w http.ResponseWriter, r *http.Request, box *local.Box, port int) {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = fmt.Sprintf("127.0.0.1:%d", port)
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return box.DialPort(ctx, port) },
			// One connection per request: a box's connections are
			// processes inside it.
			DisableKeepAlives: true,
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeJSON(w, http.StatusBadGateway, map[string]any{"message": fmt.Sprintf("The sandbox is running but port %d is not open", port), "code": 502})
		},
	}
	rp.ServeHTTP(w, r)
}
