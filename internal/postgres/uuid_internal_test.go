package postgres

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"
)

// BenchmarkEncodeUUID encodes a UUID parameter in binary, as pgx does for
// every one of a statement's: by value and by pointer with the service's
// registration (registerUUID), and by pointer with pgx-google-uuid's alone.
func BenchmarkEncodeUUID(b *testing.B) {
	u := uuid.New()
	service := pgtype.NewMap()
	registerUUID(service)
	libraryOnly := pgtype.NewMap()
	pgxuuid.Register(libraryOnly)
	for _, c := range []struct {
		name  string
		m     *pgtype.Map
		value any
	}{
		{"value", service, u},
		{"pointer", service, &u},
		{"pointer-library-only", libraryOnly, &u},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 64)
			for b.Loop() {
				if _, err := c.m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, c.value, buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
