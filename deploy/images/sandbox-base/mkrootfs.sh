#!/usr/bin/env bash
# mkrootfs.sh OUT.tar.gz RELEASE MIRROR SECURITY_MIRROR PACKAGES
#
# Builds a Debian root file system with debootstrap (minbase variant plus
# PACKAGES, comma-separated) from Debian's own packages, brings it up to date
# with the release's -updates and -security suites, trims what containers do
# not need, and writes it as a gzipped tarball for `docker import`. Needs
# root (debootstrap chroots); build.sh runs it through sudo when it is not.
set -euo pipefail

out=$1 release=$2 mirror=$3 security=$4 packages=$5

if ! command -v debootstrap >/dev/null 2>&1; then
  echo "mkrootfs: debootstrap missing; installing it from Debian's packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

work=$(mktemp -d "$(dirname "$out")/rootfs.XXXXXX")
cleanup() {
  for m in proc dev/pts; do
    if mountpoint -q "$work/rootfs/$m" 2>/dev/null; then umount -l "$work/rootfs/$m" || true; fi
  done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
r=$work/rootfs

echo "mkrootfs: debootstrap $release from $mirror with $packages" >&2
debootstrap --variant=minbase --include="$packages" "$release" "$r" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -n 40 "$work/debootstrap.log" >&2
  [ -f "$r/debootstrap/debootstrap.log" ] && tail -n 40 "$r/debootstrap/debootstrap.log" >&2
  exit 1
}

# Containers never start services from package scripts, never install
# recommends, and keep no documentation (copyright files excepted).
printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
chmod 0755 "$r/usr/sbin/policy-rc.d"
cat >"$r/etc/apt/apt.conf.d/90supervisor" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
APT
cat >"$r/etc/dpkg/dpkg.cfg.d/90supervisor-nodoc" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
DPKG

# Package sources: the release, its updates and its security fixes (none
# for sid/unstable/testing names without those suites).
{
  echo "deb $mirror $release main"
  case $release in
    sid|unstable) ;;
    *)
      echo "deb $mirror $release-updates main"
      echo "deb $security $release-security main"
      ;;
  esac
} >"$r/etc/apt/sources.list"

mount -t proc proc "$r/proc"
echo "mkrootfs: applying $release's updates" >&2
chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  sh -c 'apt-get update -qq && apt-get -y -q -o Dpkg::Options::=--force-confold dist-upgrade && apt-get clean' \
  >"$work/upgrade.log" 2>&1 || {
  tail -n 40 "$work/upgrade.log" >&2
  exit 1
}
umount "$r/proc"

# Trim: package caches and lists, documentation, logs, host identity.
rm -rf "$r"/var/cache/apt/* "$r"/var/lib/apt/lists/* "$r"/var/log/* "$r"/tmp/* "$r"/var/tmp/* \
  "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/debootstrap
find "$r/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
find "$r/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
: >"$r/etc/resolv.conf"
rm -f "$r/etc/hostname"
: >"$r/etc/machine-id"

tar --numeric-owner --xattrs --xattrs-include='security.capability' -C "$r" -czf "$out.tmp" .
mv -f "$out.tmp" "$out"
echo "mkrootfs: wrote $out ($(du -h "$out" | cut -f1))" >&2
