# pspsim.sh: sourced by scripts/run.sh (make run) to run the payment
# simulator (bin/pspsim, from proving/cmd/pspsim) as its own process beside
# the API, which never runs a provider itself.
# starter:remove begin
# The Makefile's bench target sources it too.
# starter:remove end
#
#   pspsim_start WEBHOOK_URL LOG   start it on a free loopback port with an API
#                                  key and a webhook secret made for this run;
#                                  export PSP_URL, PSP_API_KEY and
#                                  PSP_WEBHOOK_SECRETS for the API; set PSPSIM_PID
#   pspsim_stop                    stop it (SIGTERM, then wait for it)
#   pspsim_webhook_url HTTP_ADDR   the API's webhook URL for its listen address
#
# The key and the secret reach both processes through the environment, never
# the command line (which anyone on the machine can read with ps).

pspsim_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# pspsim_random N prints N random bytes as hex.
pspsim_random() {
  od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'
}

pspsim_webhook_url() {
  local addr=$1 host port
  host=${addr%:*}
  port=${addr##*:}
  if [ -z "$port" ] || [ "$port" = 0 ] || [ "$port" = "$addr" ]; then
    echo "pspsim.sh: HTTP_ADDR=$addr has no fixed port; the simulator needs one to send its webhooks to" >&2
    return 1
  fi
  case $host in
    '' | 0.0.0.0) host=127.0.0.1 ;;
    '[::]') host='[::1]' ;;
  esac
  printf 'http://%s:%s/webhooks/psp\n' "$host" "$port"
}

pspsim_start() {
  local webhook=$1 log=$2 addr="" deadline
  mkdir -p "$(dirname "$log")"
  PSP_API_KEY="sk_sim_$(pspsim_random 16)"
  # A Standard Webhooks secret: whsec_ and the base64 of 24 random bytes.
  PSP_WEBHOOK_SECRETS="whsec_$(head -c 24 /dev/urandom | base64 -w0)"
  export PSP_API_KEY PSP_WEBHOOK_SECRETS
  # Its own session: a Ctrl-C in the terminal reaches the API, which drains
  # its requests while the simulator still answers; pspsim_stop ends it.
  PSP_WEBHOOK_SECRET="$PSP_WEBHOOK_SECRETS" PSP_ADDR=127.0.0.1:0 PSP_WEBHOOK_URL="$webhook" \
    setsid "$pspsim_root/bin/pspsim" >"$log" 2>&1 </dev/null &
  PSPSIM_PID=$!
  # It logs the address it listens on once it does; port 0 let the kernel
  # choose a free one, so nothing else can take it in between.
  deadline=$((SECONDS + 30))
  while [ -z "$addr" ]; do
    if ! kill -0 "$PSPSIM_PID" 2>/dev/null; then
      echo "pspsim.sh: the payment simulator did not start:" >&2
      tail -n 5 "$log" >&2
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "pspsim.sh: the payment simulator did not listen within 30s (log: $log)" >&2
      return 1
    fi
    addr=$(sed -n 's/.*"msg":"pspsim listening".*"addr":"\([^"]*\)".*/\1/p' "$log" | head -n 1)
    [ -n "$addr" ] || sleep 0.05 # polling its log for the line, with the deadline above
  done
  export PSP_URL="http://$addr"
}

pspsim_stop() {
  if [ -n "${PSPSIM_PID:-}" ]; then
    kill -TERM "$PSPSIM_PID" 2>/dev/null || true
    wait "$PSPSIM_PID" 2>/dev/null || true
    PSPSIM_PID=""
  fi
}
