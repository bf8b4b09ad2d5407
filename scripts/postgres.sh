#!/usr/bin/env bash
# postgres.sh NAME: make sure a private PostgreSQL cluster named NAME runs under
# .data/postgres/NAME and print its connection URL on stdout (nothing else).
# postgres.sh --stop NAME: stop that cluster if it runs.
#
# When DATABASE_URL is set, it is printed as it is and nothing is started.
# Otherwise the cluster is created on first use (Debian's PostgreSQL binaries,
# installed with apt-get when missing and we are root), started on a free
# loopback port, and reused on the next call. As root, initdb and the server run
# as the unprivileged "postgres" user, because initdb refuses to run as root.
#
# Extra server settings can be given in PG_SERVER_OPTS (for example the test
# cluster turns fsync off: test data is thrown away, durability is not needed).
#
# A running cluster whose server is not the installed version is restarted
# (one line says so): a package upgrade since it started (building Citus
# installs postgresql-server-dev, which can move 15.18 to 15.20) leaves it
# running the old binary, which then fails to load the new libraries
# ("could not load library plpgsql.so: undefined symbol"). Tests fake the
# installed version with POSTGRES_SH_INSTALLED_VERSION.
set -euo pipefail

stop=""
if [ "${1:-}" = "--stop" ]; then
  stop=1
  shift
fi
name=${1:?usage: postgres.sh [--stop] NAME}
# A cluster's name is a directory under .data/postgres: letters, digits,
# dots, dashes and underscores, not starting with a dash (a mistyped flag
# would otherwise become a cluster of that name).
if ! [[ "$name" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]*$ ]] || [ "$#" -gt 1 ]; then
  printf 'postgres.sh: %s is not a cluster name (usage: postgres.sh [--stop] NAME, NAME of letters, digits, ".", "-", "_")\n' "$*" >&2
  exit 2
fi
if [ -z "$stop" ] && [ -n "${DATABASE_URL:-}" ]; then
  printf '%s\n' "$DATABASE_URL"
  exit 0
fi

log() { printf 'postgres.sh: %s\n' "$*" >&2; }

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.data/postgres/$name"
data="$dir/data"

find_bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
      printf '%s\n' "$d"
      return 0
    fi
  done
  return 1
}

bindir=$(find_bindir || true)
if [ -z "$bindir" ]; then
  if [ "$(id -u)" != 0 ]; then
    log "PostgreSQL server binaries not found; install them (apt-get install postgresql) or set DATABASE_URL"
    exit 1
  fi
  log "installing PostgreSQL with apt-get (once)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  bindir=$(find_bindir)
fi

# as_owner runs a command as the cluster's owner: "postgres" when we are root
# (from /, since the owner may not be allowed into the current folder).
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

if [ -n "$stop" ]; then
  data="$(readlink -f "$dir")/data"
  if [ -d "$data" ] && as_owner "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    as_owner "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    log "stopped cluster $name"
  fi
  exit 0
fi

mkdir -p "$(dirname "$dir")"
if [ "$(id -u)" = 0 ] && [ ! -e "$dir" ]; then
  # The server runs as "postgres", which may not be able to enter this
  # checkout (a clone under /root, say). Then the cluster lives in a folder of
  # its own and .data/postgres/NAME links to it.
  if runuser -u postgres -- test -x "$(dirname "$dir")"; then
    mkdir -p "$dir"
  else
    hash=$(printf '%s' "$root" | sha256sum | cut -c1-12)
    real="/var/lib/postgresql/oncepay-$hash/$name"
    mkdir -p "$real"
    chown postgres: "$(dirname "$real")" "$real"
    ln -s "$real" "$dir"
    log "$root is not readable by the postgres user; cluster $name lives in $real"
  fi
fi
mkdir -p "$dir"
dir=$(readlink -f "$dir")
data="$dir/data"
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$dir"
fi

if [ ! -s "$data/PG_VERSION" ]; then
  log "creating cluster $name in $data"
  as_owner "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    exit 1
  }
fi

port_file="$dir/port"

port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pick_port() {
  local candidate
  for _ in $(seq 1 200); do
    candidate=$((20000 + RANDOM % 30000))
    if port_free "$candidate"; then
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  log "no free port found"
  exit 1
}

# installed_version is the version of the server binary (15.20), and
# running_version that of the cluster's running server ("" when it does not
# answer).
installed_version() {
  if [ -n "${POSTGRES_SH_INSTALLED_VERSION:-}" ]; then
    printf '%s\n' "$POSTGRES_SH_INSTALLED_VERSION"
    return
  fi
  "$bindir/postgres" -V | awk '{ print $3 }'
}
running_version() {
  "$bindir/psql" -X -At -h 127.0.0.1 -p "$(cat "$port_file" 2>/dev/null)" -U postgres -d postgres \
    -c 'SHOW server_version' 2>/dev/null | awk '{ print $1 }' || true
}

restarting=""
if as_owner "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  running=$(running_version)
  installed=$(installed_version)
  if [ -n "$running" ] && [ "$running" != "$installed" ]; then
    log "cluster $name runs PostgreSQL $running, the installed server is $installed (upgraded since it started): restarting it"
    as_owner "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    restarting=1
  fi
fi

if ! as_owner "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  port=$(cat "$port_file" 2>/dev/null || true)
  if [ -z "$port" ] || ! port_free "$port"; then
    port=$(pick_port)
  fi
  # A port found free can be taken before the server binds it (by any
  # outgoing connection's ephemeral port): then try another, a few times.
  for attempt in 1 2 3 4 5; do
    echo "$port" >"$port_file"
    [ -n "$restarting" ] || log "starting cluster $name on 127.0.0.1:$port"
    logged=$(stat -c %s "$dir/server.log" 2>/dev/null || echo 0)
    if as_owner "$bindir/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300 ${PG_SERVER_OPTS:-}" \
      start >/dev/null 2>"$dir/pg_ctl.err"; then
      break
    fi
    if [ "$attempt" -lt 5 ] && tail -c +"$((logged + 1))" "$dir/server.log" | grep -q 'could not bind .*Address already in use'; then
      log "127.0.0.1:$port was taken meanwhile; trying another port"
      port=$(pick_port)
      continue
    fi
    cat "$dir/pg_ctl.err" >&2
    tail -n 20 "$dir/server.log" >&2
    exit 1
  done
fi

port=$(cat "$port_file")
printf 'postgres://postgres@127.0.0.1:%s/postgres?sslmode=disable\n' "$port"
