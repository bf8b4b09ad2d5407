// The targets a run is judged by, from its results.

package main

import (
	"fmt"
	"slices"
	"time"
)

// findResult returns the result of scenario sc at clients.
func findResult(results []result, sc string, clients int) (result, bool) {
	i := slices.IndexFunc(results, func(r result) bool { return r.scenario == sc && r.clients == clients })
	if i < 0 {
		return result{}, false
	}
	return results[i], true
}

// targets judges the results against the service's goals, per client count:
// create reaches 0.8x the SQL-equivalent throughput (the same statements
// with the same batching; the detail says what the floor plus a bare HTTP
// exchange would reach), and 1.0x the naive sequence (a round trip per
// statement) at 1 client, where its p99 is at most twice its p50 (the
// detail gives the floor's own p99/p50 of the same run); replay reaches
// 3x create throughput; replay's p99 is at most create's p50; at 16
// clients the API spends at most 400 µs of CPU per create and 120 µs per
// replay; and the API's peak RSS stays within 100 MiB.
func targets(results []result, clientCounts []int, mem rss) []target {
	find := func(sc string, clients int) (result, bool) { return findResult(results, sc, clients) }
	var out []target
	for _, c := range clientCounts {
		sql, okSQL := find(scenarioSQL, c)
		create, okCreate := find(scenarioCreate, c)
		want := 0.8
		detail := fmt.Sprintf("%.1f vs %.1f req/s", create.throughput(), sql.throughput())
		if bare, ok := find(scenarioHTTP, c); ok && okSQL {
			detail += fmt.Sprintf("; ceiling of any HTTP service here: %.2fx (sql plus a bare exchange, %.1f req/s)",
				ceiling(sql.throughput(), bare.throughput()), bare.throughput())
		}
		out = append(out, target{
			name: fmt.Sprintf("create/sql throughput @%d", c), want: want, atLeast: true, unit: "x",
			got:    ratio(create.throughput(), sql.throughput()),
			detail: detail,
			skip:   !okSQL || !okCreate,
		})
	}
	if naive, ok := find(scenarioSQLNaive, 1); ok {
		create, okCreate := find(scenarioCreate, 1)
		out = append(out, target{
			name: "create/sql-naive throughput @1", want: 1, atLeast: true, unit: "x",
			got:    ratio(create.throughput(), naive.throughput()),
			detail: fmt.Sprintf("%.1f vs %.1f req/s", create.throughput(), naive.throughput()),
			skip:   !okCreate,
		})
	}
	if create, ok := find(scenarioCreate, 1); ok {
		p50, p99 := percentile(create.latencies, 50), percentile(create.latencies, 99)
		detail := fmt.Sprintf("%s vs %s", ms(p99), ms(p50))
		if sql, ok := find(scenarioSQL, 1); ok {
			detail += fmt.Sprintf("; the sql floor's own: %.2fx", ratio(float64(percentile(sql.latencies, 99)), float64(percentile(sql.latencies, 50))))
		}
		out = append(out, target{
			name: "create p99 / create p50 @1", want: 2, unit: "x",
			got: ratio(float64(p99), float64(p50)), detail: detail,
		})
	}
	for _, t := range []struct {
		sc   string
		want float64
	}{{scenarioCreate, 400}, {scenarioReplay, 120}} {
		r, ok := find(t.sc, 16)
		per := float64(-1)
		if ok && r.cpu.api >= 0 && r.requests > 0 {
			per = float64(r.cpu.api) / float64(time.Microsecond) / float64(r.requests)
		}
		out = append(out, target{
			name: fmt.Sprintf("API CPU per %s @16", t.sc), want: t.want, unit: " µs",
			got: per, detail: cpuPerRequest(r.cpu.api, r.requests), skip: !ok || per < 0,
		})
	}
	for _, c := range clientCounts {
		create, okCreate := find(scenarioCreate, c)
		replay, okReplay := find(scenarioReplay, c)
		out = append(out, target{
			name: fmt.Sprintf("replay/create throughput @%d", c), want: 3, atLeast: true, unit: "x",
			got:    ratio(replay.throughput(), create.throughput()),
			detail: fmt.Sprintf("%.1f vs %.1f req/s", replay.throughput(), create.throughput()),
			skip:   !okCreate || !okReplay,
		})
	}
	for _, c := range clientCounts {
		create, okCreate := find(scenarioCreate, c)
		replay, okReplay := find(scenarioReplay, c)
		rp99, cp50 := percentile(replay.latencies, 99), percentile(create.latencies, 50)
		out = append(out, target{
			name: fmt.Sprintf("replay p99 / create p50 @%d", c), want: 1, unit: "x",
			got:    ratio(float64(rp99), float64(cp50)),
			detail: fmt.Sprintf("%s vs %s", ms(rp99), ms(cp50)),
			skip:   !okCreate || !okReplay,
		})
	}
	detail := mem.why
	if mem.known {
		detail = fmt.Sprintf("%d kB", mem.kib)
		if r := mem.atReady; r != nil && r.known {
			detail += fmt.Sprintf("; %d kB before the load", r.kib)
		}
	}
	out = append(out, target{
		name: "API peak RSS (VmHWM)", got: float64(mem.kib) / 1024, want: 100, unit: " MiB",
		detail: detail, skip: !mem.known,
	})
	return out
}
