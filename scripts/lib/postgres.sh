# Postgres for the tests: Debian's postgresql-15 server, as a
# throwaway cluster of its own (not the system's service) in a temp
# directory, on a free loopback port, owned by the `postgres` user (the
# server refuses to run as root), trusting loopback connections. Sourced by
# scripts/test and the benchmarks; `start_postgres` exports
# SHELLGATE_TEST_POSTGRES_URL, and the cluster is stopped and removed by
# `stop_postgres` (the caller's exit trap).

POSTGRES_BIN=/usr/lib/postgresql/15/bin

install_postgres() {
  if [ ! -x "$POSTGRES_BIN/postgres" ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
  fi
  # Debian's package starts the system's own cluster; ours is separate.
}

start_postgres() {
  install_postgres
  # Its files in memory (tmpfs) where the machine has it: a throwaway
  # database needs no disk, which a loaded machine makes everyone wait on.
  local parent=/tmp
  if [ -w /dev/shm ]; then
    parent=/dev/shm
  fi
  POSTGRES_DIR=$(mktemp -d "$parent/shellgate-postgres.XXXXXX")
  chown postgres:postgres "$POSTGRES_DIR"
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  runuser -u postgres -- "$POSTGRES_BIN/initdb" -D "$POSTGRES_DIR/data" -U postgres \
    --auth=trust --no-sync -E UTF8 >/dev/null
  # TLS offered (the store tests connect with sslmode=require too), with a
  # certificate for 127.0.0.1 signed by a CA of this run's own.
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=shellgate test CA" \
    -keyout "$POSTGRES_DIR/ca.key" -out "$POSTGRES_DIR/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$POSTGRES_DIR/data/server.key" -out "$POSTGRES_DIR/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' >"$POSTGRES_DIR/san.ext"
  openssl x509 -req -in "$POSTGRES_DIR/server.csr" -CA "$POSTGRES_DIR/ca.pem" -CAkey "$POSTGRES_DIR/ca.key" \
    -CAcreateserial -days 2 -extfile "$POSTGRES_DIR/san.ext" -out "$POSTGRES_DIR/data/server.crt" 2>/dev/null
  chown postgres:postgres "$POSTGRES_DIR/data/server.key" "$POSTGRES_DIR/data/server.crt"
  chmod 600 "$POSTGRES_DIR/data/server.key"
  # Enough connections for three nodes and two replicas of the cluster
  # tests, each with its pool, and the store's own tests.
  runuser -u postgres -- "$POSTGRES_BIN/pg_ctl" -D "$POSTGRES_DIR/data" -l "$POSTGRES_DIR/log" -w \
    -o "-p $port -k $POSTGRES_DIR -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c synchronous_commit=off -c ssl=on" \
    start >/dev/null
  export SHELLGATE_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
  export SHELLGATE_TEST_POSTGRES_CA="$POSTGRES_DIR/ca.pem"
  export POSTGRES_DIR
}

stop_postgres() {
  if [ -n "${POSTGRES_DIR:-}" ] && [ -d "$POSTGRES_DIR/data" ]; then
    runuser -u postgres -- "$POSTGRES_BIN/pg_ctl" -D "$POSTGRES_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$POSTGRES_DIR"
  fi
}
