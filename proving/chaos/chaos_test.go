package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testdb"
)

// repoRoot is the module root, two folders up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return dir
}

// TestChaosShort is the short chaos run CI does: the real binaries, built
// into a temporary folder, on a fresh database, 200 seeded intents and
// every kind of fault at least once. It must find no violation.
func TestChaosShort(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	rep, err := Run(ctx, Config{
		Seed:          1,
		Intents:       200,
		Concurrency:   8,
		RepoDir:       repoRoot(t),
		WorkDir:       t.TempDir(),
		DatabaseURL:   url,
		Race:          raceEnabled,
		ProxyRate:     0.15,
		IntentBudget:  60 * time.Second,
		SettleTimeout: 60 * time.Second,
		Logf:          t.Logf,
	})
	if rep != nil {
		var b strings.Builder
		rep.Print(&b)
		t.Log("\n" + b.String())
	}
	if err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	if n := len(rep.Violations); n > 0 {
		t.Errorf("%d invariant violations (listed above)", n)
	}
	if missing := rep.MissingFaults(); len(missing) > 0 {
		t.Errorf("fault kinds never injected: %v", missing)
	}
	if rep.Unsettled != "" {
		t.Errorf("not settled: %s", rep.Unsettled)
	}
}

// TestPlanIsReplayable: the same seed gives the same schedule, another seed
// another one, and a short plan still schedules every timed fault.
func TestPlanIsReplayable(t *testing.T) {
	t.Parallel()
	a := NewPlan(7, PlanOptions{Intents: 150, Outbox: true, ProxyRate: 0.15, CrashEvery: 400})
	b := NewPlan(7, PlanOptions{Intents: 150, Outbox: true, ProxyRate: 0.15, CrashEvery: 400})
	if a.Hash() != b.Hash() {
		t.Fatalf("same seed, different schedules: %s vs %s", a.Hash(), b.Hash())
	}
	if c := NewPlan(8, PlanOptions{Intents: 150, Outbox: true, ProxyRate: 0.15, CrashEvery: 400}); c.Hash() == a.Hash() {
		t.Fatal("another seed, the same schedule")
	}
	kinds := map[StepKind]bool{}
	for _, s := range a.Steps {
		kinds[s.Kind] = true
		if s.At < 0 {
			t.Fatalf("step before the first intent: %+v", s)
		}
	}
	for _, k := range []StepKind{StepKillAPI, StepKillRecorder, StepTerminatePG, StepProviderFail, StepProviderTimeout, StepProviderDrop,
		StepProviderRates, StepWebhookDup, StepWebhookReorder, StepKillDispatcher, StepKillBroker, StepReplay} {
		if !kinds[k] {
			t.Errorf("no %s step in a 150-intent plan", k)
		}
	}
	drops, resets := 0, 0
	for _, f := range a.Proxy {
		for _, x := range f {
			switch x {
			case ProxyDrop:
				drops++
			case ProxyReset:
				resets++
			}
		}
	}
	if drops == 0 || resets == 0 {
		t.Errorf("proxy faults: %d drops, %d resets", drops, resets)
	}
}

// A stack that fails to start reports why in one line and stops what it had
// started: here the simulator runs, and the API binary is missing.
func TestStartStackFailureIsReported(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := Binaries{API: filepath.Join(dir, "no-such-api"), PSPSim: filepath.Join(dir, "pspsim")}
	build := exec.Command("go", "build", "-o", bin.PSPSim, "./proving/cmd/pspsim")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the simulator: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := startStack(ctx, bin, dir, "postgres://nobody@127.0.0.1:1/none", 1, false, 5*time.Second, 6*time.Second)
	if err == nil {
		s.stop()
		t.Fatal("the stack started without an API binary")
	}
	if !strings.Contains(err.Error(), "start api-0") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error = %q, want one line saying api-0 did not start", err)
	}
	log, err := os.ReadFile(filepath.Join(dir, "pspsim.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"msg":"pspsim stopped"`) {
		t.Fatalf("the simulator of the failed start was not stopped; its log:\n%s", log)
	}
}
