#!/usr/bin/env bash
# The package test (`make packages-test`, part of `make test`): on this Debian host, as root,
#   - installs DIR's berth .deb with dpkg -i (a berth package left by an aborted run is purged first);
#   - checks every file and directory is in place with its type, mode and owner, that postinstall made
#     /etc/ecs/ecs.config from the template (0600, owned by no package), that the binary is static and
#     `berth version` reports VERSION, that the CNI plugins
#     answer VERSION, that the pause tarball is a docker save archive, and the unit with systemd-analyze
#     verify and its key settings;
#   - installs the .deb again over itself (an upgrade): an edited ecs.config is kept;
#   - dpkg -r: every file is gone but ecs.config; dpkg -P: ecs.config is still there, edited (it is the
#     operator's); no enablement symlink left;
#   - installs the .deb once more over that unowned ecs.config, as EC2 user data leaves one before the
#     install: no conffile prompt (stdin is /dev/null), the file untouched; then purges again;
#   - checks DIR's .rpm with rpm: the same paths, modes and owners, version, scripts.
# Leaves no berth package and no ecs.config of its own installed, whatever the outcome. Prints one line
# per step and "ok" at the end.
#
#   usage: scripts/packages-test.sh DIR VERSION
set -euo pipefail
# Checks grep captured output, never `cmd | grep -q`: grep -q exits at its first match, the writer
# (tar -t writes name by name) may then die of SIGPIPE, and pipefail fails the check at random.

say() { printf 'packages-test: %s\n' "$*"; }
die() { printf 'packages-test: FAIL: %s\n' "$*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: $0 DIR VERSION"
dir=$1 version=$2
[ "$(id -u)" -eq 0 ] || die "must run as root (it installs the .deb on this host)"
for tool in dpkg dpkg-query systemd-analyze rpm ldd tar; do
  command -v "$tool" >/dev/null || die "$tool not found (scripts/provision.sh installs rpm)"
done
shopt -s nullglob
debs=("$dir"/berth_*.deb) rpms=("$dir"/berth-*.rpm)
[ ${#debs[@]} -eq 1 ] || die "want one berth_*.deb in $dir, found ${#debs[@]} (make packages)"
[ ${#rpms[@]} -eq 1 ] || die "want one berth-*.rpm in $dir, found ${#rpms[@]} (make packages)"
deb=${debs[0]} rpm=${rpms[0]}
start=$SECONDS

# What the packages hold besides parent directories such as /usr/bin: path, type, mode (owner root:root).
expected=(
  "/usr/bin/berth f 755"
  "/usr/lib/systemd/system/berth.service f 644"
  "/usr/lib/berth d 755"
  "/usr/lib/berth/cni d 755"
  "/usr/lib/berth/cni/bridge f 755"
  "/usr/lib/berth/cni/host-device f 755"
  "/usr/lib/berth/cni/host-local f 755"
  "/usr/lib/berth/cni/loopback f 755"
  "/usr/lib/berth/cni/static f 755"
  "/usr/lib/berth/pause.tar f 644"
  "/etc/ecs d 755"
  "/usr/share/berth/ecs.config f 644"
  "/usr/share/doc/berth/examples/ecs.config f 644"
  "/usr/share/doc/berth/examples/ecs.config.json f 644"
  "/var/lib/ecs d 755"
  "/var/lib/ecs/data d 700"
  "/var/log/ecs d 750"
)
conffile=/etc/ecs/ecs.config # made by postinstall, owned by no package
template=/usr/share/berth/ecs.config
unit=/usr/lib/systemd/system/berth.service
wants_link=/etc/systemd/system/multi-user.target.wants/berth.service

status() { dpkg-query -W -f='${db:Status-Abbrev}' berth 2>/dev/null | tr -d ' ' || true; }
purge() { [ -z "$(status)" ] || dpkg -P berth >"$log" 2>&1 || { cat "$log" >&2; die "dpkg -P berth failed"; }; }

log=$(mktemp)
stub=""
made_conffile=false
# drop_conffile removes the ecs.config the test made, and /etc/ecs unless it was there before.
drop_conffile() {
  rm -f "$conffile"
  made_conffile=false
  [[ " ${preexisting[*]:-} " == *" /etc/ecs "* ]] || rmdir /etc/ecs 2>/dev/null || true
}
cleanup() {
  local rc=$?
  if [ $rc -ne 0 ] && [ -n "$(status)" ]; then
    dpkg -P berth >/dev/null 2>&1 || true
  fi
  if [ "$made_conffile" = true ]; then
    drop_conffile
  fi
  rm -rf "$log" "$stub"
  exit $rc
}
trap cleanup EXIT

# A berth package (installed or only its config files) left by an aborted run: purged first.
if [ -n "$(status)" ]; then
  say "purging berth ($(status)) left from an earlier run"
  purge
fi
# Files the package would take over must not be there unowned: dpkg would overwrite them silently. Nor
# may ecs.config, which the test checks postinstall creates. Directories may exist (another agent's
# /etc/ecs); those are not checked for removal below.
[ ! -e "$conffile" ] || die "$conffile exists; move it away first (the test checks the package creates it)"
preexisting=()
for e in "${expected[@]}"; do
  read -r path type _ <<<"$e"
  if [ -e "$path" ] || [ -L "$path" ]; then
    [ "$type" = d ] || die "$path exists and no package owns it; remove it first"
    preexisting+=("$path")
  fi
done
[ ! -L "$wants_link" ] || die "$wants_link exists; remove it first"

# check_installed: every expected path with its type, mode and owner.
check_installed() {
  local e path type mode got
  for e in "${expected[@]}"; do
    read -r path type mode <<<"$e"
    [ "$type" = f ] && want="regular file" || want=directory
    got=$(stat -c '%F %a %U:%G' "$path" 2>/dev/null) || die "$path missing after dpkg -i"
    [ "$got" = "$want $mode root:root" ] || die "$path: got '$got', want '$want $mode root:root'"
  done
}

# check_gone KEEP...: every expected path is gone except KEEP and directories that were there before.
check_gone() {
  local e path type keep
  for e in "${expected[@]}"; do
    read -r path type _ <<<"$e"
    for keep in "$@" "${preexisting[@]}"; do [ "$path" != "$keep" ] || continue 2; done
    [ ! -e "$path" ] || die "$path still there"
  done
  [ ! -L "$wants_link" ] || die "$wants_link still there"
}

# --- install ---------------------------------------------------------------------------------------
dpkg -i "$deb" </dev/null >"$log" 2>&1 || { cat "$log" >&2; die "dpkg -i $deb failed"; }
[ "$(status)" = ii ] || die "berth status after dpkg -i: $(status), want ii"
say "installed $(basename "$deb")"
made_conffile=true
check_installed
got=$(stat -c '%F %a %U:%G' "$conffile" 2>/dev/null) || die "postinstall did not create $conffile"
[ "$got" = "regular file 600 root:root" ] || die "$conffile: got '$got', want 'regular file 600 root:root'"
cmp -s "$conffile" "$template" || die "$conffile is not a copy of $template"
! dpkg-query -S "$conffile" >/dev/null 2>&1 || die "$conffile is owned by a package; it must be the operator's"
[ ! -L "$wants_link" ] || die "the package enabled berth.service on install; it must not"
say "${#expected[@]} paths in place with their modes, owned by root; $conffile made from $template, owned by no package; service not enabled"

# The binary: static (make build's CGO_ENABLED=0) and reporting the package's version.
out=$(ldd /usr/bin/berth 2>&1 || true)
[[ $out == *"not a dynamic executable"* ]] || die "/usr/bin/berth is not static: $out"
out=$(/usr/bin/berth version) || die "/usr/bin/berth version failed: $out"
[[ $out == "berth $version "* ]] || die "/usr/bin/berth version says '$out', want berth $version"
say "/usr/bin/berth version: $out"
# The shipped ecs.config parses, and the defaults point at what the package installed (a clean
# environment: no ECS_* variable of this shell's may change the answer).
cfg=$(env -i PATH="$PATH" /usr/bin/berth config) || die "berth config with $conffile failed: $cfg"
grep -q '"envFile": "/etc/ecs/ecs.config"' <<<"$cfg" || die "berth config did not read $conffile"
for want in /usr/lib/berth/cni /usr/lib/berth/pause.tar /var/lib/ecs/data; do
  grep -q "\"value\": \"$want\"" <<<"$cfg" || die "berth config: no key defaults to $want"
done
for p in bridge host-device host-local loopback static; do
  grep -q '"cniVersion"' <<<"$(CNI_COMMAND=VERSION "/usr/lib/berth/cni/$p" </dev/null 2>&1)" ||
    die "/usr/lib/berth/cni/$p does not answer CNI VERSION"
done
listing=$(tar -tf /usr/lib/berth/pause.tar) || die "tar cannot list /usr/lib/berth/pause.tar"
grep -qx manifest.json <<<"$listing" || die "/usr/lib/berth/pause.tar is not a docker save archive (no manifest.json): $listing"
say "berth config reads $conffile; the CNI plugins answer VERSION; pause.tar is a docker save archive"

# The unit. systemd-analyze verify prints nothing and exits 0 for a clean unit; it exits 0 on some
# problems (an unknown key), so any output fails too. It resolves the unit's dependencies: when no
# docker.service is installed (a host without the Docker Engine package), a stub docker.service on
# SYSTEMD_UNIT_PATH (the trailing ':' keeps the default paths) stands in for it, so that verify judges
# berth.service itself and not the host; the line below says when it did. provision.sh installs docker.io,
# whose docker.service is then used.
docker_unit=""
for p in $(systemd-analyze unit-paths 2>/dev/null); do
  [ -e "$p/docker.service" ] && { docker_unit=$p/docker.service; break; }
done
if [ -n "$docker_unit" ]; then
  out=$(systemd-analyze verify "$unit" 2>&1) || die "systemd-analyze verify $unit: $out"
  how="with $docker_unit"
else
  stub=$(mktemp -d)
  printf '[Unit]\nDescription=stand-in for the Docker Engine (packages-test)\n[Service]\nExecStart=/bin/true\n' >"$stub/docker.service"
  out=$(SYSTEMD_UNIT_PATH="$stub:" systemd-analyze verify "$unit" 2>&1) || die "systemd-analyze verify $unit: $out"
  how="with a stub docker.service: none is installed"
fi
[ -z "$out" ] || die "systemd-analyze verify $unit: $out"
for line in 'EnvironmentFile=-/etc/ecs/ecs.config' 'ExecStart=/usr/bin/berth agent' 'Restart=always' \
  'Wants=docker.service network-online.target' 'After=docker.service network-online.target' \
  'TimeoutStopSec=30s' 'WantedBy=multi-user.target'; do
  grep -qxF "$line" "$unit" || die "$unit lacks '$line'"
done
! grep -q '^Requires=' "$unit" || die "$unit has Requires=; Berth survives Docker restarts, want Wants="
say "systemd-analyze verify $unit: clean ($how); Restart=always, Wants=/After=docker.service, TimeoutStopSec=30s"

# --- upgrade (the same package over itself): an edited ecs.config is kept --------------------------
echo 'ECS_LOGLEVEL=debug # packages-test' >>"$conffile"
systemctl --no-reload enable berth.service >/dev/null 2>&1 || die "systemctl enable berth.service failed"
[ -L "$wants_link" ] || die "systemctl enable made no $wants_link"
dpkg -i "$deb" </dev/null >"$log" 2>&1 || { cat "$log" >&2; die "dpkg -i $deb over itself failed"; }
grep -q '^ECS_LOGLEVEL=debug # packages-test$' "$conffile" || die "reinstalling lost the edit to $conffile"
check_installed
say "reinstalled over itself: the edit to $conffile is kept"

# --- remove, then purge ----------------------------------------------------------------------------
dpkg -r berth >"$log" 2>&1 || { cat "$log" >&2; die "dpkg -r berth failed"; }
[ "$(status)" = rc ] || die "berth status after dpkg -r: $(status), want rc (config files left)"
check_gone /etc/ecs
grep -q '^ECS_LOGLEVEL=debug # packages-test$' "$conffile" || die "dpkg -r did not keep $conffile"
say "dpkg -r: every file gone but $conffile (kept, with the edit); the enablement symlink is gone"
dpkg -P berth >"$log" 2>&1 || { cat "$log" >&2; die "dpkg -P berth failed"; }
[ -z "$(status)" ] || die "berth status after dpkg -P: $(status), want none"
check_gone /etc/ecs
grep -q '^ECS_LOGLEVEL=debug # packages-test$' "$conffile" || die "dpkg -P removed or changed $conffile"
say "dpkg -P: no berth package known to dpkg; $conffile left as the operator's, with the edit"

# --- install over an ecs.config written before it (EC2 user data) ----------------------------------
# The leftover file is one no package owns, as `echo ECS_CLUSTER=prod >> /etc/ecs/ecs.config` in user
# data leaves it: the install must neither prompt (stdin is /dev/null: a prompt fails dpkg) nor touch it.
chmod 0640 "$conffile"
before=$(stat -c '%a %s %Y' "$conffile") && saved=$(cat "$conffile")
dpkg -i "$deb" </dev/null >"$log" 2>&1 || { cat "$log" >&2; die "dpkg -i over an existing $conffile failed"; }
[ "$(stat -c '%a %s %Y' "$conffile")" = "$before" ] && [ "$(cat "$conffile")" = "$saved" ] ||
  die "dpkg -i changed the existing $conffile"
purge
check_gone /etc/ecs
drop_conffile
[ ! -e /etc/ecs ] || [[ " ${preexisting[*]} " == *" /etc/ecs "* ]] || die "/etc/ecs left behind"
say "dpkg -i over an existing $conffile: no prompt, the file untouched; purged again"

# --- the .rpm ----------------------------------------------------------------------------------------
# rpm -qp reads the package file only (no rpm database is involved). FILEFLAGS:fflags shows c for
# %config and n for noreplace.
rpm_version=$(rpm -qp --qf '%{VERSION}' "$rpm" 2>/dev/null) || die "rpm -qp $rpm failed"
[ "$rpm_version" = "${version//-/\~}" ] || die "$rpm has version $rpm_version, want ${version//-/\~}"
listing=$(rpm -qp --qf '[%{FILENAMES} %{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILEFLAGS:fflags}\n]' "$rpm" 2>/dev/null)
for e in "${expected[@]}"; do
  read -r path type mode <<<"$e"
  row=$(awk -v p="$path" '$1 == p' <<<"$listing")
  [ -n "$row" ] || die "$rpm lacks $path"
  read -r _ perms owner flags <<<"$row"
  [ "$owner" = root:root ] || die "$rpm: $path owned by $owner"
  [ "${perms:0:1}" = "$([ "$type" = d ] && echo d || echo -)" ] || die "$rpm: $path has type ${perms:0:1}"
  want_perms=$(printf '%s' "$mode" | sed 's/7/rwx/g; s/6/rw-/g; s/5/r-x/g; s/4/r--/g; s/0/---/g')
  [ "${perms:1}" = "$want_perms" ] || die "$rpm: $path has mode $perms, want $want_perms"
done
! awk -v p="$conffile" '$1 == p { found = 1 } END { exit !found }' <<<"$listing" ||
  die "$rpm: lists $conffile; it must be the operator's, made by postinstall"
scripts=$(rpm -qp --scripts "$rpm" 2>/dev/null)
for s in postinstall preuninstall postuninstall; do
  grep -q "^$s scriptlet" <<<"$scripts" || die "$rpm has no $s scriptlet"
done
grep -qF "$template $conffile" <<<"$scripts" || die "$rpm: the postinstall scriptlet does not create $conffile from $template"
say "$(basename "$rpm"): version $rpm_version; rpm -qlp lists all ${#expected[@]} paths with their modes, root-owned, not $conffile; post/preun/postun scriptlets, postinstall creating $conffile"

say "ok ($((SECONDS - start)) s)"
