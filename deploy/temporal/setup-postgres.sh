#!/bin/sh
# One-shot job: create Temporal's databases in PostgreSQL and bring their schemas up to date (idempotent: safe on
# every `docker compose up`). Modelled on Temporal's own compose layout (samples-server/compose).
set -eu
: "${POSTGRES_SEEDS:?POSTGRES_SEEDS is required}"
: "${POSTGRES_USER:?POSTGRES_USER is required}"
: "${SQL_PASSWORD:?SQL_PASSWORD is required}"
PORT=${DB_PORT:-5432}
SCHEMA_DIR=/etc/temporal/schema/postgresql/v12

echo "waiting for PostgreSQL at ${POSTGRES_SEEDS}:${PORT}"
i=0
until nc -z -w 5 "$POSTGRES_SEEDS" "$PORT"; do
  i=$((i + 1)); [ "$i" -ge 60 ] && { echo "PostgreSQL did not come up"; exit 1; }
  sleep 2
done

for db in temporal temporal_visibility; do
  dir=temporal; [ "$db" = temporal_visibility ] && dir=visibility
  temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -u "$POSTGRES_USER" -p "$PORT" --db "$db" create || true
  temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -u "$POSTGRES_USER" -p "$PORT" --db "$db" setup-schema -v 0.0 || true
  temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -u "$POSTGRES_USER" -p "$PORT" --db "$db" update-schema -d "$SCHEMA_DIR/$dir/versioned"
done
echo "PostgreSQL schemas are up to date"
