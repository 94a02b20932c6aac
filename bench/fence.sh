#!/usr/bin/env bash
# bench/fence.sh: what toh-exec --fence costs, as ratios to the same run without the
# fence, measured in one session (issue 5, "Speed"). See bench/README.md, section
# "toh-exec --fence", for the workloads, the results and where the time goes.
#
#   sudo bench/fence.sh                    # 12 rounds, ~8 minutes; writes results/fence-<date>.md
#   sudo REPS=2 RUNS_GIT=5 OUT=- bench/fence.sh   # a quick look, nothing recorded
#   sudo WORKLOADS="true status" RUNNERS=bwrap OUT=- bench/fence.sh
#
# Must run as root: the runs measured are root's (the stage mounts the fence inside
# the run's own mount namespace; for other users toh-exec mounts through fusermount3
# on the host first, a different path), and the breakdown reads kernel tracepoints.
#
# Workloads, each run as `toh-exec --mode workspace-write [--fence] --runner R -- CMD`
# with a warm probe cache (--probe-cache F, warmed once; --runner runs no probe anyway)
# and --policy pointing at a missing file (the embedded default: workspace = the
# working directory):
#   true          CMD = true, in an empty workspace
#   status        CMD = git status --porcelain, in a git repository of a copy of
#                 $(go env GOROOT)/src (~12,000 files), plus plain git as a reference row
#   commit-empty  CMD = git commit -q --allow-empty -m x, in that repository
#   commit-files  CMD = sh -c 'append a line to 3 files; git commit -qam x'
# Every round runs each workload once through hyperfine (warmup runs first, so every
# measured run is warm), all of its commands back to back, in an order reversed every
# other round. A ratio is fence/no-fence of one round's medians; the table shows the
# median of those ratios over the rounds, and their range.
#
# Environment:
#   REPS        rounds (12)
#   RUNS_TRUE   measured runs per command per round for "true" (20)
#   RUNS_GIT    measured runs per command per round for the git workloads (5)
#   WARMUP      hyperfine warmup runs per command per round (2)
#   RUNNERS     subset of: bwrap landlock (both)
#   WORKLOADS   subset of: true status commit-empty commit-files (all)
#   BREAKDOWN   1: also a timeline of the true runs (perf: exec, mount and exit
#               tracepoints), process start floors, and FUSE request counts of one run
#               of each workload (perf, fuse:fuse_request_send) (1)
#   WORKBASE    where the scratch directory goes (/var/tmp); not under /tmp, which is a
#               writable root of workspace-write (a probe cache there is ignored, and
#               under bwrap /tmp is a private tmpfs that would hide the workspace)
#   OUT         where the report goes (bench/results, as fence-YYYY-MM-DD.md); OUT=- prints only
#   REV         build a committed revision (git archive REV) instead of the working tree
#   KEEP=1      keep the scratch directory (binaries, tree, raw hyperfine JSON)
#
# Needs go, git, hyperfine (installed with apt-get when missing), bwrap and jq;
# perf for the breakdown. Everything it creates is in one scratch directory,
# removed at the end; it mounts nothing on the host and so unmounts nothing. It checks
# afterwards that no fence mount, toh-fence-* directory or toh-exec process of its own
# was left behind, and that every commit landed.
set -euo pipefail

prog=$(basename "$0")
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPS=${REPS:-12}
RUNS_TRUE=${RUNS_TRUE:-20}
RUNS_GIT=${RUNS_GIT:-5}
WARMUP=${WARMUP:-2}
RUNNERS=${RUNNERS:-bwrap landlock}
WORKLOADS=${WORKLOADS:-true status commit-empty commit-files}
BREAKDOWN=${BREAKDOWN:-1}
WORKBASE=${WORKBASE:-/var/tmp}
REV=${REV:-}
OUT=${OUT:-$repo/bench/results}

die() { echo "$prog: $*" >&2; exit 1; }
note() { echo "$prog: $*" >&2; }
q() { printf '%q' "$1"; }

[[ $(id -u) == 0 ]] || die "run as root (see the header of $0)"
for c in go git jq bwrap; do command -v $c >/dev/null || die "$c is not installed"; done
if ! command -v hyperfine >/dev/null; then
	note "installing hyperfine (apt-get)"
	apt-get install -y hyperfine >/dev/null || die "hyperfine could not be installed"
fi

work=$(mktemp -d "$WORKBASE/toh-fencebench.XXXXXX")
case $work in /tmp/* | /tmp) die "scratch directory $work lies under /tmp; set WORKBASE elsewhere" ;; esac
[[ $work != *[[:space:]]* ]] || die "WORKBASE must not contain white space"
bin=$work/bin ws=$work/ws tree=$work/tree cache=$work/cache raw=$work/raw
mkdir -p "$bin" "$ws" "$cache" "$raw" "$work/config"

# What is ours to find afterwards: fence mounts (type fuse.toh) on the host under
# $work or on /tmp (the Landlock runner fences /tmp too, in the run's namespace),
# toh-fence-* directories (fencerun's host mountpoints for non-root callers), and
# processes running our binaries.
fence_mounts() { awk -v w="$work" '$3 == "fuse.toh" && (index($2, w) == 1 || $2 == "/tmp") {print $2}' /proc/self/mounts; }
fence_dirs() { ls -d /tmp/toh-fence-* /run/user/*/toh-fence-* 2>/dev/null | sort || true; }
our_procs() { pgrep -a -f "^$bin/toh-" || true; }
dirs_before=$(fence_dirs)

cleanup() {
	local m
	m=$(fence_mounts)
	if [[ -n $m ]]; then
		# Not ours to unmount (we mounted nothing): leave it, and the directory under it.
		note "fence mounts left on the host, NOT removed (a bug in --fence): $m; kept $work"
		return
	fi
	if [[ ${KEEP:-0} == 1 ]]; then note "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

unset TMPDIR # a $TMPDIR would be one more writable root
export XDG_CONFIG_HOME=$work/config
export GIT_CONFIG_NOSYSTEM=1
toh=$bin/toh-exec
src=$repo
if [[ -n $REV ]]; then
	# A committed revision, exported (the working tree is left alone): other work in
	# progress there then cannot change what is measured.
	src=$work/src
	mkdir -p "$src"
	REV=$(git -C "$repo" rev-parse --short "$REV^{commit}") || die "no commit $REV"
	git -C "$repo" archive "$REV" | tar -x -C "$src"
fi
note "building toh-exec and toh-mount (--fence runs it beside toh-exec) from ${REV:-the working tree} into $bin"
(cd "$src" && go build -o "$toh" ./cmd/toh-exec && go build -o "$bin/toh-mount" ./cmd/toh-mount)

pc=$cache/probe-cache.json
TOH="$(q "$toh") --policy $(q "$work/no-such-policy.json") --probe-cache $(q "$pc") --mode workspace-write"
(cd "$ws" && $TOH --refresh-probe -- true) || die "toh-exec -- true failed"
[[ -s $pc ]] || die "the probe cache $pc was not written"

needs_tree=0
for w in $WORKLOADS; do [[ $w == true ]] || needs_tree=1; done
goroot=$(go env GOROOT)
nfiles=0
if ((needs_tree)); then
	note "copying $goroot/src to $tree and committing it (untimed)"
	cp -a "$goroot/src" "$tree"
	(
		cd "$tree"
		git init -q
		git config user.name bench
		git config user.email bench@localhost
		git config gc.auto 0
		git add -A
		git commit -qm tree
		git status --porcelain >/dev/null # the index's stat data, written natively
	)
	nfiles=$(git -C "$tree" ls-files | wc -l)
fi

dir_of() { [[ $1 == true ]] && echo "$ws" || echo "$tree"; }
cmd_of() {
	case $1 in
	true) echo "true" ;;
	status) echo "git status --porcelain" ;;
	commit-empty) echo "git commit -q --allow-empty -m x" ;;
	commit-files) echo "sh -c 'echo >>fmt/print.go; echo >>os/file.go; echo >>net/net.go; git commit -qam x'" ;;
	*) die "unknown workload $1" ;;
	esac
}
runs_of() { [[ $1 == true ]] && echo "$RUNS_TRUE" || echo "$RUNS_GIT"; }

declare -A roots
# Sanity, before timing: every fenced command succeeds with no denial and names its
# fenced roots; a write to a protected path in the fence is denied, recorded and absent.
for r in $RUNNERS; do
	for w in $WORKLOADS; do
		out=$(cd "$(dir_of "$w")" && eval "$TOH --runner $r --fence --json -- $(cmd_of "$w")") ||
			die "$r $w with --fence failed: $out"
		jq -e '.result.exitCode == 0 and (.result.denials | length) == 0 and (.result.fence.roots | length) > 0' <<<"$out" >/dev/null ||
			die "$r $w with --fence: unexpected result $out"
	done
	if ((needs_tree)); then
		out=$(cd "$tree" && $TOH --runner "$r" --fence --json -- sh -c 'echo x >.git/hooks/fencebench' || true)
		jq -e '.result.denials | map(select(.rule == "protected" and (.path | endswith("/.git/hooks/fencebench")))) | length == 1' <<<"$out" >/dev/null ||
			die "$r: the denied write was not recorded: $out"
		[[ ! -e $tree/.git/hooks/fencebench ]] || die "$r: a denied write landed"
	fi
	roots[$r]=$(cd "$ws" && $TOH --runner "$r" --fence --json -- true | jq -r '.result.fence.roots | join(", ")')
done
commits_before=0
((needs_tree)) && commits_before=$(git -C "$tree" rev-list --count HEAD)

# name|directory|command
rows_of() {
	local w=$1 r c
	c=$(cmd_of "$w")
	[[ $w == true ]] || echo "plain|$c"
	for r in $RUNNERS; do
		echo "$r|$TOH --runner $r -- $c"
		echo "$r-fence|$TOH --runner $r --fence -- $c"
	done
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
expected_commits=0
: >"$raw/medians.tsv"
for ((i = 1; i <= REPS; i++)); do
	note "round $i/$REPS"
	for w in $WORKLOADS; do
		mapfile -t rows < <(rows_of "$w")
		if ((i % 2 == 0)); then
			mapfile -t rows < <(printf '%s\n' "${rows[@]}" | tac)
		fi
		args=()
		for row in "${rows[@]}"; do args+=(-n "${row%%|*}" "${row#*|}"); done
		n=$(runs_of "$w")
		(cd "$(dir_of "$w")" && hyperfine -N --style basic --warmup "$WARMUP" --runs "$n" \
			--export-json "$raw/$w-$i.json" "${args[@]}" >"$raw/$w-$i.log") ||
			die "hyperfine failed on $w (round $i); see $raw/$w-$i.log (KEEP=1)"
		[[ $w == commit-* ]] && expected_commits=$((expected_commits + ${#rows[@]} * (WARMUP + n)))
		jq -r --arg w "$w" --arg i "$i" '.results[] | [$i, $w, .command, .median] | @tsv' "$raw/$w-$i.json" >>"$raw/medians.tsv"
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# The table: median over rounds of each command's median; the ratio is the median over
# rounds of that round's fence/no-fence median ratio, with its range.
table=$(awk -F'\t' -v runners="$RUNNERS" -v workloads="$WORKLOADS" '
function med(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function lo(s,   a, n, i, m) { n = split(s, a, " "); m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
function hi(s,   a, n, i, m) { n = split(s, a, " "); m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
function ms(x) { return x < 0.1 ? sprintf("%.1f ms", x * 1000) : sprintf("%.0f ms", x * 1000) }
{ t[$2, $3, $1] = $4; all[$2, $3] = all[$2, $3] " " $4; if ($1 > rounds) rounds = $1 }
END {
	print "| workload | runner | without fence | with fence | ratio (median of " rounds " rounds) | ratio range | added |"
	print "|---|---|--:|--:|--:|--:|--:|"
	nw = split(workloads, W, " "); nr = split(runners, R, " ")
	for (a = 1; a <= nw; a++) {
		w = W[a]
		if ((w, "plain") in all) printf "| %s | none (plain git) | %s | — | — | — | — |\n", w, ms(med(all[w, "plain"]))
		for (b = 1; b <= nr; b++) {
			r = R[b]; rs = ""
			for (i = 1; i <= rounds; i++) if ((w, r, i) in t && (w, r "-fence", i) in t) rs = rs " " t[w, r "-fence", i] / t[w, r, i]
			m0 = med(all[w, r]); m1 = med(all[w, r "-fence"])
			printf "| %s | %s | %s | %s | **%.2f×** | %.2f–%.2f× | %s |\n", w, r, ms(m0), ms(m1), med(rs), lo(rs), hi(rs), ms(m1 - m0)
		}
	}
}' "$raw/medians.tsv")

# Correctness afterwards: every commit landed, nothing was left behind.
checks=()
if ((needs_tree)); then
	commits=$(($(git -C "$tree" rev-list --count HEAD) - commits_before))
	if [[ $commits == "$expected_commits" ]]; then
		checks+=("all $commits commits landed (warmup runs included)")
	else
		checks+=("**$commits commits landed, $expected_commits expected**")
	fi
	dirty=$(git -C "$tree" status --porcelain | wc -l)
	((dirty == 0)) && checks+=("the tree is clean afterwards") || checks+=("**$dirty paths not clean afterwards**")
fi
m=$(fence_mounts)
[[ -z $m ]] && checks+=("no fence mount on the host") || checks+=("**fence mounts left on the host: $m**")
d=$(comm -13 <(echo "$dirs_before") <(fence_dirs) | grep . || true)
[[ -z $d ]] && checks+=("no toh-fence-* directory left in /tmp or /run/user") || checks+=("**left behind: $d**")
sleep 0.2
p=$(our_procs)
[[ -z $p ]] && checks+=("no toh-exec or toh-mount process of this run left") || checks+=("**processes left: $p**")

breakdown=""
if ((BREAKDOWN)); then
	# Where the time of `toh-exec -- true` goes: perf records three tracepoints in
	# toh-exec's process tree (every exec with its file name, every mount(2), every
	# exit), which costs next to nothing, unlike strace's stops; median over 21 runs
	# (after 2 untimed) of each step, in ms.
	timeline() { # RUNNER FENCE: prints one line of step durations
		perf record -q -o "$raw/tl.data" -e sched:sched_process_exec,syscalls:sys_enter_mount,sched:sched_process_exit \
			-- $TOH --runner "$1" $2 -- true >/dev/null 2>&1 || true
		# The first toh-mount exec is the fence host, the second the stage; the
		# stage's first mount with MS_NOSUID|MS_NODEV alone is its first FUSE mount; the
		# runner is bwrap or the second toh-exec (the Landlock launcher).
		perf script -i "$raw/tl.data" -F pid,time,event,trace 2>/dev/null | awk -v fence="$2" '
			{ t = $2 + 0; if (!t0) t0 = t; end = t }
			$3 == "sched:sched_process_exec:" {
				f = $4; sub(/^filename=/, "", f); n = split(f, parts, "/"); base = parts[n]
				if (base == "toh-mount") { if (!host) host = t; else if (!stage) { stage = t; stagepid = $1 } }
				else if (base == "bwrap" && !runner) runner = t
				else if (base == "toh-exec" && t > t0 && !runner) runner = t
				else if (f == "/usr/bin/true") { cmd = t; cmdpid = $1 }
			}
			$3 == "syscalls:sys_enter_mount:" && $1 == stagepid && /flags: 0x00000006/ && !mnt { mnt = t }
			$3 == "sched:sched_process_exit:" && $1 == cmdpid && cmd && !cmdexit { cmdexit = t }
			function d(a, b) { return (b - a) * 1000 }
			END {
				if (fence != "") printf "%.2f %.2f %.2f %.2f ", d(t0, host), d(host, stage), d(stage, mnt), d(mnt, runner)
				else printf "%.2f 0 0 0 ", d(t0, runner)
				printf "%.2f %.2f %.2f %.2f\n", d(runner, cmd), d(cmd, cmdexit), d(cmdexit, end), d(t0, end)
			}'
	}
	if command -v perf >/dev/null && perf list 'sched:sched_process_exec' 2>/dev/null | grep -q sched_process_exec; then
		bd="| runner | fence | toh-exec start → exec of the fence host (or of the runner) | host start → stage exec | stage start → first FUSE mount | first mount → runner exec (INIT, serve, ack, chdir) | runner exec → command exec | command | command exit → toh-exec exit | total |"$'\n'"|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"
		cd "$ws"
		# Interleaved: every pass runs each configuration once, so a burst of load
		# hits all of them alike.
		for ((k = 0; k < 23; k++)); do
			for r in $RUNNERS; do
				for f in "" --fence; do timeline "$r" "$f" >>"$raw/tl-$r${f:+-fence}.txt"; done
			done
		done
		for r in $RUNNERS; do
			for f in "" --fence; do
				bd+=$'\n'"| $r | ${f:-no} | $(awk 'NR > 2 { for (i = 1; i <= NF; i++) c[i] = c[i] " " $i } END {
					for (i = 1; i <= 8; i++) { n = split(c[i], a, " "); for (x = 1; x <= n; x++) for (y = x + 1; y <= n; y++) if (a[y] < a[x]) { t = a[x]; a[x] = a[y]; a[y] = t }
						printf "%s%.1f", (i > 1 ? " | " : ""), a[int((n + 1) / 2)] } }' "$raw/tl-$r${f:+-fence}.txt") |"
			done
		done
		cd - >/dev/null
		breakdown+=$'\n\n'"Timeline of \`toh-exec --mode workspace-write [--fence] --runner R -- true\` from perf (tracepoints sched_process_exec, sys_enter_mount, sched_process_exit; ms, median of 21 runs after 2 untimed, the four configurations interleaved):"$'\n\n'"${bd//| 0.0 | 0.0 | 0.0 |/| — | — | — |}"
	fi
	# The floor of each extra process a fenced run starts: the fence host and the stage
	# are both toh-mount (which links go-fuse; toh-exec does not).
	hyperfine -N --style basic --warmup 5 --runs 100 --export-json "$raw/floors.json" \
		-n true true -n "toh-exec --help" "$toh --help" -n "toh-mount --help" "$bin/toh-mount --help" >"$raw/floors.log"
	breakdown+=$'\n\n'"Process start floors (hyperfine, median of 100 runs): $(jq -r '[.results[] | "`\(.command)` \(.median * 1000 * 100 | round / 100) ms"] | join(", ")' "$raw/floors.json"); binaries: toh-exec $(($(stat -c %s "$toh") / 1024)) KiB, toh-mount $(($(stat -c %s "$bin/toh-mount") / 1024)) KiB."
	if command -v perf >/dev/null && perf list 'fuse:*' 2>/dev/null | grep -q fuse_request_send; then
		# FUSE requests of one fenced run (after a warm one): perf records the kernel's
		# fuse_request_send in the run's own processes (perf follows toh-exec's process
		# tree; a request is traced in its sender), on the connections whose FUSE_INIT
		# the run sent (its stage mounted them): other FUSE mounts on the machine and
		# other processes' requests are not counted.
		fusecount() {
			perf record -q -o "$raw/perf.data" -e fuse:fuse_request_send -- "$@" >/dev/null 2>&1 || true
			perf script -i "$raw/perf.data" -F trace 2>/dev/null | awk '
				$1 == "connection" { c = $2; op = $7; gsub(/[()]/, "", op); sub(/^FUSE_/, "", op); n[c, op]++; tot[c]++; if (op == "INIT") init[c] = 1; ops[op] = 1 }
				END { for (k in n) { split(k, a, SUBSEP); if (init[a[1]]) { all += n[k]; per[a[2]] += n[k] } }
					for (o in per) printf "%d %s\n", per[o], o; printf "%d TOTAL\n", all }' |
				sort -k1,1nr | awk '$2 == "TOTAL" { t = $1; next } { s = s (s ? ", " : "") $2 " " $1 } END { printf "%d | %s", t, s }'
		}
		fc="| workload | runner | FUSE requests | by opcode |"$'\n'"|---|---|--:|---|"
		for w in $WORKLOADS; do
			for r in $RUNNERS; do
				(cd "$(dir_of "$w")" && eval "$TOH --runner $r --fence -- $(cmd_of "$w")") >/dev/null 2>&1
				fc+=$'\n'"| $w | $r | $(cd "$(dir_of "$w")" && eval "fusecount $TOH --runner $r --fence -- $(cmd_of "$w")") |"
			done
		done
		breakdown+=$'\n\n'"FUSE requests the run's processes sent to the run's fences during one fenced run after a warm one (perf record of toh-exec's process tree, tracepoint fuse:fuse_request_send, connections initialised in the run):"$'\n\n'"$fc"
	fi
fi

if [[ -n $REV ]]; then
	commit=$(git -C "$repo" rev-parse --short "$REV")
else
	commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
	git -C "$repo" diff --quiet HEAD -- cmd sandbox policy canon fusefence internal go.mod 2>/dev/null || commit="$commit+uncommitted"
fi
cmdline="${REV:+REV=$REV }REPS=$REPS RUNS_TRUE=$RUNS_TRUE RUNS_GIT=$RUNS_GIT WARMUP=$WARMUP bench/fence.sh"
[[ $RUNNERS == "bwrap landlock" ]] || cmdline="RUNNERS=\"$RUNNERS\" $cmdline"
[[ $WORKLOADS == "true status commit-empty commit-files" ]] || cmdline="WORKLOADS=\"$WORKLOADS\" $cmdline"
rootlist=""
for r in $RUNNERS; do rootlist+="${rootlist:+; }$r: ${roots[$r]//$work/<scratch>}"; done
report="# toh-exec --fence speed: $started

- command: \`sudo $cmdline\` (hyperfine -N, $WARMUP warmup runs per command per round, order reversed every other round)
- toh: $commit, $(go version | cut -d' ' -f3); $(bwrap --version 2>&1 | head -1); $(hyperfine --version); $(git --version)
- machine: $(nproc) CPU ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), kernel $(uname -r), $(df --output=fstype "$work" | tail -n 1) under the scratch directory
- load average before $load_before, after $load_after
- tree: $nfiles files of Go's src/ ($goroot/src) in a git repository; workspace = the working directory (embedded default policy)
- fenced roots: $rootlist
- checks: $(IFS=';'; echo "${checks[*]}" | sed 's/;/; /g')

Times are the median over the rounds of each command's hyperfine median; \"added\" is their difference.

$table$breakdown"

echo
echo "$report"
if [[ $OUT != - ]]; then
	mkdir -p "$OUT"
	f=$OUT/fence-$(date -u +%Y-%m-%d).md
	echo "$report" >"$f"
	note "wrote $f"
fi
