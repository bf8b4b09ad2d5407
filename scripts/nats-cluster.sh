#!/usr/bin/env bash
# nats-cluster.sh NAME: make sure a private three-server NATS JetStream cluster
# named NAME runs under .data/nats-cluster-NAME/ and print its client URLs,
# comma-separated as NATS_URL takes them, on stdout (nothing else).
# nats-cluster.sh --stop NAME: stop the servers of that cluster that run.
#
# The servers are nats-server processes in the background (bin/nats-server,
# built from the version go.mod pins when missing; NATS_SERVER names another
# binary), each with its own store directory, JetStream fsyncing every message
# before it acknowledges it (sync_interval: always, as deploy/nats.conf), a
# client port, a cluster port and a monitoring port, all on 127.0.0.1, ports
# found free on first use and reused on the next start. Clients need the
# cluster's token (in the printed URLs), routes a password of the cluster's
# own: loopback is shared by every user of the machine. Both are made once
# and kept in the cluster's directory, readable by its owner only. It returns
# once the JetStream meta group has a leader, every server sees all three
# and reports itself healthy (/healthz, /jsz on the monitoring ports).
#
# Use it with NATS_STREAM_REPLICAS=3. A server that is not running is started
# again on its ports and store: stopping one by its pid (n0/nats-server.pid)
# and running this again is how to lose and bring back a server.
set -euo pipefail

stop=""
if [ "${1:-}" = "--stop" ]; then
  stop=1
  shift
fi
name=${1:?usage: nats-cluster.sh [--stop] NAME}
case "$name" in
  *[!A-Za-z0-9_-]*) printf 'nats-cluster.sh: NAME %q: use letters, digits, - and _ only\n' "$name" >&2; exit 1 ;;
esac

log() { printf 'nats-cluster.sh: %s\n' "$*" >&2; }

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.data/nats-cluster-$name"
size=3

# pid_of prints the pid of server i when its process runs (the pid file's
# process, checked to be a nats-server on this cluster's configuration).
pid_of() {
  local pid
  pid=$(cat "$dir/n$1/nats-server.pid" 2>/dev/null || true)
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir/n$1/nats.conf" || return 1
  printf '%s\n' "$pid"
}

if [ -n "$stop" ]; then
  for i in $(seq 0 $((size - 1))); do
    if pid=$(pid_of "$i"); then
      kill -TERM "$pid"
      for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$pid" 2>/dev/null; then
        log "server $i (pid $pid) did not stop within 10s"
        exit 1
      fi
      log "stopped server $i of cluster $name"
    fi
  done
  exit 0
fi

server=${NATS_SERVER:-$root/bin/nats-server}
if [ ! -x "$server" ]; then
  if [ -n "${NATS_SERVER:-}" ]; then
    log "NATS_SERVER=$server is not an executable file"
    exit 1
  fi
  log "building bin/nats-server (the version go.mod pins)"
  GOTOOLCHAIN=$(sed -n 's/^toolchain //p' "$root/go.mod") \
    go -C "$root" build -o bin/nats-server github.com/nats-io/nats-server/v2 >&2
fi

mkdir -p "$dir"
chmod 700 "$dir"

# secret makes 128 random bits as hex, once per file, kept for restarts.
secret() {
  if [ ! -s "$dir/$1" ]; then
    (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$dir/$1")
  fi
  cat "$dir/$1"
}
token=$(secret token)
route_pass=$(secret route-password)

port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# pick_ports prints 3*size distinct ports found free: client, cluster and
# monitoring port of each server.
pick_ports() {
  local picked=() candidate
  for _ in $(seq 1 400); do
    candidate=$((20000 + RANDOM % 30000))
    if [[ " ${picked[*]:-} " != *" $candidate "* ]] && port_free "$candidate"; then
      picked+=("$candidate")
      if [ "${#picked[@]}" -eq $((3 * size)) ]; then
        printf '%s\n' "${picked[@]}"
        return 0
      fi
    fi
  done
  log "no free ports found"
  exit 1
}

ports_file="$dir/ports"
ports=()
running=0
for i in $(seq 0 $((size - 1))); do
  if pid_of "$i" >/dev/null; then running=$((running + 1)); fi
done
if [ -s "$ports_file" ]; then
  mapfile -t ports <"$ports_file"
fi
# Ports of an earlier start are reused when they are free (or ours: the
# servers that still run); otherwise every server gets new ones, so the
# routes stay consistent.
reuse=${#ports[@]}
if [ "$reuse" -eq $((3 * size)) ] && [ "$running" -eq 0 ]; then
  for p in "${ports[@]}"; do
    if ! port_free "$p"; then reuse=0; break; fi
  done
fi
if [ "$reuse" -ne $((3 * size)) ]; then
  if [ "$running" -gt 0 ]; then
    log "cluster $name runs without its ports file; stop it first (nats-cluster.sh --stop $name)"
    exit 1
  fi
  mapfile -t ports < <(pick_ports)
fi

client_port() { printf '%s\n' "${ports[$((3 * $1))]}"; }
cluster_port() { printf '%s\n' "${ports[$((3 * $1 + 1))]}"; }
http_port() { printf '%s\n' "${ports[$((3 * $1 + 2))]}"; }

write_config() {
  local i=$1 routes="" j
  for j in $(seq 0 $((size - 1))); do
    routes+="    nats-route://route:$route_pass@127.0.0.1:$(cluster_port "$j")"$'\n'
  done
  mkdir -p "$dir/n$i/store"
  (umask 077 && cat >"$dir/n$i/nats.conf" <<EOF
# Server $i of the oncepay test cluster $name (scripts/nats-cluster.sh).
server_name: oncepay-$name-$i
listen: 127.0.0.1:$(client_port "$i")
http: 127.0.0.1:$(http_port "$i")
authorization { token: "$token" }
jetstream {
  store_dir: "$dir/n$i/store"
  # Acknowledged means on disk, on every replica that acknowledged.
  sync_interval: always
}
cluster {
  name: oncepay-$name
  listen: 127.0.0.1:$(cluster_port "$i")
  authorization { user: route, password: "$route_pass" }
  routes: [
$routes  ]
}
pid_file: "$dir/n$i/nats-server.pid"
log_file: "$dir/n$i/nats-server.log"
EOF
  )
}

# start_missing starts every server that does not run; it prints nothing
# and fails when a server exits at once (its log says why).
start_missing() {
  local i pid logged
  for i in $(seq 0 $((size - 1))); do
    if pid_of "$i" >/dev/null; then continue; fi
    write_config "$i"
    rm -f "$dir/n$i/nats-server.pid"
    logged=$(stat -c %s "$dir/n$i/nats-server.log" 2>/dev/null || echo 0)
    log "starting server $i of cluster $name on 127.0.0.1:$(client_port "$i") (cluster port $(cluster_port "$i"), monitoring $(http_port "$i"))"
    setsid "$server" -c "$dir/n$i/nats.conf" </dev/null >>"$dir/n$i/stdout.log" 2>&1 &
    pid=$!
    # The pid file appears once the server has read its configuration.
    for _ in $(seq 1 100); do
      if ! kill -0 "$pid" 2>/dev/null; then
        tail -c +"$((logged + 1))" "$dir/n$i/nats-server.log" 2>/dev/null | tail -n 20 >&2 || true
        tail -n 5 "$dir/n$i/stdout.log" >&2 || true
        if tail -c +"$((logged + 1))" "$dir/n$i/nats-server.log" 2>/dev/null | grep -q 'address already in use'; then
          return 2
        fi
        return 1
      fi
      if pid_of "$i" >/dev/null; then break; fi
      sleep 0.1
    done
  done
}

# http_get PORT PATH prints the body of a GET to the monitoring port.
http_get() {
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" "$2" >&3 && sed "1,/^\r\{0,1\}$/d" <&3' _ "$1" "$2" 2>/dev/null
}

# ready says whether every server is healthy and sees a meta leader and a
# cluster of three.
ready() {
  local i body
  for i in $(seq 0 $((size - 1))); do
    body=$(http_get "$(http_port "$i")" /healthz) || return 1
    grep -q '"status": *"ok"' <<<"$body" || return 1
    body=$(http_get "$(http_port "$i")" /jsz) || return 1
    grep -q '"leader": *"oncepay-'"$name"'-[0-9]"' <<<"$body" || return 1
    grep -q '"cluster_size": *'"$size" <<<"$body" || return 1
  done
}

# A port found free can be taken before the server binds it: then stop what
# started, pick other ports and try again, a few times.
for attempt in 1 2 3 4 5; do
  printf '%s\n' "${ports[@]}" >"$ports_file"
  set +e
  start_missing
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then break; fi
  if [ "$rc" -eq 2 ] && [ "$attempt" -lt 5 ]; then
    log "a port was taken meanwhile; trying other ports"
    "$0" --stop "$name"
    mapfile -t ports < <(pick_ports)
    continue
  fi
  log "a server of cluster $name did not start; its log is under $dir"
  exit 1
done

for _ in $(seq 1 300); do
  if ready; then
    urls=()
    for i in $(seq 0 $((size - 1))); do
      urls+=("nats://$token@127.0.0.1:$(client_port "$i")")
    done
    (IFS=,; printf '%s\n' "${urls[*]}")
    exit 0
  fi
  sleep 0.1
done
log "cluster $name did not elect a JetStream meta leader with all $size servers healthy within 30s; logs: $dir/n*/nats-server.log"
exit 1
