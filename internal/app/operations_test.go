package app_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/retention"
)

// Every operation of the registry has what the service needs of it: a
// retention that covers its horizons, and RETENTION_MONEY lengthens it
// exactly when the operation covers the settlement horizon; and, when it
// calls out, the recoverer resumes it (app.New refuses to start otherwise;
// every end-to-end test starts one).
func TestEveryOperationIsComplete(t *testing.T) {
	t.Parallel()
	specs := app.Operations()
	if len(specs) < 3 {
		t.Fatalf("the registry has %d operations", len(specs))
	}
	c, err := app.ConfigFromEnv(func(name string) string {
		return map[string]string{"DATABASE_URL": "postgres://x", "RETENTION_MONEY": "100d"}[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if err := s.Check(); err != nil {
			t.Error(err)
		}
		money := slices.Contains(s.Covers, retention.HorizonSettlement)
		if got := c.Retention.Idempotency[s.Name]; (got == 100*retention.Day) != money || (!money && got != s.Retention) {
			t.Errorf("%s (money: %t): retention %v with RETENTION_MONEY=100d, registry %v", s.Name, money, got, s.Retention)
		}
	}
}

// The registry check itself: what it refuses.
func TestRegistryCheckRefusesIncompleteOperations(t *testing.T) {
	t.Parallel()
	good := operation.Spec{Name: "x.create", Retention: time.Hour, Covers: []retention.Horizon{retention.HorizonClientRetry}}
	resumesNothing := func(idempotency.Operation) bool { return false }
	for _, tc := range []struct {
		name  string
		specs []operation.Spec
		want  string
	}{
		{"no retention", []operation.Spec{{Name: "x.create", Covers: good.Covers}}, "has no retention"},
		{"no horizon", []operation.Spec{{Name: "x.create", Retention: time.Hour}}, "covers no horizon"},
		{"twice", []operation.Spec{good, good}, "registered twice"},
		{"resumable without a recoverer", []operation.Spec{{Name: "x.pay", Retention: time.Hour, Covers: good.Covers, Resumable: true}}, "recoverer does not resume it"},
	} {
		if err := app.CheckOperations(tc.specs, resumesNothing); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := app.CheckOperations([]operation.Spec{good}, resumesNothing); err != nil {
		t.Errorf("a complete operation is refused: %v", err)
	}
}
