#!/usr/bin/env bash
# build.sh [IMAGE...] — build Supervisor's container images on this machine
# from our own binaries and Debian's packages. Nothing is pulled from a
# registry: the one image not built from a Dockerfile, sandbox-base, is a
# Debian root file system made with debootstrap and loaded with
# `docker import`; every other image starts FROM it or FROM scratch.
#
#   sandbox-base  Debian (minbase) + the packages in sandbox-base/packages: git, make, ca-certificates, tini
#   sandbox-go    sandbox-base + Debian's Go toolchain (Go 1.26 from trixie-backports on bookworm)
#   nats          FROM scratch: a static nats-server built from the nats-server/v2 Go module
#   redis         sandbox-base + Debian's redis-server
#   prometheus    sandbox-base + Debian's prometheus (compose.yaml scrapes the fleet with it)
#   coordinator   sandbox-base + the static coordinator (integration runs git) + configs/gates, context, roles, templates
#   worker        sandbox-base + the static worker + supervisor-test-agent
#   gaterunner    sandbox-go   + the static gaterunner + supervisor-coverage-check
#
# With no arguments it builds them all (`make images`); otherwise the named
# ones and what they are built on.
#
# Idempotent and cached: every image carries the label io.supervisor.inputs,
# a SHA-256 of everything it is made from (Dockerfile, each file copied in,
# build arguments, the parent image's id; for sandbox-base the package list,
# the root file system script, the Debian release and mirrors). An image
# whose label matches is left as it is. The debootstrapped root file system
# is also kept as a tarball under $SUPERVISOR_IMAGE_CACHE, keyed the same
# way, so a removed sandbox-base image is re-imported without debootstrap.
#
# Environment:
#   IMAGE_PREFIX           image names' prefix (default supervisor: supervisor/worker, ...)
#   IMAGE_TAG              tag of every image (default latest)
#   DEBIAN_RELEASE         Debian release of the root file system (default bookworm)
#   DEBIAN_MIRROR          Debian mirror (default: the one this machine's apt sources use for the release)
#   DEBIAN_SECURITY_MIRROR security mirror (default: the one they use for <release>-security)
#   GO_SUITE               suite the Go toolchain comes from (default trixie-backports on bookworm, else $DEBIAN_RELEASE-backports; empty: the release)
#   GO_PACKAGE             Debian package of the Go toolchain (default golang-1.26-go on bookworm, else golang-go)
#   SUPERVISOR_IMAGE_CACHE rootfs tarball cache (default ${XDG_CACHE_HOME:-~/.cache}/supervisor-images)
#   IMAGE_STAGE_DIR        static binaries and build contexts (default bin/images in the repository)
#   FORCE=1                rebuild even when the inputs did not change
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
prefix=${IMAGE_PREFIX:-supervisor}
tag=${IMAGE_TAG:-latest}
release=${DEBIAN_RELEASE:-bookworm}

# apt_uri WANT: the first URI this machine's apt sources (deb822 .sources
# files, then one-line .list files) give for a suite matching the
# extended regular expression WANT. The mirrors are the machine's to
# choose; none is written here.
apt_uri() {
  local want=$1 f
  {
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -r "$f" ] || continue
      awk -v want="^($want)\$" '
        BEGIN { RS = ""; FS = "\n" }
        {
          uris = ""; suites = ""; on = 1
          for (i = 1; i <= NF; i++) {
            line = $i
            if (line ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", line); uris = line }
            else if (line ~ /^Suites:/) { sub(/^Suites:[ \t]*/, "", line); suites = line }
            else if (line ~ /^Enabled:[ \t]*[Nn]o/) on = 0
          }
          if (!on || uris == "") next
          n = split(suites, s, /[ \t]+/)
          for (j = 1; j <= n; j++) if (s[j] ~ want) { split(uris, u, /[ \t]+/); print u[1]; next }
        }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [ -r "$f" ] || continue
      awk -v want="^($want)\$" '
        $1 == "deb" {
          i = 2
          if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
          if ($(i + 1) ~ want) print $i
        }' "$f"
    done
  } | head -n 1
}
mirror=${DEBIAN_MIRROR:-$(apt_uri "$release")}
mirror=${mirror:-$(apt_uri "[a-z]+")}
security=${DEBIAN_SECURITY_MIRROR:-$(apt_uri "$release-security")}
security=${security:-$(apt_uri "[a-z]+-security")}
# The Go toolchain: on bookworm, Go 1.26 from trixie-backports
# (golang-1.26-go) by default; elsewhere golang-go from the release's
# backports (none for sid). Debian's toolchain is statically linked and
# depends on its sources alone, so a later release's backport installs on
# this one as it is. Bookworm's own backport is Go 1.23, which builds no
# module whose go.mod asks for 1.24 or later (sandboxes run with
# GOTOOLCHAIN=local): GO_SUITE=bookworm-backports GO_PACKAGE=golang-go
# gives it back. The gate runner's warm-up serves either (PERF-79).
case $release in
  bookworm) default_go_suite=trixie-backports default_go_package=golang-1.26-go ;;
  sid | unstable) default_go_suite="" default_go_package=golang-go ;;
  *) default_go_suite="$release-backports" default_go_package=golang-go ;;
esac
go_suite=${GO_SUITE-$default_go_suite}
go_package=${GO_PACKAGE:-$default_go_package}
cache=${SUPERVISOR_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/supervisor-images}
stage=${IMAGE_STAGE_DIR:-$root/bin/images}
GO=${GO:-go}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
label=io.supervisor.inputs
all=(sandbox-base sandbox-go nats redis prometheus coordinator worker gaterunner)

log() { printf 'images: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}
[ -n "$mirror" ] || die "no Debian mirror in this machine's apt sources (/etc/apt/sources.list[.d]): set DEBIAN_MIRROR"
[ -n "$security" ] || die "no Debian security mirror in this machine's apt sources: set DEBIAN_SECURITY_MIRROR"
sha() { sha256sum | cut -c1-64; }
ref() { echo "$prefix/$1:$tag"; }

# current_inputs IMAGE prints the input hash the image was built from ("" if
# it is missing).
current_inputs() {
  docker image inspect --format "{{ index .Config.Labels \"$label\" }}" "$(ref "$1")" 2>/dev/null || true
}

image_id() { docker image inspect --format '{{.Id}}' "$(ref "$1")"; }

# The images each image is built on, and the binaries it needs.
parents() {
  case $1 in
    sandbox-go | redis | prometheus | coordinator | worker) echo sandbox-base ;;
    gaterunner) echo sandbox-go ;;
  esac
}
binaries() {
  case $1 in
    nats) echo nats-server ;;
    coordinator) echo coordinator ;;
    worker) echo worker supervisor-test-agent supervisor-sandbox-helper ;;
    gaterunner) echo gaterunner supervisor-coverage-check supervisor-sandbox-helper ;;
  esac
}

# ---- what to build ---------------------------------------------------------

wanted=()
add_wanted() {
  local p
  for p in $(parents "$1"); do add_wanted "$p"; done
  [[ " ${wanted[*]-} " == *" $1 "* ]] || wanted+=("$1")
}
if [ $# -eq 0 ]; then set -- "${all[@]}"; fi
for name in "$@"; do
  [[ " ${all[*]} " == *" $name "* ]] || die "unknown image $name (known: ${all[*]})"
  add_wanted "$name"
done

command -v docker >/dev/null 2>&1 || die "docker is not installed"
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"
# Without buildx the CLI falls back to the legacy builder with a warning;
# ask for it outright. Both build these Dockerfiles the same way.
if [ -z "${DOCKER_BUILDKIT:-}" ] && ! docker buildx version >/dev/null 2>&1; then
  export DOCKER_BUILDKIT=0
fi

# One build at a time per checkout (they share $stage); builds of other
# checkouts only ever replace an image tag atomically.
mkdir -p "$stage"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$stage/.lock"
  flock 9
fi

# ---- static binaries -----------------------------------------------------

# build_binaries builds the static binaries the wanted images need into
# $stage/bin. go build leaves an up-to-date output alone, so a rerun with no
# source change relinks nothing and yields byte-identical files.
build_binaries() {
  local need=() name b
  for name in "${wanted[@]}"; do
    for b in $(binaries "$name"); do
      [[ " ${need[*]-} " == *" $b "* ]] || need+=("$b")
    done
  done
  [ ${#need[@]} -gt 0 ] || return 0
  mkdir -p "$stage/bin"
  local start=$SECONDS mod pkg
  for b in "${need[@]}"; do
    case $b in
      coordinator) mod=coordinator pkg=./cmd/coordinator ;;
      worker) mod=worker pkg=./cmd/worker ;;
      gaterunner) mod=gaterunner pkg=./cmd/gaterunner ;;
      supervisor-coverage-check) mod=gaterunner pkg=./cmd/supervisor-coverage-check ;;
      supervisor-test-agent) mod=worker pkg=./cmd/supervisor-test-agent ;;
      supervisor-sandbox-helper) mod=shared pkg=./sandbox/cmd/supervisor-sandbox-helper ;;
      nats-server) mod=shared pkg=github.com/nats-io/nats-server/v2 ;;
    esac
    (cd "$root/$mod" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags='-s -w' -o "$stage/bin/$b" "$pkg") ||
      die "go build $pkg failed"
  done
  log "static binaries (CGO_ENABLED=0) ready in $((SECONDS - start))s: ${need[*]}"
}

# ---- sandbox-base: debootstrap + docker import ----------------------------

packages() { sed -e 's/#.*//' "$here/sandbox-base/packages" | tr -s ' \t\n' '\n' | sed '/^$/d' | sort -u | paste -sd, -; }

build_sandbox_base() {
  local pk key
  pk=$(packages)
  key=$({
    echo "sandbox-base v1"
    echo "release=$release mirror=$mirror security=$security packages=$pk"
    cat "$here/sandbox-base/mkrootfs.sh"
  } | sha)
  if [ "${FORCE:-}" != 1 ] && [ "$(current_inputs sandbox-base)" = "$key" ]; then
    log "$(ref sandbox-base) is up to date (inputs ${key:0:12})"
    return
  fi
  local tarball="$cache/rootfs-$release-${key:0:16}.tar.gz"
  if [ "${FORCE:-}" = 1 ] || [ ! -s "$tarball" ]; then
    mkdir -p "$cache"
    local sudo=() start=$SECONDS
    if [ "$(id -u)" -ne 0 ]; then
      command -v sudo >/dev/null 2>&1 || die "debootstrap needs root: run as root or install sudo"
      sudo=(sudo)
    fi
    log "building the Debian $release root file system (debootstrap; about a minute)"
    ${sudo[@]+"${sudo[@]}"} "$here/sandbox-base/mkrootfs.sh" "$tarball" "$release" "$mirror" "$security" "$pk"
    if [ ${#sudo[@]} -gt 0 ]; then sudo chown "$(id -u):$(id -g)" "$tarball"; fi
    log "root file system built in $((SECONDS - start))s"
    # Keep only the newest few tarballs (their names are ours: no odd characters).
    # shellcheck disable=SC2012
    ls -1t "$cache"/rootfs-*.tar.gz 2>/dev/null | tail -n +4 | xargs -r rm -f
  else
    log "using the cached root file system $tarball"
  fi
  docker import \
    --change "LABEL $label=$key" \
    --change "LABEL org.opencontainers.image.title=$prefix/sandbox-base" \
    --change "LABEL org.opencontainers.image.description=\"Debian $release (debootstrap minbase) with $pk\"" \
    --change "LABEL io.supervisor.debian.release=$release" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    "$tarball" "$(ref sandbox-base)" >/dev/null
  log "imported $(ref sandbox-base) (inputs ${key:0:12})"
}

# ---- Dockerfile images -----------------------------------------------------

# stage_context NAME fills $stage/ctx/NAME with the image's Dockerfile and
# the files it copies.
stage_context() {
  local name=$1 ctx="$stage/ctx/$1" b
  rm -rf "$ctx"
  mkdir -p "$ctx"
  cp "$here/$name/Dockerfile" "$ctx/"
  for b in $(binaries "$name"); do cp -p "$stage/bin/$b" "$ctx/$b"; done
  case $name in
    coordinator | worker | gaterunner) cp "$here/supervisor-entrypoint" "$ctx/" ;;
  esac
  case $name in
    coordinator) for c in gates context roles templates; do cp -R "$root/configs/$c" "$ctx/$c"; done ;;
    nats) mkdir -p "$ctx/data" ;;
  esac
  echo "$ctx"
}

# build_dockerfile NAME builds the image from its staged context unless an
# image with the same inputs exists.
build_dockerfile() {
  local name=$1 ctx args=() p key
  ctx=$(stage_context "$name")
  for p in $(parents "$name"); do
    args+=(--build-arg "BASE_IMAGE=$(ref "$p")")
  done
  case $name in
    sandbox-go) args+=(--build-arg "DEBIAN_MIRROR=$mirror" --build-arg "GO_SUITE=$go_suite" --build-arg "GO_PACKAGE=$go_package") ;;
  esac
  key=$({
    echo "$name v1"
    printf '%s\n' "${args[@]}"
    for p in $(parents "$name"); do echo "parent $p $(image_id "$p")"; done
    # Every file of the context: path, mode and content.
    (cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum &&
      find . -print0 | sort -z | xargs -0 -r stat -c '%n %a')
  } | sha)
  if [ "${FORCE:-}" != 1 ] && [ "$(current_inputs "$name")" = "$key" ]; then
    log "$(ref "$name") is up to date (inputs ${key:0:12})"
    return
  fi
  local start=$SECONDS out
  log "building $(ref "$name")"
  if ! out=$(docker build --label "$label=$key" "${args[@]}" -t "$(ref "$name")" "$ctx" 2>&1); then
    printf '%s\n' "$out" | tail -n 60 >&2
    die "docker build of $(ref "$name") failed"
  fi
  log "built $(ref "$name") in $((SECONDS - start))s (inputs ${key:0:12})"
}

# ---- main ------------------------------------------------------------------

start=$SECONDS
build_binaries
for name in "${wanted[@]}"; do
  case $name in
    sandbox-base) build_sandbox_base ;;
    *) build_dockerfile "$name" ;;
  esac
done
# Old builds of these images lose their tag; remove the untagged leftovers
# that carry our label (never anything else).
docker image prune -f --filter "label=$label" >/dev/null 2>&1 || true
log "done in $((SECONDS - start))s:"
for name in "${wanted[@]}"; do
  docker image ls --format '  {{.Repository}}:{{.Tag}}  {{.ID}}  {{.Size}}' "$(ref "$name")" >&2
done
