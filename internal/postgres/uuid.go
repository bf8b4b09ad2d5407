package postgres

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"
)

// registerUUID makes google/uuid's types pgx's own UUID, both ways: without
// it, pgx encodes every UUID parameter through its string form and scans
// every UUID column by parsing one (a tenth of the API's CPU per create,
// measured with perf; docs/BENCHMARKS.md). Registered, a UUID is its 16
// bytes.
//
// pgx-google-uuid covers uuid.UUID and uuid.NullUUID; the nullable
// columns' parameters are *uuid.UUID (sqlc's emit_pointers_for_null_types),
// and that pointer is a driver.Valuer too (Value has a value receiver),
// which pgx, by design, does not dereference: each one went through
// Value's string, a failed binary encode, a parse of the string and a
// second encode (2% of the API's CPU per create at 16 clients, perf,
// 2026-12-03). encodeUUIDPointer dereferences it first.
func registerUUID(m *pgtype.Map) {
	pgxuuid.Register(m)
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUIDPointer}, m.TryWrapEncodePlanFuncs...)
}

func tryWrapUUIDPointer(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if _, ok := value.(*uuid.UUID); ok {
		return &encodeUUIDPointer{}, uuid.UUID{}, true
	}
	return nil, nil, false
}

// encodeUUIDPointer encodes a *uuid.UUID as the UUID it points to, or NULL.
type encodeUUIDPointer struct{ next pgtype.EncodePlan }

func (p *encodeUUIDPointer) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *encodeUUIDPointer) Encode(value any, buf []byte) ([]byte, error) {
	u := value.(*uuid.UUID)
	if u == nil {
		return nil, nil
	}
	return p.next.Encode(*u, buf)
}
