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
func (s *Service) RecoverOnce(ctx context.Context, limit int) (int, error) {
	var claims []*idempotency.Claim
	err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		claims, err = s.idem.ClaimExpired(ctx, tx, []idempotency.Operation{idempotency.OpPaymentsCreate, idempotency.OpRefundsCreate}, limit)
		return err
	})
	if err != nil {
		return 0, err
	}
	done := 0
	for _, c := range claims {
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

func (s *Service) resume(ctx context.Context, c *idempotency.Claim) error {
	if c.ResourceID == nil {
		return fmt.Errorf("pending claim without a recorded attempt")
	}
	var err error
	switch c.Request().Operation {
	case idempotency.OpPaymentsCreate:
		var pay dbsqlc.Payment
		if pay, err = dbsqlc.New(s.pool).PaymentGetByID(ctx, *c.ResourceID); err == nil {
			_, err = s.completePayment(ctx, c, pay)
		}
	case idempotency.OpRefundsCreate:
		var ref dbsqlc.Refund
		if ref, err = dbsqlc.New(s.pool).RefundGetByID(ctx, *c.ResourceID); err == nil {
			_, err = s.completeRefund(ctx, c, ref)
		}
	default:
		return fmt.Errorf("recoverer: unknown operation %s", c.Request().Operation)
	}
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
