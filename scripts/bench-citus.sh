#!/usr/bin/env bash
# bench-citus.sh: the service on one PostgreSQL against the same service on
# Citus (a coordinator and two workers), on this machine, behind
# `make bench-citus`. It starts a durable private PostgreSQL (bench) and a
# durable private Citus cluster (citusbench), one payment simulator and two
# APIs (one on each database, each with its embedded broker), then runs
# proving/cmd/bench's create and replay scenarios against the two in turn,
# ROUNDS times (plain, Citus, plain, Citus, ...), so that drift on a shared
# machine hits both alike, and prints each round's Citus/plain ratios and
# their median. BENCH_DURATION is the measured time per scenario, client
# count and round (default 10s); BENCH_CLIENTS the client counts (default
# 1,16). Everything it started is stopped at the end; the clusters' data is
# kept under .data/postgres/ for the next run.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=scripts/pspsim.sh
source scripts/pspsim.sh

rounds=${ROUNDS:-3}
duration=${BENCH_DURATION:-10s}
clients=${BENCH_CLIENTS:-1,16}
work=.data/bench-citus
rm -rf "$work" && mkdir -p "$work"

unset DATABASE_URL
plain_db=$(PG_SERVER_OPTS= scripts/postgres.sh bench)
citus_db=$(PG_SERVER_OPTS= scripts/citus.sh citusbench)

free_port() {
  local c
  for _ in $(seq 1 200); do
    c=$((20000 + RANDOM % 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$c") 2>/dev/null; then echo "$c"; return; fi
  done
  echo "bench-citus: no free port found" >&2
  exit 1
}

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  pspsim_stop
}
trap cleanup EXIT

plain_port=$(free_port)
citus_port=$(free_port)
# Order creation never reaches the provider; the APIs need one to start.
pspsim_start "http://127.0.0.1:$plain_port/webhooks/psp" "$work/pspsim.log"

start_api() { # name port database
  DEMO_MODE=true SWEEP_INTERVAL=0 HTTP_ADDR="127.0.0.1:$2" DATABASE_URL="$3" NATS_STORE_DIR="$work/nats-$1" \
    ./bin/api serve >"$work/api-$1.log" 2>&1 &
  pids+=($!)
  echo $!
}
plain_pid=$(start_api plain "$plain_port" "$plain_db")
citus_pid=$(start_api citus "$citus_port" "$citus_db")
echo "bench-citus: plain PostgreSQL API on 127.0.0.1:$plain_port (pid $plain_pid), Citus API on 127.0.0.1:$citus_port (pid $citus_pid); logs in $work"

go build -o "$work/bench" ./proving/cmd/bench
for round in $(seq 1 "$rounds"); do
  for target in plain citus; do
    port=plain_port pid=plain_pid db=plain_db
    [ "$target" = citus ] && port=citus_port pid=citus_pid db=citus_db
    echo "== round $round: $target"
    out="$work/bench-$round-$target.txt"
    "$work/bench" --api "http://127.0.0.1:${!port}" --api-pid "${!pid}" --database-url "${!db}" --wait 120s \
      --scenarios create,replay --clients "$clients" --duration "$duration" --rounds 1 >"$out" 2>&1 || {
      echo "bench-citus: the bench against $target failed:" >&2
      tail -n 5 "$out" >&2
      exit 1
    }
    sed -n 's/^  round 1 \(create\|replay\) *@\([0-9]*\) .* \([0-9.]*\) req\/s  p50 \([0-9.]*\) ms  p99 \([0-9.]*\) ms.*/\1 \2 \3 \4 \5/p' "$out" |
      while read -r sc n rps p50 p99; do
        printf '%s %s %s %s %s %s %s\n' "$round" "$target" "$sc" "$n" "$rps" "$p50" "$p99" | tee -a "$work/results.txt"
      done
  done
done

echo
echo "Citus/plain throughput by round (create and replay; 1.00 = as fast as one PostgreSQL):"
awk '
  { key = $3 " @" $4; rps[$1, $2, key] = $5; keys[key] = 1; if ($1 > maxr) maxr = $1 }
  END {
    for (k in keys) {
      line = sprintf("  %-12s", k); n = 0
      for (r = 1; r <= maxr; r++) {
        if (rps[r, "plain", k] > 0) { x = rps[r, "citus", k] / rps[r, "plain", k]; v[++n] = x; line = line sprintf("  %.2fx", x) }
      }
      # median
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
      print line sprintf("   median %.2fx", med)
    }
  }' "$work/results.txt" | sort
echo "(per round: plain and Citus req/s, p50 and p99 in ms, in $work/results.txt; each bench's report in $work/bench-*.txt)"
