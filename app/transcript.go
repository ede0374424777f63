package app

import (
	"context"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/sessionmaterializer"
	"github.com/proliferate/proliferate/internal/transcript"
)

// transcriptPublisher is the gateway's writer of sessions.transcript
// (through the outbox), redacting with the organizations' secrets and
// patterns (the process's one cache, Redactors). The gateway role closes it
// after its hubs shut down.
func (a *App) transcriptPublisher() *transcript.Publisher {
	return transcript.NewPublisher(transcript.PublisherOptions{Pool: a.Pool, Codec: a.Codec,
		Redactors: a.Redactors(), Log: a.Log.With("component", "transcript")})
}

// sessionMaterializerHandler applies one statement per fetched batch of a
// partition.
func (a *App) sessionMaterializerHandler(ctx context.Context) (consumers.BatchHandler, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return nil, err
	}
	a.readyPostgres()
	return sessionmaterializer.BatchHandler(sessionmaterializer.Deps{Pool: a.Pool,
		Log: a.Log.With("group", sessionmaterializer.Group.Name)}), nil
}
