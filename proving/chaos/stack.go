package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// WriteTimeout is the APIs' WRITE_TIMEOUT; their IDEMPOTENCY_LEASE (Config.Lease)
// must be longer, or they refuse to start.
const WriteTimeout = 5 * time.Second

// readyTimeout bounds how long a process may take to start.
const readyTimeout = 60 * time.Second

// Binaries are the executables a run starts.
type Binaries struct {
	API, PSPSim string
	// NATS is the nats-server; empty without the outbox.
	NATS string
}

// Build compiles the API and the simulator of the module in repoDir (and
// the nats-server when withNATS) into dir. race builds them with the race
// detector, whose reports Check counts as violations.
func Build(ctx context.Context, repoDir, dir string, race, withNATS bool) (Binaries, error) {
	b := Binaries{API: filepath.Join(dir, "api"), PSPSim: filepath.Join(dir, "pspsim")}
	targets := [][2]string{{b.API, "./cmd/api"}, {b.PSPSim, "./proving/cmd/pspsim"}}
	if withNATS {
		b.NATS = filepath.Join(dir, "nats-server")
		targets = append(targets, [2]string{b.NATS, "github.com/nats-io/nats-server/v2"})
	}
	for _, t := range targets {
		args := []string{"build", "-o", t[0]}
		if race {
			args = append(args, "-race")
		}
		cmd := exec.CommandContext(ctx, "go", append(args, t[1])...)
		cmd.Dir = repoDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %w\n%s", t[1], err, out)
		}
	}
	return b, nil
}

// HasOutbox reports whether the API binary has the outbox operator commands
// (`api outbox ...`), which arrive with the dispatcher and the consumer.
func HasOutbox(ctx context.Context, apiBin string) bool {
	out, _ := exec.CommandContext(ctx, apiBin, "help").CombinedOutput()
	return bytes.Contains(out, []byte("outbox"))
}

// stack is the running system under test: the provider simulator, the
// broker (with the outbox), and two API processes on one database.
type stack struct {
	bin    Binaries
	dir    string
	dbURL  string
	secret string
	seed   uint64
	races  atomic.Int64
	outbox bool
	pspURL string
	// pspKey is the simulator's API key, made for the run: the APIs send
	// it, and the run's own reads of the ledger and changes of the faults
	// need it too.
	pspKey string
	psp    *proc
	pspLog *pspLog
	apiLog apiLog
	// keyRetention is how long the provider remembers idempotency keys.
	keyRetention time.Duration
	// lease is the APIs' IDEMPOTENCY_LEASE.
	lease time.Duration
	// natsURL lists the broker's servers (comma-separated, as NATS_URL
	// takes them); cluster is set for a cluster run: three servers, an R3
	// stream, the Citus cluster in citus.
	natsURL string
	cluster bool
	citus   *Citus

	// pg is the run's own PostgreSQL (nil on a server of the caller's).
	pg *Postgres
	// links are the fault proxies the APIs reach their dependencies
	// through (nil without network faults); apiDB, apiNATS and apiPSP are
	// the URLs the APIs use, the proxies' or the dependencies' own.
	links                  *links
	apiDB, apiNATS, apiPSP string

	mu   sync.Mutex
	nats []*natsNode
	apis [2]*apiProc
}

// apiProc is one API process and the fixed address it restarts on.
type apiProc struct {
	addr string
	proc *proc
}

// apiLog counts log lines of the APIs that show a recovery path at work:
// evidence that the faults reached the code they are meant for. It also
// counts the requests answered 500 internal_error, and keeps the first few
// of their lines: a fault of the run's is an infrastructure fault, which
// the contract answers 503, so every 500 is a misclassified error (or a
// bug) to look at.
type apiLog struct {
	mu       sync.Mutex
	n        map[string]int
	internal int
	samples  []string
}

// maxInternalSamples bounds the 500 lines a report keeps.
const maxInternalSamples = 5

// apiPaths are the log messages apiLog counts, with their report names.
var apiPaths = [][2]string{
	{`"msg":"provider outcome unknown; attempt stays pending"`, "provider outcome unknown (503 to the client)"},
	{`"msg":"resumed payment found its charge at the provider"`, "resumed payment found its charge by reference"},
	{`"msg":"recoverer finished an abandoned attempt"`, "recoverer finished an abandoned attempt"},
	{`"code":"request_in_progress"`, "409 request_in_progress answered"},
	{`"msg":"webhook not applied; will retry"`, "webhook not applied, retried"},
	{`"msg":"webhook names nothing of ours; marked processed"`, "webhook naming nothing of ours"},
}

func (l *apiLog) watch(line string) {
	if strings.Contains(line, `"msg":"request"`) && strings.Contains(line, `"status":500,`) {
		l.mu.Lock()
		l.internal++
		if len(l.samples) < maxInternalSamples {
			if len(line) > 600 {
				line = line[:600] + "..."
			}
			l.samples = append(l.samples, line)
		}
		l.mu.Unlock()
		return
	}
	for _, p := range apiPaths {
		if strings.Contains(line, p[0]) {
			l.mu.Lock()
			if l.n == nil {
				l.n = map[string]int{}
			}
			l.n[p[1]]++
			l.mu.Unlock()
		}
	}
}

// internalErrors returns how many requests were answered 500 and the
// first few of their log lines.
func (l *apiLog) internalErrors() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.internal, slices.Clone(l.samples)
}

func (l *apiLog) counts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, p := range apiPaths {
		out[p[1]] = l.n[p[1]]
	}
	return out
}

// pspLog counts the simulator's fault log lines: the faults it really
// injected, not just the ones armed.
type pspLog struct {
	failed, dropped, hung atomic.Int64
}

func (l *pspLog) watch(line string) {
	switch {
	case strings.Contains(line, "fault injected: 503 before processing"):
		l.failed.Add(1)
	case strings.Contains(line, "fault injected: dropping connection after processing"):
		l.dropped.Add(1)
	case strings.Contains(line, "fault injected: hanging until the client gives up"):
		l.hung.Add(1)
	}
}

// baseEnv is the environment every child starts from: only what a process
// needs to run, so that nothing of the caller's configuration (a NATS_URL, an
// HTTP_ADDR) leaks into the system under test.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG", "GORACE"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// freePort returns a loopback port that is free now, for a process that
// must come back on the same port after a kill (an API, PostgreSQL, a
// nats-server). It is below the kernel's range of ephemeral ports, from
// which every listener on port 0 and every outgoing connection of the
// machine takes its port: one taken from that range while its process was
// down would keep it from coming back ("address already in use"), and on a
// busy machine, with tests of other work beside the run, that happened.
func freePort() (int, error) { return freePortIn(minFixedPort, ephemeralLow()) }

// freePortIn returns a loopback port in [lo, hi) that is free now: it tries
// ports at random and keeps the first it can listen on.
func freePortIn(lo, hi int) (int, error) {
	for range 200 {
		port := lo + mrand.IntN(hi-lo) // #nosec G404 -- a port to try, nothing secret
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken: try another
		}
		ln.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port between %d and %d", lo, hi)
}

// minFixedPort is the lowest port freePort hands out: above the ports of
// well-known services.
const minFixedPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range; Linux's default, 32768, when it
// cannot be read or leaves no room below it).
func ephemeralLow() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return linuxDefault
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= minFixedPort+1000 {
		return linuxDefault
	}
	return lo
}

// webhookSecret returns a fresh Standard Webhooks secret.
func webhookSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// providerKey returns a fresh API key for the simulator.
func providerKey() string {
	return "sk_sim_" + rand.Text()
}

// bearer adds the simulator's API key to every request of the run's own
// client of the simulator.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// startStack starts the simulator, the broker (with outbox) and both APIs.
// On error everything already started is stopped. s is not the named
// result: every error path returns nil for it, and the cleanup must still
// see what was started so far.
func startStack(ctx context.Context, bin Binaries, dir, dbURL string, seed uint64, outbox, netFaults, cluster bool, keyRetention, lease time.Duration) (_ *stack, err error) {
	s := &stack{bin: bin, dir: dir, dbURL: dbURL, secret: webhookSecret(), pspKey: providerKey(), seed: seed, outbox: outbox, cluster: cluster,
		pspLog: &pspLog{}, keyRetention: keyRetention, lease: lease}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	// Without network faults the APIs reach every dependency directly.
	through := func(dep, rawURL string) (string, error) { return rawURL, nil }
	if netFaults {
		s.links = newLinks()
		through = s.links.start
	}
	if s.apiDB, err = through(DepPostgres, dbURL); err != nil {
		return nil, err
	}
	for i := range s.apis {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.apis[i] = &apiProc{addr: "127.0.0.1:" + strconv.Itoa(port)}
	}
	if err := s.startPSP(ctx); err != nil {
		return nil, err
	}
	if s.apiPSP, err = through(DepProvider, s.pspURL); err != nil {
		return nil, err
	}
	if outbox {
		if err := s.startBroker(ctx); err != nil {
			return nil, err
		}
		if s.apiNATS, err = through(DepNATS, s.natsURL); err != nil {
			return nil, err
		}
	}
	// One after the other: the first applies migrations and seeds the demo
	// tenants, the second finds them done.
	for i := range s.apis {
		if err := s.startAPI(ctx, i); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *stack) startPSP(ctx context.Context) error {
	ready, fire := signalOnce()
	var addr atomic.Value
	watch := func(line string) {
		s.pspLog.watch(line)
		if strings.Contains(line, `"pspsim listening"`) {
			var l struct {
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Addr != "" {
				addr.Store(l.Addr)
				fire()
			}
		}
	}
	args := []string{
		"--addr", "127.0.0.1:0",
		"--webhook-url", "http://" + s.apis[0].addr + "/webhooks/psp",
		"--webhook-backoff", "250ms",
		"--webhook-max-attempts", "12",
		"--seed", strconv.FormatUint(s.seed, 10),
		"--key-retention", s.keyRetention.String(),
	}
	env := append(baseEnv(), "PSP_WEBHOOK_SECRET="+s.secret, "PSP_API_KEY="+s.pspKey)
	p, err := startProc("pspsim", s.bin.PSPSim, args, env, s.dir, &s.races, watch)
	if err != nil {
		return err
	}
	s.psp = p
	if err := p.waitReady(ctx, ready, readyTimeout); err != nil {
		return err
	}
	s.pspURL = "http://" + addr.Load().(string)
	return nil
}

// apiEnv is the configuration of both API processes. The provider timeout
// and the write timeout stay below the lease (6s unless configured), so a
// live attempt is never taken over.
func (s *stack) apiEnv(i int, addr string) []string {
	env := append(baseEnv(),
		"DATABASE_URL="+withApplicationName(s.apiDB, apiName(i)),
		"HTTP_ADDR="+addr,
		"DEMO_MODE=true",
		"AUTO_MIGRATE=true",
		"LOG_LEVEL=info",
		"PSP_URL="+s.apiPSP,
		"PSP_API_KEY="+s.pspKey,
		"PSP_WEBHOOK_SECRETS="+s.secret,
		"PSP_TIMEOUT=2s",
		"WRITE_TIMEOUT="+WriteTimeout.String(),
		"IDEMPOTENCY_LEASE="+s.lease.String(),
		"SWEEP_INTERVAL=0",
	)
	if s.outbox {
		env = append(env, "NATS_URL="+s.apiNATS)
		if s.cluster {
			env = append(env, fmt.Sprintf("NATS_STREAM_REPLICAS=%d", natsClusterSize))
		}
	}
	return env
}

// apiTuning is the tuning file of both API processes (api serve --tuning):
// intervals shorter than the defaults so that a run settles in seconds.
// The recoverer's backoff is scaled to the run's minutes (the service's 30s
// doubling to 15m is for hours-long outages), with a bound no run of
// injected faults spends: a held attempt would stay pending past the settle
// phase. TestRecoveryBoundHoldsTheAttempt proves the bound.
var apiTuning = map[string]any{
	"RecovererInterval":     "1s",
	"RecovererBackoff":      "1s",
	"RecovererBackoffMax":   "5s",
	"RecovererMaxAttempts":  100,
	"WebhookWorkerInterval": "500ms",
	"ShutdownTimeout":       "5s",
}

// writeTuning writes apiTuning into the run's directory and returns its
// path.
func (s *stack) writeTuning() (string, error) {
	data, err := json.MarshalIndent(apiTuning, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.dir, "api-tuning.json")
	return path, os.WriteFile(path, data, 0o600)
}

// apiName is API i's application_name in pg_stat_activity; its outbox
// bookkeeping connections add "-outbox". The traps find the process that
// waits on their locks by it.
func apiName(i int) string { return fmt.Sprintf("oncepay-api-%d", i) }

// withApplicationName sets application_name in a postgres:// URL.
func withApplicationName(rawURL, name string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL // the API reports the bad URL itself
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

func (s *stack) startAPI(ctx context.Context, i int) error {
	a := s.apis[i]
	ready, fire := signalOnce()
	watch := func(line string) {
		if strings.HasPrefix(line, "oncepay is ready at ") {
			fire()
		}
		s.apiLog.watch(line)
	}
	tuning, err := s.writeTuning()
	if err != nil {
		return err
	}
	p, err := startProc(fmt.Sprintf("api-%d", i), s.bin.API, []string{"serve", "--tuning", tuning}, s.apiEnv(i, a.addr), s.dir, &s.races, watch)
	if err != nil {
		return err
	}
	s.mu.Lock()
	a.proc = p
	s.mu.Unlock()
	return p.waitReady(ctx, ready, readyTimeout)
}

// addrs returns the API addresses (fixed for the whole run).
func (s *stack) addrs() []string { return []string{s.apis[0].addr, s.apis[1].addr} }

// api returns the current process of API i.
func (s *stack) api(i int) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.apis[i].proc
}

// killAPI SIGKILLs API i.
func (s *stack) killAPI(i int) { s.api(i).kill() }

// restartAPI starts API i again on its address after down.
func (s *stack) restartAPI(ctx context.Context, i int, down time.Duration) error {
	if err := pause(ctx, down); err != nil {
		return err
	}
	return s.startAPI(ctx, i)
}

// ensureUp restarts whatever is down (after a fault step failed midway),
// except a database that a fault step keeps away on purpose.
func (s *stack) ensureUp(ctx context.Context) error {
	var errs []error
	if s.pg != nil && !s.pg.held.Load() && !s.pg.alive() {
		errs = append(errs, s.pg.Start(ctx))
	}
	for i := range s.nats {
		if p := s.natsProc(i); p == nil || !p.alive() {
			errs = append(errs, s.startNATS(ctx, i))
		}
	}
	for i := range s.apis {
		if !s.api(i).alive() {
			errs = append(errs, s.startAPI(ctx, i))
		}
	}
	return errors.Join(errs...)
}

// stop ends every process: the APIs first (they drain), then the broker
// and the simulator.
func (s *stack) stop() {
	var wg sync.WaitGroup
	for i := range s.apis {
		if p := s.apis[i]; p != nil && p.proc != nil {
			wg.Go(func() { p.proc.stop(10 * time.Second) })
		}
	}
	wg.Wait()
	for i := range s.nats {
		if p := s.natsProc(i); p != nil {
			wg.Go(func() { p.stop(5 * time.Second) })
		}
	}
	wg.Wait()
	if s.psp != nil {
		s.psp.stop(5 * time.Second)
	}
	if s.links != nil {
		s.links.stop()
	}
}

// pause waits d, or less when ctx ends: the schedule's own pacing of a
// fault (how long a killed process stays down), never a wait for work.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
