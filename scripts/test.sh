#!/usr/bin/env bash
# make test: every phase of Berth's test run, in parallel where one does not need another, with how
# long each took printed as it ends and in a table at the end. Exit 1 when any phase failed.
#
#   provision ─┐                               ┌─ images, exec-deps ─┐
#   modules ───┼─ ec2-metadata-mock, CNI plugins ┤                     ├─ lane A: agent/cmd/berth, agent/hostnat ───────────────┐
#   npm ───────┘  lane A's test binaries (-race) ┘                     ├─ the other test binaries ─── lane B ──────────────────┼─ exclusive
#                                                                      └─ vet ─── lint (gofmt, staticcheck), packages-test, ───┘
#                                                                                 damage sweeps
#
# Lane A holds the tests that run the agent on its fixed ports and own the task endpoint's NAT;
# it is the longest, so it starts as soon as its own test binaries are built. Lane B holds every
# other package; each lane runs its packages one at a time. The tests that restart the Docker
# Engine (TestIntegrationDockerRestart, the one-minute soak) would pull it from under the others,
# so they run alone at the end. Vet, lint, the package test and the state files' damage sweeps
# (without -race) use the CPU the lanes leave while they wait on the Engine; staticcheck and nfpm are
# built (once, into .run/tools) by the lint and package phases themselves. Those builds without the
# race detector share one configuration (the Makefile's PLAIN), so each package is compiled once for
# all of them; vet compiles them, and the phases that need them start once it is done, not beside it,
# where each would compile the same packages again at the same moment.
#
# The test binaries are built once, with go test -c, into .run/test-bin, and the lanes run them
# there: go test would link each of them again (it caches compiled packages, not test binaries).
#
# Setup phases log to .run/test-logs/<phase>.log (its tail is printed when one fails); the test
# lanes print their lines as they come, prefixed with the lane.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
MAKE=${MAKE:-make}
GO=${GO:-go}
run_dir=${BERTH_RUN_DIR:-$PWD/.run}
logs=$run_dir/test-logs
rm -rf "$logs" && mkdir -p "$logs"

declare -A pid started took status
order=()
failed=0
t0=$(date +%s%N)

elapsed() { printf '%d.%d' $((($2 - $1) / 1000000000)) $(((($2 - $1) / 100000000) % 10)); }

# start NAME CMD...: runs CMD in the background, its output in NAME's log.
start() {
	local name=$1
	shift
	order+=("$name")
	started[$name]=$(date +%s%N)
	( ("$@") >"$logs/$name.log" 2>&1; rc=$?; date +%s%N >"$logs/$name.end"; times >"$logs/$name.times"; exit "$rc" ) &
	pid[$name]=$!
	printf 'test: %-14s started at %ss\n' "$name" "$(elapsed "$t0" "${started[$name]}")"
}

# stream NAME CMD...: start, with CMD's lines also printed as they come, prefixed with NAME.
stream() {
	local name=$1
	shift
	order+=("$name")
	started[$name]=$(date +%s%N)
	( ("$@") 2>&1 | tee "$logs/$name.log" | sed -u "s/^/[$name] /"; rc=${PIPESTATUS[0]}; date +%s%N >"$logs/$name.end"; times >"$logs/$name.times"; exit "$rc" ) &
	pid[$name]=$!
	printf 'test: %-14s started at %ss\n' "$name" "$(elapsed "$t0" "${started[$name]}")"
}

# finish NAME...: waits for each phase; prints how long it ran (to its own end, which it records,
# not to the wait), and its log's tail when it failed.
finish() {
	local name rc
	for name in "$@"; do
		[ -n "${status[$name]:-}" ] && continue
		wait "${pid[$name]}"
		rc=$?
		took[$name]=$(elapsed "${started[$name]}" "$(cat "$logs/$name.end" 2>/dev/null || date +%s%N)")
		if [ "$rc" -eq 0 ]; then
			status[$name]=ok
		else
			status[$name]="FAILED (exit $rc)"
			failed=1
			printf 'test: %s failed; the end of %s:\n' "$name" "$logs/$name.log"
			tail -n 60 "$logs/$name.log" | sed "s/^/[$name] /"
		fi
		printf 'test: %-14s %s in %ss\n' "$name" "${status[$name]}" "${took[$name]}"
	done
}

# A phase that cannot start because one before it failed.
skip() {
	order+=("$1")
	status[$1]="not run"
	took[$1]=-
}

# cpu NAME: the CPU seconds (user + system) NAME's processes used, from the times it recorded; "-"
# for a phase that did not run.
cpu() {
	[ -f "$logs/$1.times" ] || { echo -; return; }
	sed -n 2p "$logs/$1.times" | awk '{
		t = 0
		for (i = 1; i <= 2; i++) { split($i, p, "m"); t += p[1] * 60 + p[2] }
		printf "%.1f", t
	}'
}

# busy: the jiffies the machine's CPUs spent not idle (nor waiting on I/O), and in all, from /proc/stat.
busy() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat; }
read -r busy0 all0 < <(busy)

summary() {
	printf '\ntest: phase          time (s)   cpu (s)  result\n'
	local name
	for name in "${order[@]}"; do
		printf 'test: %-14s %8s  %8s  %s\n' "$name" "${took[$name]}" "$(cpu "$name")" "${status[$name]}"
	done
	printf 'test: total          %8s            %s\n' "$(elapsed "$t0" "$(date +%s%N)")" "$([ "$failed" -eq 0 ] && echo ok || echo FAILED)"
	local busy1 all1
	read -r busy1 all1 < <(busy)
	awk -v b=$((busy1 - busy0)) -v a=$((all1 - all0)) -v hz="$(getconf CLK_TCK)" -v n="$(nproc)" 'BEGIN {
		printf "test: the machine'"'"'s %d CPUs were busy %.0f%% of the run: %.0f CPU seconds, the Docker Engine'"'"'s and the tests'"'"' containers'"'"' included\n", n, a ? 100 * b / a : 0, b / hz
	}'
}

# run_tests FLAGS -- PKG...: runs each package's test binary from $bins, in the package's directory
# with FLAGS, one package at a time, as go test -p 1 would: its output once it ends (all of it when it
# failed), then go test's "ok" or "FAIL" line with how long it took. Fails when any package failed.
bins=$run_dir/test-bin
run_tests() {
	local flags=() rc=0 pkg dir bin begin code out
	while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
	[ $# -gt 0 ] || { echo "run_tests: no -- before the packages" >&2; return 2; }
	shift
	out=$(mktemp)
	while read -r pkg dir; do
		bin=$bins/${pkg##*/}.test
		if [ ! -x "$bin" ]; then
			printf '?   \t%s\t[no test files]\n' "$pkg"
			continue
		fi
		begin=$(date +%s%N)
		(cd "$dir" && "$bin" -test.paniconexit0 "${flags[@]}") >"$out" 2>&1
		code=$?
		if [ "$code" -eq 0 ]; then
			grep -v -x PASS "$out"
			printf 'ok  \t%s\t%ss\n' "$pkg" "$(elapsed "$begin" "$(date +%s%N)")"
		else
			cat "$out"
			printf 'FAIL\t%s\t%ss\n' "$pkg" "$(elapsed "$begin" "$(date +%s%N)")"
			rc=1
		fi
	done < <("$GO" list -f '{{.ImportPath}} {{.Dir}}' "$@")
	rm -f "$out"
	return "$rc"
}

export AWS_EC2_METADATA_DISABLED=true
# The agents the tests start publish where they are here, not in the host's /run/berth/agent.json.
export BERTH_RUN_FILE=$run_dir/test-agent/agent.json

start provision "$MAKE" --no-print-directory provision
start modules "$GO" mod download
start npm "$MAKE" --no-print-directory jsclients
finish modules
lane_a=(./agent/cmd/berth ./agent/hostnat)
if [ "${status[modules]}" = ok ]; then
	# Lane A is the longest: its test binaries first, the rest while it runs. staticcheck and nfpm
	# are built by lint and packages-test themselves, beside the lanes.
	start test-tools "$MAKE" --no-print-directory ec2-metadata-mock cni-plugins
	rm -rf "$bins" && mkdir -p "$bins"
	start binaries-a "$GO" test -race -tags integration -c -o "$bins/" "${lane_a[@]}"
else
	skip test-tools
	skip binaries-a
fi
finish provision
if [ "${status[provision]}" = ok ] && [ "${status[modules]}" = ok ]; then
	start images "$MAKE" --no-print-directory images exec-deps
else
	skip images
fi
finish npm test-tools binaries-a images

if [ "$failed" -ne 0 ]; then
	summary
	exit 1
fi

mapfile -t lane_b < <("$GO" list ./... | grep -v -x -e github.com/berth-agent/berth/agent/cmd/berth -e github.com/berth-agent/berth/agent/hostnat)
exclusive='^(TestIntegrationDockerRestart|TestIntegrationSoakShort)$'
# What the integration tests run: the CNI plugins, the pause image and ECS Exec's files built above.
export BERTH_CNI_PLUGINS="$run_dir/cni-plugins" BERTH_PAUSE_TARBALL="$run_dir/images/pause.tar" BERTH_EXEC_DEPS="$run_dir/exec-deps"

stream lane-a run_tests -test.count=1 -test.timeout=20m -test.skip="$exclusive" -- "${lane_a[@]}"
start binaries-b "$GO" test -race -tags integration -c -o "$bins/" "${lane_b[@]}"
start vet "$MAKE" --no-print-directory vet
finish binaries-b
if [ "${status[binaries-b]}" = ok ]; then
	stream lane-b run_tests -test.count=1 -test.timeout=20m -test.skip="$exclusive" -- "${lane_b[@]}"
else
	skip lane-b
fi
finish vet
start lint "$MAKE" --no-print-directory fmt staticcheck
start packages-test "$MAKE" --no-print-directory packages-test
start damage-sweeps "$MAKE" --no-print-directory damage-sweeps
finish lint packages-test damage-sweeps lane-b lane-a
stream exclusive run_tests -test.count=1 -test.timeout=10m -test.run="$exclusive" -- ./agent/cmd/berth ./scripts/soak
finish exclusive

summary
exit "$failed"
