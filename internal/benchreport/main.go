// Command benchreport turns `go test -bench` output (on stdin) into the report
// `make bench` prints: the median of each benchmark over its runs, and each
// hot path as a ratio to a baseline measured in the same run, because absolute
// numbers on shared 2-core machines are noise from one run to the next.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// comparison is one ratio of the report. Ratios are expressed so that > 1
// means the subject is faster than its baseline.
type comparison struct {
	title, subject, baseline, metric string
	// goal, when set, is the minimum acceptable ratio.
	goal float64
}

// goals are minimum ratios for named subjects (the rest are reported only).
var goals = map[string]float64{
	"BenchmarkThroughput/runner": 0.5,
}

// absolute goals that are stated in units, not ratios.
var absolute = []struct {
	name, metric string
	min, max     float64 // 0 = no bound
}{
	{"BenchmarkRelay/relay", "events/s", 10_000, 0},
	{"BenchmarkIngest/github", "requests/s", 5_000, 0},
	{"BenchmarkIngest/github", "p99-µs", 0, 20_000},
	{"BenchmarkWebhookToQueuedRun", "p99-µs", 0, 10_000},
	{"BenchmarkQueuedToRunning/stages", "p99-µs", 0, 200_000},
	{"BenchmarkFanout/gateway", "delivery-p99-ms", 0, 50},
	{"BenchmarkFanout/baseline", "delivery-p99-ms", 0, 0},
	// 10,000 clients of one session over three gateway processes (reported)
	{"BenchmarkFanoutAcrossGateways/gateways", "delivery-p99-ms", 0, 0},
	{"BenchmarkFanoutAcrossGateways/baseline", "delivery-p99-ms", 0, 0},
	{"BenchmarkTokenOverhead/gateway", "ns/token", 0, 1_000_000},
	// the consumer applies partitions in parallel; one stream alone reaches ~26k/s
	{"BenchmarkLedgerApply/batched-parallel", "events/s", 50_000, 0},
	// transcript events materialized into the history (batched, the
	// search indexer running alongside), and the lag from the gateway's
	// Publisher to a row the messages API returns
	{"BenchmarkSessionMaterializer/materializer", "events/s", 20_000, 0},
	{"BenchmarkSessionSearchIndex", "events/s", 0, 0},
	{"BenchmarkSessionTranscriptLag/baseline", "p99-ms", 0, 0},
	{"BenchmarkSessionTranscriptLag/materialized", "p50-ms", 0, 0},
	{"BenchmarkSessionTranscriptLag/materialized", "p99-ms", 0, 250},
	{"BenchmarkLLMProxy/proxy", "added-ttfb-p99-µs", 0, 2_000},
	{"BenchmarkLLMProxy/proxy", "added-req-p99-µs", 0, 2_000},
	// the dashboard's first screen, gzipped (its baseline: a trivial Preact app)
	{"BenchmarkDashboardJS/first-screen", "gzip-kB", 0, 150},
	// a 2,000 tokens/s agent stream as the gateway sends it (tokens
	// coalesced in 50 ms): 95% of the frames within a 60 Hz budget (+jitter)
	{"BenchmarkTimelineStream/batched", "p95-frame-ms", 0, 20},
	{"BenchmarkTimelineStream/batched", "dropped-%", 0, 0},
	{"BenchmarkTimelineStream/per-token", "dropped-%", 0, 0},
	{"BenchmarkTimelineStream/per-token", "catch-up-ms", 0, 0},
}

var line = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func main() {
	if err := report(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func report(in io.Reader, out io.Writer) error {
	samples := map[string]map[string][]float64{} // name → metric → values
	var order []string
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		m := line.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		name := m[1]
		if samples[name] == nil {
			samples[name] = map[string][]float64{}
			order = append(order, name)
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err == nil {
				samples[name][f[i+1]] = append(samples[name][f[i+1]], v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(order) == 0 {
		return fmt.Errorf("no benchmark lines on stdin")
	}
	med := func(name, metric string) (float64, bool) {
		vs := samples[name][metric]
		if len(vs) == 0 {
			return 0, false
		}
		s := append([]float64(nil), vs...)
		sort.Float64s(s)
		return s[len(s)/2], true
	}

	fmt.Fprintln(out, "\n== medians ==")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "benchmark\tns/op\tthroughput\tB/op\tallocs/op\tother\t")
	for _, n := range order {
		ns, _ := med(n, "ns/op")
		thr, other := "", []string{}
		for metric := range samples[n] {
			v, _ := med(n, metric)
			switch {
			case strings.HasSuffix(metric, "/s"):
				thr = fmt.Sprintf("%.0f %s", v, metric)
			case metric != "ns/op" && metric != "B/op" && metric != "allocs/op":
				other = append(other, fmt.Sprintf("%.0f %s", v, metric))
			}
		}
		sort.Strings(other)
		bop, _ := med(n, "B/op")
		allocs, _ := med(n, "allocs/op")
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.0f\t%.0f\t%s\t\n", n, ns, thr, bop, allocs, strings.Join(other, ", "))
	}
	tw.Flush()

	fmt.Fprintln(out, "\n== ratios to baselines measured in the same run (> 1 = faster than baseline) ==")
	all := baselineComparisons(order, samples)
	all = append(all, codecComparisons(order)...)
	all = append(all, comparison{"ledger apply: batched vs one locked transaction per event", "BenchmarkLedgerApply/batched",
		"BenchmarkLedgerApply/per-event", "events/s", 10})
	all = append(all, comparison{"dashboard first-screen JS vs a trivial Preact app (gzip kB, × baseline)", "BenchmarkDashboardJS/first-screen",
		"BenchmarkDashboardJS/trivial-preact", "gzip-kB", 0})
	all = append(all, comparison{"relay lz4 vs uncompressed (events/s)", "BenchmarkRelay/relay",
		"BenchmarkRelay/relay-uncompressed", "events/s", 0})
	all = append(all, comparison{"relay uncompressed vs lz4 (wire bytes per event)", "BenchmarkRelay/relay-uncompressed",
		"BenchmarkRelay/relay", "wire-B/event", 0})
	for _, c := range all {
		s, ok1 := med(c.subject, c.metric)
		base, ok2 := med(c.baseline, c.metric)
		if !ok1 || !ok2 || s == 0 || base == 0 {
			continue
		}
		ratio := s / base
		if c.metric == "ns/op" {
			ratio = base / s
		}
		verdict := ""
		if c.goal > 0 {
			verdict = fmt.Sprintf("  goal ≥ %.2f: %s", c.goal, met(ratio >= c.goal))
		}
		fmt.Fprintf(out, "%-62s %6.2f%s\n", c.title, ratio, verdict)
	}
	fmt.Fprintln(out, "\n== absolute goals ==")
	for _, a := range absolute {
		v, ok := med(a.name, a.metric)
		if !ok {
			continue
		}
		if a.max == 0 && a.min == 0 { // reported, no goal
			fmt.Fprintf(out, "%-62s %.1f %s\n", a.name, v, a.metric)
			continue
		}
		if a.max > 0 {
			fmt.Fprintf(out, "%-62s %.0f %s (goal < %.0f: %s)\n", a.name, v, a.metric, a.max, met(v < a.max))
		} else {
			fmt.Fprintf(out, "%-62s %.0f %s (goal ≥ %.0f: %s)\n", a.name, v, a.metric, a.min, met(v >= a.min))
		}
	}
	return nil
}

// baselineComparisons pairs every benchmark with its sibling named
// "baseline" (same parent): BenchmarkX/thing vs BenchmarkX/baseline, on the
// throughput metric when both report one (x/s), else on ns/op.
func baselineComparisons(names []string, samples map[string]map[string][]float64) []comparison {
	var out []comparison
	for _, n := range names {
		i := strings.LastIndex(n, "/")
		if i < 0 || n[i+1:] == "baseline" {
			continue
		}
		base := n[:i] + "/baseline"
		if samples[base] == nil {
			continue
		}
		metric := "ns/op"
		for m := range samples[n] {
			if strings.HasSuffix(m, "/s") && samples[base][m] != nil {
				metric = m
			}
		}
		out = append(out, comparison{n + " vs " + base[strings.LastIndex(base[:i], "/")+1:], n, base, metric, goals[n]})
	}
	return out
}

// codecComparisons compares the codec's Encode/Decode of the event type that
// BenchmarkGoavro measured with goavro's raw binary encode/decode of it.
func codecComparisons(names []string) []comparison {
	var out []comparison
	for _, n := range names {
		if t, ok := strings.CutPrefix(n, "BenchmarkGoavro/BinaryFromNative/"); ok {
			out = append(out, comparison{"codec Encode(" + t + ") vs goavro BinaryFromNative", "BenchmarkEncode/" + t, n, "ns/op", 0})
		}
		if t, ok := strings.CutPrefix(n, "BenchmarkGoavro/NativeFromBinary/"); ok {
			out = append(out, comparison{"codec Decode(" + t + ") vs goavro NativeFromBinary", "BenchmarkDecode/" + t, n, "ns/op", 0})
		}
	}
	return out
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}
