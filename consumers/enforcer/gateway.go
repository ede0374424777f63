package enforcer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/proliferate/proliferate/gateway/client"
)

// GatewayPauser pauses sessions through the gateway (POST
// /proliferate/{id}/pause with a reason, as a service), over C's base URL
// and credential (a service token: client.ServiceTokens).
type GatewayPauser struct {
	C *client.Client
}

// Pause implements Pauser: 2xx is done; 404 (deleted) and 409 (ended) are
// ErrGone; anything else is an error to retry.
func (g GatewayPauser) Pause(ctx context.Context, orgID, sessionID, reason string) error {
	body, err := json.Marshal(map[string]string{"reason": reason})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		g.C.BaseURL+"/proliferate/"+url.PathEscape(sessionID)+"/pause", bytes.NewReader(body))
	if err != nil {
		return err
	}
	tok := g.C.Token
	if g.C.TokenSource != nil {
		if tok, err = g.C.TokenSource(ctx); err != nil {
			return fmt.Errorf("enforcer: gateway credential: %w", err)
		}
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(client.OrgHeader, orgID)
	hc := g.C.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("enforcer: pause %s through the gateway: %w", sessionID, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusNotFound, resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("%w: gateway %d: %s", ErrGone, resp.StatusCode, errorCode(raw))
	}
	return fmt.Errorf("enforcer: pause %s through the gateway: %d %s", sessionID, resp.StatusCode, errorCode(raw))
}

func errorCode(raw []byte) string {
	var b struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &b) == nil && b.Error.Code != "" {
		return b.Error.Code
	}
	return "(no error code)"
}
