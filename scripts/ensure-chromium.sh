#!/usr/bin/env bash
# ensure-chromium.sh [CMD...]: make sure a Chromium the browser tests can
# drive headless is installed, installing Debian's chromium package when it
# is missing (as root, or through sudo), then run CMD if one is given.
# SUPERVISOR_CHROMIUM names the binary when it is not on PATH as chromium.
set -euo pipefail

find_chromium() {
  if [ -n "${SUPERVISOR_CHROMIUM:-}" ] && [ -x "${SUPERVISOR_CHROMIUM}" ]; then return 0; fi
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
    || command -v google-chrome >/dev/null 2>&1 || command -v headless-shell >/dev/null 2>&1
}

if ! find_chromium; then
  echo "ensure-chromium: chromium missing; installing it from Debian's packages" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  find_chromium || { echo "ensure-chromium: chromium still missing after apt-get install" >&2; exit 1; }
fi
[ "$#" -eq 0 ] || exec "$@"
