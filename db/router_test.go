package db_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/testdb"
)

// fanOut lists the statements that may read every shard on Citus, each
// with why: reads without a lock, for a listing across tenants or a lookup
// that does not know the tenant yet. Everything else must be a router
// statement (one task). A statement here must not lock or write.
var fanOut = map[string]string{
	"OutboxDueTenants":          "the dispatcher's list of tenants with due events; it claims each one's on its shard",
	"IdempotencyExpiredTenants": "the recoverer's list of tenants with expired claims; it takes each one's on its shard",
	"IdempotencyCountStuck":     "a count for the sweeper's report and the metrics",
	"OutboxStats":               "counts for the metrics",
	"OutboxListStuck":           "the operator's list of stuck events of all tenants",
	"OutboxGet":                 "an operator names an event by its id alone; the retry that follows names the tenant",
	"AttentionGet":              "an operator names an item by its id alone; the resolve that follows names the tenant",
	"AttentionListOpen":         "the operator's queue across tenants",
	"AttentionListResolved":     "the operator's queue across tenants",
	"AttentionCountOpen":        "counts for the metrics",
}

// On Citus every statement that takes a lock or writes runs on one shard
// (a router statement: EXPLAIN shows one task); a FOR UPDATE across shards
// is refused there, and a write across shards, or one Citus turns into a
// COPY, would make a two-phase commit of a business transaction. The statements are every query sqlc
// generated (internal/*/internal/dbsqlc), so a new one that fans out fails
// here.
func TestEveryLockingStatementIsSingleShardOnCitus(t *testing.T) {
	t.Parallel()
	queries := generatedQueries(t)
	if len(queries) < 50 {
		t.Fatalf("found %d generated queries; the walk over internal/*/internal/dbsqlc is broken", len(queries))
	}
	for name := range fanOut {
		if _, ok := queries[name]; !ok {
			t.Errorf("%s is listed, but no generated query has that name", name)
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.CitusURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var distributed []string
	if err := conn.QueryRow(ctx, `SELECT array_agg(logicalrelid::text ORDER BY 1) FROM pg_dist_partition WHERE partmethod = 'h'`).Scan(&distributed); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(distributed, "orders") || !slices.Contains(distributed, "outbox_events") {
		t.Fatalf("distributed tables %v: the migrations did not distribute the schema", distributed)
	}
	names := make([]string, 0, len(queries))
	for name := range queries {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		sql := queries[name]
		plan, err := explain(ctx, conn, name, sql)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		tasks := taskCounts(plan)
		why, mayFanOut := fanOut[name]
		if mayFanOut {
			if locks(sql) {
				t.Errorf("%s may read every shard (%s) but it locks or writes:\n%s", name, why, sql)
			}
			continue
		}
		if len(tasks) == 0 && strings.Contains(plan, "Citus") {
			// "INSERT/SELECT method: pull to coordinator": Citus computes the
			// rows on the coordinator and COPYs them into the shards, and a
			// COPY makes the transaction a two-phase commit, whose COMMIT
			// PREPARED, cut by a lost connection, leaves the rows invisible
			// and locked until Citus recovers it (found by the chaos run on
			// a cluster, in OrderItemsInsert).
			t.Errorf("%s is a Citus plan without tasks (a COPY, not one statement on one shard):\n%s", name, plan)
		}
		for _, n := range tasks {
			if n != 1 {
				t.Errorf("%s runs as %d tasks on Citus, want one (a router statement: name the tenant):\n%s", name, n, plan)
				break
			}
		}
	}
}

// locks reports whether a statement takes row locks or writes.
func locks(sql string) bool {
	s := strings.ToUpper(sql)
	for _, w := range []string{"FOR UPDATE", "FOR SHARE", "INSERT ", "UPDATE ", "DELETE "} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

var taskCount = regexp.MustCompile(`Task Count: (\d+)`)

// taskCounts returns every "Task Count" of a Citus plan (none for a
// statement only on coordinator tables).
func taskCounts(plan string) []int {
	var out []int
	for _, m := range taskCount.FindAllStringSubmatch(plan, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

// explain prepares sql and explains it executed with a value of each
// parameter's type (the same tenant for every uuid): the plan Citus makes
// for it.
func explain(ctx context.Context, conn *pgx.Conn, name, sql string) (string, error) {
	stmt := "router_" + strings.ToLower(name)
	if _, err := conn.Exec(ctx, "PREPARE "+stmt+" AS "+sql); err != nil {
		return "", fmt.Errorf("prepare: %w", err)
	}
	defer conn.Exec(ctx, "DEALLOCATE "+stmt) // the connection is closed after the test anyway
	var types []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(t::text ORDER BY ord), '{}') FROM pg_prepared_statements,
		unnest(parameter_types) WITH ORDINALITY AS p(t, ord) WHERE name = $1`, stmt).Scan(&types); err != nil {
		return "", err
	}
	args := make([]string, len(types))
	for i, typ := range types {
		v, ok := sample(typ)
		if !ok {
			return "", fmt.Errorf("no sample value for a parameter of type %s", typ)
		}
		args[i] = fmt.Sprintf("%s::%s", quote(v), typ)
	}
	call := stmt
	if len(args) > 0 {
		call += "(" + strings.Join(args, ", ") + ")"
	}
	rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+call)
	if err != nil {
		return "", fmt.Errorf("explain: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("explain: %w", err)
	}
	return strings.Join(lines, "\n"), nil
}

const sampleTenant = "0192f1c6-0000-7000-8000-00000000000a"

func sample(typ string) (string, bool) {
	base, array := strings.CutSuffix(typ, "[]")
	v, ok := map[string]string{
		"uuid": sampleTenant, "text": "x", "character varying": "x", "integer": "1", "bigint": "1", "smallint": "1",
		"boolean": "false", "timestamp with time zone": "2026-12-01T00:00:00Z", "bytea": `\x00`, "jsonb": "{}", "json": "{}",
		"double precision": "1", "numeric": "1",
	}[base]
	if !ok {
		return "", false
	}
	if array {
		return `{"` + strings.ReplaceAll(v, `\`, `\\`) + `"}`, true
	}
	return v, true
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// generatedQueries reads every query sqlc generated: the constants of
// internal/*/internal/dbsqlc/*.sql.go and batch.go, by the name sqlc gives them.
func generatedQueries(t *testing.T) map[string]string {
	t.Helper()
	// The queries are in the *.sql.go files, the batch queries (...Queued,
	// postgres.Pipeline) in batch.go.
	files, err := filepath.Glob("../internal/*/internal/dbsqlc/*.sql.go")
	if err != nil {
		t.Fatal(err)
	}
	batches, err := filepath.Glob("../internal/*/internal/dbsqlc/batch.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, batches...)
	out := map[string]string{}
	name := regexp.MustCompile(`^-- name: (\w+) :\w+`)
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok || len(spec.Values) != 1 {
				return true
			}
			lit, ok := spec.Values[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			sql, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if m := name.FindStringSubmatch(sql); m != nil {
				out[m[1]] = sql
			}
			return true
		})
	}
	return out
}
