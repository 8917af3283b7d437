#!/usr/bin/env bash
# A throwaway PostgreSQL for tests: `pg-throwaway.sh start DIR` initialises a
# cluster in DIR (as the `postgres` user: initdb refuses root), starts it on a
# free loopback port with fsync on, and prints its URL; `pg-throwaway.sh stop
# DIR` stops it and removes DIR. Needs Debian's postgresql (15) binaries.
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?directory}
bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[ -x "$bin/initdb" ] || { echo "no PostgreSQL binaries (apt-get install postgresql)" >&2; exit 1; }

as_pg() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

case "$cmd" in
start)
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && { id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres; chown postgres "$dir"; }
  as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200" start >/dev/null
  echo "postgres://postgres@127.0.0.1:$port/postgres"
  ;;
stop)
  [ -d "$dir/data" ] && as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
  ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
