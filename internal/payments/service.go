package payments

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/dbsqlc"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/wire"
)

// Hooks inject faults at the points where a process can die. They are nil in
// production; the failure drills set them.
type Hooks struct {
	// AfterProviderCall runs after the provider answered and before phase 2
	// records the outcome. An error stops the operation right there, as a
	// crash would (drill 7): the claim stays pending with its lease, which a
	// dead process cannot give back.
	AfterProviderCall func(op idempotency.Operation) error
	// InPhase2 runs inside phase 2's transaction, before it commits. An
	// error rolls phase 2 back, as a lost database connection would; the
	// process lives on.
	InPhase2 func(op idempotency.Operation) error
}

// Service executes payments.create and refunds.create.
type Service struct {
	pool         *pgxpool.Pool
	idem         *idempotency.Store
	provider     *Provider
	logger       *slog.Logger
	now          func() time.Time
	writeTimeout time.Duration
	hooks        Hooks
	events       *outbox.Signal
}

// NewService returns a Service. writeTimeout bounds a started operation,
// which runs to its end even when the client hangs up. events is told after
// every phase 2 that committed, since it may have appended an event (nil:
// nobody is told; the dispatcher finds the event at its next poll).
func NewService(pool *pgxpool.Pool, idem *idempotency.Store, provider *Provider, events *outbox.Signal, logger *slog.Logger, now func() time.Time, writeTimeout time.Duration, hooks Hooks) *Service {
	return &Service{pool: pool, idem: idem, provider: provider, events: events, logger: logger, now: now, writeTimeout: writeTimeout, hooks: hooks}
}

// RetryAfterUnknown is the Retry-After of an unknown provider outcome.
const RetryAfterUnknown = 2 * time.Second

func (s *Service) nowUTC() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// Pay executes payments.create: charge the order once, whatever happens to
// the requests that ask for it.
func (s *Service) Pay(ctx context.Context, req idempotency.Request, orderID uuid.UUID, paymentMethod string) (idempotency.Response, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.writeTimeout)
	defer cancel()
	claim, pay, final, err := phase1(ctx, s, req,
		func(q *dbsqlc.Queries, id uuid.UUID) (dbsqlc.Payment, error) { return q.PaymentGetByID(ctx, id) },
		func(tx pgx.Tx, claim *idempotency.Claim) (dbsqlc.Payment, *idempotency.Response, error) {
			return s.createPayment(ctx, tx, claim, orderID, paymentMethod)
		})
	if err != nil || final != nil {
		return deref(final), err
	}
	return s.afterPhase1(ctx, claim, func() (idempotency.Response, error) { return s.completePayment(ctx, claim, pay) })
}

// afterPhase1 runs work, everything an operation does on its claim after
// phase 1 committed (the provider call and phase 2). When work ends without
// having stored an outcome, by an error or a panic, the claim's lease is
// given back before the caller answers (release): the attempt stays pending
// but nobody works on it any more, so the client's retry resumes it at once
// instead of meeting request_in_progress until the lease runs out. Only a
// crash keeps the lease (the AfterProviderCall hook's crashedError stands for
// one); the lease and the recoverer deal with those.
//
// Money safety: work calls the provider synchronously, so once it has
// returned, no provider call of this attempt is left running in this
// process. One the provider may still be executing (a timeout) is what the
// resumed attempt's lookup by reference and its unchanged provider key are
// for, exactly as after an unknown outcome.
func (s *Service) afterPhase1(ctx context.Context, claim *idempotency.Claim, work func() (idempotency.Response, error)) (resp idempotency.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.release(ctx, claim)
			panic(p)
		}
	}()
	resp, err = work()
	var crash *crashedError
	if err != nil && !errors.As(err, &crash) {
		s.release(ctx, claim)
	}
	return resp, err
}

// crashedError is the AfterProviderCall hook's error: the process "died"
// there, so nothing of it may run afterwards, release included.
type crashedError struct{ err error }

func (e *crashedError) Error() string { return e.err.Error() }
func (e *crashedError) Unwrap() error { return e.err }

// phase1 is the first phase of a multi-phase operation. It answers from the
// stored outcome when there is one (the unlocked fast path, then under the
// claim); else it claims the key and either loads the attempt an earlier
// phase 1 recorded (a resumed claim) or records a new one with create. create
// may instead finish the claim with a final refusal, returned as final.
func phase1[T any](ctx context.Context, s *Service, req idempotency.Request,
	load func(q *dbsqlc.Queries, id uuid.UUID) (T, error),
	create func(tx pgx.Tx, claim *idempotency.Claim) (T, *idempotency.Response, error),
) (claim *idempotency.Claim, attempt T, final *idempotency.Response, err error) {
	if final, err = s.idem.Lookup(ctx, s.pool, req); err != nil || final != nil {
		return nil, attempt, final, err
	}
	var ran bool // the transaction's work succeeded: an error now is its commit's
	err = postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		err := func() error {
			var err error
			if claim, err = s.idem.Begin(ctx, tx, req); err != nil {
				return err
			}
			if claim.Replay != nil {
				final = claim.Replay
				return nil
			}
			if claim.ResourceID != nil { // phase 1 committed before: resume that attempt
				attempt, err = load(dbsqlc.New(tx), *claim.ResourceID)
				return err
			}
			attempt, final, err = create(tx, claim)
			return err
		}()
		ran = err == nil
		return err
	})
	if err != nil && ran && claim != nil && final == nil {
		// The commit may have happened although it reported an error (a
		// dropped connection): give a claim that may exist back at once. If
		// nothing committed, the record is not leased by this claim and
		// release changes nothing.
		s.release(ctx, claim)
	}
	return claim, attempt, final, err
}

// createPayment is phase 1 of a fresh claim: it records a pending payment, or
// a final refusal (order already paid) as the claim's outcome.
func (s *Service) createPayment(ctx context.Context, tx pgx.Tx, claim *idempotency.Claim, orderID uuid.UUID, paymentMethod string) (dbsqlc.Payment, *idempotency.Response, error) {
	req := claim.Request()
	q := dbsqlc.New(tx)
	// A payment under this key while no record exists: the record expired
	// and a genuine late retry arrived (drill 8). The payment decides.
	if prev, err := q.PaymentGetByIdempotencyKey(ctx, dbsqlc.PaymentGetByIdempotencyKeyParams{TenantID: req.TenantID, IdempotencyKey: string(req.Key)}); err == nil {
		return prev, nil, s.lateRetry(ctx, tx, claim, "payment", prev.ID, prev.RequestHash, pointPaymentCreated)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return dbsqlc.Payment{}, nil, fmt.Errorf("load payment by key: %w", err)
	}

	order, err := q.OrderGetForUpdate(ctx, dbsqlc.OrderGetForUpdateParams{TenantID: req.TenantID, ID: orderID})
	if errors.Is(err, pgx.ErrNoRows) {
		return dbsqlc.Payment{}, nil, problem.New(problem.NotFound, "No such order.")
	}
	if err != nil {
		return dbsqlc.Payment{}, nil, fmt.Errorf("lock order: %w", err)
	}
	// The order row is locked: concurrent payments of this order (under other
	// keys) queue here, so this check is not check-then-act. The partial
	// unique index payments_one_live_per_order backs it up.
	_, liveErr := q.PaymentGetLiveForOrder(ctx, order.ID)
	if order.Status != "awaiting_payment" || liveErr == nil {
		resp, err := s.finishProblem(ctx, tx, claim, problem.New(problem.OrderAlreadyPaid,
			"Order %s is already paid or has a payment in progress.", order.ID), nil)
		return dbsqlc.Payment{}, resp, err
	}
	if !errors.Is(liveErr, pgx.ErrNoRows) {
		return dbsqlc.Payment{}, nil, fmt.Errorf("load live payment: %w", liveErr)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return dbsqlc.Payment{}, nil, err
	}
	pay, err := q.PaymentInsert(ctx, dbsqlc.PaymentInsertParams{
		ID:             id,
		TenantID:       req.TenantID,
		OrderID:        order.ID,
		IdempotencyKey: string(req.Key),
		RequestHash:    req.Fingerprint[:],
		ProviderKey:    ProviderKey(req.TenantID, req.Operation, req.Key),
		Amount:         order.AmountTotal,
		Currency:       order.Currency,
		PaymentMethod:  paymentMethod,
		CreatedAt:      s.nowUTC(),
	})
	if err != nil {
		return dbsqlc.Payment{}, nil, fmt.Errorf("insert payment: %w", err)
	}
	return pay, nil, claim.Checkpoint(ctx, tx, pointPaymentCreated, &idempotency.Resource{Type: "payment", ID: pay.ID})
}

// lateRetry answers a key that created a payment or refund (kind, id) while
// it has no idempotency record: the record expired and a genuine late retry
// arrived (drill 8). The resource decides: the same request (by the
// fingerprint the resource keeps) resumes it from point, where the attempt
// finds it finished and answers its outcome; another request under the key
// is refused.
func (s *Service) lateRetry(ctx context.Context, tx pgx.Tx, claim *idempotency.Claim, kind string, id uuid.UUID, requestHash []byte, point string) error {
	req := claim.Request()
	if !bytes.Equal(requestHash, req.Fingerprint[:]) {
		return problem.New(problem.IdempotencyKeyReused, "This Idempotency-Key already created %s %s with a different request.", kind, id)
	}
	s.idem.Observe(req.Operation, idempotency.OutcomeLateRetry)
	return claim.Checkpoint(ctx, tx, point, &idempotency.Resource{Type: kind, ID: id})
}

// completePayment calls the provider for a pending payment (unless a webhook
// already finished it) and runs phase 2.
func (s *Service) completePayment(ctx context.Context, claim *idempotency.Claim, pay dbsqlc.Payment) (idempotency.Response, error) {
	var charge *Charge
	if pay.Status == StatusPending {
		c, err := s.charge(ctx, claim, pay)
		var rejected *RejectedError
		switch {
		case errors.As(err, &rejected) && rejected.Status == http.StatusBadRequest:
			// The provider refused the request without charging (e.g. an
			// unknown payment method): a definite, final failure.
			code := rejected.Code
			c = Charge{Status: StatusFailed, FailureCode: &code}
		case err != nil:
			return s.unknownOutcome(ctx, claim, err)
		}
		charge = &c
		if h := s.hooks.AfterProviderCall; h != nil {
			if err := h(idempotency.OpPaymentsCreate); err != nil {
				return idempotency.Response{}, &crashedError{err}
			}
		}
	}
	var resp idempotency.Response
	err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		if done, err := claim.Reacquire(ctx, tx); err != nil || done != nil {
			resp = deref(done)
			return err
		}
		var (
			final dbsqlc.Payment
			err   error
		)
		if charge != nil {
			final, err = s.applyCharge(ctx, tx, pay, *charge)
		} else {
			final, err = dbsqlc.New(tx).PaymentGetByID(ctx, pay.ID) // finished meanwhile, e.g. by its webhook
		}
		if err != nil {
			return err
		}
		if resp, err = s.finishPayment(ctx, tx, claim, final); err != nil {
			return err
		}
		if h := s.hooks.InPhase2; h != nil {
			return h(idempotency.OpPaymentsCreate)
		}
		return nil
	})
	if err == nil {
		s.events.Committed()
	}
	return resp, err // on an error the caller (afterPhase1) releases the claim
}

// charge asks the provider for the charge. A resumed attempt may have
// charged already, possibly longer ago than the provider keeps keys: it looks
// the charge up by our reference first.
func (s *Service) charge(ctx context.Context, claim *idempotency.Claim, pay dbsqlc.Payment) (Charge, error) {
	if claim.Resumed {
		found, err := s.provider.FindCharge(ctx, pay.ID.String())
		if err != nil {
			return Charge{}, err
		}
		if found != nil {
			s.logger.InfoContext(ctx, "resumed payment found its charge at the provider",
				"payment_id", pay.ID, "charge_id", found.ID, "idempotency_key", string(claim.Request().Key))
			return *found, nil
		}
	}
	return s.provider.CreateCharge(ctx, pay.ProviderKey, pay.Amount, pay.Currency, pay.PaymentMethod, map[string]string{
		"reference":       pay.ID.String(),
		"order_id":        pay.OrderID.String(),
		"tenant_id":       pay.TenantID.String(),
		"idempotency_key": pay.IdempotencyKey,
	})
}

// applyCharge records a provider charge on a payment: pending becomes
// succeeded or failed, once. It is shared by phase 2, the recoverer and the
// webhook worker; whoever moves the payment emits its event, so there is
// exactly one. A payment that is no longer pending is returned as it is.
func (s *Service) applyCharge(ctx context.Context, tx pgx.Tx, pay dbsqlc.Payment, c Charge) (dbsqlc.Payment, error) {
	q := dbsqlc.New(tx)
	now := s.nowUTC()
	var (
		row   dbsqlc.Payment
		err   error
		event string
	)
	var chargeID *string
	if c.ID != "" { // a refused request created no charge
		chargeID = &c.ID
		if err := chargeMismatch(pay, c); err != nil {
			return dbsqlc.Payment{}, err
		}
	}
	if c.Status == StatusSucceeded {
		row, err = q.PaymentSucceed(ctx, dbsqlc.PaymentSucceedParams{ProviderChargeID: chargeID, Now: now, ID: pay.ID})
		event = EventPaymentSucceeded
	} else {
		code := "card_declined"
		if c.FailureCode != nil {
			code = *c.FailureCode
		}
		row, err = q.PaymentFail(ctx, dbsqlc.PaymentFailParams{ProviderChargeID: chargeID, FailureCode: &code, Now: now, ID: pay.ID})
		event = EventPaymentFailed
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return q.PaymentGetByID(ctx, pay.ID) // finished by somebody else first
	}
	if err != nil {
		return dbsqlc.Payment{}, fmt.Errorf("record charge: %w", err)
	}
	if row.Status == StatusSucceeded {
		if _, err := q.OrderAdvanceStatus(ctx, dbsqlc.OrderAdvanceStatusParams{Status: "paid", Now: now, ID: row.OrderID}); err != nil {
			return dbsqlc.Payment{}, fmt.Errorf("mark order paid: %w", err)
		}
	}
	if _, err := outbox.Append(ctx, tx, outbox.Event{
		TenantID:       row.TenantID,
		Type:           event,
		AggregateType:  "payment",
		AggregateID:    row.ID,
		IdempotencyKey: row.IdempotencyKey,
		OccurredAt:     now,
		Payload:        paymentJSONFrom(row),
	}); err != nil {
		return dbsqlc.Payment{}, err
	}
	return row, nil
}

// finishPayment stores the answer for a final payment: 201 with the payment,
// 402 card_declined when the provider declined a charge, or 422
// payment_rejected when it refused the request without creating a charge.
func (s *Service) finishPayment(ctx context.Context, tx pgx.Tx, claim *idempotency.Claim, pay dbsqlc.Payment) (idempotency.Response, error) {
	res := &idempotency.Resource{Type: "payment", ID: pay.ID}
	if pay.Status == StatusFailed {
		pe := problem.New(problem.CardDeclined,
			"The card was declined (%s). Payment %s failed; a new attempt needs a new Idempotency-Key.", deref(pay.FailureCode), pay.ID)
		if pay.ProviderChargeID == nil {
			pe = problem.New(problem.PaymentRejected,
				"The payment provider refused payment %s (%s); check the payment method. A new attempt needs a new Idempotency-Key.", pay.ID, deref(pay.FailureCode))
		}
		pe.Instance = "/v1/payments/" + pay.ID.String()
		resp, err := s.finishProblem(ctx, tx, claim, pe, res)
		return deref(resp), err
	}
	body, err := wire.Encode(paymentJSONFrom(pay))
	if err != nil {
		return idempotency.Response{}, err
	}
	return claim.Finish(ctx, tx, idempotency.Response{
		Status:      http.StatusCreated,
		ContentType: "application/json",
		Location:    "/v1/payments/" + pay.ID.String(),
		Body:        body,
	}, res)
}

// finishProblem stores a business failure as the claim's final outcome.
func (s *Service) finishProblem(ctx context.Context, tx pgx.Tx, claim *idempotency.Claim, pe *problem.Error, res *idempotency.Resource) (*idempotency.Response, error) {
	resp, err := claim.Finish(ctx, tx, idempotency.Response{
		Status:      problem.Status(pe.Code),
		ContentType: problem.ContentType,
		Body:        pe.JSON(),
	}, res)
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

// unknownOutcome answers 503 when the provider's answer is unknown. The claim
// stays pending (nothing final is stored) and its lease ends (afterPhase1), so
// the client's retry resumes the attempt with the same provider key at once.
// A definite refusal is no unknown outcome; it is a bug of ours, kept pending
// for an operator to see (its lease ends all the same: nobody works on it).
func (s *Service) unknownOutcome(ctx context.Context, claim *idempotency.Claim, cause error) (idempotency.Response, error) {
	var rejected *RejectedError
	if errors.As(cause, &rejected) {
		return idempotency.Response{}, fmt.Errorf("provider refused %s %s: %w", claim.Request().Operation, claim.Request().Key, cause)
	}
	s.logger.WarnContext(ctx, "provider outcome unknown; attempt stays pending",
		"operation", claim.Request().Operation, "idempotency_key", string(claim.Request().Key), "error", cause.Error())
	return idempotency.Response{}, &problem.Error{
		Code:       problem.PaymentProviderUnavailable,
		Detail:     "The payment provider's outcome is not known yet. Nothing is lost: retry with the same Idempotency-Key to resume this attempt.",
		RetryAfter: RetryAfterUnknown,
		Err:        cause,
	}
}

// releaseTimeout bounds release, which runs after the operation's own time
// may be used up (a provider timeout is an unknown outcome).
const releaseTimeout = 5 * time.Second

// release ends the claim's lease after an attempt stopped between its phases
// while this process lives on (Claim.Release, which never touches a lease
// that is not this claim's). A crash cannot release; then the lease and the
// recoverer do.
//
// The failure that brought us here is often the database connection: when
// the database dropped every backend, each idle connection of the pool is
// dead too and would fail the release the same way. So after a failure on
// the pool, release retries on a connection of its own, opened for it, until
// releaseTimeout. If that fails as well, the lease simply runs out.
func (s *Service) release(ctx context.Context, claim *idempotency.Claim) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err := s.releaseOn(rctx, s.pool, claim)
	for wait := 50 * time.Millisecond; err != nil; wait = min(2*wait, time.Second) {
		if err = s.releaseOnFreshConn(rctx, claim); err == nil || rctx.Err() != nil {
			break
		}
		select {
		case <-rctx.Done():
		case <-time.After(wait):
		}
	}
	if err != nil {
		s.logger.ErrorContext(ctx, "release lease; it runs out instead", "operation", claim.Request().Operation,
			"idempotency_key", string(claim.Request().Key), "error", err.Error())
	}
}

func (s *Service) releaseOn(ctx context.Context, db postgres.TxBeginner, claim *idempotency.Claim) error {
	return postgres.InTx(ctx, db, func(tx pgx.Tx) error {
		released, err := claim.Release(ctx, tx)
		if err == nil && !released {
			s.logger.InfoContext(ctx, "lease not released: not this claim's (never committed, finished, or taken over)",
				"operation", claim.Request().Operation, "idempotency_key", string(claim.Request().Key))
		}
		return err
	})
}

func (s *Service) releaseOnFreshConn(ctx context.Context, claim *idempotency.Claim) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return s.releaseOn(ctx, conn, claim)
}

// Get returns one of the tenant's payments.
func (s *Service) Get(ctx context.Context, tenantID, id uuid.UUID) (dbsqlc.Payment, error) {
	p, err := dbsqlc.New(s.pool).PaymentGet(ctx, dbsqlc.PaymentGetParams{TenantID: tenantID, ID: id})
	return p, postgres.NotFound(err)
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
