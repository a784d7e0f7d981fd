#!/usr/bin/env bash
# with-redis.sh CMD...: run CMD with a private redis-server on a free port,
# exported as SUPERVISOR_TEST_REDIS_URL. Installs redis-server from Debian's
# packages when it is missing (as root, or through sudo).
set -euo pipefail

if ! command -v redis-server >/dev/null 2>&1; then
  echo "with-redis: redis-server missing; installing it from Debian's packages" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
  || echo $((20000 + RANDOM % 20000)))
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  --protected-mode no --maxmemory-policy noeviction --daemonize yes --pidfile "$dir/redis.pid" \
  --logfile "$dir/redis.log"
cleanup() {
  if [ -f "$dir/redis.pid" ]; then kill "$(cat "$dir/redis.pid")" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -p "$port" ping >/dev/null || { echo "with-redis: redis-server did not start" >&2; cat "$dir/redis.log" >&2; exit 1; }
export SUPERVISOR_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
echo "with-redis: redis-server on 127.0.0.1:$port" >&2
"$@"
