package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testkit"
)

// The compose profile's Prometheus configuration and the Grafana dashboard.
const (
	prometheusConfig = "../../observability/prometheus/prometheus.yml"
	dashboardJSON    = "../../observability/grafana/dashboards/oncepay.json"
)

// The dashboard works against the service as it is: a real Prometheus (from
// Debian's prometheus package, scripts/deps.sh) scrapes a test server with
// the profile's configuration, promtool accepts that configuration, and
// every panel's PromQL parses and returns a series after a little traffic.
// A renamed metric or label fails here, not on an operator's screen.
func TestDashboardQueriesAgainstPrometheus(t *testing.T) {
	t.Parallel()
	prom, promtool := lookPath(t, "prometheus"), lookPath(t, "promtool")
	if out, err := exec.Command(promtool, "check", "config", "--syntax-only", prometheusConfig).CombinedOutput(); err != nil { // #nosec G204 -- the test's own binary and file
		t.Fatalf("promtool check config %s: %v\n%s", prometheusConfig, err, out)
	}
	b := setup(t)

	// The profile's configuration, scraping the test server every second.
	raw, err := os.ReadFile(prometheusConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(raw)
	for old, repl := range map[string]string{`"api:8080"`: `"` + b.addr + `"`, "scrape_interval: 5s": "scrape_interval: 1s"} {
		if !strings.Contains(cfg, old) {
			t.Fatalf("%s no longer has %s", prometheusConfig, old)
		}
		cfg = strings.ReplaceAll(cfg, old, repl)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", cfgPath).CombinedOutput(); err != nil { // #nosec G204 -- the test's own binary and file
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	api := startPrometheus(t, prom, cfgPath, dir)

	testkit.WaitFor(t, 30*time.Second, "Prometheus to scrape the test server", func() bool {
		res, err := promQuery(api, `up{job="oncepay"} == 1`)
		return err == nil && len(res) == 1
	})
	// A little traffic: a create, a pay, a replay, a mismatch, a webhook.
	orderID, _ := b.order(t, "dash-o1")
	b.order(t, "dash-o1")
	wantProblem(t, b.do(t, "POST", "/v1/orders", acme, "dash-o1", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`), http.StatusUnprocessableEntity, "idempotency_key_reused")
	if r := b.pay(t, orderID, "dash-pay", "pm_card_ok"); r.status != http.StatusCreated {
		t.Fatalf("pay: %d %s", r.status, r.body)
	}
	// A rate needs two samples of a series, and the request series exist
	// from the first request on: wait for two scrapes of the pay's.
	testkit.WaitFor(t, 20*time.Second, "two scrapes with the traffic", func() bool {
		res, err := promQuery(api, `count_over_time(oncepay_http_request_duration_seconds_count{route="/v1/orders/:id/payments"}[30s]) >= 2`)
		return err == nil && len(res) > 0
	})

	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	raw, err = os.ReadFile(dashboardJSON)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardJSON, err)
	}
	// Grafana's own variables, as Grafana would fill them in for a
	// one-second scrape interval.
	grafana := strings.NewReplacer("$__rate_interval", "30s", "$__interval", "5s", "$__range", "30m")
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			queries++
			res, err := promQuery(api, grafana.Replace(target.Expr))
			switch {
			case err != nil:
				t.Errorf("panel %q: %s: %v", p.Title, target.Expr, err)
			case len(res) == 0:
				t.Errorf("panel %q: %s returned no series", p.Title, target.Expr)
			}
		}
	}
	if queries < 15 {
		t.Fatalf("only %d queries in the dashboard", queries)
	}
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		// Never a skip: `make test` installs it (scripts/deps.sh).
		t.Fatalf("no %s found: run `make test` (it installs Debian's prometheus package) or apt-get install -y prometheus", name)
	}
	return p
}

// startPrometheus runs Prometheus with cfg on a free loopback port until the
// test ends and returns its base URL.
func startPrometheus(t *testing.T, bin, cfg, dir string) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		base, busy := tryPrometheus(t, bin, cfg, filepath.Join(dir, fmt.Sprint(attempt)))
		if !busy {
			return base
		}
		if attempt == 3 {
			t.Fatal("prometheus: three free ports were taken before it could listen")
		}
	}
}

// tryPrometheus starts Prometheus on a port that was free a moment ago;
// busy is true when another process took it first.
func tryPrometheus(t *testing.T, bin, cfg, dir string) (base string, busy bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // Prometheus takes the port
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "prometheus.log")
	log, err := os.Create(logPath) // #nosec G304 -- the test's own temporary directory
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, // #nosec G204 -- the test's own binary and file
		"--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	readLog := func() string {
		out, _ := os.ReadFile(logPath) // #nosec G304 -- the test's own temporary directory
		return string(out)
	}
	base = "http://" + addr
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-exited:
			cancel()
			if out := readLog(); strings.Contains(out, "address already in use") {
				return "", true
			} else {
				t.Fatalf("prometheus exited: %v\n%s", err, out)
			}
		default:
		}
		res, err := http.Get(base + "/-/ready")
		if err != nil {
			continue
		}
		_ = res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Cleanup(func() {
				cancel()
				<-exited
				if t.Failed() {
					t.Logf("prometheus log:\n%s", readLog())
				}
			})
			return base, false
		}
	}
	cancel()
	<-exited
	t.Fatalf("prometheus was not ready within 20s:\n%s", readLog())
	return "", false
}

// promQuery evaluates query now through Prometheus's HTTP API and returns
// its result's series; a query that does not parse is an error.
func promQuery(base, query string) ([]json.RawMessage, error) {
	res, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var body struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("decode the answer (%s): %w", res.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: %s", body.ErrorType, body.Error)
	}
	if body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector", body.Data.ResultType)
	}
	return body.Data.Result, nil
}
