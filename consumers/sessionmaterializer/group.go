package sessionmaterializer

import (
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/topics"
)

// Group is the session-materializer consumer group; it runs BatchHandler
// (one statement per fetched batch of a partition), and the worker runs an
// Indexer next to it for the search index.
var Group = group.Define(group.Group{
	Name:        "session-materializer",
	Description: "materializes session transcripts into the searchable history in Postgres (session_messages), and drops a deleted session's history",
	Inputs:      []string{topics.SessionsTranscript, topics.SessionsEvents},
	Owns:        []string{"session_messages", "session_message_tombstones", "session_message_search", "session_message_search_queue"},
	Kind:        group.Batch,
})
