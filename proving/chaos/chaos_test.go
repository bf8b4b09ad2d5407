package chaos

import (
	"context"
	"os"
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
