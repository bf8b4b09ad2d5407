package app_test

import (
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/retention"
)

// Every operation of the registry has what the service needs of it: a
// retention that covers its horizons and a RETENTION_ variable that changes
// it, and, when it calls out, the recoverer resumes it (app.New refuses to
// start otherwise; every end-to-end test starts one).
func TestEveryOperationIsComplete(t *testing.T) {
	t.Parallel()
	specs := app.Operations()
	if len(specs) < 3 {
		t.Fatalf("the registry has %d operations", len(specs))
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if err := s.Check(); err != nil {
			t.Error(err)
		}
		v := s.RetentionVariable()
		if seen[v] {
			t.Errorf("%s: %s is used twice", s.Name, v)
		}
		seen[v] = true
		// The variable is read: a retention shorter than the horizons is
		// refused by name.
		_, err := app.ConfigFromEnv(func(name string) string {
			switch name {
			case "DATABASE_URL":
				return "postgres://x"
			case v:
				return "1m"
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), "retention of "+string(s.Name)+" (1m)") {
			t.Errorf("%s=1m: ConfigFromEnv = %v, want the retention of %s refused", v, err, s.Name)
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
