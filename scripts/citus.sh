#!/usr/bin/env bash
# citus.sh NAME: make sure a local Citus cluster named NAME runs, a coordinator
# and two workers, and print the coordinator's connection URL on stdout
# (nothing else). The three are private PostgreSQL clusters of
# scripts/postgres.sh (NAME-coordinator, NAME-worker-1, NAME-worker-2) started
# with shared_preload_libraries=citus, each with the citus extension in its
# postgres database, the workers added to the coordinator's metadata.
# citus.sh --stop NAME: stop the three.
# citus.sh --install: only make sure Citus is installed.
#
# Citus comes from the installed PostgreSQL (citus.so in its library folder),
# or is built from CITUS_SRC: a Citus 13.x source tree or .tar.gz (13.x is the
# last line that supports PostgreSQL 15, Debian 12's). Building needs Debian's
# postgresql-server-dev and a few -dev packages, installed with apt-get when we
# are root. Installing postgresql-server-dev may upgrade the server's minor
# version: scripts/postgres.sh restarts a cluster that still runs the old
# server the next time it is asked for it.
set -euo pipefail

log() { printf 'citus.sh: %s\n' "$*" >&2; }
# The nodes are private clusters of postgres.sh, which would print a
# DATABASE_URL of the environment instead of starting them.
unset DATABASE_URL

root=$(cd "$(dirname "$0")/.." && pwd)
mode=start
case "${1:-}" in
  --stop) mode=stop; shift ;;
  --install) mode=install ;;
esac
if [ "$mode" != install ]; then
  name=${1:?usage: citus.sh [--stop] NAME | citus.sh --install}
fi
nodes=(coordinator worker-1 worker-2)

if [ "$mode" = stop ]; then
  for n in "${nodes[@]}"; do "$root/scripts/postgres.sh" --stop "$name-$n"; done
  exit 0
fi

# The PostgreSQL that scripts/postgres.sh runs: the newest under
# /usr/lib/postgresql, as it finds it.
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r | head -n1)
if [ -z "$bindir" ]; then
  # postgres.sh installs PostgreSQL (as root) or says what to install.
  "$root/scripts/postgres.sh" --stop "citus-probe" >/dev/null
  bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r | head -n1)
fi
major=$(basename "$(dirname "$bindir")")
libdir="/usr/lib/postgresql/$major/lib"

installed() { [ -f "$libdir/citus.so" ] && [ -f "/usr/share/postgresql/$major/extension/citus.control" ]; }

build_citus() {
  local src=$CITUS_SRC work="$root/.data/citus-build"
  if [ -f "$src" ]; then
    rm -rf "$work" && mkdir -p "$work"
    log "unpacking $src"
    tar -xzf "$src" -C "$work"
    src=$work
  elif [ ! -f "$src/configure" ]; then
    log "CITUS_SRC=$CITUS_SRC is neither a Citus source tree nor a .tar.gz of one"
    exit 1
  else
    rm -rf "$work" && mkdir -p "$work"
    cp -a "$src/." "$work/"
    src=$work
  fi
  local deps=(postgresql-server-dev-"$major" liblz4-dev libzstd-dev libkrb5-dev libssl-dev libselinux1-dev
    libxslt1-dev libpam0g-dev libreadline-dev autoconf flex bison make gcc)
  local missing=()
  for p in "${deps[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
      log "building Citus needs: ${missing[*]} (sudo apt-get install -y ${missing[*]})"
      exit 1
    fi
    log "installing ${missing[*]} (log: $work/apt.log)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$work/apt.log" 2>&1 || {
      tail -n 20 "$work/apt.log" >&2
      exit 1
    }
  fi
  local pgconfig="/usr/lib/postgresql/$major/bin/pg_config"
  [ -x "$pgconfig" ] || pgconfig=$(command -v pg_config)
  # PostgreSQL 15.20 declares (and exports) have_createdb_privilege, which
  # Citus 13.2's compatibility header defines as a static function for
  # versions before 16: the one definition too many. Drop Citus's copy when
  # the server's header has it.
  if grep -q 'have_createdb_privilege' "$("$pgconfig" --includedir-server)/commands/dbcommands.h" 2>/dev/null; then
    perl -0pi -e 's/static inline bool\nhave_createdb_privilege\(void\)\n\{.*?\n\}\n//s' "$src/src/include/pg_version_compat.h"
  fi
  log "building Citus from $CITUS_SRC for PostgreSQL $major (a few minutes)"
  (cd "$src" && PG_CONFIG=$pgconfig ./configure --without-libcurl >"$work/configure.log" 2>&1 &&
    make -j"$(nproc)" >"$work/make.log" 2>&1 && make install >"$work/install.log" 2>&1) || {
    log "the build failed; its logs are in $work"
    exit 1
  }
}

if ! installed; then
  if [ -z "${CITUS_SRC:-}" ]; then
    log "Citus is not installed for PostgreSQL $major and CITUS_SRC is not set: install Citus's packages for PostgreSQL $major (https://docs.citusdata.com/en/stable/installation/), set CITUS_SRC to a Citus 13.x source tree or .tar.gz to build it, or use the citusdata/citus image (docker compose --profile citus up)"
    exit 1
  fi
  build_citus
  installed || { log "the build did not install citus.so into $libdir"; exit 1; }
fi
[ "$mode" = install ] && exit 0

psql() { "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -At "$@"; }
urls=()
for n in "${nodes[@]}"; do
  # Every database with the extension has a maintenance daemon of its own
  # (2PC recovery, distributed deadlock detection), a background worker:
  # the tests' databases, one per test on every node, need more than
  # PostgreSQL's default of 8.
  urls+=("$(PG_SERVER_OPTS="-c shared_preload_libraries=citus -c max_worker_processes=64 ${PG_SERVER_OPTS:-}" "$root/scripts/postgres.sh" "$name-$n")")
done
port_of() { sed -E 's|.*@127\.0\.0\.1:([0-9]+)/.*|\1|' <<<"$1"; }
for u in "${urls[@]}"; do
  psql "$u" -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS citus" >/dev/null
done
coordinator=${urls[0]}
psql "$coordinator" -c "SELECT citus_set_coordinator_host('127.0.0.1', $(port_of "$coordinator"))" >/dev/null
for u in "${urls[@]:1}"; do
  p=$(port_of "$u")
  # Added once; postgres.sh keeps each cluster on its port across restarts.
  if [ "$(psql "$coordinator" -c "SELECT count(*) FROM pg_dist_node WHERE nodename = '127.0.0.1' AND nodeport = $p")" = 0 ]; then
    psql "$coordinator" -c "SELECT citus_add_node('127.0.0.1', $p)" >/dev/null
    log "added worker 127.0.0.1:$p to $name"
  fi
done
printf '%s\n' "$coordinator"
