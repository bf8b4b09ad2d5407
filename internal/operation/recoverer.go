package operation

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/attention"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tracing"
)

// Resumable is an operation the Recoverer can finish: a Phases operation.
type Resumable interface {
	Operation() idempotency.Operation
	Resume(ctx context.Context, claim *idempotency.Claim) (idempotency.Response, error)
}

// Recoverer finishes abandoned attempts of its operations: pending records
// whose lease ran out (the process died between two steps, or the client
// gave up after an unknown outcome). Each is resumed exactly as the client's
// retry would resume it, by the operation's own loop from the recovery point
// stored on its record. Several processes may run it at once; they never
// take the same claim. It is bounded (RecoveryBound, WithRecoveryBound): it
// backs off per attempt between recoveries, and holds an attempt for an
// operator once its last recovery, too, ended without an outcome.
type Recoverer struct {
	r   *Runner
	ops map[idempotency.Operation]Resumable
}

// NewRecoverer returns a Recoverer of ops.
func NewRecoverer(r *Runner, ops ...Resumable) *Recoverer {
	rc := &Recoverer{r: r, ops: make(map[idempotency.Operation]Resumable, len(ops))}
	for _, op := range ops {
		rc.ops[op.Operation()] = op
	}
	return rc
}

// Resumes reports whether the Recoverer finishes abandoned attempts of op.
func (rc *Recoverer) Resumes(op idempotency.Operation) bool {
	_, ok := rc.ops[op]
	return ok
}

// RecoverOnce finishes up to limit abandoned attempts and returns how many it
// finished.
//
// It takes one claim at a time and works on it at once: a claim taken in a
// batch would be leased, and answer request_in_progress to its client, while
// it waits for the claims before it (each up to a provider timeout) or after
// the round was cancelled. An attempt that fails is given back and left for
// the next round; meeting one of those again means every other expired claim
// was tried (ClaimExpired takes the longest expired first, and a released
// claim expired just now), which ends the round.
func (rc *Recoverer) RecoverOnce(ctx context.Context, limit int) (int, error) {
	done := 0
	tried := map[idempotency.Request]bool{}
	for range limit {
		if ctx.Err() != nil {
			break
		}
		c, err := rc.claimExpired(ctx)
		if err != nil {
			return done, err
		}
		if c == nil {
			break
		}
		if tried[c.Request()] {
			rc.r.release(ctx, c)
			break
		}
		tried[c.Request()] = true
		if rc.r.bound.exhausted(c) && c.Recovery > rc.r.bound.MaxAttempts {
			// Its last recovery never ended (the process died in it): the
			// bound is spent, so no further one runs.
			needs := NeedsOperator(attention.ReasonRecoveryExhausted,
				fmt.Errorf("no outcome after %d recoveries, the last one cut off at %s", c.Recovery-1, c.RecoveryPoint))
			if _, err := rc.r.hold(ctx, c, needs, needs); !isHeld(err) {
				rc.r.release(ctx, c)
			}
			continue
		}
		if err := rc.traced(ctx, c); err != nil {
			continue
		}
		done++
	}
	return done, nil
}

// claimExpired takes over one abandoned claim, or returns nil when there is
// none. It finds the tenants with expired claims first (no lock), then
// takes one claim of theirs, tenant by tenant: on Citus each take-over is a
// single-shard statement.
func (rc *Recoverer) claimExpired(ctx context.Context) (*idempotency.Claim, error) {
	ops := make([]idempotency.Operation, 0, len(rc.ops))
	for op := range rc.ops {
		ops = append(ops, op)
	}
	// Bounded like a request: a database that stopped answering must not
	// hold the round (and the shutdown that waits for it) forever.
	ctx, cancel := context.WithTimeout(ctx, rc.r.writeTimeout)
	defer cancel()
	tenants, err := rc.r.store.ExpiredTenants(ctx, rc.r.pool, ops, expiredTenantsPerClaim)
	if err != nil {
		return nil, err
	}
	for _, tenant := range tenants {
		c, err := rc.claimExpiredOf(ctx, tenant, ops)
		if c != nil || err != nil {
			return c, err
		}
		// Another recoverer took this tenant's claims meanwhile.
	}
	return nil, nil
}

// expiredTenantsPerClaim bounds the tenants claimExpired tries.
const expiredTenantsPerClaim = 8

// claimExpiredOf takes over one of the tenant's abandoned claims, or returns
// nil when it has none (left).
func (rc *Recoverer) claimExpiredOf(ctx context.Context, tenant uuid.UUID, ops []idempotency.Operation) (*idempotency.Claim, error) {
	var claims []*idempotency.Claim
	err := postgres.InTx(ctx, rc.r.pool, func(tx pgx.Tx) error {
		var err error
		claims, err = rc.r.store.ClaimExpired(ctx, tx, tenant, ops, 1, rc.r.bound.wait)
		return err
	})
	if err != nil {
		// The commit may have happened although it reported an error: give
		// back what we may hold.
		for _, c := range claims {
			rc.r.release(ctx, c)
		}
		return nil, err
	}
	if len(claims) == 0 {
		return nil, nil
	}
	return claims[0], nil
}

// traced resumes c in a span of its own, linked to the trace of the request
// that started the attempt, and logs a failure inside it.
func (rc *Recoverer) traced(ctx context.Context, c *idempotency.Claim) error {
	ctx, span := rc.r.tracer.Start(ctx, "recover "+string(c.Request().Operation),
		trace.WithLinks(tracing.Links(c.TraceContext())...),
		trace.WithAttributes(tracing.RecoveryPoint.String(string(c.RecoveryPoint))))
	defer span.End()
	idempotency.Annotate(span, c.Request(), idempotency.OutcomeResumed)
	err := rc.resume(ctx, c)
	if isHeld(err) {
		// Held for an operator: logged, with its attention item, when it
		// was held; the span says so.
		span.SetAttributes(tracing.Outcome.String(string(idempotency.OutcomeAwaitingOperator)))
		span.SetStatus(codes.Error, err.Error())
		return err
	}
	if err != nil {
		// Unknown outcomes stay pending for the next round; log, go on.
		span.SetStatus(codes.Error, err.Error())
		rc.r.logger.WarnContext(ctx, "recoverer could not finish an attempt",
			"operation", c.Request().Operation, "idempotency_key", string(c.Request().Key),
			"recovery_point", c.RecoveryPoint, "error", err.Error())
	}
	return err
}

func (rc *Recoverer) resume(ctx context.Context, c *idempotency.Claim) error {
	op, ok := rc.ops[c.Request().Operation]
	if !ok {
		rc.r.release(ctx, c)
		return fmt.Errorf("recoverer: no operation %s", c.Request().Operation)
	}
	point := c.RecoveryPoint
	if _, err := op.Resume(ctx, c); err != nil {
		return err
	}
	rc.r.logger.InfoContext(ctx, "recoverer finished an abandoned attempt",
		"operation", c.Request().Operation, "idempotency_key", string(c.Request().Key), "resumed_at", point)
	return nil
}

// Run calls RecoverOnce every interval (with jitter, so several processes
// spread out) until ctx is cancelled.
func (rc *Recoverer) Run(ctx context.Context, interval time.Duration) error {
	for {
		wait := interval/2 + rand.N(interval) // #nosec G404 -- jitter that spreads recoverers out; nothing depends on it being unpredictable
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		if _, err := rc.RecoverOnce(ctx, 50); err != nil && !errors.Is(err, context.Canceled) {
			rc.r.logger.ErrorContext(ctx, "recoverer round", "error", err.Error(), "code", string(problem.CodeOf(err)))
		}
	}
}
