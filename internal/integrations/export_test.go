package integrations

// JoinedFlight reports how many callers joined the in-flight token fetch of
// an installation (-1 when none is in flight); tests use it to release a held
// fetch only once every caller waits on it.
func (g *GitHubApp) JoinedFlight(installationID int64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.inflight[tokenKey{installation: installationID}]; ok {
		return f.joined
	}
	return -1
}
