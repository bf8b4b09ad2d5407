#!/usr/bin/env bash
# deps.sh: install the Debian packages the tests need when they are missing:
# docker-compose (the compose file check) and prometheus (prometheus and
# promtool: the dashboard test evaluates every panel's query on a real
# Prometheus).
# starter:remove begin
# And chromium, for the browser tests of the demo UI.
# starter:remove end
# PostgreSQL is installed by scripts/postgres.sh when it is first needed.
# As a normal user it only says what is missing.
set -euo pipefail

need=()
# starter:remove begin
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# starter:remove end
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need+=(prometheus)
[ "${#need[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
  echo "deps.sh: missing Debian packages: ${need[*]} (install them: sudo apt-get install -y ${need[*]})" >&2
  exit 1
fi
echo "deps.sh: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
