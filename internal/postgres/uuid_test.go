package postgres_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/oncepay/oncepay/internal/testdb"
)

// A *uuid.UUID parameter, what sqlc gives a nullable UUID column, reaches
// PostgreSQL as the UUID it points to, or as NULL, and costs what a
// uuid.UUID costs: not a round through its driver.Valuer's string, a failed
// binary encode and a parse, every time (internal/postgres/uuid.go).
// Not parallel: testing.AllocsPerRun refuses to run beside other tests.
func TestAUUIDPointerIsEncodedAsItsBytes(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Pool(t)
	u := uuid.New()
	var got *uuid.UUID
	if err := pool.QueryRow(ctx, "SELECT $1::uuid", &u).Scan(&got); err != nil || got == nil || *got != u {
		t.Fatalf("SELECT a *uuid.UUID: %v, %v; want %v", got, err, u)
	}
	var null bool
	if err := pool.QueryRow(ctx, "SELECT $1::uuid IS NULL", (*uuid.UUID)(nil)).Scan(&null); err != nil || !null {
		t.Fatalf("a nil *uuid.UUID: NULL is %v, %v; want NULL", null, err)
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	m := conn.Conn().TypeMap()
	buf := make([]byte, 0, 64)
	encode := func(v any) func() {
		return func() {
			if _, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, v, buf[:0]); err != nil {
				t.Fatal(err)
			}
		}
	}
	byValue := testing.AllocsPerRun(200, encode(u))
	byPointer := testing.AllocsPerRun(200, encode(&u))
	if byPointer > byValue+1 {
		t.Errorf("encoding a *uuid.UUID allocates %.0f times, a uuid.UUID %.0f: the pointer goes through its string form", byPointer, byValue)
	}
}
