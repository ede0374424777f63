package app

import (
	"encoding/json"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/web"
)

// previewPath matches the gateway's preview routes, which serve what a
// sandbox's web server answers: they are never forwarded onto the
// dashboard's origin, where a page of the agent's could read the signed-in
// person's tokens. The dashboard links to them on the gateway's origin.
var previewPath = regexp.MustCompile(`^/proliferate/[^/]+/(preview|previews)(/|$)`)

// previewManagement matches the gateway's share-link routes (create,
// list, revoke), which answer the gateway's own JSON (never a sandbox's
// content) and are forwarded. Matched on the method and the escaped path,
// so nothing else under preview/ gets through.
var previewManagement = regexp.MustCompile(`^(GET /proliferate/[0-9A-Za-z-]+/preview/shares` +
	`|POST /proliferate/[0-9A-Za-z-]+/preview/[0-9]+/share` +
	`|DELETE /proliferate/[0-9A-Za-z-]+/preview/shares/[0-9A-Za-z-]+)$`)

// terminalPath matches the gateway's terminal WebSocket
// (/proxy/{sid}/{token}/terminal), the one route of the gateway's /proxy/
// tree forwarded on the dashboard's origin (the OpenCode proxy is not).
// Its path carries a credential: logs show logPath's form instead.
var terminalPath = regexp.MustCompile(`^/proxy/([^/]+)/[^/]+/terminal$`)

// logPath is a request's path fit for a log line (a terminal's token left
// out).
func logPath(r *http.Request) string {
	if m := terminalPath.FindStringSubmatch(r.URL.Path); m != nil {
		return "/proxy/" + m[1] + "/…/terminal"
	}
	return r.URL.Path
}

// frontDoor is what the API role serves on its one origin: the REST API
// at /api/v1, the session gateway's routes and WebSocket at /proliferate/
// (forwarded to DASHBOARD_GATEWAY_URL, else GATEWAY_PUBLIC_URL; previews
// refused but for their share-link routes) with its
// terminal WebSocket (GET /proxy/{sid}/{token}/terminal; the rest of
// /proxy/ is 404 here), and the dashboard at every other path.
func (a *App) frontDoor(apiHandler http.Handler) (http.Handler, error) {
	target := a.Cfg.DashboardGatewayURL
	if target == "" {
		target = a.Cfg.GatewayPublicURL
	}
	gw, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(gw)
			// The gateway checks a WebSocket's Origin against the Host the
			// browser used: keep it.
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			a.Log.Warn("dashboard: the gateway is unreachable", "error", err, "path", logPath(r))
			writeFrontDoorError(w, http.StatusBadGateway, "upstream_error", "the session gateway is unreachable; try again shortly")
		},
	}
	ui := web.Handler(a.Cfg.NangoConnectURL) // its Connect UI opens in a frame
	mux := http.NewServeMux()
	mux.Handle(api.Prefix+"/", apiHandler)
	mux.Handle(api.Prefix, apiHandler)
	mux.HandleFunc("/proliferate/", func(w http.ResponseWriter, r *http.Request) {
		if (previewPath.MatchString(r.URL.Path) && !previewManagement.MatchString(r.Method+" "+r.URL.EscapedPath())) || strings.Contains(r.URL.Path, "..") {
			writeFrontDoorError(w, http.StatusNotFound, httpapi.CodeNotFound,
				"previews are served on the gateway's own origin ("+a.Cfg.GatewayPublicURL+")")
			return
		}
		proxy.ServeHTTP(w, r)
	})
	mux.HandleFunc("/proxy/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !terminalPath.MatchString(r.URL.Path) || strings.Contains(r.URL.Path, "..") {
			writeFrontDoorError(w, http.StatusNotFound, httpapi.CodeNotFound, "only the terminal WebSocket of /proxy/ is served on this origin")
			return
		}
		proxy.ServeHTTP(w, r)
	})
	mux.Handle("/", ui)
	return mux, nil
}

// writeFrontDoorError answers in the API's error shape.
func writeFrontDoorError(w http.ResponseWriter, status int, code, msg string) {
	var b httpapi.ErrorBody
	b.Error.Code, b.Error.Message = code, msg
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(b)
}
