#!/usr/bin/env bash
# Start a throwaway PostgreSQL for development and tests when none answers:
# initdb into a temporary directory, trust authentication, listening on
# 127.0.0.1:$PGPORT (default 5432). Uses Debian's postgresql packages and
# installs them when run as root on a machine that lacks them.
#
#   scripts/postgres-local.sh          # start (no-op if a server already answers)
#   scripts/postgres-local.sh stop     # stop the server this script started
set -euo pipefail

port="${PGPORT:-5432}"
state="${SCHEDLOOP_PG_STATE:-/tmp/schedloop-postgres-$port}"

find_bindir() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

if [[ "${1:-start}" == "stop" ]]; then
  bindir="$(find_bindir)"
  if [[ -f "$state/data/postmaster.pid" ]]; then
    if [[ $(id -u) -eq 0 ]]; then
      runuser -u postgres -- "$bindir/pg_ctl" -D "$state/data" -m fast -w stop
    else
      "$bindir/pg_ctl" -D "$state/data" -m fast -w stop
    fi
  else
    echo "no server started by this script on port $port ($state)"
  fi
  exit 0
fi

if command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h 127.0.0.1 -p "$port"; then
  echo "Postgres already answers on 127.0.0.1:$port"
  exit 0
fi

bindir="$(find_bindir)"
if [[ -z "$bindir" ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "PostgreSQL is not installed. Install it with: sudo apt-get install -y postgresql" >&2
    exit 1
  fi
  echo "installing Debian's postgresql packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  bindir="$(find_bindir)"
fi

# A cluster Debian already configured only needs starting.
if [[ $(id -u) -eq 0 ]] && command -v pg_ctlcluster >/dev/null 2>&1 && [[ -d /etc/postgresql ]]; then
  for version in $(ls /etc/postgresql); do
    if grep -qs "^port *= *$port" "/etc/postgresql/$version/main/postgresql.conf"; then
      echo "starting Debian cluster $version/main"
      pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
      if pg_isready -q -h 127.0.0.1 -p "$port" -t 20; then exit 0; fi
    fi
  done
fi

# initdb refuses to run as root: use the postgres account the package made.
as_owner=()
if [[ $(id -u) -eq 0 ]]; then
  as_owner=(runuser -u postgres --)
fi
rm -rf "$state"
mkdir -p "$state"
[[ $(id -u) -eq 0 ]] && chown postgres: "$state"
"${as_owner[@]}" "$bindir/initdb" -D "$state/data" -U postgres --auth=trust -E UTF8 >"$state/initdb.log"
# fsync off: this server holds test data only, and it makes tests faster.
"${as_owner[@]}" "$bindir/pg_ctl" -D "$state/data" -l "$state/server.log" -w \
  -o "-p $port -k $state -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off" start
echo "Postgres started on 127.0.0.1:$port (data in $state/data; stop with: scripts/postgres-local.sh stop)"
