#!/usr/bin/env bash
# dashshot.sh: the dashboard picture of docs/OPERATIONS.md, from real demo
# traffic. It runs what `make run` runs (a private PostgreSQL, here named
# "dash", the payment simulator as its own process, `api serve` in demo
# mode) on free loopback ports, a Prometheus (Debian's) scraping the API
# with the compose profile's configuration, DASH_DURATION (default 240s) of
# demo traffic (creates, pays, replays, key mismatches, lost responses, a
# provider outage, a refund), then proving/cmd/dashshot, which draws every
# panel of the dashboard from that Prometheus into docs/dashboard.png (or
# DASH_OUT). Grafana does not run here; see docs/OPERATIONS.md.
# Builds bin/api and bin/pspsim first (make build). Everything it started is
# stopped on exit.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=scripts/pspsim.sh
source "$root/scripts/pspsim.sh"
duration=${DASH_DURATION:-240}
out=${DASH_OUT:-docs/dashboard.png}
dir=.data/dash
mkdir -p "$dir"

free_port() {
  local c
  for _ in $(seq 1 200); do
    c=$((20000 + RANDOM % 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$c") 2>/dev/null; then echo "$c"; return; fi
  done
  echo "dashshot: no free port" >&2
  exit 1
}

api="" prom=""
cleanup() {
  [ -z "$api" ] || { kill -TERM "$api" 2>/dev/null || true; wait "$api" 2>/dev/null || true; }
  [ -z "$prom" ] || { kill -TERM "$prom" 2>/dev/null || true; wait "$prom" 2>/dev/null || true; }
  pspsim_stop
  scripts/postgres.sh --stop dash || true
}
trap cleanup EXIT

make -s build
DATABASE_URL=$(scripts/postgres.sh dash)
export DATABASE_URL
api_port=$(free_port)
base="http://127.0.0.1:$api_port"
pspsim_start "$base/webhooks/psp" "$dir/pspsim.log"
# The recoverer every 5s instead of 10s: its panel moves within the run.
printf '{"RecovererInterval": "5s"}\n' >"$dir/tuning.json"
DEMO_MODE=true HTTP_ADDR="127.0.0.1:$api_port" SWEEP_INTERVAL=20s \
  bin/api serve --tuning "$dir/tuning.json" >"$dir/api.log" 2>&1 &
api=$!

prom_port=$(free_port)
sed -e "s/\"api:8080\"/\"127.0.0.1:$api_port\"/" -e 's/scrape_interval: 5s/scrape_interval: 2s/' \
  observability/prometheus/prometheus.yml >"$dir/prometheus.yml"
rm -rf "$dir/prometheus-data"
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/prometheus-data" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$dir/prometheus.log" 2>&1 &
prom=$!

for _ in $(seq 1 120); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
curl -fsS "$base/readyz" >/dev/null

key=sk_test_acme
body='{"currency":"EUR","items":[{"sku":"travel-mug","quantity":1}]}'
other='{"currency":"EUR","items":[{"sku":"ceramic-dripper","quantity":2}]}'
post() { # path key body [header]
  curl -s -o "$dir/last.json" -w '%{http_code}' -X POST "$base$1" -H "Authorization: Bearer $key" \
    -H "Idempotency-Key: $2" -H 'Content-Type: application/json' ${4:+-H "$4"} -d "$3" || true
}
faults() { curl -fsS -X PUT "$PSP_URL/admin/faults" -H "Authorization: Bearer $PSP_API_KEY" -d "$1" >/dev/null; }

echo "dashshot: $duration s of demo traffic against $base, Prometheus on 127.0.0.1:$prom_port"
start=$(date +%s) i=0
while [ $(($(date +%s) - start)) -lt "$duration" ]; do
  i=$((i + 1)) elapsed=$(($(date +%s) - start))
  # A provider outage in the second quarter of the run, slow answers in the third.
  if [ "$elapsed" -ge $((duration / 4)) ] && [ "$elapsed" -lt $((duration / 2)) ]; then
    faults '{"fail_rate":0.5}'
  elif [ "$elapsed" -ge $((duration / 2)) ] && [ "$elapsed" -lt $((3 * duration / 4)) ]; then
    faults '{"latency_ms":150,"webhook_duplicates":1}'
  else
    faults '{}'
  fi
  post /v1/orders "dash-o$i" "$body" >/dev/null
  order=$(sed -n 's/.*"id":"\([^"]*\)".*/\1/p' "$dir/last.json" | head -n1)
  [ $((i % 3)) -eq 0 ] && post /v1/orders "dash-o$i" "$body" >/dev/null              # a client's retry: replayed
  [ $((i % 15)) -eq 0 ] && post /v1/orders "dash-o$i" "$other" >/dev/null             # the same key, another order: 422
  [ -n "$order" ] || continue
  if [ $((i % 7)) -eq 0 ]; then
    post "/v1/orders/$order/payments" "dash-p$i" '{"payment_method":"pm_card_ok"}' "X-Demo-Chaos: lose-response" >/dev/null
  fi
  code=$(post "/v1/orders/$order/payments" "dash-p$i" '{"payment_method":"pm_card_ok"}')
  [ $((i % 4)) -eq 0 ] && post "/v1/orders/$order/payments" "dash-p$i" '{"payment_method":"pm_card_ok"}' >/dev/null
  if [ "$code" = 201 ] && [ $((i % 10)) -eq 0 ]; then
    payment=$(sed -n 's/.*"id":"\([^"]*\)".*/\1/p' "$dir/last.json" | head -n1)
    post "/v1/payments/$payment/refunds" "dash-r$i" '{"amount":500}' >/dev/null
  fi
  curl -s -o /dev/null "$base/v1/orders/$order" -H "Authorization: Bearer $key"
  sleep 0.2
done
faults '{}'
sleep 5 # the last scrapes
echo "dashshot: $i rounds; drawing $out"
go run ./proving/cmd/dashshot --prometheus "http://127.0.0.1:$prom_port" --range "$((duration + 10))s" --step 4s --out "$out"
echo "dashshot: wrote $out"
