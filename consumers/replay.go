package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/schemas"
)

// ReplayOptions configure Replay: the rebuild of a materializer's tables
// from its topics (`proliferate replay`).
type ReplayOptions struct {
	// Group is the live consumer group whose tables are rebuilt and whose
	// offsets are set to the replayed point afterwards.
	Group  string
	Topics []string
	// Tables are the tables the group owns (group.Group.Owns): truncated,
	// and nothing else.
	Tables []string
	Pool   *pgxpool.Pool
	Kafka  kafka.Options
	Codec  *schemas.Codec
	// Exactly one of Handler and BatchHandler: the group's own handler.
	Handler      Handler
	BatchHandler BatchHandler
	// MaxBatch bounds the records handed to BatchHandler at once (default
	// 1000, as the runner).
	MaxBatch int
	// AllowRetentionLoss replays even when retention has already deleted
	// the oldest records of a topic (rows materialized from them are lost).
	AllowRetentionLoss bool
	Logger             *slog.Logger
}

// ReplayReport says what a replay did.
type ReplayReport struct {
	Truncated []string
	// Applied counts the records the handler applied; Skipped those it can
	// never apply (undecodable or permanently failing records, which the
	// live group dead-lettered when it first met them).
	Applied, Skipped int64
	// Offsets are the next offsets committed for the group, per topic and
	// partition: the live group continues from there.
	Offsets map[string]map[int32]int64
}

// ErrGroupActive is returned while the group has members: a replay runs
// only while every member of the group is stopped.
var ErrGroupActive = errors.New("consumer group has active members")

// ErrRetentionLoss is returned when a topic's oldest records are already
// deleted by retention and ReplayOptions.AllowRetentionLoss is not set.
var ErrRetentionLoss = errors.New("retention has deleted records the tables were built from")

// Replay rebuilds a group's tables from its topics:
//
//  1. refuses while the group has members (kadm DescribeGroups), or when a
//     topic's start offset is past 0 (retention deleted records) unless
//     AllowRetentionLoss;
//  2. snapshots the end offset of every partition of the group's topics;
//  3. truncates the group's tables, in one statement;
//  4. reads every partition from its start to the snapshot with a client
//     that joins no group (assigned partitions, read committed) and applies
//     the records through the group's own handler, a partition's records in
//     offset order;
//  5. checks again that the group has no members and commits the snapshot
//     as the group's offsets, so the live group, once started, continues
//     with the records produced after it.
//
// A failure (database, broker) stops the replay without committing
// offsets; running it again starts over (it truncates again). Records the
// handler can never apply are skipped and counted: they are in the group's
// dead-letter topic already.
func Replay(ctx context.Context, o ReplayOptions) (ReplayReport, error) {
	rep := ReplayReport{}
	if (o.Handler == nil) == (o.BatchHandler == nil) {
		return rep, errors.New("replay: exactly one of Handler and BatchHandler")
	}
	if len(o.Tables) == 0 {
		return rep, fmt.Errorf("replay: group %s owns no tables", o.Group)
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 1000
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("group", o.Group)
	// The metrics (one set per client) go to the consuming client.
	admOpts := o.Kafka
	admOpts.Metrics = nil
	admCl, err := kafka.NewClient(admOpts)
	if err != nil {
		return rep, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	if err := checkNoMembers(ctx, adm, o.Group); err != nil {
		return rep, err
	}
	starts, err := adm.ListStartOffsets(ctx, o.Topics...)
	if err != nil {
		return rep, fmt.Errorf("replay: list start offsets: %w", err)
	}
	if err := starts.Error(); err != nil {
		return rep, fmt.Errorf("replay: list start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, o.Topics...)
	if err != nil {
		return rep, fmt.Errorf("replay: list end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return rep, fmt.Errorf("replay: list end offsets: %w", err)
	}
	from := map[string]map[int32]kgo.Offset{}
	rep.Offsets = map[string]map[int32]int64{}
	pending := map[string]map[int32]int64{} // partitions still to read: end offset
	var lost []string
	ends.Each(func(e kadm.ListedOffset) {
		if rep.Offsets[e.Topic] == nil {
			rep.Offsets[e.Topic] = map[int32]int64{}
		}
		rep.Offsets[e.Topic][e.Partition] = e.Offset
		start := int64(0)
		if s, ok := starts.Lookup(e.Topic, e.Partition); ok {
			start = s.Offset
		}
		if start > 0 {
			lost = append(lost, fmt.Sprintf("%s/%d before offset %d", e.Topic, e.Partition, start))
		}
		if start >= e.Offset {
			return
		}
		if from[e.Topic] == nil {
			from[e.Topic] = map[int32]kgo.Offset{}
			pending[e.Topic] = map[int32]int64{}
		}
		from[e.Topic][e.Partition] = kgo.NewOffset().At(start)
		pending[e.Topic][e.Partition] = e.Offset
	})
	for _, t := range o.Topics {
		if rep.Offsets[t] == nil {
			return rep, fmt.Errorf("replay: topic %s does not exist", t)
		}
	}
	if len(lost) > 0 && !o.AllowRetentionLoss {
		sort.Strings(lost)
		return rep, fmt.Errorf("replay %s: %w (%s); truncating would lose the rows built from them", o.Group, ErrRetentionLoss, strings.Join(lost, ", "))
	}

	tables := make([]string, len(o.Tables))
	for i, t := range o.Tables {
		tables[i] = pgx.Identifier{t}.Sanitize()
	}
	if _, err := o.Pool.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", ")); err != nil {
		return rep, fmt.Errorf("replay: truncate %s: %w", strings.Join(o.Tables, ", "), err)
	}
	rep.Truncated = slices.Clone(o.Tables)
	log.Info("replay: tables truncated, reading topics from the beginning", "tables", strings.Join(o.Tables, ","), "topics", strings.Join(o.Topics, ","))

	if len(pending) > 0 {
		if err := replayPartitions(ctx, o, from, pending, &rep); err != nil {
			return rep, err
		}
	}

	// The live group continues after the replayed point.
	if err := checkNoMembers(ctx, adm, o.Group); err != nil {
		return rep, fmt.Errorf("%w (it started during the replay: its offsets were not changed; stop it and replay again)", err)
	}
	commit := kadm.Offsets{}
	for t, ps := range rep.Offsets {
		for p, off := range ps {
			commit.Add(kadm.Offset{Topic: t, Partition: p, At: off, LeaderEpoch: -1})
		}
	}
	if err := adm.CommitAllOffsets(ctx, o.Group, commit); err != nil {
		return rep, fmt.Errorf("replay: commit offsets of %s: %w", o.Group, err)
	}
	log.Info("replay: done", "applied", rep.Applied, "skipped", rep.Skipped)
	return rep, nil
}

func checkNoMembers(ctx context.Context, adm *kadm.Client, group string) error {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("replay: describe group %s: %w", group, err)
	}
	d, ok := described[group]
	if !ok {
		return nil
	}
	if errors.Is(d.Err, kerr.GroupIDNotFound) {
		return nil // never joined: nothing runs it
	}
	if d.Err != nil && !errors.Is(d.Err, kadm.ErrEmpty) {
		return fmt.Errorf("replay: describe group %s: %w", group, d.Err)
	}
	if len(d.Members) > 0 {
		hosts := make([]string, 0, len(d.Members))
		for _, m := range d.Members {
			hosts = append(hosts, m.ClientID+"@"+m.ClientHost)
		}
		return fmt.Errorf("replay %s: %w (%d, state %s: %s); stop the workers running it first", group, ErrGroupActive,
			len(d.Members), d.State, strings.Join(hosts, ", "))
	}
	return nil
}

// replayPartitions reads every pending partition up to its end offset and
// applies its records in offset order.
func replayPartitions(ctx context.Context, o ReplayOptions, from map[string]map[int32]kgo.Offset, pending map[string]map[int32]int64, rep *ReplayReport) error {
	cl, err := kafka.NewClient(o.Kafka, kgo.ConsumePartitions(from), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	left := 0
	for _, ps := range pending {
		left += len(ps)
	}
	for left > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("%s/%d: %w", t, p, err))
		})
		if ferr != nil {
			return fmt.Errorf("replay: fetch: %w", ferr)
		}
		var perr error
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if perr != nil {
				return
			}
			end, ok := pending[fp.Topic][fp.Partition]
			if !ok {
				return // done already
			}
			var recs []*kgo.Record
			for _, r := range fp.Records {
				if r.Offset < end {
					recs = append(recs, r)
				}
			}
			if perr = applyReplay(ctx, o, recs, rep); perr != nil {
				return
			}
			if n := len(fp.Records); n > 0 && fp.Records[n-1].Offset+1 >= end {
				delete(pending[fp.Topic], fp.Partition)
				left--
			}
		})
		if perr != nil {
			return perr
		}
	}
	return nil
}

// applyReplay applies one partition's records, in offset order, through
// the group's handler.
func applyReplay(ctx context.Context, o ReplayOptions, recs []*kgo.Record, rep *ReplayReport) error {
	msgs := make([]*Message, 0, len(recs))
	for _, r := range recs {
		m := &Message{Record: r, Attempt: 1}
		if o.Codec != nil {
			ev, err := o.Codec.Decode(r.Value)
			if err != nil {
				rep.Skipped++
				continue
			}
			m.Event = ev
		}
		msgs = append(msgs, m)
	}
	if o.Handler != nil {
		for _, m := range msgs {
			if err := o.Handler(ctx, m); err != nil {
				if IsPermanent(err) {
					rep.Skipped++
					continue
				}
				return fmt.Errorf("replay: %s/%d@%d: %w", m.Record.Topic, m.Record.Partition, m.Record.Offset, err)
			}
			rep.Applied++
		}
		return nil
	}
	for len(msgs) > 0 {
		batch := msgs[:min(len(msgs), o.MaxBatch)]
		msgs = msgs[len(batch):]
		err := o.BatchHandler(ctx, batch)
		var failed FailedRecords
		switch {
		case err == nil:
		case errors.As(err, &failed):
			for m, ferr := range failed {
				if !IsPermanent(ferr) {
					return fmt.Errorf("replay: %s/%d@%d: %w", m.Record.Topic, m.Record.Partition, m.Record.Offset, ferr)
				}
			}
			rep.Skipped += int64(len(failed))
		default:
			return fmt.Errorf("replay: %s/%d from offset %d: %w", batch[0].Record.Topic, batch[0].Record.Partition, batch[0].Record.Offset, err)
		}
		rep.Applied += int64(len(batch) - len(failed))
	}
	return nil
}
