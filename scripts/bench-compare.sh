#!/usr/bin/env bash
# bench-compare.sh: `make bench-compare REF=<commit>`. Measures this
# checkout's API side by side with the API of another commit, in one run:
# both serve the same durable private PostgreSQL (the bench's) and the same
# payment simulator, and proving/cmd/bench measures every API scenario
# against the one right after the other (--compare), so that the machine's
# drift hits both alike. The other commit's API is built from `git archive`
# of REF into .data/bench/ref/ (nothing of the checkout changes).
#
# BENCH_ARGS passes flags to the bench (e.g. --scenarios create,replay,pay);
# BENCH_DURATION is the measured time per scenario (default 10s).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=scripts/pspsim.sh
source "$root/scripts/pspsim.sh"

ref=${REF:?"bench-compare: set REF to the commit to compare with, e.g. make bench-compare REF=main"}
rev=$(git rev-parse --verify --quiet "$ref^{commit}") || { echo "bench-compare: $ref is not a commit" >&2; exit 1; }
label=${LABEL:-$(git rev-parse --short "$rev")}

src=.data/bench/ref
rm -rf "$src" && mkdir -p "$src"
git archive "$rev" | tar -x -C "$src"
echo "bench-compare: building the API of $ref ($rev) in $src"
(cd "$src" && GOTOOLCHAIN="$(sed -n 's/^toolchain //p' go.mod)" go build -o "$root/bin/api-ref" ./cmd/api)

free_port() {
  local c
  for _ in $(seq 1 200); do
    c=$((20000 + RANDOM % 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$c") 2>/dev/null; then echo "$c"; return 0; fi
  done
  echo "bench-compare: no free port found" >&2
  return 1
}

DATABASE_URL=$(PG_SERVER_OPTS='' scripts/postgres.sh bench)
export DATABASE_URL
rm -rf .data/bench/nats .data/bench/nats-ref
mkdir -p .data/bench
port=$(free_port)
port_ref=$(free_port)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  pspsim_stop
  scripts/postgres.sh --stop bench || true
}
trap cleanup EXIT
pspsim_start "http://127.0.0.1:$port/webhooks/psp" .data/bench/pspsim.log

# The API of REF first: it migrates the schema it knows, and this
# checkout's API then applies what it adds.
DEMO_MODE=true SWEEP_INTERVAL=0 NATS_STORE_DIR=.data/bench/nats-ref HTTP_ADDR="127.0.0.1:$port_ref" \
  ./bin/api-ref serve >.data/bench/api-ref.log 2>&1 &
pid_ref=$!
pids+=("$pid_ref")
ready() { # ready PORT PID: wait up to 60s for /readyz to answer 200
  local deadline=$((SECONDS + 60))
  until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz" || true)" = 200 ]; do
    kill -0 "$2" 2>/dev/null || { echo "bench-compare: the API on port $1 exited" >&2; return 1; }
    [ "$SECONDS" -lt "$deadline" ] || { echo "bench-compare: the API on port $1 not ready within 60s" >&2; return 1; }
    sleep 0.1 # polling /readyz, with the deadline above
  done
}
ready "$port_ref" "$pid_ref"
DEMO_MODE=true SWEEP_INTERVAL=0 NATS_STORE_DIR=.data/bench/nats HTTP_ADDR="127.0.0.1:$port" \
  ./bin/api serve >.data/bench/api.log 2>&1 &
pid=$!
pids+=("$pid")
echo "bench-compare: this checkout's API pid $pid on 127.0.0.1:$port (.data/bench/api.log), $label's pid $pid_ref on 127.0.0.1:$port_ref (.data/bench/api-ref.log)"
pgpid=$(head -n1 .data/postgres/bench/data/postmaster.pid 2>/dev/null || echo 0)
# shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
go run ./proving/cmd/bench --api "http://127.0.0.1:$port" --api-pid "$pid" --pg-pid "$pgpid" --wait 60s \
  --compare "http://127.0.0.1:$port_ref" --compare-pid "$pid_ref" --compare-label "$label" \
  --duration "${BENCH_DURATION:-10s}" ${BENCH_ARGS:-}
