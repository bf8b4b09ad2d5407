#!/usr/bin/env bash
# run-cluster.sh: the demo behind `make run-cluster` (which builds bin/api,
# bin/pspsim and bin/nats-server first): oncepay past one machine's shape,
# on this one. It starts
#   - a Citus cluster, a coordinator and two workers (scripts/citus.sh
#     clusterdev; Citus installed, or built from CITUS_SRC),
#   - a three-server NATS JetStream cluster (scripts/nats-cluster.sh
#     clusterdev),
#   - the payment simulator on a free loopback port (scripts/pspsim.sh),
#     sending its webhooks to HTTP_ADDR,
#   - two API replicas (`api serve`, DEMO_MODE=true unless set) on free
#     127.0.0.1 ports, DATABASE_URL the coordinator, NATS_URL the three
#     servers, NATS_STREAM_REPLICAS=3,
#   - HAProxy (Debian's haproxy, installed with apt-get when missing and we
#     are root) on HTTP_ADDR (default 127.0.0.1:8080), balancing over the
#     replicas whose /readyz answers 200; its configuration is written to
#     .data/run-cluster/haproxy.cfg from deploy/haproxy.cfg.
# A replica that exits is started again on its port after 3 s: by then
# HAProxy has taken it out (two failed checks a second apart), and it sends
# it traffic again after two passing ones. Ctrl-C stops the replicas,
# HAProxy and the simulator, in that order; so does HAProxy or the simulator
# ending. The Citus and NATS clusters keep running for the next start
# (make pg-stop stops the Citus one, scripts/nats-cluster.sh --stop
# clusterdev the NATS one; make clean stops both and deletes their data). With PSP_URL set no
# simulator is started: the replicas use the provider you named (and your
# PSP_API_KEY and PSP_WEBHOOK_SECRETS). DATABASE_URL and NATS_URL of the
# environment are not used: the point is the clusters. RUN_CLUSTER_NAME
# names the Citus and NATS clusters and the run's folder (default
# clusterdev, .data/run-cluster), so that a second topology (make
# conform-cluster's) runs beside the demo's without sharing its data.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/pspsim.sh
source "$root/scripts/pspsim.sh"

fail() {
  printf 'run-cluster.sh: %s\n' "$*" >&2
  exit 1
}

name=${RUN_CLUSTER_NAME:-clusterdev}
replicas=2
run="$root/.data/run-cluster"
[ "$name" = clusterdev ] || run="$root/.data/run-$name"
export DEMO_MODE="${DEMO_MODE:-true}"
addr="${HTTP_ADDR:-127.0.0.1:8080}"
# The simulator's webhook URL doubles as the check that HTTP_ADDR has a
# fixed port.
webhook=$(pspsim_webhook_url "$addr") || exit 1
probe_host=${webhook#http://}
probe_host=${probe_host%%/*}
probe_port=${probe_host##*:}
probe_host=${probe_host%:*}
probe_host=${probe_host#[}
probe_host=${probe_host%]}
if (exec 3<>"/dev/tcp/$probe_host/$probe_port") 2>/dev/null; then
  fail "HTTP_ADDR $addr is taken by another process; set HTTP_ADDR to a free address"
fi

# HAProxy: Debian's, in /usr/sbin (not on a normal user's PATH).
haproxy=$(PATH="$PATH:/usr/sbin:/sbin" command -v haproxy || true)
if [ -z "$haproxy" ]; then
  if [ "$(id -u)" != 0 ]; then
    fail "HAProxy is missing: install it (sudo apt-get install -y haproxy)"
  fi
  mkdir -p "$run"
  echo "run-cluster.sh: installing haproxy with apt-get (once; log: ${run#"$root"/}/apt.log)" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends haproxy; } >"$run/apt.log" 2>&1 || {
    tail -n 20 "$run/apt.log" >&2
    fail "apt-get install haproxy failed (log: $run/apt.log)"
  }
  haproxy=$(PATH="$PATH:/usr/sbin:/sbin" command -v haproxy) || fail "haproxy is not on the PATH after apt-get install haproxy"
fi

"$root/scripts/citus.sh" --install
DATABASE_URL=$("$root/scripts/citus.sh" "$name") || fail "the Citus cluster $name did not start"
NATS_URL=$("$root/scripts/nats-cluster.sh" "$name") || fail "the NATS cluster $name did not start"
export DATABASE_URL NATS_URL
export NATS_STREAM_REPLICAS=3
mkdir -p "$run"

loops=()
haproxy_pid=""
interrupted=""
# Ctrl-C ends the run at once, also while it still starts; cleanup then
# runs to its end (a second Ctrl-C does not cut it short: it would leave
# HAProxy and the simulator running), as long as the replicas take to drain.
on_signal() {
  interrupted=1
  exit 0
}
cleanup() {
  local status=$? pid
  trap '' INT TERM
  # The replicas first: they finish their requests, whose answers still go
  # out through HAProxy; the simulator last, so that their provider calls
  # still reach it.
  local stopping=()
  for pid in "${loops[@]}"; do
    if kill -TERM "$pid" 2>/dev/null; then stopping+=("$pid"); fi
  done
  for pid in "${stopping[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "$haproxy_pid" ]; then
    kill -TERM "$haproxy_pid" 2>/dev/null || true
    wait "$haproxy_pid" 2>/dev/null || true
  fi
  pspsim_stop
  if [ -n "$interrupted" ]; then status=0; fi
  if [ "${#loops[@]}" -gt 0 ]; then
    echo "run-cluster.sh: stopped the API replicas, HAProxy and $psp_note; the Citus and NATS clusters $name still run (make pg-stop stops Citus; scripts/nats-cluster.sh --stop $name, or make clean, NATS)" >&2
  fi
  exit "$status"
}
trap cleanup EXIT
trap on_signal INT TERM

psp_note="your provider"
if [ -z "${PSP_URL:-}" ]; then
  psp_note="the payment simulator"
  pspsim_start "$webhook" "$run/pspsim.log"
fi

# replica I LOG runs replica I (in a subshell of its own) and starts it again
# 3 s after it exits, until it gets SIGTERM, which it passes on. The API
# runs in a session of its own, so that a Ctrl-C reaches this script only,
# which stops the replicas in order. The first start takes port 0, the
# kernel's choice, read from the log and written to api-I.port; every
# restart takes that port again (HAProxy's configuration names it). A
# replica that exits before it was ever ready is not started again: the run
# fails.
replica() {
  local i=$1 log=$2 port=0 child="" status started
  # A Ctrl-C is this script's to handle (a subshell would get this script's
  # INT trap reset to the default, die, and leave its replica running).
  trap '' INT
  trap '[ -z "$child" ] || { kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; }; exit 0' TERM
  while :; do
    started=$SECONDS
    HTTP_ADDR="127.0.0.1:$port" setsid "$root/bin/api" serve </dev/null >>"$log" 2>&1 &
    child=$!
    while [ "$port" = 0 ] && kill -0 "$child" 2>/dev/null; do
      port=$(sed -n 's/.*"msg":"listening".*"url":"http:\/\/127\.0\.0\.1:\([0-9]*\)".*/\1/p' "$log" | head -n 1)
      if [ -n "$port" ]; then
        echo "$port" >"$run/api-$i.port"
      else
        port=0
        sleep 0.05 # polling its log for the line, while it runs
      fi
    done
    status=0
    # (Its own line instead of bash's "Killed" notice.)
    wait "$child" 2>/dev/null || status=$?
    child=""
    grep -q '^oncepay is ready at ' "$log" || exit 1
    echo "run-cluster.sh: API replica $i exited (status $status after $((SECONDS - started))s); starting it again on 127.0.0.1:$port in 3s (log: ${log#"$root"/})" >&2
    # Longer than HAProxy's two failed checks (inter 1s, fall 2 in
    # deploy/haproxy.cfg): it is out of the balance before it comes back,
    # and in again only once /readyz passes, never while it starts.
    sleep 3
  done
}

# One replica after the other, each once it is ready: the first applies the
# migrations (on a fresh Citus database that takes longer than
# golang-migrate's 15s lock timeout, which a replica started alongside
# would run into and exit), the others find the schema current. Ready means
# it waited for the database and NATS, migrated and seeded the demo tenants.
ports=()
logs=()
for i in $(seq 1 "$replicas"); do
  log="$run/api-$i.log"
  : >"$log"
  rm -f "$run/api-$i.port"
  logs+=("$log")
  replica "$i" "$log" &
  loops+=($!)
  ready='^oncepay is ready at '
  # In demo mode the keys are printed after the ready line: wait for the last.
  [ "$DEMO_MODE" != true ] || ready='^  try: '
  deadline=$((SECONDS + 180))
  until grep -q "$ready" "$log"; do
    if ! kill -0 "${loops[$((i - 1))]}" 2>/dev/null; then
      tail -n 5 "$log" >&2
      fail "API replica $i did not start (log: $log)"
    fi
    [ "$SECONDS" -lt "$deadline" ] || fail "API replica $i was not ready within 180s (log: $log)"
    sleep 0.1 # polling its log for the ready line, with the deadline above
  done
  ports+=("$(cat "$run/api-$i.port")")
done

# HAProxy's configuration, from the template.
servers=""
for i in $(seq 1 "$replicas"); do
  servers+="  server api$i 127.0.0.1:${ports[$((i - 1))]}"$'\n'
done
# Each replica holds at most 4096 connections (the tuning's MaxConnections):
# HAProxy keeps below it, so that the replica's own shedding (MaxInFlight,
# 503 overloaded) is what answers overload.
maxconn=$((4096 * 3 / 4))
[ "$maxconn" -le 1000 ] || maxconn=1000
cfg=$(<"$root/deploy/haproxy.cfg")
cfg=${cfg//@HTTP_ADDR@/$addr}
cfg=${cfg//@SERVER_MAXCONN@/$maxconn}
cfg=${cfg//@SERVERS@/${servers%$'\n'}}
printf '%s\n' "$cfg" >"$run/haproxy.cfg"
"$haproxy" -c -q -f "$run/haproxy.cfg" >"$run/haproxy.log" 2>&1 || {
  cat "$run/haproxy.log" >&2
  fail "HAProxy refused its configuration ${run#"$root"/}/haproxy.cfg"
}
setsid "$haproxy" -db -f "$run/haproxy.cfg" </dev/null >>"$run/haproxy.log" 2>&1 &
haproxy_pid=$!
deadline=$((SECONDS + 10))
until (exec 3<>"/dev/tcp/$probe_host/$probe_port") 2>/dev/null; do
  if ! kill -0 "$haproxy_pid" 2>/dev/null; then
    tail -n 5 "$run/haproxy.log" >&2
    haproxy_pid=""
    fail "HAProxy did not start (log: $run/haproxy.log)"
  fi
  [ "$SECONDS" -lt "$deadline" ] || fail "HAProxy did not listen on $addr within 10s (log: $run/haproxy.log)"
  sleep 0.05 # polling its port, with the deadline above
done

url="http://$probe_host:$probe_port"
case $probe_host in *:*) url="http://[$probe_host]:$probe_port" ;; esac
echo "on Citus: the coordinator at $DATABASE_URL, two workers"
echo "NATS: three servers, NATS_URL=$NATS_URL (NATS_STREAM_REPLICAS=3)"
if [ -n "${PSPSIM_PID:-}" ]; then
  echo "the payment simulator runs at $PSP_URL (log: ${run#"$root"/}/pspsim.log)"
fi
for i in $(seq 1 "$replicas"); do
  echo "API replica $i at http://127.0.0.1:${ports[$((i - 1))]} (log: ${run#"$root"/}/api-$i.log)"
done
echo "oncepay is ready at $url (HAProxy over the $replicas replicas; config ${run#"$root"/}/haproxy.cfg, log ${run#"$root"/}/haproxy.log)"
grep '^  demo tenant ' "${logs[0]}" || true
if [ "$DEMO_MODE" = true ]; then
  echo "  try: curl -s $url/v1/products -H 'Authorization: Bearer sk_test_acme'"
fi
echo "Ctrl-C stops the replicas, HAProxy and $psp_note; the Citus and NATS clusters keep running (make pg-stop stops Citus; scripts/nats-cluster.sh --stop $name, or make clean, NATS)"

# HAProxy or the simulator ending, or Ctrl-C, ends the run; cleanup stops
# the rest. The replicas come back by themselves.
wait -n "$haproxy_pid" ${PSPSIM_PID:+"$PSPSIM_PID"} || true
if [ -z "$interrupted" ]; then
  if ! kill -0 "$haproxy_pid" 2>/dev/null; then
    haproxy_pid=""
    fail "HAProxy stopped (log: $run/haproxy.log); stopping the rest"
  fi
  if [ -n "${PSPSIM_PID:-}" ] && ! kill -0 "$PSPSIM_PID" 2>/dev/null; then
    fail "the payment simulator stopped (log: $run/pspsim.log); stopping the rest"
  fi
fi
