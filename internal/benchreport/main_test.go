package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkThroughput/baseline-2   3   100 ns/op   500000 records/s
BenchmarkThroughput/baseline-2   3   100 ns/op   600000 records/s
BenchmarkThroughput/baseline-2   3   100 ns/op   400000 records/s
BenchmarkThroughput/runner-2     3   100 ns/op   250000 records/s
BenchmarkRelay/relay-2           3   100 ns/op   9000 events/s   1200 p99-µs
BenchmarkEncode/run.lifecycle-2  100  2000 ns/op  512 B/op  9 allocs/op
BenchmarkGoavro/BinaryFromNative/run.lifecycle-2  100  1000 ns/op  256 B/op  4 allocs/op
`

func TestReportRatiosAndGoals(t *testing.T) {
	var out strings.Builder
	if err := report(strings.NewReader(sample), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"BenchmarkThroughput/runner vs BenchmarkThroughput/baseline", "0.50  goal ≥ 0.50: met", // median baseline 500000
		"codec Encode(run.lifecycle) vs goavro BinaryFromNative           0.50",
		"BenchmarkRelay/relay", "9000 events/s (goal ≥ 10000: NOT MET)", "1200 p99-µs",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

func TestReportRejectsEmptyInput(t *testing.T) {
	if err := report(strings.NewReader("PASS\n"), &strings.Builder{}); err == nil {
		t.Fatal("want an error for input without benchmarks")
	}
}
