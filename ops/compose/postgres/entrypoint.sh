#!/usr/bin/env bash
# The official postgres image's start: as root, give PGDATA to postgres and run again as
# postgres; on an empty PGDATA, initdb with POSTGRES_USER and POSTGRES_PASSWORD, create
# POSTGRES_DB, run /docker-entrypoint-initdb.d/*.sql and *.sh against a server on the
# socket only, then serve on every address, password-checked (POSTGRES_HOST_AUTH_METHOD,
# scram-sha-256 by default).
set -euo pipefail
if [[ "${1:-}" != postgres ]]; then
  exec "$@"
fi
if [[ "$(id -u)" == 0 ]]; then
  mkdir -p "$PGDATA"
  chown -R postgres:postgres "$PGDATA"
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
  if [[ -z "${POSTGRES_PASSWORD:-}" && "$auth" != trust ]]; then
    echo "Error: the database is uninitialized and POSTGRES_PASSWORD is not set." >&2
    echo "Set it to a non-empty value, or POSTGRES_HOST_AUTH_METHOD=trust (no password)." >&2
    exit 1
  fi
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS holds several arguments
  initdb --username="$user" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") \
    ${POSTGRES_INITDB_ARGS:-} -D "$PGDATA"
  printf '\nhost all all all %s\n' "$auth" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -p 5432" start
  export PGUSER="$user" PGPASSWORD="${POSTGRES_PASSWORD:-}"
  if [[ "$db" != postgres ]]; then
    psql -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE \"$db\""
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh) echo "running $f"; . "$f" ;;
      *.sql) echo "running $f"; psql -v ON_ERROR_STOP=1 -d "$db" -f "$f" ;;
      *) if [[ -e "$f" ]]; then echo "ignoring $f"; fi ;;
    esac
  done
  unset PGPASSWORD
  pg_ctl -D "$PGDATA" -m fast -w stop
fi
exec "$@" -c listen_addresses='*'
