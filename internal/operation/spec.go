package operation

import (
	"fmt"
	"time"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/retention"
)

// Spec declares one idempotent operation of the service: the entry it has in
// the registry (internal/app, operations.go). The retention policy, the
// startup horizon check, the metrics' series and the Recoverer's list all
// derive from the registry, so adding an operation is one entry.
type Spec struct {
	// Name scopes the operation's keys (with the tenant), e.g. "orders.create".
	Name idempotency.Operation
	// Retention is how long its finished records are kept by default.
	Retention time.Duration
	// Covers are the horizons that retention must cover: every
	// operation covers the client's retry; money covers settlement.
	Covers []retention.Horizon
	// Resumable is set for an operation with an external call (a step after
	// the first): its abandoned attempts are resumed by the Recoverer, which
	// must know it.
	Resumable bool
}

// Check reports what a spec lacks.
func (s Spec) Check() error {
	switch {
	case s.Name == "":
		return fmt.Errorf("an operation without a name")
	case s.Retention <= 0:
		return fmt.Errorf("operation %s has no retention", s.Name)
	case len(s.Covers) == 0:
		return fmt.Errorf("operation %s covers no horizon", s.Name)
	}
	return nil
}

// PolicyOf is the idempotency retention of the operations specs declare,
// each its Spec.Retention: what the service's registry gives the store
// (internal/app), and what a package's tests give theirs, so that an
// operation a feature registers is known to its tests as soon as it is
// declared (internal/app TestEveryOperationIsKnownEverywhere).
func PolicyOf(specs ...[]Spec) idempotency.Policy {
	p := idempotency.Policy{}
	for _, list := range specs {
		for _, s := range list {
			p[s.Name] = s.Retention
		}
	}
	return p
}
