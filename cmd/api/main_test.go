package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/testdb"
	"github.com/oncepay/oncepay/internal/testkit"
	"github.com/oncepay/oncepay/proving/pspsim"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestRunHelpVersionAndUsage(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, env(nil), &out, &errOut); err != nil || !strings.Contains(out.String(), "migrate up") {
		t.Fatalf("--help: %v, %q", err, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"version"}, env(nil), &out, &errOut); err != nil || out.Len() == 0 {
		t.Fatalf("version: %v, %q", err, out.String())
	}
	if err := run(context.Background(), []string{"frobnicate"}, env(nil), &out, &errOut); !errors.Is(err, errUsage) {
		t.Fatalf("unknown command: %v, want a usage error", err)
	}
	if err := run(context.Background(), []string{"serve"}, env(nil), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("serve without DATABASE_URL: %v", err)
	}
}

// api serve never runs a payment provider of its own, and never trusts the
// public demo webhook secret outside demo mode: without PSP_URL, or with
// that secret, it refuses to start with one line that says what to set,
// before it touches the database or opens a port.
func TestServeNeedsAProviderAndItsSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"PSP_WEBHOOK_SECRETS": "whsec_b3duLXNlY3JldA=="}, []string{"PSP_URL is required", "make run"}},
		{map[string]string{"PSP_URL": "http://127.0.0.1:1"}, []string{"PSP_WEBHOOK_SECRETS must name", "DEMO_MODE=true"}},
	} {
		tc.env["DATABASE_URL"] = "postgres://nobody@127.0.0.1:1/none"
		tc.env["HTTP_ADDR"] = "127.0.0.1:0"
		err := run(context.Background(), []string{"serve"}, env(tc.env), io.Discard, io.Discard)
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Fatalf("serve with %v: %v, want one line", tc.env, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("serve with %v: %v, want it to say %q", tc.env, err, w)
			}
		}
	}
}

// api serve refuses a tuning file it cannot use, and an unsafe combination
// of settings, whether they come from the environment or the file, with one
// line that names them, before it touches the database or opens a port.
func TestServeRefusesBadTuningAndUnsafeSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unknown member", []string{"--tuning", file("typo.json", `{"OutboxLingr": "5ms"}`)}, nil, `unknown member "OutboxLingr"`},
		{"bad duration", []string{"--tuning", file("bad.json", `{"ShutdownTimeout": "5"}`)}, nil, `ShutdownTimeout: want a duration`},
		{"out of range", []string{"--tuning", file("range.json", `{"OutboxLinger": "2s"}`)}, nil, "tuning OutboxLinger (2s) must be at most 1s"},
		{"no file", []string{"--tuning", filepath.Join(dir, "none.json")}, nil, "tuning file: open "},
		{"a tuning field against a variable", []string{"--tuning", file("wait.json", `{"AdmissionWait": "3s"}`)}, map[string]string{"WRITE_TIMEOUT": "3s", "IDEMPOTENCY_LEASE": "6s", "PSP_TIMEOUT": "2s"},
			"tuning AdmissionWait (3s) must be shorter than WRITE_TIMEOUT (3s)"},
		{"two variables", nil, map[string]string{"IDEMPOTENCY_LEASE": "5s"}, "IDEMPOTENCY_LEASE (5s) must be longer than WRITE_TIMEOUT (10s)"},
		{"an argument", []string{"now"}, nil, "serve takes no arguments but --tuning FILE"},
	} {
		e := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "HTTP_ADDR": "127.0.0.1:0", "PSP_URL": "http://127.0.0.1:1", "DEMO_MODE": "true"}
		maps.Copy(e, tc.env)
		err := run(context.Background(), append([]string{"serve"}, tc.args...), env(e), io.Discard, io.Discard)
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want one line with %q", tc.name, err, tc.want)
		}
	}
}

// The production binary links nothing of the proving ground: the simulator,
// the chaos engine and the benchmarks stay out of it.
func TestBinaryLinksNoProvingGround(t *testing.T) {
	t.Parallel()
	// go test puts its own toolchain first on PATH.
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const proving = "github.com/oncepay/oncepay/proving/"
	for pkg := range strings.SplitSeq(string(out), "\n") {
		if strings.HasPrefix(pkg, proving) {
			t.Errorf("cmd/api links %s", pkg)
		}
	}
	if !strings.Contains(string(out), "github.com/oncepay/oncepay/internal/app\n") {
		t.Fatalf("go list -deps did not list the service's own packages:\n%s", out)
	}
}

// Every command explains itself with --help, -h or "api help <command>",
// without a database and without doing anything: the text goes to stdout
// and the exit status is 0.
func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string // the synopsis first
	}{
		{[]string{"serve", "--help"}, []string{"Usage: api serve", "--tuning FILE", "DATABASE_URL", "RETENTION_MONEY", "SIGTERM", "NATS_URL", "/metrics"}},
		{[]string{"migrate", "--help"}, []string{"Usage: api migrate", "down [N]", "AUTO_MIGRATE"}},
		{[]string{"migrate", "up", "-h"}, []string{"Usage: api migrate"}},
		{[]string{"tenants", "--help"}, []string{"Usage: api tenants create", "--slug", "--name", "shown once"}},
		{[]string{"tenants", "create", "--help"}, []string{"Usage: api tenants create"}},
		{[]string{"sweep", "--help"}, []string{"Usage: api sweep", "--once", "SWEEP_INTERVAL", "SweepBatch", "--tuning"}},
		{[]string{"outbox", "--help"}, []string{"Usage: api outbox", "stuck", "retry", "replay", "Nats-Msg-Id", "NATS_STORE_DIR"}},
		{[]string{"outbox", "replay", "--help"}, []string{"Usage: api outbox"}},
		{[]string{"outbox", "stuck", "-h"}, []string{"Usage: api outbox"}},
		{[]string{"keys", "--help"}, []string{"Usage: api keys create", "list", "revoke", "rotate", "--overlap", "AuthCacheTTL", "shown once"}},
		{[]string{"keys", "rotate", "--help"}, []string{"Usage: api keys"}},
		{[]string{"attention", "--help"}, []string{"Usage: api attention", "list", "show", "resolve", "--retry", "--close", "awaiting_operator", "oncepay_attention_open_items"}},
		{[]string{"attention", "resolve", "--help"}, []string{"Usage: api attention"}},
		{[]string{"idempotency", "--help"}, []string{"Usage: api idempotency show", "--tenant", "--operation", "--key", "--body"}},
		{[]string{"version", "--help"}, []string{"Usage: api version"}},
		{[]string{"help", "sweep"}, []string{"Usage: api sweep"}},
		{[]string{"help"}, []string{"Usage: api <command>", "api <command> --help", "outbox replay", "tenants create", "keys rotate"}},
		{[]string{"-h"}, []string{"Usage: api <command>"}},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), tc.args, env(nil), &out, &errOut); err != nil {
			t.Errorf("%v: %v (stderr %q)", tc.args, err, errOut.String())
			continue
		}
		if !strings.HasPrefix(out.String(), tc.want[0]) {
			t.Errorf("%v printed %q, want it to start with %q", tc.args, out.String(), tc.want[0])
		}
		for _, w := range tc.want[1:] {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: the help does not mention %q", tc.args, w)
			}
		}
	}
	// Every command of the overview has its own help.
	for name := range helps {
		if !strings.Contains(usage, "  "+name+" ") {
			t.Errorf("the overview does not list %q", name)
		}
	}
	if err := run(context.Background(), []string{"help", "frobnicate"}, env(nil), io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("help of an unknown command: %v, want a usage error", err)
	}
	if err := run(context.Background(), []string{"sweep", "--once", "extra"}, env(nil), io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("sweep with a stray argument: %v, want a usage error", err)
	}
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	e := env(map[string]string{"DATABASE_URL": testdb.URL(t)})
	var out bytes.Buffer
	for _, args := range [][]string{{"migrate", "version"}, {"migrate", "down", "1"}, {"migrate", "up"}} {
		out.Reset()
		if err := run(context.Background(), args, e, &out, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.HasPrefix(out.String(), "schema version ") {
			t.Fatalf("%v printed %q", args, out.String())
		}
	}
	latest, err := postgres.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("schema version %d ", latest)) {
		t.Fatalf("after up: %q", out.String())
	}
	if err := run(context.Background(), []string{"migrate", "sideways"}, e, io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Fatalf("bad migrate: %v", err)
	}
}

// tenants create prints a key once; that key authenticates; the same slug
// cannot be created twice.
func TestTenantsCreateAndServe(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	e := env(map[string]string{"DATABASE_URL": testdb.URL(t), "HTTP_ADDR": addr, "LOG_LEVEL": "warn", "NATS_STORE_DIR": t.TempDir(),
		"PSP_URL": newSimulator(t), "PSP_WEBHOOK_SECRETS": "whsec_b3duLXNlY3JldA=="})

	var out bytes.Buffer
	if err := run(context.Background(), []string{"tenants", "create", "--slug", "initech", "--name", "Initech"}, e, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`sk_live_[a-z0-9]+`).FindString(out.String())
	if key == "" {
		t.Fatalf("no key in %q", out.String())
	}
	if err := run(context.Background(), []string{"tenants", "create", "--slug", "initech"}, e, io.Discard, io.Discard); err == nil {
		t.Fatal("created the same tenant twice")
	}
	if err := run(context.Background(), []string{"tenants", "create", "--slug", "Bad Slug"}, e, io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Fatalf("bad slug: %v", err)
	}

	serveInBackground(t, e, addr)
	if res := call(t, "GET", "http://"+addr+"/v1/products", key, "", ""); res.status != http.StatusOK {
		t.Fatalf("the new key gets %d", res.status)
	}
}

// freeAddr returns a loopback address nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// newSimulator starts a payment simulator on a loopback port for the test
// and returns its URL.
func newSimulator(t *testing.T) string {
	t.Helper()
	sim, err := pspsim.New(pspsim.Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	provider := httptest.NewServer(sim.Handler())
	t.Cleanup(provider.Close)
	return provider.URL
}

// serveInBackground runs "api serve" with e until the test ends (then it
// takes SIGTERM's path: a graceful shutdown, after which run returns nil),
// and returns once it is ready on addr.
func serveInBackground(t *testing.T, e func(string) string, addr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, e, io.Discard, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve returned %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		// /healthz answers from the start; /readyz once the database and
		// the broker are there and everything is built.
		res, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("/readyz answered %d", res.StatusCode)
		}
		select {
		case err := <-done:
			t.Fatalf("serve stopped before it answered: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not come up: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling for the listener and the start, not for async work
	}
}

type answer struct {
	status int
	body   []byte
}

// call sends one request with an API key (and an Idempotency-Key and a
// body, when not empty).
func call(t *testing.T, method, url, apiKey, idemKey, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: res.StatusCode, body: raw}
}

// api outbox replay, in a process of its own, finds the running API's
// embedded NATS server through NATS_STORE_DIR, with the token that server
// accepts, and publishes the event again.
func TestOutboxReplayReachesTheEmbeddedServer(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	e := env(map[string]string{"DATABASE_URL": testdb.URL(t), "HTTP_ADDR": addr, "LOG_LEVEL": "warn", "NATS_STORE_DIR": t.TempDir(),
		"DEMO_MODE": "true", "PSP_URL": newSimulator(t)})
	serveInBackground(t, e, addr)
	const acme = "sk_test_acme" // #nosec G101 -- the public demo key
	if r := call(t, "POST", "http://"+addr+"/v1/orders", acme, "replay-1", `{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}`); r.status != http.StatusCreated {
		t.Fatalf("create order: %d %s", r.status, r.body)
	}
	r := call(t, "GET", "http://"+addr+"/v1/events?limit=1", acme, "", "")
	var events struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &events); err != nil || len(events.Data) != 1 {
		t.Fatalf("events: %d %s (%v)", r.status, r.body, err)
	}
	id := events.Data[0].ID
	var out bytes.Buffer
	if err := run(context.Background(), []string{"outbox", "replay", id}, e, &out, io.Discard); err != nil {
		t.Fatalf("outbox replay: %v", err)
	}
	if !strings.HasPrefix(out.String(), "event "+id+" replayed") {
		t.Fatalf("outbox replay printed %q", out.String())
	}
}

func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	e := env(map[string]string{"DATABASE_URL": testdb.URL(t), "NATS_STORE_DIR": t.TempDir()})
	var out bytes.Buffer
	if err := run(context.Background(), []string{"outbox", "stuck"}, e, &out, io.Discard); err != nil || !strings.Contains(out.String(), "0 stuck") {
		t.Fatalf("outbox stuck: %v %q", err, out.String())
	}
	if err := run(context.Background(), []string{"outbox", "retry", "01a22931-c9da-71c4-a494-fc128972f4cb"}, e, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "no event") {
		t.Fatalf("retry of an unknown event: %v", err)
	}
	if err := run(context.Background(), []string{"outbox", "replay", "nope"}, e, io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Fatalf("replay of a bad id: %v", err)
	}
}

// The operator commands build only what they need: a pool and their one
// service. They work against the database alone, whatever else the service
// is configured with: a taken HTTP_ADDR, a broker and a provider nobody
// answers at.
func TestOperatorCommandsNeedOnlyTheDatabase(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneAddr := gone.Addr().String()
	gone.Close()
	e := env(map[string]string{
		"DATABASE_URL": testdb.URL(t), "LOG_LEVEL": "warn",
		"HTTP_ADDR": taken.Addr().String(),
		"NATS_URL":  "nats://" + goneAddr,
		"PSP_URL":   "http://" + goneAddr,
	})
	for _, args := range [][]string{
		{"tenants", "create", "--slug", "hooli"},
		{"keys", "create", "--tenant", "hooli"},
		{"keys", "list", "--tenant", "hooli"},
		{"keys", "rotate", "--tenant", "hooli"},
		{"sweep", "--once"},
		{"outbox", "stuck"},
		{"attention", "list"},
		{"migrate", "version"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), args, e, &out, io.Discard); err != nil {
			t.Errorf("api %s: %v", strings.Join(args, " "), err)
		}
	}
}

// api sweep reads the sweeper's tuning from the file api serve takes, and
// refuses a value out of range before it deletes anything.
func TestSweepReadsItsTuning(t *testing.T) {
	t.Parallel()
	e := env(map[string]string{"DATABASE_URL": testdb.URL(t), "LOG_LEVEL": "warn"})
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	if err := errors.Join(os.WriteFile(good, []byte(`{"SweepBatch": 10, "SweepDutyCycle": 1}`), 0o600),
		os.WriteFile(bad, []byte(`{"SweepBatch": 0}`), 0o600)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"sweep", "--once", "--tuning", good}, e, &out, io.Discard); err != nil || !strings.Contains(out.String(), "deleted: ") {
		t.Fatalf("sweep with a tuning file: %v, %q", err, out.String())
	}
	err := run(context.Background(), []string{"sweep", "--once", "--tuning", bad}, e, io.Discard, io.Discard)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "tuning SweepBatch (0) must be from 1 to 100000") {
		t.Fatalf("sweep with SweepBatch 0: %v, want one line naming it", err)
	}
}

// The URL logged at start is one a person can open: a wildcard listen
// address (a container's HTTP_ADDR=0.0.0.0:8080) is not.
func TestBrowserURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		want string
	}{
		{"0.0.0.0:8080", "http://127.0.0.1:8080"},
		{"[::]:8080", "http://127.0.0.1:8080"},
		{"127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"[::1]:9000", "http://[::1]:9000"},
		{"192.0.2.7:80", "http://192.0.2.7:80"},
	} {
		addr, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := browserURL(addr); got != tc.want {
			t.Errorf("browserURL(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// A version given at build time (the Dockerfile's) is the version logged;
// without it, the go command's stamp. Not parallel: it sets what the linker
// sets.
func TestVersionGivenAtBuildTime(t *testing.T) {
	old := buildVersion
	t.Cleanup(func() { buildVersion = old })
	buildVersion = "3f2c1ab-dirty"
	if got := version(); got != "3f2c1ab-dirty" {
		t.Fatalf("version() = %q, want the build-time version", got)
	}
}

// The key lifecycle from the command line: create adds a key, list shows
// prefixes and never a key, revoke ends one by its prefix, rotate makes a
// new key and ends the old ones after the overlap (at once with 0). What the
// commands print is what a running API then accepts.
func TestKeysCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := env(map[string]string{"DATABASE_URL": testdb.URL(t), "LOG_LEVEL": "warn"})
	keyOf := func(out string) string {
		t.Helper()
		key := regexp.MustCompile(`sk_live_[a-z2-7]{32}`).FindString(out)
		if key == "" {
			t.Fatalf("no key in %q", out)
		}
		return key
	}
	runOK := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(ctx, args, e, &out, io.Discard); err != nil {
			t.Fatalf("api %s: %v", strings.Join(args, " "), err)
		}
		return out.String()
	}
	first := keyOf(runOK("tenants", "create", "--slug", "initech"))
	second := keyOf(runOK("keys", "create", "--tenant", "initech"))

	list := runOK("keys", "list", "--tenant", "initech")
	for _, key := range []string{first, second} {
		if !strings.Contains(list, key[:12]) || strings.Contains(list, key[12:]) {
			t.Errorf("keys list shows %q; want the prefix %s and nothing more of the key", list, key[:12])
		}
	}
	if out := runOK("keys", "revoke", second[:12]); !strings.Contains(out, "revoked") || !strings.Contains(out, "AuthCacheTTL") {
		t.Errorf("keys revoke printed %q", out)
	}
	rotated := runOK("keys", "rotate", "--tenant", "initech", "--overlap", "0")
	third := keyOf(rotated)
	if !strings.Contains(rotated, "old key "+first[:12]) {
		t.Errorf("keys rotate printed %q; want it to name the old key it ended", rotated)
	}
	if out := runOK("keys", "rotate", "--tenant", "initech", "--overlap", "7d"); !strings.Contains(out, "old key "+third[:12]+" ") {
		t.Errorf("keys rotate --overlap 7d printed %q", out)
	}

	cfg, err := app.ConfigFromEnv(e)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tuning.AuthCacheTTL = 0
	pool, err := app.OpenDatabase(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	svc := app.NewTenants(pool, cfg, time.Now)
	for key, works := range map[string]bool{first: false, second: false, third: true} {
		if _, err := svc.Authenticate(ctx, key); (err == nil) != works {
			t.Errorf("key %s: Authenticate = %v, want working %t", key[:12], err, works)
		}
	}

	for _, args := range [][]string{
		{"keys"}, {"keys", "list"}, {"keys", "revoke"}, {"keys", "frobnicate"},
		{"keys", "create", "--tenant", "initech", "extra"},
		{"keys", "rotate", "--tenant", "initech", "--overlap", "-1h"},
		{"keys", "rotate", "--tenant", "initech", "--overlap", "soon"},
	} {
		if err := run(ctx, args, e, io.Discard, io.Discard); err == nil {
			t.Errorf("api %s succeeded, want a usage error", strings.Join(args, " "))
		}
	}
	if err := run(ctx, []string{"keys", "list", "--tenant", "nobody"}, e, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "no such tenant") {
		t.Errorf("keys list of an unknown tenant: %v", err)
	}
	if err := run(ctx, []string{"keys", "revoke", "sk_live_zzzz"}, e, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "no such api key") {
		t.Errorf("keys revoke of an unknown key: %v", err)
	}
}

// A database seeded in demo mode and then served with DEMO_MODE=false: api
// serve refuses to start while the public demo keys work there, in one line
// that names the command revoking them; after that command it starts, and
// the demo keys are refused.
func TestServeRefusesLiveDemoKeysOutsideDemoMode(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	pool, err := postgres.Open(context.Background(), url, postgres.PoolConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	testkit.SeedDemo(t, pool)
	pool.Close()

	addr := freeAddr(t)
	e := env(map[string]string{"DATABASE_URL": url, "HTTP_ADDR": addr, "LOG_LEVEL": "warn", "NATS_STORE_DIR": t.TempDir(),
		"PSP_URL": newSimulator(t), "PSP_WEBHOOK_SECRETS": "whsec_b3duLXNlY3JldA=="})
	// Bounded: a serve that does not refuse runs until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err = run(ctx, []string{"serve"}, e, io.Discard, io.Discard)
	cancel()
	const revoke = "api keys revoke sk_test_acme sk_test_globex"
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), revoke) {
		t.Fatalf("serve of a demo database outside demo mode: %v; want one line naming %q", err, revoke)
	}
	if err := run(context.Background(), strings.Fields(revoke)[1:], e, io.Discard, io.Discard); err != nil {
		t.Fatalf("%s: %v", revoke, err)
	}
	serveInBackground(t, e, addr)
	for _, d := range []string{"sk_test_acme", "sk_test_globex"} {
		if r := call(t, "GET", "http://"+addr+"/v1/products", d, "", ""); r.status != http.StatusUnauthorized {
			t.Errorf("demo key %s outside demo mode: %d %s, want 401", d, r.status, r.body)
		}
	}
}

// The operator's commands of the needs-attention queue and of idempotency
// records: list, show and resolve an item (trying a held attempt again
// releases its record), and show a record with its attention status, its
// stored body only when asked.
func TestAttentionAndIdempotencyCommands(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	e := env(map[string]string{"DATABASE_URL": url, "LOG_LEVEL": "warn"})
	ctx := context.Background()
	runOut := func(args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := run(ctx, args, e, &out, io.Discard)
		return out.String(), err
	}
	if out, err := runOut("tenants", "create", "--slug", "initech"); err != nil {
		t.Fatalf("tenants create: %v %q", err, out)
	}
	pool, err := postgres.Open(ctx, url, postgres.PoolConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// A payment attempt held for an operator, with its item, as a step that
	// found a charge for other money leaves them; a finished order; a
	// webhook set aside.
	const itemID, hookItemID, paymentID = "01a23100-0000-7000-8000-000000000001", "01a23100-0000-7000-8000-000000000002", "01a23100-0000-7000-8000-0000000000aa"
	if _, err := pool.Exec(ctx, `
		WITH t AS (SELECT id FROM tenants WHERE slug = 'initech')
		INSERT INTO api_idempotency (tenant_id, operation, idempotency_key, request_hash, state, recovery_point, locked_until,
			request_id, resource_type, resource_id, created_at, updated_at, expires_at, held_at)
		SELECT t.id, 'payments.create', 'pay-odd', sha256('x'), 'pending', 'payment_created', NULL::timestamptz,
			'req-1', 'payment', $1::uuid, now(), now(), now() + interval '45 days', now() FROM t
		UNION ALL
		SELECT t.id, 'orders.create', 'order-1', sha256('y'), 'pending', 'started', NULL,
			'req-2', NULL, NULL::uuid, now(), now(), now() + interval '7 days', NULL::timestamptz FROM t`, paymentID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		UPDATE api_idempotency SET state = 'completed', recovery_point = 'finished', status_code = 201,
			response_headers = '{"Content-Type":"application/json"}', response_body = '{"secret":"customer data"}'
		WHERE idempotency_key = 'order-1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO attention_items (id, reason, detail, tenant_id, operation, idempotency_key, delivery_id, resource_type, resource_id, raised_at)
		SELECT $1::uuid, 'mismatch', 'charge ch_1 is 1 EUR, payment is 5800 EUR', id, 'payments.create', 'pay-odd', NULL, 'payment', $3::uuid, now() FROM tenants WHERE slug = 'initech'
		UNION ALL
		SELECT $2::uuid, 'mismatch', 'webhook msg_1: other money', id, NULL, NULL, 'msg_1', 'payment', $3::uuid, now() FROM tenants WHERE slug = 'initech'`,
		itemID, hookItemID, paymentID); err != nil {
		t.Fatal(err)
	}

	out, err := runOut("attention", "list")
	if err != nil || !strings.Contains(out, itemID+" open mismatch") || !strings.Contains(out, `key="pay-odd"`) ||
		!strings.Contains(out, "webhook=msg_1") || !strings.Contains(out, "2 open") {
		t.Fatalf("attention list: %v %q", err, out)
	}
	if out, err = runOut("attention", "show", itemID); err != nil || !strings.Contains(out, "charge ch_1 is 1 EUR") || !strings.Contains(out, "payment:") {
		t.Fatalf("attention show: %v %q", err, out)
	}
	out, err = runOut("idempotency", "show", "--tenant", "initech", "--operation", "payments.create", "--key", "pay-odd")
	for _, w := range []string{"state:          pending", "recovery point: payment_created", "held for an operator", "resource:       payment " + paymentID,
		"attention:      " + itemID + " open mismatch", "fingerprint:"} {
		if err != nil || !strings.Contains(out, w) {
			t.Fatalf("idempotency show of the held attempt: %v, want %q in %q", err, w, out)
		}
	}

	for _, args := range [][]string{
		{"attention", "resolve", itemID, "--retry"},                           // no note
		{"attention", "resolve", itemID, "--retry", "--close", "--note", "x"}, // both
		{"attention", "resolve", "nope", "--close", "--note", "x"},
		{"attention", "frob"},
		{"idempotency", "show", "--tenant", "initech", "--operation", "payments.create"},
		{"idempotency", "show", "--tenant", "initech", "--operation", "nope.create", "--key", "k"},
	} {
		if _, err := runOut(args...); !errors.Is(err, errUsage) {
			t.Errorf("api %s: %v, want a usage error", strings.Join(args, " "), err)
		}
	}
	if _, err := runOut("attention", "resolve", hookItemID, "--retry", "--note", "x"); err == nil || !strings.Contains(err.Error(), "no held attempt") {
		t.Fatalf("retrying a webhook's item: %v", err)
	}
	if out, err = runOut("attention", "resolve", itemID, "--retry", "--note", "provider corrected its record"); err != nil || !strings.Contains(out, "released for another try") {
		t.Fatalf("attention resolve --retry: %v %q", err, out)
	}
	var held bool
	var recoveries int
	if err := pool.QueryRow(ctx, `SELECT held_at IS NOT NULL, recoveries FROM api_idempotency WHERE idempotency_key = 'pay-odd'`).Scan(&held, &recoveries); err != nil || held || recoveries != 0 {
		t.Fatalf("after the release: held %v, recoveries %d, %v; want released with 0", held, recoveries, err)
	}
	if _, err := runOut("attention", "resolve", itemID, "--close", "--note", "again"); err == nil || !strings.Contains(err.Error(), "resolved already") {
		t.Fatalf("resolving twice: %v", err)
	}
	if out, err = runOut("attention", "list", "--resolved"); err != nil || !strings.Contains(out, itemID+" resolved") || !strings.Contains(out, "1 resolved") {
		t.Fatalf("attention list --resolved: %v %q", err, out)
	}
	if out, err = runOut("attention", "show", itemID); err != nil || !strings.Contains(out, "(retried)") || !strings.Contains(out, "provider corrected its record") {
		t.Fatalf("attention show of the resolved item: %v %q", err, out)
	}
	if _, err := runOut("attention", "show", "01a23100-0000-7000-8000-0000000000ff"); err == nil || !strings.Contains(err.Error(), "no attention item") {
		t.Fatalf("show of an unknown item: %v", err)
	}

	// The body only with --body.
	out, err = runOut("idempotency", "show", "--tenant", "initech", "--operation", "orders.create", "--key", "order-1")
	if err != nil || !strings.Contains(out, "state:          completed") || !strings.Contains(out, "response:       201 application/json") ||
		!strings.Contains(out, "attention:      none") || strings.Contains(out, "customer data") {
		t.Fatalf("idempotency show: %v %q", err, out)
	}
	if out, err = runOut("idempotency", "show", "--tenant", "initech", "--operation", "orders.create", "--key", "order-1", "--body"); err != nil || !strings.Contains(out, `{"secret":"customer data"}`) {
		t.Fatalf("idempotency show --body: %v %q", err, out)
	}
	if _, err := runOut("idempotency", "show", "--tenant", "initech", "--operation", "orders.create", "--key", "never"); err == nil || !strings.Contains(err.Error(), "no idempotency record") {
		t.Fatalf("show of an unknown key: %v", err)
	}
	if _, err := runOut("idempotency", "show", "--tenant", "nobody", "--operation", "orders.create", "--key", "order-1"); err == nil || !strings.Contains(err.Error(), `no such tenant: "nobody"`) {
		t.Fatalf("show in an unknown tenant: %v", err)
	}
}
