package db_test

import (
	"strings"
	"testing"
)

// TestQueuedQueriesAreTheirTwins: a batch query (XQueued, queued into the
// request's pipeline) repeats the SQL of its query X, so that the fast path
// and the statement-by-statement path run the same statement. Listed here,
// with why, are the ones that differ on purpose.
func TestQueuedQueriesAreTheirTwins(t *testing.T) {
	t.Parallel()
	differ := map[string]string{
		"OrderInsertQueued":          "no ON CONFLICT: a late retry's order fails the batch, COMMIT included (orders.createBatched)",
		"PaymentReserveRefundQueued": "no WHERE guard: the locked row decided, the CHECK fails the batch on a miss (payments.reserveRefundBatched)",
	}
	queries := generatedQueries(t)
	body := func(sql string) string {
		_, rest, _ := strings.Cut(sql, "\n") // the "-- name: X :kind" line
		return strings.TrimSpace(rest)
	}
	n := 0
	for name, sql := range queries {
		twin, ok := strings.CutSuffix(name, "Queued")
		if !ok {
			continue
		}
		n++
		orig, ok := queries[twin]
		switch {
		case !ok:
			t.Errorf("%s has no twin %s", name, twin)
		case differ[name] != "":
			if body(orig) == body(sql) {
				t.Errorf("%s is listed as differing from %s (%s), but it is the same SQL", name, twin, differ[name])
			}
		case body(orig) != body(sql):
			t.Errorf("%s is not %s's SQL:\n%s\nvs\n%s", name, twin, body(sql), body(orig))
		}
	}
	if n < 5 {
		t.Fatalf("found %d batch queries; the walk over the generated code is broken", n)
	}
}
