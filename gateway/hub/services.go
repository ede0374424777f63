package hub

// Services: the service commands of the session's configuration start on
// their own after each boot that did not find the sandbox still running
// (a new sandbox, a resume, a restore), and again on the run_auto_start
// client message.
// They run under the sandbox's supervisor (`proliferate services daemon`,
// cmd/proliferate/services.go), which the gateway reaches through the
// provider's Exec with `proliferate services load` and `… list`; the agent
// manages the same services with `proliferate services …`.
//
// Progress goes to the session's clients as auto_start_output frames: one
// after the commands were started, then one at every change (a service
// exited, new output) while the gateway watches them (AutoStartWatch), the
// last with done=true. Output is each service's log tail, at most
// AutoStartOutputBytes. A service that exits is reported with its status
// (exited: code 0, failed: otherwise) and exit code; it is not restarted.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/repos"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
)

const (
	// AutoStartOutputBytes bounds each service's output in a frame.
	AutoStartOutputBytes = 4096
	// AutoStartWatch is how long the gateway reports on services after
	// starting them; autoStartPoll how often it looks.
	AutoStartWatch = 20 * time.Second
	autoStartPoll  = time.Second
)

// ServiceCommand is one service to start: Cwd is relative to the
// sandbox's workspace root.
type ServiceCommand struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	Cwd     string `json:"cwd,omitempty"`
}

// ServiceSource gives the service commands of a session (its
// configuration's effective commands; none without a configuration).
type ServiceSource interface {
	ServiceCommands(ctx context.Context, s sessions.Session) ([]ServiceCommand, error)
}

// ServiceSourceFunc adapts a function to ServiceSource.
type ServiceSourceFunc func(ctx context.Context, s sessions.Session) ([]ServiceCommand, error)

// ServiceCommands calls f.
func (f ServiceSourceFunc) ServiceCommands(ctx context.Context, s sessions.Session) ([]ServiceCommand, error) {
	return f(ctx, s)
}

// RepoServices is the ServiceSource of the platform: the configuration's
// effective service commands (its own, else its repos' defaults).
type RepoServices struct{ Store *repos.Store }

// ServiceCommands implements ServiceSource.
func (r RepoServices) ServiceCommands(ctx context.Context, s sessions.Session) ([]ServiceCommand, error) {
	if s.ConfigurationID == nil || r.Store == nil {
		return nil, nil
	}
	eff, err := r.Store.EffectiveServiceCommands(ctx, s.OrgID, *s.ConfigurationID)
	if err != nil {
		return nil, err
	}
	out := make([]ServiceCommand, 0, len(eff.Commands))
	for _, c := range eff.Commands {
		out = append(out, ServiceCommand{Name: c.Name, Command: c.Command, Cwd: c.ResolvedCwd})
	}
	return out, nil
}

// svcState is a service as `proliferate services list --json` prints it.
type svcState struct {
	Name     string `json:"name"`
	Command  string `json:"command"`
	Cwd      string `json:"cwd"`
	Status   string `json:"status"`
	ExitCode *int   `json:"exit_code"`
	Tail     string `json:"tail"`
}

// autoStart starts the session's service commands in sandbox sb and
// reports on them (see the file comment). It never fails the boot.
func (h *Hub) autoStart(ctx context.Context, sess sessions.Session, sb sandbox.Sandbox, trigger string) {
	d := h.m.d
	ex, ok := d.Provider.(sandbox.Executor)
	if d.Services == nil || !ok {
		if trigger == protocol.ClientRunAutoStart {
			h.broadcastAutoStart(protocol.AutoStartOutputMessage{Type: protocol.MsgAutoStartOutput, Trigger: trigger, Services: []protocol.AutoStartService{}, Done: true,
				Error: "this sandbox cannot run services"})
		}
		return
	}
	cmds, err := d.Services.ServiceCommands(ctx, sess)
	if err != nil {
		h.log.Warn("hub: service commands", "err", err)
		h.broadcastAutoStart(protocol.AutoStartOutputMessage{Type: protocol.MsgAutoStartOutput, Trigger: trigger, Services: []protocol.AutoStartService{}, Done: true,
			Error: "the configuration's service commands could not be read"})
		return
	}
	if len(cmds) == 0 {
		if trigger == protocol.ClientRunAutoStart {
			h.broadcastAutoStart(protocol.AutoStartOutputMessage{Type: protocol.MsgAutoStartOutput, Trigger: trigger, Services: []protocol.AutoStartService{}, Done: true})
		}
		return
	}
	names := map[string]bool{}
	for _, c := range cmds {
		names[c.Name] = true
	}
	stdin, _ := json.Marshal(cmds)
	run := func(args []string, in []byte) ([]protocol.AutoStartService, error) {
		res, err := ex.Exec(ctx, sb.ID, sandbox.ExecCommand{Args: args, Stdin: in, Timeout: time.Minute})
		if err != nil {
			return nil, err
		}
		var out struct {
			Services []svcState `json:"services"`
			Error    string     `json:"error"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(res.Stdout), &out); err != nil {
			return nil, fmt.Errorf("services: exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
		}
		svcs := []protocol.AutoStartService{}
		for _, s := range out.Services {
			if names[s.Name] {
				svcs = append(svcs, protocol.AutoStartService{Name: s.Name, Command: s.Command, Cwd: s.Cwd, Status: s.Status, ExitCode: s.ExitCode, Output: s.Tail})
			}
		}
		if out.Error != "" {
			return svcs, errors.New(out.Error)
		}
		return svcs, nil
	}
	start := time.Now()
	svcs, err := run([]string{"proliferate", "services", "load"}, stdin)
	h.log.Info("hub: service commands started", "trigger", trigger, "services", len(cmds), "ms", time.Since(start).Milliseconds())
	msg := protocol.AutoStartOutputMessage{Type: protocol.MsgAutoStartOutput, Trigger: trigger, Services: svcs}
	if msg.Services == nil {
		msg.Services = []protocol.AutoStartService{}
	}
	if err != nil {
		h.log.Warn("hub: auto-start", "err", err)
		msg.Error, msg.Done = "some service commands could not be started: "+err.Error(), svcs == nil
	}
	h.broadcastAutoStart(msg)
	if msg.Done {
		return
	}
	tick := time.NewTicker(autoStartPoll)
	defer tick.Stop()
	deadline := time.NewTimer(AutoStartWatch)
	defer deadline.Stop()
	last := msg.Services
	for {
		final := false
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			final = true
		case <-tick.C:
		}
		now, err := run([]string{"proliferate", "services", "list", "--json", "--tail", fmt.Sprint(AutoStartOutputBytes)}, nil)
		if err != nil {
			h.log.Warn("hub: auto-start watch", "err", err)
			h.broadcastAutoStart(protocol.AutoStartOutputMessage{Type: protocol.MsgAutoStartOutput, Trigger: trigger, Services: last, Done: true})
			return
		}
		settled := true
		for _, s := range now {
			settled = settled && s.Status != "running"
		}
		if final || settled || !reflect.DeepEqual(now, last) {
			h.broadcastAutoStart(protocol.AutoStartOutputMessage{Type: protocol.MsgAutoStartOutput, Trigger: trigger, Services: now, Done: final || settled})
			last = now
		}
		if final || settled {
			return
		}
	}
}

// broadcastAutoStart sends an auto_start_output frame to the session's
// clients and keeps it: a client attaching later (a page opened after the
// boot) gets the latest state of the services right after init.
func (h *Hub) broadcastAutoStart(msg protocol.AutoStartOutputMessage) {
	b, err := json.Marshal(msg)
	if err != nil {
		h.log.Error("hub: marshal message", "err", err)
		return
	}
	h.mu.Lock()
	h.lastAutoStart = b
	h.mu.Unlock()
	h.BroadcastRaw(b)
}

// sendLastAutoStart sends the kept auto_start_output frame to c, if any.
func (h *Hub) sendLastAutoStart(c Client) {
	h.mu.Lock()
	b := h.lastAutoStart
	h.mu.Unlock()
	if b != nil {
		if err := c.Send(b); err != nil {
			h.drop(c, protocol.CloseSlowClient, protocol.ReasonSlowClient)
		}
	}
}

// RunAutoStart (re)starts the configuration's service commands in the
// session's sandbox (the run_auto_start message): session members only.
func (h *Hub) RunAutoStart(ctx context.Context, p *auth.Principal) error {
	if !canMutate(h.Session(), p) {
		return ErrForbidden
	}
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	rt := h.run.cur
	h.mu.Unlock()
	if rt == nil {
		return ErrClosed
	}
	done := h.ToolCallStarted() // keeps the hub from being evicted meanwhile
	go func() {
		defer done()
		h.autoStart(h.life, h.Session(), rt.sb, protocol.ClientRunAutoStart)
	}()
	return nil
}
