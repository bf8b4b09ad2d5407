package payments

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
)

// RecoverOnce finishes up to limit abandoned attempts: pending payments and
// refunds whose claim's lease ran out (the process died between the phases,
// or the client gave up after an unknown outcome). Each is resumed exactly as
// the client's retry would resume it: same provider key, lookup by reference
// first. It returns how many it finished. Several processes may run it at
// once; they never take the same claim.
//
// It takes one claim at a time and works on it at once: a claim taken in a
// batch would be leased, and answer request_in_progress to its client, while
// it waits for the claims before it (each up to a provider timeout) or after
// the round was cancelled. An attempt that fails is given back (afterPhase1)
// and left for the next round; meeting one of those again means every other
// expired claim was tried (ClaimExpired takes the longest expired first, and
// a released claim expired just now), which ends the round.
func (s *Service) RecoverOnce(ctx context.Context, limit int) (int, error) {
	done := 0
	tried := map[idempotency.Request]bool{}
	for range limit {
		if ctx.Err() != nil {
			break
		}
		c, err := s.claimExpired(ctx)
		if err != nil {
			return done, err
		}
		if c == nil {
			break
		}
		if tried[c.Request()] {
			s.release(ctx, c)
			break
		}
		tried[c.Request()] = true
		if err := s.resume(ctx, c); err != nil {
			// Unknown outcomes stay pending for the next round; log, go on.
			s.logger.WarnContext(ctx, "recoverer could not finish an attempt",
				"operation", c.Request().Operation, "idempotency_key", string(c.Request().Key), "error", err.Error())
			continue
		}
		done++
	}
	return done, nil
}

// claimExpired takes over one abandoned claim, or returns nil when there is
// none.
func (s *Service) claimExpired(ctx context.Context) (*idempotency.Claim, error) {
	var claims []*idempotency.Claim
	err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		claims, err = s.idem.ClaimExpired(ctx, tx, []idempotency.Operation{idempotency.OpPaymentsCreate, idempotency.OpRefundsCreate}, 1)
		return err
	})
	if err != nil {
		// The commit may have happened although it reported an error: give
		// back what we may hold.
		for _, c := range claims {
			s.release(ctx, c)
		}
		return nil, err
	}
	if len(claims) == 0 {
		return nil, nil
	}
	return claims[0], nil
}

// resume finishes a claim the recoverer took over. Like a request, it runs
// to its end within the write timeout even when ctx is cancelled (shutdown),
// and gives the claim back when it fails (afterPhase1).
func (s *Service) resume(ctx context.Context, c *idempotency.Claim) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.writeTimeout)
	defer cancel()
	_, err := s.afterPhase1(ctx, c, func() (idempotency.Response, error) {
		if c.ResourceID == nil {
			return idempotency.Response{}, fmt.Errorf("pending claim without a recorded attempt")
		}
		switch c.Request().Operation {
		case idempotency.OpPaymentsCreate:
			pay, err := dbsqlc.New(s.pool).PaymentGetByID(ctx, *c.ResourceID)
			if err != nil {
				return idempotency.Response{}, fmt.Errorf("load payment: %w", err)
			}
			return s.completePayment(ctx, c, pay)
		case idempotency.OpRefundsCreate:
			ref, err := dbsqlc.New(s.pool).RefundGetByID(ctx, *c.ResourceID)
			if err != nil {
				return idempotency.Response{}, fmt.Errorf("load refund: %w", err)
			}
			return s.completeRefund(ctx, c, ref)
		}
		return idempotency.Response{}, fmt.Errorf("recoverer: unknown operation %s", c.Request().Operation)
	})
	if err != nil {
		return err
	}
	s.logger.InfoContext(ctx, "recoverer finished an abandoned attempt",
		"operation", c.Request().Operation, "idempotency_key", string(c.Request().Key), "resource_id", *c.ResourceID)
	return nil
}

// RunRecoverer calls RecoverOnce every interval (with jitter, so several
// processes spread out) until ctx is cancelled.
func (s *Service) RunRecoverer(ctx context.Context, interval time.Duration) error {
	for {
		wait := interval/2 + rand.N(interval)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		if _, err := s.RecoverOnce(ctx, 50); err != nil && !errors.Is(err, context.Canceled) {
			s.logger.ErrorContext(ctx, "recoverer round", "error", err.Error(), "code", string(problem.CodeOf(err)))
		}
	}
}
