package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// result is what one scenario measured.
type result struct {
	scenario string
	clients  int
	// requests counts the successful requests of the measured phase.
	requests int
	// errors counts failed requests, warm-up included: any failure is one.
	errors  int
	elapsed time.Duration
	// latencies are the durations of the successful measured requests,
	// sorted ascending.
	latencies []time.Duration
	// cpu is the CPU time each process used in the measured phase.
	cpu cpuSample
}

// merge adds the measurements of another run of the same scenario, so
// that several rounds read as one longer run.
func (r *result) merge(o result) {
	r.requests += o.requests
	r.errors += o.errors
	r.elapsed += o.elapsed
	r.latencies = append(r.latencies, o.latencies...)
	slices.Sort(r.latencies)
	r.cpu = r.cpu.add(o.cpu)
}

// throughput returns successful requests per second.
func (r result) throughput() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.requests) / r.elapsed.Seconds()
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value with at least p percent of the
// values at or below it. It returns 0 for no values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// ratio returns a/b, or NaN when b is not positive (nothing to compare with).
func ratio(a, b float64) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return a / b
}

// target is one goal the run is judged against.
type target struct {
	name string
	got  float64
	// want is the bound; atLeast says whether got must reach it (>=) or stay
	// under it (<=).
	want    float64
	atLeast bool
	unit    string
	// detail explains got, e.g. the two numbers a ratio was made of.
	detail string
	// skip marks a target that could not be measured in this run.
	skip bool
}

// verdict returns PASS, MISS or SKIP.
func (t target) verdict() string {
	switch {
	case t.skip || math.IsNaN(t.got):
		return "SKIP"
	case t.atLeast && t.got >= t.want, !t.atLeast && t.got <= t.want:
		return "PASS"
	}
	return "MISS"
}

// cpuPerRequest formats CPU time d spread over n requests, in
// microseconds; "-" when d is unknown.
func cpuPerRequest(d time.Duration, n int) string {
	if d < 0 || n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)/float64(n))
}

// ms formats a duration in milliseconds with two decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// printResults writes the results table.
func printResults(w io.Writer, results []result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tclients\trequests\terrors\treq/s\tp50\tp99\tCPU/req: bench\tapi\tpostgres\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t\n", r.scenario, r.clients, r.requests, r.errors,
			r.throughput(), ms(percentile(r.latencies, 50)), ms(percentile(r.latencies, 99)),
			cpuPerRequest(r.cpu.bench, r.requests), cpuPerRequest(r.cpu.api, r.requests), cpuPerRequest(r.cpu.pg, r.requests))
	}
	return tw.Flush()
}

// printTargets writes each target with its verdict.
func printTargets(w io.Writer, targets []target) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tmeasured\twant\tverdict\tdetail")
	for _, t := range targets {
		op := "<="
		if t.atLeast {
			op = ">="
		}
		got := "n/a"
		if !t.skip && !math.IsNaN(t.got) {
			got = fmt.Sprintf("%.2f%s", t.got, t.unit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %.2f%s\t%s\t%s\n", t.name, got, op, t.want, t.unit, t.verdict(), t.detail)
	}
	return tw.Flush()
}

// markdownResults renders the results table as Markdown, ready to paste
// into docs/BENCHMARKS.md.
func markdownResults(results []result) string {
	var b strings.Builder
	b.WriteString("| scenario | clients | requests | errors | req/s | p50 | p99 | CPU/req bench | CPU/req api | CPU/req postgres |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.1f | %s | %s | %s | %s | %s |\n", r.scenario, r.clients, r.requests, r.errors,
			r.throughput(), ms(percentile(r.latencies, 50)), ms(percentile(r.latencies, 99)),
			cpuPerRequest(r.cpu.bench, r.requests), cpuPerRequest(r.cpu.api, r.requests), cpuPerRequest(r.cpu.pg, r.requests))
	}
	return b.String()
}

// mergeResult adds r to results: merged into the result of the same
// scenario and client count (an earlier round's), or appended.
func mergeResult(results []result, r result) []result {
	for i := range results {
		if results[i].scenario == r.scenario && results[i].clients == r.clients {
			results[i].merge(r)
			return results
		}
	}
	return append(results, r)
}

// printComparison writes, for each result that has its counterpart
// measured against the --compare API (its name with @label), this API's
// figures as multiples of the other's: throughput, p50, p99 and the API's
// CPU per request. Both were measured in the same rounds, one right after
// the other, so the machine's drift hits them alike.
func printComparison(w io.Writer, results []result, label string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "this API vs @%s\tclients\treq/s\tp50\tp99\tapi CPU/req\t\n", label)
	for _, r := range results {
		b, ok := findResult(results, r.scenario+"@"+label, r.clients)
		if !ok {
			continue
		}
		cpu := math.NaN()
		if r.cpu.api >= 0 && b.cpu.api >= 0 && r.requests > 0 && b.requests > 0 {
			cpu = ratio(float64(r.cpu.api)/float64(r.requests), float64(b.cpu.api)/float64(b.requests))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t\n", r.scenario, r.clients,
			ratio(r.throughput(), b.throughput()),
			ratio(float64(percentile(r.latencies, 50)), float64(percentile(b.latencies, 50))),
			ratio(float64(percentile(r.latencies, 99)), float64(percentile(b.latencies, 99))), cpu)
	}
	return tw.Flush()
}
