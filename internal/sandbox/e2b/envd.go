package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// envd is the agent E2B runs in every sandbox (port 49983). Its process
// service is Connect RPC (process.Process, spec/envd/process/process.proto)
// spoken here with the JSON codec: unary calls are a JSON POST, the
// server-streaming Start is a POST of one enveloped message (flags byte,
// big-endian length, JSON) answered by enveloped messages, the last one
// flagged end-of-stream (0x02) carrying {"error": {...}} on failure. Its
// files endpoint (/files) uploads and downloads whole files.

// DefaultUser is the sandbox user of E2B's templates.
const DefaultUser = "user"

// Envd talks to envd of one sandbox.
type Envd struct {
	c     *Client
	id    string
	base  string
	token string // X-Access-Token (secure sandboxes)
}

// Envd returns a client for envd in sandbox info.
func (c *Client) Envd(info SandboxInfo) *Envd {
	return &Envd{c: c, id: info.SandboxID, base: strings.TrimRight(c.PortURL(info.SandboxID, EnvdPort), "/"), token: info.EnvdAccessToken}
}

func (e *Envd) request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, body)
	if err != nil {
		return nil, err
	}
	// The SDK sends these with every envd request (E2B's proxy routes on
	// them when the host is the shared sandbox host).
	req.Header.Set("E2b-Sandbox-Id", e.id)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
	if e.token != "" {
		req.Header.Set("X-Access-Token", e.token)
	}
	return req, nil
}

// envdError reads a non-2xx envd answer: the files API's {"code",
// "message"}, Connect's {"code": "not_found", "message"}, or the proxy's
// 502 for a sandbox that is not running.
func envdError(op string, resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{Op: op, Status: resp.StatusCode}
	var body struct {
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(data, &body) == nil {
		e.Message = body.Message
		var code string
		if json.Unmarshal(body.Code, &code) == nil {
			e.Code = code
		}
	}
	return e
}

// ProcessConfig is process.ProcessConfig.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
}

// PTYSize is process.PTY.Size.
type PTYSize struct {
	Cols uint32 `json:"cols"`
	Rows uint32 `json:"rows"`
}

// PTY is process.PTY.
type PTY struct {
	Size PTYSize `json:"size"`
}

// StartRequest is process.StartRequest.
type StartRequest struct {
	Process ProcessConfig `json:"process"`
	PTY     *PTY          `json:"pty,omitempty"`
	Tag     string        `json:"tag,omitempty"`
	Stdin   *bool         `json:"stdin,omitempty"`
}

// ProcessEvent is process.ProcessEvent (one of Start, Data, End,
// Keepalive is set). Bytes are base64 in protobuf's JSON mapping, which
// encoding/json does for []byte.
type ProcessEvent struct {
	Start *struct {
		PID uint32 `json:"pid"`
	} `json:"start,omitempty"`
	Data *struct {
		Stdout []byte `json:"stdout,omitempty"`
		Stderr []byte `json:"stderr,omitempty"`
		PTY    []byte `json:"pty,omitempty"`
	} `json:"data,omitempty"`
	End *struct {
		ExitCode int32  `json:"exitCode"`
		Exited   bool   `json:"exited"`
		Status   string `json:"status"`
		Error    string `json:"error,omitempty"`
	} `json:"end,omitempty"`
	Keepalive *struct{} `json:"keepalive,omitempty"`
}

// Stream is a running Start call: its events until the process ends.
type Stream struct {
	body   io.ReadCloser
	r      *bufio.Reader
	cancel context.CancelFunc
	// PID is the process id from the start event.
	PID uint32
}

const (
	connectEndStream = 0x02
	maxMessage       = 16 << 20
)

// Start starts a process (process.Process/Start) and returns once envd
// reported its start event. The process outlives the stream: Close
// disconnects without killing it (use Signal).
func (e *Envd) Start(ctx context.Context, req StartRequest) (*Stream, error) {
	msg, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("e2b: encode start: %w", err)
	}
	env := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg)))
	env = append(env, msg...)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel) // ctx bounds the start only
	hreq, err := e.request(sctx, http.MethodPost, "/process.Process/Start", bytes.NewReader(env))
	if err != nil {
		cancel()
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/connect+json")
	hreq.Header.Set("Connect-Protocol-Version", "1")
	resp, err := e.c.http.Do(hreq)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("e2b: envd start %s: %w", req.Process.Cmd, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		cancel()
		return nil, envdError("envd start "+req.Process.Cmd, resp)
	}
	s := &Stream{body: resp.Body, r: bufio.NewReader(resp.Body), cancel: cancel}
	ev, err := s.Next()
	stop()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("e2b: envd start %s: %w", req.Process.Cmd, err)
	}
	if ev.Start == nil {
		s.Close()
		return nil, fmt.Errorf("e2b: envd start %s: first event is not a start event", req.Process.Cmd)
	}
	s.PID = ev.Start.PID
	return s, nil
}

// Next returns the next event (keepalives skipped); io.EOF after the
// end of the stream.
func (s *Stream) Next() (ProcessEvent, error) {
	for {
		var head [5]byte
		if _, err := io.ReadFull(s.r, head[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return ProcessEvent{}, err
			}
			return ProcessEvent{}, err
		}
		n := binary.BigEndian.Uint32(head[1:])
		if n > maxMessage {
			return ProcessEvent{}, fmt.Errorf("e2b: envd message of %d bytes", n)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(s.r, data); err != nil {
			return ProcessEvent{}, err
		}
		if head[0]&connectEndStream != 0 {
			var end struct {
				Error *struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(data, &end); err == nil && end.Error != nil {
				return ProcessEvent{}, &APIError{Op: "envd process stream", Status: connectStatus(end.Error.Code),
					Code: end.Error.Code, Message: end.Error.Message}
			}
			return ProcessEvent{}, io.EOF
		}
		var m struct {
			Event ProcessEvent `json:"event"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			return ProcessEvent{}, fmt.Errorf("e2b: decode process event: %w", err)
		}
		if m.Event.Keepalive != nil {
			continue
		}
		return m.Event, nil
	}
}

// Close disconnects from the process (it keeps running).
func (s *Stream) Close() {
	s.cancel()
	s.body.Close()
}

// connectStatus maps a Connect error code to the HTTP status it stands
// for (Connect's own table).
func connectStatus(code string) int {
	switch code {
	case "invalid_argument", "failed_precondition", "out_of_range":
		return http.StatusBadRequest
	case "unauthenticated":
		return http.StatusUnauthorized
	case "permission_denied":
		return http.StatusForbidden
	case "not_found":
		return http.StatusNotFound
	case "already_exists", "aborted":
		return http.StatusConflict
	case "resource_exhausted":
		return http.StatusTooManyRequests
	case "unavailable":
		return http.StatusServiceUnavailable
	case "deadline_exceeded":
		return http.StatusGatewayTimeout
	case "unimplemented":
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

// unary calls process.Process/<method> with the JSON codec.
func (e *Envd) unary(ctx context.Context, method string, in any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("e2b: encode %s: %w", method, err)
	}
	req, err := e.request(ctx, http.MethodPost, "/process.Process/"+method, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := e.c.http.Do(req)
	if err != nil {
		return fmt.Errorf("e2b: envd %s: %w", method, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return envdError("envd "+method, resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

type selector struct {
	PID uint32 `json:"pid,omitempty"`
	Tag string `json:"tag,omitempty"`
}

// Signals of process.Signal.
const (
	SIGTERM = "SIGNAL_SIGTERM"
	SIGKILL = "SIGNAL_SIGKILL"
)

// Signal sends SIGTERM or SIGKILL to the process pid.
func (e *Envd) Signal(ctx context.Context, pid uint32, signal string) error {
	return e.unary(ctx, "SendSignal", map[string]any{"process": selector{PID: pid}, "signal": signal})
}

// SendStdin writes to the process's stdin.
func (e *Envd) SendStdin(ctx context.Context, pid uint32, data []byte) error {
	return e.unary(ctx, "SendInput", map[string]any{"process": selector{PID: pid}, "input": map[string][]byte{"stdin": data}})
}

// SendPTY writes to the process's pseudo-terminal.
func (e *Envd) SendPTY(ctx context.Context, pid uint32, data []byte) error {
	return e.unary(ctx, "SendInput", map[string]any{"process": selector{PID: pid}, "input": map[string][]byte{"pty": data}})
}

// CloseStdin closes the process's stdin (EOF).
func (e *Envd) CloseStdin(ctx context.Context, pid uint32) error {
	return e.unary(ctx, "CloseStdin", map[string]any{"process": selector{PID: pid}})
}

// Resize sets the process's pseudo-terminal size.
func (e *Envd) Resize(ctx context.Context, pid uint32, cols, rows uint16) error {
	return e.unary(ctx, "Update", map[string]any{"process": selector{PID: pid},
		"pty": PTY{Size: PTYSize{Cols: uint32(cols), Rows: uint32(rows)}}})
}

// ProcessInfo is process.ProcessInfo.
type ProcessInfo struct {
	Config ProcessConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    string        `json:"tag,omitempty"`
}

// List lists the running processes started through envd.
func (e *Envd) List(ctx context.Context) ([]ProcessInfo, error) {
	req, err := e.request(ctx, http.MethodPost, "/process.Process/List", strings.NewReader("{}"))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := e.c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("e2b: envd List: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, envdError("envd List", resp)
	}
	var out struct {
		Processes []ProcessInfo `json:"processes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("e2b: envd List: %w", err)
	}
	return out.Processes, nil
}

// WriteFile uploads data to path (parents created, an existing file
// overwritten) as DefaultUser: POST /files, multipart field "file".
func (e *Envd) WriteFile(ctx context.Context, path string, data []byte) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	part, err := mw.CreateFormFile("file", path)
	if err != nil {
		return err
	}
	if _, err := part.Write(data); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	q := url.Values{"path": {path}, "username": {DefaultUser}}
	req, err := e.request(ctx, http.MethodPost, "/files?"+q.Encode(), &body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := e.c.http.Do(req)
	if err != nil {
		return fmt.Errorf("e2b: upload %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return envdError("upload "+path, resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// ReadFile downloads path: GET /files. A missing file is
// sandbox.ErrNotFound (404).
func (e *Envd) ReadFile(ctx context.Context, path string) ([]byte, error) {
	q := url.Values{"path": {path}, "username": {DefaultUser}}
	req, err := e.request(ctx, http.MethodGet, "/files?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := e.c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("e2b: download %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, envdError("download "+path, resp)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}

// Run starts a process and collects its output until it ends (stdin
// empty); the exit code of a process that ran is not an error.
func (e *Envd) Run(ctx context.Context, cfg ProcessConfig) (exit int, stdout, stderr []byte, err error) {
	no := false
	s, err := e.Start(ctx, StartRequest{Process: cfg, Stdin: &no})
	if err != nil {
		return 0, nil, nil, err
	}
	defer s.Close()
	return s.Collect(ctx, e, 8<<20)
}

// Collect reads the stream until the process ends, keeping up to max
// bytes of each output; when ctx ends first the process is killed.
func (s *Stream) Collect(ctx context.Context, e *Envd, max int) (exit int, stdout, stderr []byte, err error) {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = e.Signal(kctx, s.PID, SIGKILL)
			cancel()
			s.Close()
		case <-done:
		}
	}()
	var out, errb bytes.Buffer
	for {
		ev, err := s.Next()
		if err != nil {
			if ctx.Err() != nil {
				return 0, out.Bytes(), errb.Bytes(), ctx.Err()
			}
			return 0, out.Bytes(), errb.Bytes(), fmt.Errorf("e2b: process %d: %w", s.PID, err)
		}
		switch {
		case ev.Data != nil:
			if room := max - out.Len(); room > 0 {
				out.Write(ev.Data.Stdout[:min(len(ev.Data.Stdout), room)])
			}
			if room := max - errb.Len(); room > 0 {
				errb.Write(ev.Data.Stderr[:min(len(ev.Data.Stderr), room)])
			}
		case ev.End != nil:
			if ev.End.Error != "" && !ev.End.Exited {
				return 0, out.Bytes(), errb.Bytes(), fmt.Errorf("e2b: process %d: %s", s.PID, ev.End.Error)
			}
			return int(ev.End.ExitCode), out.Bytes(), errb.Bytes(), nil
		}
	}
}
