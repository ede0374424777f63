package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/internal/outbox"
)

const outboxUsage = `usage: proliferate outbox status|list|show ID|retry ID…|--all|discard ID…|--all

  status            pending rows, the age of the oldest, rows set aside
  list [--after ID] [--limit N] [--json]
                    rows the relay set aside because they can never be
                    published as they are (oversized, unencodable headers,
                    a topic the cluster does not have), with their errors
  show ID           one of them, its headers and its value (decoded when it
                    is an event, hex otherwise)
  retry ID…|--all   move them back into the outbox, behind every pending row
                    (fix the cause first: create the topic, raise the limit)
  discard ID…|--all delete them for good
`

func outboxCmd(ctx context.Context, a *app.App, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{outboxUsage}
	}
	if err := a.OpenPostgres(ctx); err != nil {
		return err
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "status":
		st, err := outbox.ReadStatus(ctx, a.Pool)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pending:        %d\noldest pending: %s\nset aside:      %d\n",
			st.Pending, st.OldestPending.Truncate(time.Millisecond), st.DeadLetters)
		return nil
	case "list":
		fs := flag.NewFlagSet("outbox list", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		after := fs.Int64("after", 0, "")
		limit := fs.Int("limit", 100, "")
		asJSON := fs.Bool("json", false, "")
		if err := fs.Parse(rest); err != nil || fs.NArg() > 0 || *limit < 1 {
			return usageError{outboxUsage}
		}
		dead, err := outbox.ListDeadLetters(ctx, a.Pool, *after, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			for _, d := range dead {
				if err := enc.Encode(d); err != nil {
					return err
				}
			}
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTOPIC\tKEY\tBYTES\tFAILED AT\tERROR")
		for _, d := range dead {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", d.ID, d.Topic, d.Key, d.Size, d.FailedAt.UTC().Format(time.RFC3339), d.Error)
		}
		return tw.Flush()
	case "show":
		if len(rest) != 1 {
			return usageError{outboxUsage}
		}
		id, err := strconv.ParseInt(rest[0], 10, 64)
		if err != nil {
			return usageError{"outbox show: ID must be a number"}
		}
		d, err := outbox.GetDeadLetter(ctx, a.Pool, id)
		if err != nil {
			return err
		}
		out := struct {
			outbox.DeadLetter
			Event    any    `json:"event,omitempty"`
			ValueHex string `json:"value_hex,omitempty"`
		}{DeadLetter: d}
		if err := a.OpenCodec(ctx); err == nil {
			if ev, err := a.Codec.Decode(d.Value); err == nil {
				out.Event = ev
			}
		}
		if out.Event == nil {
			const maxHex = 4096
			out.ValueHex = hex.EncodeToString(d.Value[:min(len(d.Value), maxHex)])
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	case "retry", "discard":
		ids, err := outboxIDs(rest)
		if err != nil {
			return err
		}
		if sub == "retry" {
			moved, err := outbox.RetryDeadLetters(ctx, a.Pool, ids)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%d moved back into the outbox (new ids %v)\n", len(moved), moved)
			return nil
		}
		n, err := outbox.DiscardDeadLetters(ctx, a.Pool, ids)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d discarded\n", n)
		return nil
	}
	return usageError{outboxUsage}
}

// outboxIDs parses "ID…" or "--all" (nil: every dead letter).
func outboxIDs(args []string) ([]int64, error) {
	if len(args) == 1 && args[0] == "--all" {
		return nil, nil
	}
	if len(args) == 0 {
		return nil, usageError{"name the dead letters by id, or --all"}
	}
	ids := make([]int64, len(args))
	for i, s := range args {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return nil, usageError{fmt.Sprintf("%q is not an outbox id", s)}
		}
		ids[i] = id
	}
	return ids, nil
}
