#!/usr/bin/env bash
# conform.sh run|cluster: the conformance kit (bin/conform, from
# proving/cmd/conform) against the demo as `make run` starts it
# (scripts/run.sh) or as `make run-cluster` does (scripts/run-cluster.sh),
# behind `make conform-run` and `make conform-cluster`, which build bin/api,
# bin/pspsim, bin/conform (and bin/nats-server) first.
#
# The demo runs in the background on a free loopback port, on data of its
# own: `run` on the private PostgreSQL cluster "conform" and an embedded
# NATS store under .data/conform-run, `cluster` on the Citus and NATS
# clusters "clusterconform" (RUN_CLUSTER_NAME). Once /readyz answers 200
# (within a deadline, while the demo still runs), the kit runs against it
# with the keys of the tenants demo mode seeds (internal/tenants/demo.go;
# named here, so that a starter, which serves no GET /demo, runs it the
# same way). Whatever the outcome, a trap then
# stops the demo and the clusters it ran on; the exit status is the kit's.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
case $mode in
  run) deadline_s=180 ;;
  cluster) deadline_s=600 ;;
  *)
    echo "usage: conform.sh run|cluster" >&2
    exit 2
    ;;
esac
out="$root/.data/conform-$mode"
mkdir -p "$out"
log="$out/demo.log"

# A free loopback port: one nothing answers on now (the demo needs a fixed
# one, which the simulator sends its webhooks to).
port=""
for _ in $(seq 1 200); do
  c=$((20000 + RANDOM % 30000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$c") 2>/dev/null; then
    port=$c
    break
  fi
done
[ -n "$port" ] || {
  echo "conform.sh: no free port found" >&2
  exit 1
}

demo=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$demo" ] && kill -0 "$demo" 2>/dev/null; then
    # The demo's own script stops what it started (the API or the
    # replicas, HAProxy, the simulator) on SIGTERM.
    kill -TERM "$demo" 2>/dev/null || true
    wait "$demo" 2>/dev/null || true
  fi
  if [ "$mode" = run ]; then
    "$root/scripts/postgres.sh" --stop conform || true
  else
    "$root/scripts/citus.sh" --stop clusterconform || true
    "$root/scripts/nats-cluster.sh" --stop clusterconform 2>/dev/null || true
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ready: /readyz answers 200 (plain bash: no curl needed).
ready() {
  (
    exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
    printf 'GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    IFS= read -r -t 5 status <&3 || exit 1
    [[ $status == *" 200 "* ]]
  ) 2>/dev/null
}

echo "conform.sh: make $([ "$mode" = run ] && echo run || echo run-cluster) on 127.0.0.1:$port (log: ${log#"$root"/})"
if [ "$mode" = run ]; then
  DATABASE_URL=$("$root/scripts/postgres.sh" conform)
  rm -rf "$out/nats"
  DATABASE_URL=$DATABASE_URL NATS_STORE_DIR="$out/nats" DEMO_MODE=true HTTP_ADDR="127.0.0.1:$port" \
    setsid "$root/scripts/run.sh" </dev/null >"$log" 2>&1 &
  demo=$!
else
  # Citus first, in the foreground: installing or building it is not the
  # demo's start, which the deadline below measures.
  "$root/scripts/citus.sh" --install
  RUN_CLUSTER_NAME=clusterconform DEMO_MODE=true HTTP_ADDR="127.0.0.1:$port" \
    setsid "$root/scripts/run-cluster.sh" </dev/null >"$log" 2>&1 &
  demo=$!
fi

deadline=$((SECONDS + deadline_s))
until ready; do
  if ! kill -0 "$demo" 2>/dev/null; then
    tail -n 20 "$log" >&2
    echo "conform.sh: the demo stopped before it was ready (log: ${log#"$root"/})" >&2
    demo=""
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    tail -n 20 "$log" >&2
    echo "conform.sh: the demo was not ready within ${deadline_s}s (log: ${log#"$root"/})" >&2
    exit 1
  fi
  sleep 0.5 # polling /readyz, with the deadline above
done

status=0
"$root/bin/conform" --base "http://127.0.0.1:$port" --keys sk_test_acme,sk_test_globex || status=$?
if [ "$status" != 0 ]; then
  echo "conform.sh: the kit failed against make $([ "$mode" = run ] && echo run || echo run-cluster) (the demo's log: ${log#"$root"/})" >&2
fi
exit "$status"
