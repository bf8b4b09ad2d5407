package app

import (
	"errors"
	"fmt"
	"slices"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/retention"
)

// Operations is the registry of every idempotent operation of the service.
// Each feature declares its own (orders.Specs, payments.Specs); adding an
// operation is one entry there. From this list derive: the retention per
// operation (RETENTION_MONEY lengthens that of the operations covering the
// settlement horizon, Config), the horizons the startup check holds it to
// (retention.Check), the series the
// metrics export from the start, and which operations the Recoverer must
// resume (CheckOperations).
func Operations() []operation.Spec {
	return slices.Concat(orders.Specs(), payments.Specs())
}

// idempotencyPolicy is the default retention of every registered operation.
func idempotencyPolicy(specs []operation.Spec) idempotency.Policy { return operation.PolicyOf(specs) }

// covers is what each registered operation's retention must cover.
func covers(specs []operation.Spec) retention.Covers {
	c := make(retention.Covers, len(specs))
	for _, s := range specs {
		c[s.Name] = s.Covers
	}
	return c
}

// CheckOperations refuses a registry in which an operation lacks what it
// needs: a name, a retention and a horizon, no duplicate, and, for a
// resumable operation, a Recoverer that resumes it (resumes reports that).
func CheckOperations(specs []operation.Spec, resumes func(idempotency.Operation) bool) error {
	var errs []error
	seen := map[idempotency.Operation]bool{}
	for _, s := range specs {
		if err := s.Check(); err != nil {
			errs = append(errs, err)
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("operation %s is registered twice", s.Name))
		}
		seen[s.Name] = true
		if s.Resumable && !resumes(s.Name) {
			errs = append(errs, fmt.Errorf("operation %s calls out but the recoverer does not resume it", s.Name))
		}
	}
	return errors.Join(errs...)
}
