package chaos

import (
	"slices"
	"testing"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/operation"
)

// The chaos run drives and checks every operation of the service's
// registry, or says why not: a new operation that it does not know fails
// here, so the run never reports "0 violations" over a part of the service
// it silently left out. An operation that calls out (Resumable) must be
// driven.
func TestEveryRegisteredOperationIsDriven(t *testing.T) {
	t.Parallel()
	driven, skipped := Operations(), NotDriven()
	for _, s := range app.Operations() {
		name := string(s.Name)
		reason, isSkipped := skipped[name]
		switch {
		case slices.Contains(driven, name) && isSkipped:
			t.Errorf("%s is both driven and listed as not driven", name)
		case isSkipped && s.Resumable:
			t.Errorf("%s calls out; the chaos run must drive it (NotDriven says %q)", name, reason)
		case !slices.Contains(driven, name) && !isSkipped:
			t.Errorf("the registry has %s, which the chaos run neither drives nor lists in NotDriven", name)
		}
	}
	for _, op := range driven {
		if !slices.ContainsFunc(app.Operations(), func(s operation.Spec) bool { return string(s.Name) == op }) {
			t.Errorf("the chaos run drives %s, which the registry does not have", op)
		}
	}
	for _, op := range driven {
		if len(allowed[op]) == 0 {
			t.Errorf("the chaos run has no allowed answers for %s", op)
		}
	}
}
