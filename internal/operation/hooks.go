package operation

import (
	"errors"

	"github.com/oncepay/oncepay/internal/idempotency"
)

// The failure drills' fault injection: hooks that stand for a process dying,
// or a transaction being lost, at the points where that can happen. Only
// tests set them (WithHooks; internal/app's WithOperationHooks); the
// production build never does, and each nil hook does nothing.

// WithHooks injects faults at the points where a process can die. Only tests
// set it: production code never does (default none).
func WithHooks(h Hooks) Option { return func(r *Runner) { r.hooks = h } }

// Hooks inject faults for the failure drills; each nil hook does nothing.
type Hooks struct {
	// BeforeCall runs before a step's outside call, after the step before it
	// committed. An error stops the operation there, as a crash would: the
	// claim keeps its lease, and nothing reached the outside world.
	BeforeCall func(op idempotency.Operation, point idempotency.RecoveryPoint) error
	// AfterCall runs after a step's outside call returned and before the
	// step's transaction records its outcome. An error stops the operation
	// right there, as a crash after the provider answered would: the claim
	// keeps its lease, which a dead process cannot give back.
	AfterCall func(op idempotency.Operation, point idempotency.RecoveryPoint) error
	// BeforeCommit runs inside every step's transaction just before it
	// commits. An error rolls the step back, as a lost database connection
	// would; the process lives on.
	BeforeCommit func(op idempotency.Operation, point idempotency.RecoveryPoint) error
}

// crashedError is the error of the BeforeCall and AfterCall hooks: the
// process "died" there, so nothing of it may run afterwards, release
// included.
type crashedError struct{ err error }

func (e *crashedError) Error() string { return e.err.Error() }
func (e *crashedError) Unwrap() error { return e.err }

// isCrash reports whether err is a hook's stand-in for a crash.
func isCrash(err error) bool {
	var c *crashedError
	return errors.As(err, &c)
}

func (h Hooks) beforeCommit(op idempotency.Operation, point idempotency.RecoveryPoint) error {
	if h.BeforeCommit == nil {
		return nil
	}
	return h.BeforeCommit(op, point)
}

func (h Hooks) beforeCall(op idempotency.Operation, point idempotency.RecoveryPoint) error {
	return crash(h.BeforeCall, op, point)
}

func (h Hooks) afterCall(op idempotency.Operation, point idempotency.RecoveryPoint) error {
	return crash(h.AfterCall, op, point)
}

func crash(hook func(idempotency.Operation, idempotency.RecoveryPoint) error, op idempotency.Operation, point idempotency.RecoveryPoint) error {
	if hook == nil {
		return nil
	}
	if err := hook(op, point); err != nil {
		return &crashedError{err}
	}
	return nil
}
