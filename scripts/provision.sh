#!/usr/bin/env bash
# Provision what Berth's tests and `make run` need on a Debian host, idempotently:
#   - packages: docker.io, docker-registry, iproute2, awscli, curl, and rpm for the package
#     test's rpm -qlp (installed only when missing)
#   - a Docker Engine answering on DOCKER_HOST (started when none answers)
#   - a local registry on 127.0.0.1:5000 (started when none answers)
# Safe to run again: it only acts on what is missing. Logs go to $BERTH_RUN_DIR (default .run/).
set -euo pipefail

run_dir=${BERTH_RUN_DIR:-"$(cd "$(dirname "$0")/.." && pwd)/.run"}
mkdir -p "$run_dir"
registry_addr=127.0.0.1:5000

say() { printf 'provision: %s\n' "$*"; }
die() { printf 'provision: %s\n' "$*" >&2; exit 1; }

missing=()
for pkg in docker.io docker-registry iproute2 iptables awscli curl rpm; do
  grep -q 'install ok installed' <<<"$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  [ "$(id -u)" -eq 0 ] || die "missing packages ${missing[*]}; run as root to install them"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # The packages' own services are not wanted: this script starts the daemons itself.
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$run_dir/apt.log" 2>&1 ||
    { tail -n 20 "$run_dir/apt.log" >&2; die "apt-get install ${missing[*]} failed"; }
fi

docker_answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if ! docker_answers; then
  [ "$(id -u)" -eq 0 ] || die "no Docker Engine answers on ${DOCKER_HOST:-unix:///var/run/docker.sock}; run as root to start one"
  if [ -d /run/systemd/system ] && systemctl start docker 2>/dev/null; then
    say "started docker.service"
  else
    say "starting dockerd (log: $run_dir/dockerd.log)"
    nohup dockerd >"$run_dir/dockerd.log" 2>&1 &
  fi
  for _ in $(seq 1 60); do docker_answers && break; sleep 1; done
  docker_answers || { tail -n 20 "$run_dir/dockerd.log" >&2 || true; die "dockerd did not answer within 60 s"; }
fi
say "docker $(docker version --format '{{.Server.Version}}') answers"

registry_answers() { curl -fsS -o /dev/null --max-time 5 "http://$registry_addr/v2/" 2>/dev/null; }

if ! registry_answers; then
  cat >"$run_dir/registry.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $run_dir/registry
  delete:
    enabled: true
http:
  addr: $registry_addr
YAML
  say "starting docker-registry on $registry_addr (log: $run_dir/registry.log)"
  nohup docker-registry serve "$run_dir/registry.yml" >"$run_dir/registry.log" 2>&1 &
  for _ in $(seq 1 30); do registry_answers && break; sleep 1; done
  registry_answers || { tail -n 20 "$run_dir/registry.log" >&2 || true; die "registry did not answer on $registry_addr within 30 s"; }
fi
say "registry answers on $registry_addr"
