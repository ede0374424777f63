package app

import "github.com/proliferate/proliferate/consumers/sessionmaterializer"

// sessionSearchIndexer is the role next to the session-materializer group
// that computes the search index of the rows it materializes (the
// group's handler opened Postgres).
func (a *App) sessionSearchIndexer() Role {
	ix := &sessionmaterializer.Indexer{Pool: a.Pool, Log: a.Log.With("component", "session-search-indexer")}
	return Role{"consumer/" + sessionmaterializer.Group.Name + "/search-indexer", ix.Run}
}
