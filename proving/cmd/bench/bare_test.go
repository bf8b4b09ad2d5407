package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the bare server too: the bench starts
// its own executable with bareCommand, and under go test that is this
// binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == bareCommand {
		if err := serveBare(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The http scenario is the create's exchange against a server in a process
// of its own, which the bench starts and stops itself; the project's client
// decodes its answer as an order, so every request succeeds.
func TestTheHTTPScenarioIsABareExchangeWithAProcessOfItsOwn(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	args := []string{"--scenarios", "http", "--clients", "1,2", "--requests", "30", "--warmup", "0s"}
	if err := run(context.Background(), args, func(string) string { return "" }, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`bare HTTP server: http://127\.0\.0\.1:\d+ \(pid (\d+)\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no bare server in the report:\n%s", out.String())
	}
	pid, _ := strconv.Atoi(m[1])
	if pid == os.Getpid() {
		t.Fatalf("the bare server ran in the bench's own process")
	}
	for _, c := range []string{"1", "2"} {
		row := regexp.MustCompile(`(?m)^\s*http\s+` + c + `\s+(\d+)\s+(\d+)\s`).FindStringSubmatch(out.String())
		if row == nil || row[1] != "30" || row[2] != "0" {
			t.Errorf("http @%s: %v, want 30 requests and 0 errors\n%s", c, row, out.String())
		}
	}
	if alive(pid) {
		t.Errorf("the bare server (pid %d) is still running after the bench", pid)
	}
}

// The create/sql target says what the floor plus a bare exchange would
// reach: their times per request add.
func TestTheCreateTargetNamesTheCeilingOfAnHTTPService(t *testing.T) {
	t.Parallel()
	res := func(sc string, clients, requests int) result {
		return result{scenario: sc, clients: clients, requests: requests, elapsed: time.Second}
	}
	results := []result{
		res(scenarioSQL, 1, 1000), res(scenarioHTTP, 1, 9000), res(scenarioCreate, 1, 600),
		res(scenarioSQL, 16, 2000), res(scenarioCreate, 16, 1200),
	}
	ts := targets(results, []int{1, 16}, rss{})
	if !strings.Contains(ts[0].detail, "ceiling of any HTTP service here: 0.90x") {
		t.Errorf("create/sql @1 detail %q, want the ceiling 0.90x (1 ms of sql plus 0.11 ms of HTTP)", ts[0].detail)
	}
	if strings.Contains(ts[1].detail, "ceiling") {
		t.Errorf("create/sql @16 detail %q names a ceiling without an http run", ts[1].detail)
	}
	if c := ceiling(1000, 0); !math.IsNaN(c) {
		t.Errorf("ceiling without an http throughput = %v, want NaN", c)
	}
}

// make bench pins the bare server where it pins the API (--bare-cpus).
func TestTheBareServerIsPinnedWhereAsked(t *testing.T) {
	t.Parallel()
	b, err := startBare(context.Background(), "0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.pid))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^Cpus_allowed_list:\s+0$`).Match(status) {
		t.Errorf("bare server's CPUs: %s, want 0", regexp.MustCompile(`(?m)^Cpus_allowed_list:.*$`).Find(status))
	}
}
