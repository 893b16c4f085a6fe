#!/usr/bin/env bash
# Build the images Berth's tests and examples run, idempotently, from any cwd:
#   - berth/testapp:latest (misc/testapp), also tagged and pushed as
#     $BERTH_REGISTRY/berth/testapp:latest (default 127.0.0.1:5000)
#   - berth/fluentstandin:latest (misc/fluentstandin), a FireLens router stand-in, also
#     tagged and pushed as $BERTH_REGISTRY/berth/fluentstandin:latest
#   - berth/pause:latest (misc/pause), also saved as $BERTH_RUN_DIR/images/pause.tar
#     (default .run/), which the agent loads at start when the image is missing
# All are FROM scratch around one static binary (CGO_ENABLED=0), so nothing is pulled.
# Each image carries a label berth.hash=<sha256 of its binary and Dockerfile>; when a
# fresh build of the binary hashes the same, the image is left alone. Prints one line
# per image: built or unchanged.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
run_dir=${BERTH_RUN_DIR:-"$root/.run"}
registry_addr=${BERTH_REGISTRY:-127.0.0.1:5000}
GO=${GO:-go}
images_dir=$run_dir/images

say() { printf 'build-images: %s\n' "$*"; }
die() { printf 'build-images: %s\n' "$*" >&2; exit 1; }

command -v docker >/dev/null || die "docker not found; run scripts/provision.sh"
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
  die "no Docker Engine answers on ${DOCKER_HOST:-unix:///var/run/docker.sock}; run scripts/provision.sh"
mkdir -p "$images_dir"
# One build at a time when several test runs start together.
if command -v flock >/dev/null; then
  exec 9>"$images_dir/.lock"
  flock 9
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

label_of() { docker image inspect -f '{{index .Config.Labels "berth.hash"}}' "$1" 2>/dev/null || true; }
id_of() { docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }
size_of() { docker image inspect -f '{{.Size}}' "$1" | awk '{ printf "%.1f MB", $1 / 1e6 }'; }

# build_image NAME: builds ./misc/NAME into berth/NAME:latest unless the image's
# berth.hash label matches the fresh build. Sets state (built|unchanged) and hash.
build_image() {
  local name=$1 ctx=$work/$1 image=berth/$1:latest old_id
  mkdir -p "$ctx"
  # -buildvcs=false: no VCS stamp, so the binary (and its hash) changes only with the code (and the
  # checkout's path, which a build without -trimpath records; -trimpath would compile the standard
  # library again, apart from every other build's).
  CGO_ENABLED=0 GOOS=linux "$GO" build -buildvcs=false -ldflags '-s -w' \
    -o "$ctx/$name" "./misc/$name" || die "go build ./misc/$name failed"
  cp "misc/$name/Dockerfile" "$ctx/Dockerfile"
  hash=$(cd "$ctx" && sha256sum "$name" Dockerfile | sha256sum | cut -d' ' -f1)
  if [ "$(label_of "$image")" = "$hash" ]; then
    state=unchanged
    return
  fi
  old_id=$(id_of "$image")
  DOCKER_BUILDKIT=0 docker build --label "berth.hash=$hash" -t "$image" "$ctx" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log" >&2; die "docker build $image failed"; }
  state=built
  # Drop the image this build replaced once nothing names it (a container may still use it).
  if [ -n "$old_id" ] && [ "$old_id" != "$(id_of "$image")" ]; then
    stale+=("$old_id")
  fi
}

# registry_has IMAGE REPO: whether the registry's REPO:latest is the local IMAGE.
registry_has() {
  local digest
  command -v curl >/dev/null || return 1
  digest=$(curl -fsSI --max-time 5 \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "http://$registry_addr/v2/$2/manifests/latest" 2>/dev/null |
    tr -d '\r' | awk 'tolower($1) == "docker-content-digest:" { print $2 }') || return 1
  [ -n "$digest" ] &&
    grep -qxF "$registry_addr/$2@$digest" <<<"$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$1")"
}

stale=()

# push_image NAME: tags berth/NAME:latest for the local registry and pushes it unless the registry
# already holds it. Sets extra to what it did, for the line printed.
push_image() {
  local name=$1 remote=$registry_addr/berth/$1:latest
  docker tag "berth/$name:latest" "$remote"
  extra=""
  if ! registry_has "berth/$name:latest" "berth/$name"; then
    docker push "$remote" >"$work/push.log" 2>&1 ||
      { cat "$work/push.log" >&2; die "docker push $remote failed (is the registry up? run scripts/provision.sh)"; }
    extra="; pushed $remote"
  fi
}

# berth/testapp and berth/fluentstandin, mirrored to the local registry for the pull paths.
for name in testapp fluentstandin; do
  build_image "$name"
  push_image "$name"
  say "berth/$name:latest $state (berth.hash ${hash:0:12}, $(size_of "berth/$name:latest"))$extra"
done

# berth/pause, saved as a tarball the agent loads when the image is missing.
build_image pause
tarball=$images_dir/pause.tar
pause_id=$(id_of berth/pause:latest)
extra=""
if ! { [ -s "$tarball" ] && grep -q "${pause_id#sha256:}" <<<"$(tar -xOf "$tarball" manifest.json 2>/dev/null)"; }; then
  docker save -o "$work/pause.tar" berth/pause:latest || die "docker save berth/pause:latest failed"
  chmod 0644 "$work/pause.tar"
  mv -f "$work/pause.tar" "$tarball"
  extra="; saved ${tarball#"$root"/}"
fi
say "berth/pause:latest $state (berth.hash ${hash:0:12}, $(size_of berth/pause:latest))$extra"

for id in "${stale[@]}"; do
  if [ "$(docker image inspect -f '{{len .RepoTags}}' "$id" 2>/dev/null)" = 0 ]; then
    docker image rm "$id" >/dev/null 2>&1 || true
  fi
done
