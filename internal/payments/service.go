package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/orders"
	"github.com/oncepay/oncepay/internal/problem"
)

// Service executes payments.create and refunds.create, and applies the
// provider's events to them.
type Service struct {
	pool     *pgxpool.Pool
	orders   *orders.Service
	provider *Provider
	logger   *slog.Logger
	now      func() time.Time

	pay    *operation.Phases[payAttempt]
	refund *operation.Phases[refundAttempt]
	cancel *operation.Phases[CancelInput]
	// store holds the records whose trace a provider event links to.
	store *idempotency.Store
}

// NewService returns a Service whose operations run on ops, moving orders
// through orderSvc and charging at provider.
func NewService(pool *pgxpool.Pool, ops *operation.Runner, orderSvc *orders.Service, provider *Provider, logger *slog.Logger, now func() time.Time) *Service {
	s := &Service{pool: pool, orders: orderSvc, provider: provider, logger: logger, now: now, store: ops.Store()}
	s.pay = operation.NewPhases(ops, OpPay, s.paySteps())
	s.refund = operation.NewPhases(ops, OpRefund, s.refundSteps())
	s.cancel = operation.NewPhases(ops, OpCancel, s.cancelSteps())
	return s
}

// Operations returns the package's operations, for the Recoverer.
func (s *Service) Operations() []operation.Resumable {
	return []operation.Resumable{s.pay, s.refund}
}

// RetryAfterUnknown is the Retry-After of an unknown provider outcome.
const RetryAfterUnknown = 2 * time.Second

func (s *Service) nowUTC() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// unknownOutcome is the answer when the provider's outcome is unknown: 503
// with Retry-After. The attempt stays pending at its recovery point (nothing
// final is stored) and its lease ends, so the client's retry resumes it with
// the same provider key at once. A definite refusal of a request that should
// have been fine is no unknown outcome; it is a bug of ours, answered 500 and
// kept pending for an operator to see.
func (s *Service) unknownOutcome(ctx context.Context, req idempotency.Request, cause error) error {
	var rejected *RejectedError
	if errors.As(cause, &rejected) {
		return fmt.Errorf("provider refused %s %s: %w", req.Operation, req.Key, cause)
	}
	s.logger.WarnContext(ctx, "provider outcome unknown; attempt stays pending",
		"operation", req.Operation, "idempotency_key", string(req.Key), "error", cause.Error())
	return &problem.Error{
		Code:       problem.PaymentProviderUnavailable,
		Detail:     "The payment provider's outcome is not known yet. Nothing is lost: retry with the same Idempotency-Key to resume this attempt.",
		RetryAfter: RetryAfterUnknown,
		Err:        cause,
	}
}

// Get returns one of the tenant's payments (ErrNotFound for none).
func (s *Service) Get(ctx context.Context, tenantID, id uuid.UUID) (Payment, error) {
	return storeOf(s.pool).payment(ctx, tenantID, id)
}

// GetRefund returns one of the tenant's refunds (ErrNotFound for none).
func (s *Service) GetRefund(ctx context.Context, tenantID, id uuid.UUID) (Refund, error) {
	return storeOf(s.pool).refund(ctx, tenantID, id)
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
