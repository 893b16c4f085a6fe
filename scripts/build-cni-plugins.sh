#!/usr/bin/env bash
# Build the CNI reference plugins Berth's awsvpc networking runs, pinned, into DEST:
#   bridge, host-device, loopback (plugins/main) and host-local, static (plugins/ipam)
# from github.com/containernetworking/plugins at $VERSION, with `GOBIN=DEST go install`.
# Idempotent: DEST/.berth-cni-plugins holds the version built; when it matches and every
# binary is there, nothing is built. Works from any cwd (DEST may be relative to it).
# Prints one line: built or unchanged.
#
#   usage: scripts/build-cni-plugins.sh DEST
set -euo pipefail

VERSION=v1.10.0
MODULE=github.com/containernetworking/plugins
PLUGINS=(main/bridge main/host-device main/loopback ipam/host-local ipam/static)
GO=${GO:-go}

say() { printf 'build-cni-plugins: %s\n' "$*"; }
die() { printf 'build-cni-plugins: %s\n' "$*" >&2; exit 1; }

[ $# -eq 1 ] && [ -n "$1" ] || die "usage: $0 DEST"
mkdir -p "$1"
dest=$(cd "$1" && pwd -P)
stamp=$dest/.berth-cni-plugins

# One build at a time when several test runs start together.
if command -v flock >/dev/null; then
  exec 9>"$dest/.lock"
  flock 9
fi

up_to_date() {
  [ "$(cat "$stamp" 2>/dev/null)" = "$VERSION" ] || return 1
  local p
  for p in "${PLUGINS[@]}"; do
    [ -x "$dest/${p##*/}" ] || return 1
  done
}

if up_to_date; then
  say "unchanged: $MODULE@$VERSION in $dest"
  exit 0
fi

rm -f "$stamp"
pkgs=()
for p in "${PLUGINS[@]}"; do
  pkgs+=("$MODULE/plugins/$p@$VERSION")
done
# `go install pkg@version` ignores any go.mod around the cwd; run it from / all the same so a
# GOFLAGS=-mod=vendor or go.work nearby cannot interfere. Static binaries: plugins run in any
# mount namespace.
# go's download chatter is shown only when the install fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
(cd / && GOBIN=$dest CGO_ENABLED=0 GOFLAGS= GOWORK=off "$GO" install "${pkgs[@]}") >"$log" 2>&1 ||
  { cat "$log" >&2; die "go install $MODULE@$VERSION failed"; }
printf '%s\n' "$VERSION" >"$stamp"
say "built: $MODULE@$VERSION (${PLUGINS[*]##*/}) in $dest"
