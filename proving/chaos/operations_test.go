package chaos

import (
	"slices"
	"testing"

	"github.com/oncepay/oncepay/internal/app"
)

// The chaos run drives and checks every operation of the service's
// registry: a new operation that it does not know fails here, so the run
// never reports "0 violations" over a part of the service it never touched.
func TestEveryRegisteredOperationIsDriven(t *testing.T) {
	t.Parallel()
	var registered []string
	for _, s := range app.Operations() {
		registered = append(registered, string(s.Name))
	}
	driven := Operations()
	slices.Sort(registered)
	slices.Sort(driven)
	if !slices.Equal(registered, driven) {
		t.Fatalf("the registry has %v, the chaos run drives %v", registered, driven)
	}
	for _, op := range driven {
		if len(allowed[op]) == 0 {
			t.Errorf("the chaos run has no allowed answers for %s", op)
		}
	}
}
