package outbox

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testdb"
)

// The dispatcher's bookkeeping commits asynchronously on its own
// connections; the service's pool keeps synchronous commits.
func TestBookkeepingCommitsAsynchronouslyOnItsOwnConnections(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	d, err := NewDispatcher(pool, nil, DispatcherConfig{}, slog.New(slog.DiscardHandler), time.Now, DispatcherHooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx := context.Background()
	var book, service string
	if err := d.book.QueryRow(ctx, "SHOW synchronous_commit").Scan(&book); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&service); err != nil {
		t.Fatal(err)
	}
	if book != "off" || service != "on" {
		t.Fatalf("synchronous_commit: dispatcher %q, service %q; want off, on", book, service)
	}
}
