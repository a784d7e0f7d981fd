#!/usr/bin/env bash
# compose-creds.sh DIR COORDINATOR: the TLS certificates and Redis ACL users
# of compose.yaml's fleet in DIR, generated with `COORDINATOR tls init` (our
# own Go program: no openssl) unless DIR already holds them, then handed to
# the uid of the container that reads each part: the servers' and services'
# directories to the images' users (nats 65532, coordinator/worker/gaterunner
# 10001, redis the image's redis user), through a container of
# supervisor/sandbox-base as root (no sudo). Each service's files stay 0600
# in a 0700 directory and each service mounts only its own (compose.yaml).
# tls/cli and tls/operator, for the host's coordinator CLI, and the CA's key
# in tls/ca stay this user's.
#
# Environment: SUPERVISOR_REDIS_IMAGE, SUPERVISOR_SANDBOX_BASE_IMAGE (the
# images whose users own the files; defaults supervisor/redis:latest and
# supervisor/sandbox-base:latest).
set -euo pipefail

dir=${1:?usage: compose-creds.sh DIR COORDINATOR}
coordinator=${2:?usage: compose-creds.sh DIR COORDINATOR}
base=${SUPERVISOR_SANDBOX_BASE_IMAGE:-supervisor/sandbox-base:latest}
redis=${SUPERVISOR_REDIS_IMAGE:-supervisor/redis:latest}

if [ -e "$dir/tls" ] || [ -e "$dir/redis" ]; then
  echo "compose-creds: using the certificates and Redis users already in $dir" >&2
  exit 0
fi
mkdir -p "$dir"
chmod 0700 "$dir"
"$coordinator" tls init "$dir" --redis-acl \
  --hosts nats-1,nats-2,nats-3,redis,localhost,127.0.0.1 >&2

abs=$(cd "$dir" && pwd)
own() { # own IMAGE OWNER PATH...: chown -R OWNER PATH... (paths under DIR) as root in IMAGE
  local image=$1 owner=$2
  shift 2
  docker run --rm --network none --user 0 --entrypoint chown -v "$abs:/d" "$image" -R "$owner" "${@/#//d/}"
}
own "$base" 65532:65532 tls/nats
own "$base" 10001:10001 tls/coordinator tls/worker tls/gaterunner \
  redis/coordinator.password redis/worker.password redis/gaterunner.password
own "$redis" redis:redis tls/redis redis/users.acl
echo "compose-creds: wrote the fleet's certificates and Redis users in $dir" >&2
