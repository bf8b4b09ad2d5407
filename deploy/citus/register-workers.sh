#!/usr/bin/env bash
# Run once by the citusdata/citus image's entrypoint when the coordinator's
# data directory is first initialised (docker-entrypoint-initdb.d, after the
# image's own script created the citus extension in POSTGRES_DB): it names
# the coordinator and adds the workers, waiting for each to accept
# connections. The API connects only once this is done: until then the
# coordinator listens on its unix socket alone.
set -euo pipefail
psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" -qAt)
"${psql[@]}" -c "SELECT citus_set_coordinator_host('citus-coordinator', 5432)" >/dev/null
for w in ${CITUS_WORKERS:?}; do
  for _ in $(seq 1 120); do
    pg_isready -q -h "$w" -p 5432 -U "$POSTGRES_USER" -d "$POSTGRES_DB" && break
    sleep 1
  done
  "${psql[@]}" -c "SELECT citus_add_node('$w', 5432)" >/dev/null
  echo "register-workers: added $w"
done
