package db_test

import (
	"strings"
	"testing"
)

// Every statement is written once: no two queries of db/queries are the
// same SQL. A step's transaction sends its statements at once on a
// transaction or queued into a pipeline (operation.Batch) with the same
// batch query, so a copy of a query for the other way is never needed, and
// a copy that drifted would be a second body of the same statement.
func TestEveryStatementIsWrittenOnce(t *testing.T) {
	t.Parallel()
	queries := generatedQueries(t)
	if len(queries) < 20 {
		t.Fatalf("found %d queries; the walk over the generated code is broken", len(queries))
	}
	seen := map[string]string{}
	for name, sql := range queries {
		_, body, _ := strings.Cut(sql, "\n") // the "-- name: X :kind" line
		body = strings.Join(strings.Fields(body), " ")
		if other, ok := seen[body]; ok {
			t.Errorf("%s and %s are the same statement: keep one", name, other)
		}
		seen[body] = name
	}
}
