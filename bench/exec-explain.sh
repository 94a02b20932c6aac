#!/usr/bin/env bash
# bench/exec-explain.sh: where toh-exec's time goes, beyond bench/exec.sh's ratios.
# Interleaved A/B timings (bench/cmd/abrun) of toh-exec and of the floors any Go
# front end pays (bench/cmd/execshim: a Go runtime start plus one execve, or a minimal
# Go parent that spawns like toh-exec), the same two floors in static C
# (bench/experiments/cshim.c, when cc is installed), then perf stat counters and
# strace syscall counts when those tools are installed.
#
#   bench/exec-explain.sh
#   EXPERIMENT=1 bench/exec-explain.sh   # also time the patches in bench/experiments/
#
# EXPERIMENT=1 applies bench/experiments/spawn-direct.patch (a proposed change to
# sandbox/run.go: spawn with syscall.ForkExec instead of os/exec) to a copy of HEAD,
# then early-signals.patch on top (measurement code, env-switched: toh-exec registers
# the forwarded signals at its start, concurrently with its own work, and never
# unregisters them); the working tree is never touched.
#
# Environment: ROUNDS (300 interleaved rounds), PERF_RUNS (200), EXPERIMENT, KEEP,
# LLR_VERSION, OUT (bench/results: the report is also written to
# OUT/exec-explain-latest.md; OUT=- prints only). Paths must not contain white space (abrun splits commands on it).
set -euo pipefail

ROUNDS=${ROUNDS:-300}
PERF_RUNS=${PERF_RUNS:-200}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# toh-exec hands each runner it execs a status pipe at descriptor 3 (sandbox/status.go),
# and the raw runner argv names it (--json-status-fd 3, --status-fd 3): every command
# started below inherits this one, so the raw rows run that same argv. bwrap then writes
# its records to /dev/null where toh-exec reads them from a pipe.
exec 3>/dev/null

OUT=${OUT:-$repo/bench/results}
bench_setup
if [[ $OUT != - ]]; then
	mkdir -p "$OUT"
	exec > >(tee "$OUT/exec-explain-latest.md")
fi
note "building toh-exec and the helpers into $bin"
build_toh "$bin/toh"
(cd "$repo" && CGO_ENABLED=0 go build -o "$bin/execshim" ./bench/cmd/execshim)
# The same two shapes in C, static (the cheapest start there is), when a compiler is here.
cshim=""
if command -v cc >/dev/null && cc -O2 -static -o "$bin/cshim" "$repo/bench/experiments/cshim.c" 2>"$work/cshim.log"; then
	cshim=$bin/cshim
else
	note "no C compiler (or no static libc): the C floors are skipped"
fi
build_bench abrun execargv
install_llr

xspawn="" xsig=""
if [[ ${EXPERIMENT:-0} == 1 ]]; then
	# The experiments patch a copy of the committed tree; the working tree is never
	# touched.
	src=$work/src
	mkdir -p "$src"
	git -C "$repo" archive HEAD | tar -x -C "$src"
	if (cd "$src" && git apply "$repo/bench/experiments/spawn-direct.patch"); then
		(cd "$src" && go build -o "$bin/toh-spawn" ./cmd/toh-exec)
		xspawn=toh-spawn
		if (cd "$src" && git apply "$repo/bench/experiments/early-signals.patch"); then
			(cd "$src" && go build -o "$bin/toh-sig" ./cmd/toh-exec)
			xsig=toh-sig
		else
			note "bench/experiments/early-signals.patch no longer applies; that experiment is skipped"
		fi
	else
		note "bench/experiments/spawn-direct.patch no longer applies to HEAD; experiments skipped"
	fi
fi

for t in toh $xspawn $xsig; do
	"$bin/$t" --probe-cache "$cache/$t.json" --refresh-probe -- true
	b=$(backend_of "$bin/$t" --probe-cache "$cache/$t.json")
	[[ $b == bwrap ]] || note "$t: the default chain chose '$b', not bwrap"
	"$bin/$t" --probe-cache "$cache/$t-ll.json" --bwrap "$work/no-such-bwrap" --refresh-probe -- true
done
eval "$("$bin/execargv" -toh-exec "$bin/toh" -probe-cache "$cache/toh.json")"
BW=$BWRAP_CMD
launcher() { echo "$1 __landlock-run --mode read-only -- true"; }
T() { echo "$bin/$1 --probe-cache $cache/$1.json ${*:2}"; }
# The chain with bwrap missing: Landlock, from the warm cache.
TL() { echo "$bin/$1 --probe-cache $cache/$1-ll.json --bwrap $work/no-such-bwrap ${*:2}"; }
X() { [[ -z $1 ]] || echo "$2 $(T "$1" "${@:3}")"; }
XL() { [[ -z $1 ]] || echo "$2 $(TL "$1" "${@:3}")"; }
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
echo "toh $(git -C "$repo" rev-parse --short HEAD), $(go version | cut -d' ' -f3); default build $(linkage "$bin/toh"); $(nproc) CPU, kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
[[ -z $xspawn ]] || echo "toh-spawn: HEAD + bench/experiments/spawn-direct.patch${xsig:+; toh-sig: + early-signals.patch (run with TOH_X_EARLYSIG=1)}"

section "Process start: C, an empty Go program, toh-exec --help"
ab /usr/bin/true ${cshim:+"$cshim"} "$bin/execshim" "$bin/toh --help"

section "bwrap path (read-only): raw bwrap, the C and Go floors, toh-exec"
cmds=("$BW")
[[ -z $cshim ]] || cmds+=("$cshim $BW" "$cshim -parent $BW")
cmds+=("$bin/execshim $BW" "$bin/execshim -parent $BW" "$(T toh -- true)" "$(T toh --runner bwrap -- true)")
for c in "$(X "$xspawn" "" -- true)" "$(X "$xspawn" GOMAXPROCS=1 -- true)" "$(X "$xsig" TOH_X_EARLYSIG=1 -- true)"; do
	[[ -z $c ]] || cmds+=("$c")
done
ab "${cmds[@]}"

section "Landlock path (read-only): landlock-restrict, the launcher stage, the Go floors, toh-exec"
cmds=()
[[ -z $LLR ]] || cmds+=("$LLR")
cmds+=("$(launcher "$bin/toh")" "$bin/execshim $(launcher "$bin/toh")" "$bin/execshim -parent $(launcher "$bin/toh")"
	"$bin/execshim -parent /usr/bin/true" "$(TL toh -- true)" "$(T toh --runner landlock -- true)")
for c in "$(XL "$xspawn" "" -- true)" "$(XL "$xsig" TOH_X_EARLYSIG=1 -- true)"; do
	[[ -z $c ]] || cmds+=("$c")
done
ab "${cmds[@]}"

if command -v perf >/dev/null && perf stat -e task-clock true 2>/dev/null; then
	section "perf stat -r $PERF_RUNS (per run: CPU time of the whole process tree, context switches, page faults)"
	echo '```'
	printf '%9s %7s %7s  %s\n' task-ms ctxsw faults command
	pcmds=(/usr/bin/true "$bin/execshim" "$BW" "$(T toh -- true)")
	[[ -z $xspawn ]] || pcmds+=("$(T "$xspawn" -- true)")
	[[ -z $LLR ]] || pcmds+=("$LLR")
	pcmds+=("$(launcher "$bin/toh")" "$(TL toh -- true)")
	[[ -z $xspawn ]] || pcmds+=("$(TL "$xspawn" -- true)")
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
	scmds=("$BW" "$(T toh -- true)" "$(TL toh -- true)")
	[[ -z $xspawn ]] || scmds+=("$(T "$xspawn" -- true)" "$(TL "$xspawn" -- true)")
	for c in "${scmds[@]}"; do
		# shellcheck disable=SC2086
		strace -f -c -o "$work/strace.txt" $c >/dev/null 2>&1
		printf '%s\n' "${c//$work/…}"
		awk '$NF ~ /^(clone|clone3|execve|futex|nanosleep|rt_sigaction|mmap|epoll_pwait|wait4|waitid|prctl|total)$/ {
			printf "  %-14s %6s calls\n", $NF, $4 }' "$work/strace.txt"
	done
	echo '```'
fi
