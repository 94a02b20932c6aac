#!/usr/bin/env bash
# bench/exec.sh: toh-exec's speed against its baselines, measured in one session
# (issue 3, "Speed"). See bench/README.md for what each row is and for the results.
#
#   bench/exec.sh                      # 20 rounds x 50 runs per command, ~2.5 minutes
#   ROUNDS=2 RUNS=20 INTERLEAVED=50 OUT=- bench/exec.sh   # a quick look, nothing recorded
#
# Environment:
#   ROUNDS, RUNS, WARMUP  hyperfine rounds, runs per command per round, warmup runs
#                         per command per round (20, 50, 5). Many short rounds, run
#                         order reversed every other round, keep a drifting machine
#                         from favouring one side of a pair (hyperfine itself cannot
#                         interleave commands).
#   INTERLEAVED           rounds of the interleaved cross-check of the goal pairs
#                         (bench/cmd/abrun) after the hyperfine rounds (300; 0: none)
#   TOH_BUILD_ENV         extra environment for building toh-exec, e.g. "CGO_ENABLED=0"
#   LLR_VERSION           go-landlock version for landlock-restrict (v0.11.2)
#   OUT                   where the report goes (bench/results); OUT=- prints only
#   KEEP=1                keep the scratch directory (binaries, raw hyperfine JSON)
#   HF_STYLE              hyperfine --style (basic); its output goes to the scratch
#                         directory (KEEP=1 keeps it), the report to stdout and OUT
#
# Needs go, hyperfine and bwrap. strace, when present, proves the raw bwrap baseline
# byte-identical to the argv toh-exec spawns; perf, when present (as root), that the
# Landlock rung starts the command with no launcher re-exec.
set -euo pipefail

ROUNDS=${ROUNDS:-20}
RUNS=${RUNS:-50}
WARMUP=${WARMUP:-5}
INTERLEAVED=${INTERLEAVED:-300}
HF_STYLE=${HF_STYLE:-basic}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# toh-exec hands each runner it execs a status pipe at descriptor 3 (sandbox/status.go),
# and the raw runner argv names it (--json-status-fd 3, --status-fd 3): every command
# started below inherits this one, so the raw rows run that same argv. bwrap then writes
# its records to /dev/null where toh-exec reads them from a pipe.
exec 3>/dev/null
OUT=${OUT:-$repo/bench/results}

command -v hyperfine >/dev/null || die "hyperfine is not installed (apt-get install -y hyperfine)"
bench_setup
note "building toh-exec ${TOH_BUILD_ENV:+($TOH_BUILD_ENV) }and the helpers into $bin"
build_toh "$bin/toh-exec" ${TOH_BUILD_ENV:-}
build_bench execargv hfreport abrun
install_llr

toh=$bin/toh-exec
chain_cache=$cache/probe-cache.json     # the default chain: bwrap here
ll_cache=$cache/probe-cache-ll.json     # a chain whose bwrap is missing: Landlock
no_bwrap=$work/no-such-bwrap
TOH="$(q "$toh") --probe-cache $(q "$chain_cache")"
TOH_LL="$(q "$toh") --probe-cache $(q "$ll_cache") --bwrap $(q "$no_bwrap")"

# Warm both probe caches and check what they chose.
"$toh" --probe-cache "$chain_cache" --refresh-probe -- true
"$toh" --probe-cache "$ll_cache" --bwrap "$no_bwrap" --refresh-probe -- true
chain_backend=$(backend_of "$toh" --probe-cache "$chain_cache")
ll_backend=$(backend_of "$toh" --probe-cache "$ll_cache" --bwrap "$no_bwrap")
[[ $ll_backend == landlock ]] || die "the chain without bwrap chose '$ll_backend', not landlock"
[[ $chain_backend == bwrap ]] || note "the default chain chose '$chain_backend', not bwrap: its rows measure that rung"

declare -A argv_cmd launcher_cmd llr_flags
for mode in read-only workspace-write; do
	vars=$("$bin/execargv" -toh-exec "$toh" -probe-cache "$chain_cache" -mode "$mode")
	eval "$vars"
	argv_cmd[$mode]=$BWRAP_CMD
	launcher_cmd[$mode]=$LAUNCHER_CMD
	llr_flags[$mode]=$LLR_FLAGS
	if command -v strace >/dev/null; then
		# The raw bwrap baseline must be exactly what toh-exec spawns.
		strace -f -v -xx -s 65536 -e trace=execve -o "$work/strace.txt" \
			"$toh" --probe-cache "$chain_cache" --runner bwrap --mode "$mode" -- true
		grep -qF -- "$BWRAP_STRACE" "$work/strace.txt" ||
			die "toh-exec --runner bwrap --mode $mode did not spawn the argv execargv printed (see $work/strace.txt; KEEP=1)"
		note "$mode: raw bwrap argv byte-identical to toh-exec's (strace)"
	else
		note "strace missing: argv identity with toh-exec not verified"
	fi
	if command -v perf >/dev/null && [[ $(id -u) == 0 ]]; then
		# The Landlock rung starts the command itself, with no launcher re-exec:
		# exactly two execs, toh-exec's own and true's. Not with strace: a traced
		# toh-exec keeps the launcher stage (the direct path holds the command at its
		# exec with PTRACE_TRACEME, which a tracer of toh-exec takes away).
		perf record -q -e sched:sched_process_exec -o "$work/perf.data" -- \
			"$toh" --probe-cache "$chain_cache" --runner landlock --mode "$mode" -- true
		perf script -i "$work/perf.data" 2>/dev/null | grep -o 'filename=[^ ]*' >"$work/execs.txt"
		[[ $(wc -l <"$work/execs.txt") == 2 && $(tail -n 1 "$work/execs.txt") == filename=/usr/bin/true ]] ||
			die "toh-exec --runner landlock --mode $mode did not start true directly (execs: $(tr '\n' ' ' <"$work/execs.txt"))"
		note "$mode: the Landlock rung starts true with no re-exec (perf sched_process_exec)"
	else
		note "perf missing or not root: the Landlock rung's lack of a re-exec not verified"
	fi
done
abi=$LANDLOCK_ABI

# name|label|command
rows=(
	"true|\`true\`|true"
	"bwrap-ro|raw bwrap, read-only argv|${argv_cmd[read-only]}"
	"toh-ro|\`toh-exec -- true\` (chain: $chain_backend, warm cache)|$TOH -- true"
	"toh-bwrap-ro|\`toh-exec --runner bwrap -- true\`|$TOH --runner bwrap -- true"
)
if [[ -n $llr ]]; then
	rows+=("llr-ro|\`landlock-restrict ${llr_flags[read-only]} -- /usr/bin/true\`|$(q "$llr") ${llr_flags[read-only]} -- /usr/bin/true")
fi
rows+=(
	"launcher-ro|launcher stage alone, read-only|${launcher_cmd[read-only]}"
	"toh-landlock-ro|\`toh-exec --runner landlock -- true\`|$TOH --runner landlock -- true"
	"toh-chain-ll-ro|\`toh-exec -- true\` (chain without bwrap: landlock, warm cache)|$TOH_LL -- true"
	"bwrap-ws|raw bwrap, workspace-write argv|${argv_cmd[workspace-write]}"
	"toh-ws|\`toh-exec --mode workspace-write -- true\` (chain: $chain_backend)|$TOH --mode workspace-write -- true"
	"toh-bwrap-ws|\`toh-exec --runner bwrap --mode workspace-write -- true\`|$TOH --runner bwrap --mode workspace-write -- true"
)
if [[ -n $llr ]]; then
	rows+=("llr-ws|\`landlock-restrict ${llr_flags[workspace-write]} -- /usr/bin/true\`|$(q "$llr") ${llr_flags[workspace-write]} -- /usr/bin/true")
fi
rows+=(
	"launcher-ws|launcher stage alone, workspace-write|${launcher_cmd[workspace-write]}"
	"toh-landlock-ws|\`toh-exec --runner landlock --mode workspace-write -- true\`|$TOH --runner landlock --mode workspace-write -- true"
)

labels=()
for r in "${rows[@]}"; do
	IFS='|' read -r name label cmd <<<"$r"
	labels+=(-label "$name=${label//$ws/<workspace>}")
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
jsons=()
for ((i = 1; i <= ROUNDS; i++)); do
	# Odd rounds run the list forwards, even rounds backwards, so slow drift of the
	# machine does not always favour the same side of a pair.
	ordered=("${rows[@]}")
	if ((i % 2 == 0)); then
		ordered=()
		for ((j = ${#rows[@]} - 1; j >= 0; j--)); do ordered+=("${rows[j]}"); done
	fi
	args=()
	for r in "${ordered[@]}"; do
		IFS='|' read -r name label cmd <<<"$r"
		args+=(-n "$name" "$cmd")
	done
	((i % 5 == 1)) && note "round $i/$ROUNDS: ${#rows[@]} commands x $RUNS runs"
	hyperfine -N --style "$HF_STYLE" --warmup "$WARMUP" --runs "$RUNS" \
		--export-json "$work/round$i.json" "${args[@]}" >"$work/hyperfine-round$i.log"
	jsons+=("$work/round$i.json")
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

ratios=(
	-ratio toh-ro/bwrap-ro:1.15
	-ratio toh-bwrap-ro/bwrap-ro:1.15
	-ratio toh-ws/bwrap-ws:1.15
	-ratio toh-bwrap-ws/bwrap-ws:1.15
)
if [[ -n $llr ]]; then
	ratios+=(
		-ratio toh-landlock-ro/llr-ro:1.3
		-ratio toh-chain-ll-ro/llr-ro:1.3
		-ratio launcher-ro/llr-ro
		-ratio toh-landlock-ws/llr-ws:1.3
		-ratio launcher-ws/llr-ws
	)
fi
ratios+=(-ratio toh-ro/true -ratio bwrap-ro/true)

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$repo" diff --quiet HEAD -- cmd sandbox policy canon internal go.mod 2>/dev/null || commit="$commit+uncommitted"
llr_desc="not installed"
[[ -z $llr ]] || llr_desc="$LLR_VERSION (go install, $(linkage "$llr"))"
header=$(
	cat <<EOF
# toh-exec speed: $(date -u '+%Y-%m-%d %H:%M UTC')

- command: \`ROUNDS=$ROUNDS RUNS=$RUNS WARMUP=$WARMUP${TOH_BUILD_ENV:+ TOH_BUILD_ENV="$TOH_BUILD_ENV"} bench/exec.sh\` (hyperfine -N, run order reversed every other round)
- toh: $commit, built with $(go version | cut -d' ' -f3)${TOH_BUILD_ENV:+ ($TOH_BUILD_ENV)}; $(linkage "$toh")
- machine: $(nproc) CPU ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), kernel $(uname -r), Landlock ABI $abi
- $(bwrap --version 2>&1 | head -1), $(hyperfine --version), landlock-restrict $llr_desc
- load average before $load_before, after $load_after
- workspace: a scratch directory under \$HOME; probe caches warm (default chain chose $chain_backend)

EOF
)
report=$("$bin/hfreport" "${labels[@]}" "${ratios[@]}" -json "$work/summary.json" "${jsons[@]}")
if ((INTERLEAVED > 0)); then
	# The same pairs again, each round running every command once: drift and load
	# spikes then hit both sides of a ratio alike.
	cmd_of() { local r; for r in "${rows[@]}"; do [[ ${r%%|*} == "$1" ]] && { echo "${r##*|}"; return; }; done; }
	note "interleaved cross-check: $INTERLEAVED rounds"
	groups=("bwrap-ro toh-ro toh-bwrap-ro" "bwrap-ws toh-ws toh-bwrap-ws")
	[[ -z $llr ]] || groups+=("llr-ro toh-landlock-ro toh-chain-ll-ro launcher-ro" "llr-ws toh-landlock-ws launcher-ws")
	inter=""
	for g in "${groups[@]}"; do
		cmds=()
		for n in $g; do cmds+=("$(cmd_of "$n")"); done
		inter+=$'\n```\n'"$("$bin/abrun" -rounds "$INTERLEAVED" "${cmds[@]}" | sed "s|$ws|<workspace>|g; s|$work|…|g")"$'\n```\n'
	done
	report+=$'\n\n'"Interleaved cross-check (bench/cmd/abrun, $INTERLEAVED rounds; ratios are of medians, to the first line):"$'\n'"$inter"
fi
echo
echo "$header"
echo
echo "$report"
if [[ $OUT != - ]]; then
	mkdir -p "$OUT"
	{ echo "$header"; echo; echo "$report"; } >"$OUT/exec-latest.md"
	cp "$work/summary.json" "$OUT/exec-latest.json"
	note "wrote $OUT/exec-latest.md and exec-latest.json"
fi
