package fakes

// The pages a person's browser sees during an install or connect flow,
// served by the fakes so the dashboard's flows run end to end in a test
// browser: GitHub's App install page, Slack's OAuth authorize page and
// Nango's Connect UI. Each has one button a person would press; what it
// sends back (redirect query, postMessage) is what the real service sends.

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title></head>
<body><h1>{{.Title}}</h1>{{.Body}}</body></html>`))

func writePage(w http.ResponseWriter, status int, title string, body template.HTML) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = pageTmpl.Execute(w, map[string]any{"Title": title, "Body": body})
}

// --- GitHub: the App's install page -------------------------------------------

// SetApp names the App (its slug) and its Setup URL, where GitHub sends the
// browser after an install with installation_id, setup_action and state.
func (g *GitHub) SetApp(slug, setupURL string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.slug, g.setupURL = slug, setupURL
}

// serveInstallPage is GET /apps/{slug}/installations/new?state=…: one
// Install button per installation (account); pressing it redirects to the
// Setup URL the way GitHub does.
func (g *GitHub) serveInstallPage(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	slug, setup := g.slug, g.setupURL
	var ins []GitHubInstallation
	for _, in := range g.installations {
		ins = append(ins, *in)
	}
	g.mu.Unlock()
	sort.Slice(ins, func(i, j int) bool { return ins[i].ID < ins[j].ID })
	if slug == "" || r.URL.Path != "/apps/"+slug+"/installations/new" || setup == "" {
		http.NotFound(w, r)
		return
	}
	if r.URL.Query().Get("install") != "" {
		id, err := strconv.ParseInt(r.URL.Query().Get("install"), 10, 64)
		if err != nil {
			http.Error(w, "bad installation", http.StatusBadRequest)
			return
		}
		q := url.Values{"installation_id": {strconv.FormatInt(id, 10)}, "setup_action": {"install"}}
		if st := r.URL.Query().Get("state"); st != "" {
			q.Set("state", st)
		}
		sep := "?"
		if strings.Contains(setup, "?") {
			sep = "&"
		}
		http.Redirect(w, r, setup+sep+q.Encode(), http.StatusFound)
		return
	}
	var b strings.Builder
	for _, in := range ins {
		fmt.Fprintf(&b, `<form method="get"><input type="hidden" name="state" value="%s"><input type="hidden" name="install" value="%d">`+
			`<button type="submit" data-install="%s">Install on %s</button></form>`,
			template.HTMLEscapeString(r.URL.Query().Get("state")), in.ID, template.HTMLEscapeString(in.Login), template.HTMLEscapeString(in.Login))
	}
	writePage(w, http.StatusOK, "Install "+slug, template.HTML(b.String()))
}

// --- Slack: the OAuth authorize page --------------------------------------------

// SetAuthorizeInstall is what the authorize page's Allow button grants: a
// fresh single-use code for in (see AddCode).
func (s *Slack) SetAuthorizeInstall(in SlackInstall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.authorize = &in
}

// serveAuthorize is GET /oauth/v2/authorize?client_id&scope&state&redirect_uri:
// an Allow button that redirects to redirect_uri with code and state.
func (s *Slack) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	in := s.authorize
	s.mu.Unlock()
	redirect := q.Get("redirect_uri")
	switch {
	case q.Get("client_id") != s.clientID:
		writePage(w, http.StatusBadRequest, "Invalid client_id parameter", "")
		return
	case in == nil || redirect == "":
		writePage(w, http.StatusBadRequest, "Nothing to authorize", "")
		return
	}
	if q.Get("allow") == "" {
		hidden := ""
		for _, k := range []string{"client_id", "scope", "state", "redirect_uri"} {
			hidden += `<input type="hidden" name="` + k + `" value="` + template.HTMLEscapeString(q.Get(k)) + `">`
		}
		writePage(w, http.StatusOK, "Install on "+in.TeamName, template.HTML(`<form method="get">`+hidden+
			`<input type="hidden" name="allow" value="1"><button type="submit" data-allow>Allow</button></form>`))
		return
	}
	code := "code-" + randomHex(8)
	grant := *in
	grant.Token = ""
	grant.RedirectURI = redirect
	s.AddCode(code, grant)
	sep := "?"
	if strings.Contains(redirect, "?") {
		sep = "&"
	}
	http.Redirect(w, r, redirect+sep+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
}

// --- Nango: the Connect UI --------------------------------------------------------

// ConnectUIURL is the fake's Connect UI (NANGO_CONNECT_URL).
func (n *Nango) ConnectUIURL() string { return n.URL + "/connect-ui" }

// SetConnectToken is the access token connections made through the
// Connect UI hold for an integration (config key); default a random one.
func (n *Nango) SetConnectToken(cfgKey, token string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.connectTokens == nil {
		n.connectTokens = map[string]string{}
	}
	n.connectTokens[cfgKey] = token
}

// connectUIPage speaks the Connect UI's frame protocol: it posts
// {type:"ready"} to its parent, takes {type:"session_token"}, and when the
// person presses Connect it creates the connection (as the OAuth dance
// would) and posts {type:"connect", payload:{connectionId,
// providerConfigKey}} then {type:"close"}.
const connectUIPage = `<!doctype html><html><head><meta charset="utf-8"><title>Nango Connect</title></head>
<body style="background:#fff"><h1>Nango Connect</h1><p id="status">waiting for a session token</p>
<button id="connect" data-nango-connect disabled>Connect</button> <button id="close" data-nango-close>Close</button>
<script>
let token = ''
window.addEventListener('message', (e) => {
  if (e.source !== window.parent || !e.data || e.data.type !== 'session_token') return
  token = e.data.sessionToken
  document.getElementById('status').textContent = 'ready'
  document.getElementById('connect').disabled = false
})
document.getElementById('connect').onclick = async () => {
  const res = await fetch('/connect-ui/complete', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ session_token: token }) })
  const b = await res.json()
  if (!res.ok) { document.getElementById('status').textContent = b.error; return }
  window.parent.postMessage({ type: 'connect', payload: { connectionId: b.connection_id, providerConfigKey: b.provider_config_key } }, '*')
  window.parent.postMessage({ type: 'close' }, '*')
}
document.getElementById('close').onclick = () => window.parent.postMessage({ type: 'close' }, '*')
window.parent.postMessage({ type: 'ready' }, '*')
</script></body></html>`

// serveConnectUI serves the Connect UI (GET /connect-ui) and its completion
// (POST /connect-ui/complete), which creates a connection of the session's
// end user and organization for its (first) allowed integration.
func (n *Nango) serveConnectUI(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.URL.Path == "/connect-ui" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(connectUIPage))
		return true
	case r.URL.Path == "/connect-ui/complete" && r.Method == http.MethodPost:
	default:
		return false
	}
	var body struct {
		SessionToken string `json:"session_token"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "bad body"})
		return true
	}
	n.mu.Lock()
	var sess *NangoSession
	for i := range n.sessions {
		if n.sessions[i].Token == body.SessionToken {
			sess = &n.sessions[i]
		}
	}
	if sess == nil || len(sess.AllowedIntegrations) == 0 {
		n.mu.Unlock()
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "unknown or expired session token"})
		return true
	}
	key := sess.AllowedIntegrations[0]
	tok := n.connectTokens[key]
	if tok == "" {
		tok = "nango_tok_" + randomHex(12)
	}
	id := "conn-" + randomHex(8)
	n.conns[nangoKey(id, key)] = &NangoConnection{ConnectionID: id, ConfigKey: key, Provider: n.integrations[key],
		AccessToken: tok, EndUserID: sess.EndUserID, EndUserOrgID: sess.OrganizationID}
	n.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"connection_id": id, "provider_config_key": key})
	return true
}
