package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/payments/internal/dbsqlc"
)

// store is the payments feature's access to its tables, payments and
// refunds: the one place that calls their generated queries, turns rows into
// Payment and Refund, and says what a missing row means (ErrNotFound, or a
// false "found" or "moved"). It runs on whatever it is given: the pool for a
// read, the step's transaction for everything that writes.
type store struct{ q *dbsqlc.Queries }

func storeOf(db dbsqlc.DBTX) store { return store{q: dbsqlc.New(db)} }

// noRow reports whether err is the generated queries' "no such row", and
// passes any other error on with what was being done.
func noRow(err error, what string) (bool, error) {
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, pgx.ErrNoRows):
		return true, nil
	}
	return false, fmt.Errorf("%s: %w", what, err)
}

// notFound turns a missing row into ErrNotFound.
func notFound(err error, what string) error {
	missing, err := noRow(err, what)
	if missing {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return err
}

// payment and refund read one of the tenant's by id (ErrNotFound for
// none). Every statement names the tenant, also for ids from our own records
// (a claim's resource, a refund's payment, a provider reference we made):
// on Citus that keeps it on the tenant's shard.
func (st store) payment(ctx context.Context, tenantID, id uuid.UUID) (Payment, error) {
	row, err := st.q.PaymentGet(ctx, dbsqlc.PaymentGetParams{TenantID: tenantID, ID: id})
	if err != nil {
		return Payment{}, notFound(err, "load payment "+id.String())
	}
	return paymentFromRow(row), nil
}

func (st store) refund(ctx context.Context, tenantID, id uuid.UUID) (Refund, error) {
	row, err := st.q.RefundGet(ctx, dbsqlc.RefundGetParams{TenantID: tenantID, ID: id})
	if err != nil {
		return Refund{}, notFound(err, "load refund "+id.String())
	}
	return refundFromRow(row), nil
}

// lockPayment locks one of the tenant's payments (ErrNotFound for none).
func (st store) lockPayment(ctx context.Context, tenantID, id uuid.UUID) (Payment, error) {
	row, err := st.q.PaymentGetForUpdate(ctx, dbsqlc.PaymentGetForUpdateParams{TenantID: tenantID, ID: id})
	if err != nil {
		return Payment{}, notFound(err, "lock payment")
	}
	return paymentFromRow(row), nil
}

// paymentByKey and refundByKey find what a key created, for a late retry
// whose idempotency record has expired.
func (st store) paymentByKey(ctx context.Context, tenantID uuid.UUID, key string) (Payment, bool, error) {
	row, err := st.q.PaymentGetByIdempotencyKey(ctx, dbsqlc.PaymentGetByIdempotencyKeyParams{TenantID: tenantID, IdempotencyKey: key})
	if missing, err := noRow(err, "load payment by key"); missing || err != nil {
		return Payment{}, false, err
	}
	return paymentFromRow(row), true, nil
}

func (st store) refundByKey(ctx context.Context, tenantID uuid.UUID, key string) (Refund, bool, error) {
	row, err := st.q.RefundGetByIdempotencyKey(ctx, dbsqlc.RefundGetByIdempotencyKeyParams{TenantID: tenantID, IdempotencyKey: key})
	if missing, err := noRow(err, "load refund by key"); missing || err != nil {
		return Refund{}, false, err
	}
	return refundFromRow(row), true, nil
}

// hasLivePayment reports whether the order has a pending or succeeded
// payment.
func (st store) hasLivePayment(ctx context.Context, tenantID, orderID uuid.UUID) (bool, error) {
	_, err := st.q.PaymentGetLiveForOrder(ctx, dbsqlc.PaymentGetLiveForOrderParams{TenantID: tenantID, OrderID: orderID})
	missing, err := noRow(err, "load live payment")
	return !missing && err == nil, err
}

// HasLivePayment reports whether one of the tenant's orders has a pending
// or succeeded payment, in tx. orders.cancel asks it with the order's row
// locked (internal/app wires it in), the lock a payment's first step takes
// too: a payment at the provider, whose outcome is not known yet, refuses
// the cancel instead of racing it.
func HasLivePayment(ctx context.Context, tx pgx.Tx, tenantID, orderID uuid.UUID) (bool, error) {
	return storeOf(tx).hasLivePayment(ctx, tenantID, orderID)
}

func (st store) insertPayment(ctx context.Context, p dbsqlc.PaymentInsertParams) (Payment, error) {
	row, err := st.q.PaymentInsert(ctx, p)
	if err != nil {
		return Payment{}, fmt.Errorf("insert payment: %w", err)
	}
	return paymentFromRow(row), nil
}

// succeedPayment and failPayment finish a pending payment. moved is false
// when it was no longer pending (somebody else finished it first).
func (st store) succeedPayment(ctx context.Context, tenantID, id uuid.UUID, chargeID *string, now time.Time) (Payment, bool, error) {
	row, err := st.q.PaymentSucceed(ctx, dbsqlc.PaymentSucceedParams{ProviderChargeID: chargeID, Now: now, TenantID: tenantID, ID: id})
	if missing, err := noRow(err, "record charge"); missing || err != nil {
		return Payment{}, false, err
	}
	return paymentFromRow(row), true, nil
}

func (st store) failPayment(ctx context.Context, tenantID, id uuid.UUID, chargeID *string, code string, now time.Time) (Payment, bool, error) {
	row, err := st.q.PaymentFail(ctx, dbsqlc.PaymentFailParams{ProviderChargeID: chargeID, FailureCode: &code, Now: now, TenantID: tenantID, ID: id})
	if missing, err := noRow(err, "record declined charge"); missing || err != nil {
		return Payment{}, false, err
	}
	return paymentFromRow(row), true, nil
}

// reserveRefund reserves amount of a succeeded payment in the statement that
// checks it; ok is false when the payment cannot cover it.
func (st store) reserveRefund(ctx context.Context, tenantID, paymentID uuid.UUID, amount int64, now time.Time) (bool, error) {
	_, err := st.q.PaymentReserveRefund(ctx, dbsqlc.PaymentReserveRefundParams{Amount: amount, Now: now, TenantID: tenantID, ID: paymentID})
	missing, err := noRow(err, "reserve refund")
	return !missing && err == nil, err
}

func (st store) releaseRefund(ctx context.Context, tenantID, paymentID uuid.UUID, amount int64, now time.Time) error {
	if err := st.q.PaymentReleaseRefund(ctx, dbsqlc.PaymentReleaseRefundParams{Amount: amount, Now: now, TenantID: tenantID, ID: paymentID}); err != nil {
		return fmt.Errorf("release refund reservation: %w", err)
	}
	return nil
}

func (st store) addRefunded(ctx context.Context, tenantID, paymentID uuid.UUID, amount int64, now time.Time) (Payment, error) {
	row, err := st.q.PaymentAddRefunded(ctx, dbsqlc.PaymentAddRefundedParams{Amount: amount, Now: now, TenantID: tenantID, ID: paymentID})
	if err != nil {
		return Payment{}, fmt.Errorf("add refunded amount: %w", err)
	}
	return paymentFromRow(row), nil
}

func (st store) insertRefund(ctx context.Context, p dbsqlc.RefundInsertParams) (Refund, error) {
	row, err := st.q.RefundInsert(ctx, p)
	if err != nil {
		return Refund{}, fmt.Errorf("insert refund: %w", err)
	}
	return refundFromRow(row), nil
}

// succeedRefund and failRefund finish a pending refund; moved is false when
// it was no longer pending.
func (st store) succeedRefund(ctx context.Context, tenantID, id uuid.UUID, providerRefundID string, now time.Time) (Refund, bool, error) {
	row, err := st.q.RefundSucceed(ctx, dbsqlc.RefundSucceedParams{ProviderRefundID: &providerRefundID, Now: now, TenantID: tenantID, ID: id})
	if missing, err := noRow(err, "record refund"); missing || err != nil {
		return Refund{}, false, err
	}
	return refundFromRow(row), true, nil
}

func (st store) failRefund(ctx context.Context, tenantID, id uuid.UUID, code string, now time.Time) (Refund, bool, error) {
	row, err := st.q.RefundFail(ctx, dbsqlc.RefundFailParams{FailureCode: &code, Now: now, TenantID: tenantID, ID: id})
	if missing, err := noRow(err, "record refund failure"); missing || err != nil {
		return Refund{}, false, err
	}
	return refundFromRow(row), true, nil
}

// paymentsOfOrder and refundsOfOrder list one of the tenant's orders'
// payments and refunds, oldest first.
func (st store) paymentsOfOrder(ctx context.Context, tenantID, orderID uuid.UUID) ([]Payment, error) {
	rows, err := st.q.PaymentListByOrder(ctx, dbsqlc.PaymentListByOrderParams{TenantID: tenantID, OrderID: orderID})
	if err != nil {
		return nil, fmt.Errorf("list payments of order %s: %w", orderID, err)
	}
	out := make([]Payment, len(rows))
	for i, r := range rows {
		out[i] = paymentFromRow(r)
	}
	return out, nil
}

func (st store) refundsOfOrder(ctx context.Context, tenantID, orderID uuid.UUID) ([]Refund, error) {
	rows, err := st.q.RefundListByOrder(ctx, dbsqlc.RefundListByOrderParams{TenantID: tenantID, OrderID: orderID})
	if err != nil {
		return nil, fmt.Errorf("list refunds of order %s: %w", orderID, err)
	}
	out := make([]Refund, len(rows))
	for i, r := range rows {
		out[i] = refundFromRow(r)
	}
	return out, nil
}

// requestCancel marks a pending payment to be cancelled (cancel.go); false
// when it is no longer pending.
func (st store) requestCancel(ctx context.Context, tenantID, id uuid.UUID, now time.Time) (bool, error) {
	_, err := st.q.PaymentRequestCancel(ctx, dbsqlc.PaymentRequestCancelParams{TenantID: tenantID, ID: id, Now: now})
	missing, err := noRow(err, "mark payment to be cancelled")
	return !missing && err == nil, err
}
