package operation

import (
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

// ParseRequest reads what every idempotent POST needs, in the order every
// POST under /v1 checks it: the Idempotency-Key first (a POST without one is
// refused whatever its path), then the path's id (not a UUID: no such
// resource), then the body, decoded strictly into body (wire.Decode), and
// the fingerprint over the operation, the id and the body. The tenant is
// the one tenants.Middleware authenticated. Every error here is raised
// before execution: it is not stored, and the key stays free.
func ParseRequest(c echo.Context, op idempotency.Operation, target Target, body any) (idempotency.Request, uuid.UUID, error) {
	key, err := idempotency.ParseKey(c.Request().Header)
	if err != nil {
		return idempotency.Request{}, uuid.Nil, err
	}
	var (
		id     uuid.UUID
		params []string
	)
	if target.Param != "" {
		if id, err = uuid.Parse(c.Param(target.Param)); err != nil {
			return idempotency.Request{}, uuid.Nil, problem.New(problem.NotFound, "%s", target.NotFound)
		}
		params = []string{id.String()}
	}
	raw, err := wire.ReadBody(c.Request())
	if err != nil {
		return idempotency.Request{}, uuid.Nil, err
	}
	if err := wire.Decode(raw, body); err != nil {
		return idempotency.Request{}, uuid.Nil, err
	}
	fp, err := idempotency.NewFingerprint(op, params, raw)
	if err != nil {
		return idempotency.Request{}, uuid.Nil, &problem.Error{Code: problem.InvalidJSON, Detail: "The request body could not be canonicalized.", Err: err}
	}
	return idempotency.Request{
		TenantID:    tenants.FromContext(c).ID,
		Operation:   op,
		Key:         key,
		Fingerprint: fp,
		RequestID:   c.Response().Header().Get(echo.HeaderXRequestID),
	}, id, nil
}
