#!/usr/bin/env bash
# run.sh: the demo behind `make run` (which builds bin/api and bin/pspsim
# first). It starts the private PostgreSQL (unless DATABASE_URL is set), the
# payment simulator as its own process on a free loopback port, with an API
# key and a webhook secret made for this run, and then the API (`api serve`,
# DEMO_MODE=true unless set) on HTTP_ADDR (default 127.0.0.1:8080) with
# PSP_URL, PSP_API_KEY and PSP_WEBHOOK_SECRETS naming that simulator, which
# sends its webhooks to the API's HTTP_ADDR. Ctrl-C stops both; so does
# either one ending. With PSP_URL set it runs only the API, against the
# provider you named (and your PSP_API_KEY and PSP_WEBHOOK_SECRETS).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/pspsim.sh
source "$root/scripts/pspsim.sh"

DATABASE_URL=$("$root/scripts/postgres.sh" dev)
export DATABASE_URL
export DEMO_MODE="${DEMO_MODE:-true}"
export HTTP_ADDR="${HTTP_ADDR:-127.0.0.1:8080}"

if [ -n "${PSP_URL:-}" ]; then
  exec "$root/bin/api" serve
fi

api=""
interrupted=""
on_signal() {
  interrupted=1
}
cleanup() {
  local status=$?
  trap - INT TERM
  if [ -n "$api" ]; then
    kill -TERM "$api" 2>/dev/null || true
    wait "$api" 2>/dev/null && status=0 || status=$?
  fi
  # The simulator goes last, so that requests the API drains still reach it.
  pspsim_stop
  exit "$status"
}
trap cleanup EXIT
trap on_signal INT TERM

webhook=$(pspsim_webhook_url "$HTTP_ADDR")
log="$root/.data/run/pspsim.log"
pspsim_start "$webhook" "$log"
echo "the payment simulator runs at $PSP_URL (log: ${log#"$root"/})"

"$root/bin/api" serve &
api=$!
# Whichever ends first, or Ctrl-C, ends the run; cleanup stops the rest.
wait -n "$api" "$PSPSIM_PID" || true
if [ -z "$interrupted" ] && ! kill -0 "$PSPSIM_PID" 2>/dev/null; then
  echo "the payment simulator stopped (log: ${log#"$root"/}); stopping the API" >&2
  kill -TERM "$api" 2>/dev/null || true
  wait "$api" 2>/dev/null || true
  api=""
  exit 1
fi
