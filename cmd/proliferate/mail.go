package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/internal/mailqueue/mailqueuedb"
)

const mailUsage = `usage: proliferate mail status|failed|retry ID…

  status            queued emails waiting to be sent, the age of the oldest,
                    emails set aside as undeliverable
  failed [--limit N]
                    the emails set aside (a permanent refusal such as 550
                    no such user, or MAIL_MAX_ATTEMPTS temporary failures),
                    newest first, with their errors (never their content)
  retry ID…         put set-aside emails back in the queue (fix the cause
                    first: the SMTP settings, the provider's account)
`

func mailCmd(ctx context.Context, a *app.App, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{mailUsage}
	}
	if err := a.OpenPostgres(ctx); err != nil {
		return err
	}
	q := mailqueuedb.New(a.Pool)
	switch sub, rest := args[0], args[1:]; sub {
	case "status":
		c, err := q.Counts(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pending:        %d\noldest pending: %s\nset aside:      %d\n",
			c.Pending, (time.Duration(c.OldestPendingSeconds * float64(time.Second))).Truncate(time.Millisecond), c.Failed)
		return nil
	case "failed":
		fs := flag.NewFlagSet("mail failed", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		limit := fs.Int("limit", 100, "")
		if err := fs.Parse(rest); err != nil || fs.NArg() > 0 || *limit < 1 || *limit > 10000 {
			return usageError{mailUsage}
		}
		rows, err := q.ListFailed(ctx, int32(*limit))
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tKIND\tRECIPIENT\tATTEMPTS\tFAILED AT\tERROR")
		for _, r := range rows {
			failed, last := "", ""
			if r.FailedAt != nil {
				failed = r.FailedAt.UTC().Format(time.RFC3339)
			}
			if r.LastError != nil {
				last = *r.LastError
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Kind, r.Recipient, r.Attempts, failed, last)
		}
		return w.Flush()
	case "retry":
		if len(rest) == 0 {
			return usageError{mailUsage}
		}
		for _, id := range rest {
			if _, err := uuid.Parse(id); err != nil {
				return usageError{fmt.Sprintf("mail retry: %q is not an email id (a UUID from `proliferate mail failed`)", id)}
			}
		}
		n, err := q.Retry(ctx, rest)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d of %d back in the queue\n", n, len(rest))
		return nil
	default:
		return usageError{mailUsage}
	}
}
