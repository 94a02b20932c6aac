#!/usr/bin/env bash
# bench/exec-explain.sh: where toh-exec's time goes, beyond bench/exec.sh's ratios.
# Interleaved A/B timings (bench/cmd/abrun) of build variants and of the floors any Go
# front end pays (bench/cmd/execshim: a Go runtime start plus one execve, or a minimal
# Go parent that spawns like toh-exec), then perf stat counters and strace syscall
# counts when those tools are installed.
#
#   bench/exec-explain.sh
#   EXPERIMENT=1 bench/exec-explain.sh   # also time bench/experiments/landlock-launch.patch
#
# Environment: ROUNDS (300 interleaved rounds), PERF_RUNS (200), EXPERIMENT, KEEP,
# LLR_VERSION, OUT (bench/results: the report is also written to
# OUT/exec-explain-latest.md; OUT=- prints only). Paths must not contain white space (abrun splits commands on it).
set -euo pipefail

ROUNDS=${ROUNDS:-300}
PERF_RUNS=${PERF_RUNS:-200}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT=${OUT:-$repo/bench/results}
bench_setup
if [[ $OUT != - ]]; then
	mkdir -p "$OUT"
	exec > >(tee "$OUT/exec-explain-latest.md")
fi
note "building toh-exec (default build and CGO_ENABLED=0) and the helpers into $bin"
build_toh "$bin/toh-dyn"
build_toh "$bin/toh-static" CGO_ENABLED=0
(cd "$repo" && CGO_ENABLED=0 go build -o "$bin/execshim" ./bench/cmd/execshim)
build_bench abrun execargv
install_llr

xdyn="" xstatic=""
if [[ ${EXPERIMENT:-0} == 1 ]]; then
	# The experiment patches a copy of the committed tree; the working tree is never
	# touched.
	src=$work/src
	mkdir -p "$src"
	git -C "$repo" archive HEAD | tar -x -C "$src"
	if (cd "$src" && git apply "$repo/bench/experiments/landlock-launch.patch"); then
		(cd "$src" && go build -o "$bin/toh-x-dyn" ./cmd/toh-exec && CGO_ENABLED=0 go build -o "$bin/toh-x-static" ./cmd/toh-exec)
		xdyn=$bin/toh-x-dyn xstatic=$bin/toh-x-static
	else
		note "bench/experiments/landlock-launch.patch no longer applies to HEAD; experiment skipped"
	fi
fi

for t in toh-dyn toh-static ${xdyn:+toh-x-dyn} ${xstatic:+toh-x-static}; do
	"$bin/$t" --probe-cache "$cache/$t.json" --refresh-probe -- true
	b=$(backend_of "$bin/$t" --probe-cache "$cache/$t.json")
	[[ $b == bwrap ]] || note "$t: the default chain chose '$b', not bwrap"
done
eval "$("$bin/execargv" -toh-exec "$bin/toh-static" -probe-cache "$cache/toh-static.json")"
BW=$BWRAP_CMD
launcher() { echo "$1 __landlock-run --mode read-only -- true"; }
T() { echo "$bin/$1 --probe-cache $cache/$1.json ${*:2}"; }
LLR=""
[[ -z $llr ]] || LLR="$llr -ro / -rwfiles /dev/null -- /usr/bin/true"

section() { printf '\n## %s\n\n' "$1"; }
ab() {
	echo '```'
	"$bin/abrun" -rounds "$ROUNDS" "$@" | sed "s|$work|…|g"
	echo '```'
}

echo "# toh-exec: where the time goes ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo
echo "toh $(git -C "$repo" rev-parse --short HEAD), $(go version | cut -d' ' -f3); default build $(linkage "$bin/toh-dyn"); $(nproc) CPU, kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"

section "Process start: C, an empty Go program, toh-exec --help (dynamic and static)"
ab /usr/bin/true "$bin/execshim" "$bin/toh-dyn --help" "$bin/toh-static --help"

section "bwrap path (read-only): raw bwrap, the Go floor, toh-exec builds"
ab "$BW" "$bin/execshim $BW" "$bin/execshim -parent $BW" "$(T toh-dyn -- true)" "$(T toh-static -- true)" \
	"$(T toh-static --runner bwrap -- true)" "GOMAXPROCS=1 $(T toh-static -- true)"

section "Landlock path (read-only): landlock-restrict, the launcher stage, toh-exec builds"
cmds=()
[[ -z $LLR ]] || cmds+=("$LLR")
cmds+=("$(launcher "$bin/toh-dyn")" "$(launcher "$bin/toh-static")" "$bin/execshim $(launcher "$bin/toh-static")"
	"$bin/execshim -parent $(launcher "$bin/toh-static")" "$bin/execshim -parent /usr/bin/true"
	"$(T toh-dyn --runner landlock -- true)" "$(T toh-static --runner landlock -- true)")
if [[ -n $xstatic ]]; then
	cmds+=("TOH_X_LANDLOCK=exec $(T toh-x-static --runner landlock -- true)"
		"TOH_X_LANDLOCK=inproc $(T toh-x-dyn --runner landlock -- true)"
		"TOH_X_LANDLOCK=inproc $(T toh-x-static --runner landlock -- true)")
fi
ab "${cmds[@]}"

if command -v perf >/dev/null && perf stat -e task-clock true 2>/dev/null; then
	section "perf stat -r $PERF_RUNS (per run: CPU time of the whole process tree, context switches, page faults)"
	echo '```'
	printf '%9s %7s %7s  %s\n' task-ms ctxsw faults command
	pcmds=(/usr/bin/true "$bin/execshim" "$BW" "$(T toh-dyn -- true)" "$(T toh-static -- true)")
	[[ -z $LLR ]] || pcmds+=("$LLR")
	pcmds+=("$(launcher "$bin/toh-static")" "$(T toh-dyn --runner landlock -- true)" "$(T toh-static --runner landlock -- true)")
	for c in "${pcmds[@]}"; do
		# shellcheck disable=SC2086 # the command is split on purpose
		perf stat -x, -r "$PERF_RUNS" -e task-clock,context-switches,page-faults $c 2>"$work/perf.csv" >/dev/null
		awk -F, -v c="${c//$work/…}" '
			$3=="task-clock" {t=$1} $3=="context-switches" {x=$1} $3=="page-faults" {f=$1}
			END {printf "%9.2f %7d %7d  %s\n", t, x, f, c}' "$work/perf.csv"
	done
	echo '```'
fi

if command -v strace >/dev/null; then
	section "strace -f -c: syscalls of one run (process tree), the noisiest kinds"
	echo '```'
	for c in "$BW" "$(T toh-dyn -- true)" "$(T toh-static --runner landlock -- true)"; do
		# shellcheck disable=SC2086
		strace -f -c -o "$work/strace.txt" $c >/dev/null 2>&1
		printf '%s\n' "${c//$work/…}"
		awk '$NF ~ /^(clone|clone3|execve|futex|nanosleep|rt_sigaction|mmap|epoll_pwait|wait4|waitid|total)$/ {
			printf "  %-14s %6s calls\n", $NF, $4 }' "$work/strace.txt"
	done
	echo '```'
fi
