package operation

import (
	"bytes"
	"context"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenants"
	"github.com/oncepay/oncepay/internal/wire"
)

// Target names the path parameter of a POST that acts on an existing
// resource (POST /v1/orders/{id}/payments), and the detail of its 404.
// The zero Target is a POST without one (POST /v1/orders).
type Target struct {
	Param    string
	NotFound string
}

// Input is a request's input, decoded from its body and validated when it
// is asked for: RunWith asks only when the request is not a replay.
type Input[T any] func() (T, error)

// replayOrInput is the fast path of req: the stored answer of its finished
// record, for which input is not asked; or else input, decoded. The body's
// errors come first, as when the body was decoded before the lookup: a
// lookup that failed, or found the key used by another request
// (idempotency_key_reused), is answered with input's error when it has one.
// The outcome answered with is reported then (Store.Peek, Store.Report).
func replayOrInput[T any](ctx context.Context, store *idempotency.Store, db idempotency.DB, req idempotency.Request, input Input[T]) (*idempotency.Response, T, error) {
	var zero T
	resp, err := store.Peek(ctx, db, req)
	if resp != nil {
		store.Report(ctx, req, idempotency.OutcomeReplayed)
		return resp, zero, nil
	}
	in, ierr := input()
	if ierr != nil {
		return nil, zero, ierr
	}
	if err != nil {
		if problem.CodeOf(err) == problem.IdempotencyKeyReused {
			store.Report(ctx, req, idempotency.OutcomeMismatch)
		}
		return nil, zero, err
	}
	return nil, in, nil
}

// ParseOption changes how ParseRequest reads a request.
type ParseOption func(*parseOptions)

type parseOptions struct{ optionalBody bool }

// OptionalBody is the ParseOption of an operation whose body may be left
// out (POST /v1/orders/{id}/cancel): an empty body (nothing, or only
// whitespace) is read as the empty object {}, so that no body and {} are
// the same request, with the same fingerprint, and decode sees {}. Without
// it an empty body is invalid_json, as for every operation whose body
// carries what it asks for.
func OptionalBody(o *parseOptions) { o.optionalBody = true }

// Given is the Input of a value at hand.
func Given[T any](in T) Input[T] { return func() (T, error) { return in, nil } }

// ParseRequest reads what every idempotent POST needs, in the order every
// POST under /v1 checks it: the Idempotency-Key first (a POST without one is
// refused whatever its path), then the path's id (not a UUID: no such
// resource), then the body and the fingerprint over the operation, the id
// and the body. The tenant is the one tenants.Middleware authenticated.
//
// The body is decoded strictly (wire.Decode) and validated by decode, which
// ParseRequest does not call for a body it could fingerprint: it returns
// it as the request's Input, which RunWith calls only when the key has no
// finished record. A replay is so answered after one parse of its body (the
// fingerprint's) instead of three. The answers are the same: a request whose
// fingerprint is a finished record's is byte for byte, in canonical form, a
// request that was valid, so it is valid; and any other request is decoded
// and validated before its key is claimed, so an invalid body is refused
// (validation_failed, invalid_json) before a reused key would be
// (idempotency_key_reused), as before. A body that cannot be fingerprinted
// is decoded at once, so its error is the one it always was.
//
// Every error here, and decode's, is raised before execution: it is not
// stored, and the key stays free.
func ParseRequest[T any](c echo.Context, op idempotency.Operation, target Target, decode func(body []byte, id uuid.UUID) (T, error), opts ...ParseOption) (idempotency.Request, Input[T], error) {
	var o parseOptions
	for _, opt := range opts {
		opt(&o)
	}
	key, err := idempotency.ParseKey(c.Request().Header)
	if err != nil {
		return idempotency.Request{}, nil, err
	}
	var (
		id     uuid.UUID
		params []string
	)
	if target.Param != "" {
		if id, err = uuid.Parse(c.Param(target.Param)); err != nil {
			return idempotency.Request{}, nil, problem.New(problem.NotFound, "%s", target.NotFound)
		}
		params = []string{id.String()}
	}
	raw, err := wire.ReadBody(c.Request())
	if err != nil {
		return idempotency.Request{}, nil, err
	}
	if o.optionalBody && len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	input := func() (T, error) { return decode(raw, id) }
	fp, err := idempotency.NewFingerprint(op, params, raw)
	if err != nil {
		if _, derr := input(); derr != nil {
			return idempotency.Request{}, nil, derr
		}
		return idempotency.Request{}, nil, &problem.Error{Code: problem.InvalidJSON, Detail: "The request body could not be canonicalized.", Err: err}
	}
	return idempotency.Request{
		TenantID:    tenants.FromContext(c).ID,
		Operation:   op,
		Key:         key,
		Fingerprint: fp,
		RequestID:   c.Response().Header().Get(echo.HeaderXRequestID),
	}, input, nil
}
