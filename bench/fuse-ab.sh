#!/usr/bin/env bash
# bench/fuse-ab.sh: toh-mount built at another commit against toh-mount built from
# the working tree, on the same SOURCE, in interleaved rounds: the wall time of a
# read workload and the CPU time the daemon spent serving it (perf stat -p).
#
#   sudo bench/fuse-ab.sh HEAD~1                 # find -ls and git status, caches expired
#   sudo ROUNDS=16 STATE=warm bench/fuse-ab.sh 137abad
#   sudo WORKLOADS=rm ROUNDS=8 bench/fuse-ab.sh 2627f3d   # rm -rf of the whole tree
#   sudo WORKLOADS="small untar" ROUNDS=6 bench/fuse-ab.sh HEAD~1   # creating files
#   sudo WORKLOADS="small untar rm" CPU=proc bench/fuse-ab.sh lbsame  # the fence's own cost
#
# With "lbsame" in place of a commit, the old side is go-fuse's unfenced loopback with
# toh-mount's options (bench/fuse/lbmount with fuse-lib.sh's lbsame_opts, as in
# fuse.sh), so new/old is the fence's cost, measured interleaved.
#
# Environment:
#   WORKLOADS find, git, rm, small, untar, xattr (default "find git"). rm: each timed run
#             removes a copy of the tree extracted natively into SOURCE/scratch and
#             listed once through the mount right before; small: 4 writers create
#             2,500 files of 4 KiB each (bench/fuse.sh's smallfiles); untar: the
#             tree's tarball extracted through the mount (STATE applies to find and
#             git only; what small and untar made is removed natively after each run);
#             xattr: 50,000 getxattr(security.capability) of one file, the request
#             the kernel sends before every write(2) to a file
#   STATE     expired: each timed run starts 1.2 s after a warm-up run, so every entry
#             the kernel cached has expired and each name is looked up again (what an
#             agent re-running find every few seconds sees); warm: two warm-up runs
#             right before, so almost nothing reaches the daemon (expired)
#   ROUNDS    timed runs per build and workload, alternating which goes first (10)
#   CPU       how the daemon's CPU is counted: perf (perf stat -e task-clock -p, the
#             default) or proc (utime+stime from /proc/PID/stat before and after, in
#             10 ms ticks; attaches nothing to the daemon, whose wall time perf's
#             per-thread counting can change)
#   WORK, FS  bench/fuse.sh's scratch directory and file system, whose prepared tree
#             this reuses (/var/tmp/toh-fusebench, image; run bench/fuse.sh once first)
#
# Reports medians and new/old ratios. Daemon CPU is far steadier here than wall
# time, which two shared CPUs make noisy. Needs root and perf (Debian's linux-perf).
set -euo pipefail

prog=$(basename "$0")
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${STATE:-expired}
ROUNDS=${ROUNDS:-10}
WORKLOADS=${WORKLOADS:-find git}
WORK=${WORK:-/var/tmp/toh-fusebench}

die() { echo "$prog: $*" >&2; exit 1; }
note() { echo "$prog: $*" >&2; }
# shellcheck source=fuse-lib.sh
source "$repo/bench/fuse-lib.sh"

CPU=${CPU:-perf}
[[ $# == 1 ]] || die "usage: $prog OLD-COMMIT|lbsame"
[[ $(id -u) == 0 ]] || die "run as root: the mounts allow other users, as toh-mount's do as root"
case $CPU in
perf) command -v perf >/dev/null || die "perf is not installed (apt-get install linux-perf), or set CPU=proc" ;;
proc) ;;
*) die "CPU=$CPU: want perf or proc" ;;
esac
case $STATE in expired | warm) ;; *) die "STATE=$STATE: want expired or warm" ;; esac
for w in $WORKLOADS; do
	case $w in find | git | rm | small | untar | xattr) ;; *) die "unknown workload $w: want find, git, rm, small, untar or xattr" ;; esac
done
if [[ $1 == lbsame ]]; then
	old_rev=lbsame
else
	old_rev=$(git -C "$repo" rev-parse --short "$1")
fi

tmp=$(mktemp -d /var/tmp/toh-fuse-ab.XXXXXX)
src="" pids=() fs_mounted=""
cleanup() {
	for b in old new; do
		if grep -qs " $tmp/mnt-$b fuse" /proc/self/mounts; then
			umount "$tmp/mnt-$b" 2>/dev/null || umount -l "$tmp/mnt-$b" || true
		fi
	done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	git -C "$repo" worktree remove --force "$tmp/old-tree" 2>/dev/null || true
	rm -rf "$tmp"
	if [[ -n $src ]]; then rm -rf "$src/scratch/ab-rm" "$src/scratch"/ab-new-*; fi
	bench_fs_umount
}
trap cleanup EXIT
bench_fs_mount
src=$base/ws
[[ -d $src/tree/.git ]] || die "$src/tree is missing: run bench/fuse.sh once to prepare it"

if [[ $old_rev == lbsame ]]; then
	(cd "$repo" && go build -o "$tmp/lbmount" ./bench/fuse/lbmount)
else
	git -C "$repo" worktree add -q --detach "$tmp/old-tree" "$old_rev"
	(cd "$tmp/old-tree" && go build -o "$tmp/toh-old" ./cmd/toh-mount)
fi
(cd "$repo" && go build -o "$tmp/toh-new" ./cmd/toh-mount && go build -o "$tmp/fusebench" ./bench/fuse/fusebench)
export FUSEBENCH=$tmp/fusebench TAR=$base/tree.tar
printf '{"version": 1, "mode": "workspace-write", "workspaceRoot": "%s"}\n' "$src" >"$tmp/policy.json"

declare -A pid
for b in old new; do
	mkdir -p "$tmp/mnt-$b"
	if [[ $b == old && $old_rev == lbsame ]]; then
		"$tmp/lbmount" "${lbsame_opts[@]}" "$src" "$tmp/mnt-$b" 2>"$tmp/$b.log" &
	else
		"$tmp/toh-$b" --policy "$tmp/policy.json" "$src" "$tmp/mnt-$b" 2>"$tmp/$b.log" &
	fi
	pid[$b]=$! pids+=($!)
done
for b in old new; do
	for _ in $(seq 100); do grep -qs " $tmp/mnt-$b fuse" /proc/self/mounts && break; sleep 0.05; done
	grep -qs " $tmp/mnt-$b fuse" /proc/self/mounts || die "toh-mount ($b) did not mount: $(cat "$tmp/$b.log")"
done

# proc_ticks PID: the user and system CPU time of every thread of PID so far, in
# clock ticks (fields 14 and 15 of /proc/PID/stat; the command name, field 2, may
# hold spaces, so count from after its closing parenthesis).
proc_ticks() {
	local stat
	stat=$(<"/proc/$1/stat")
	stat=${stat##*) }
	awk '{print $12 + $13}' <<<"$stat"
}
hz=$(getconf CLK_TCK)

run() { # run WORKLOAD MOUNT [NEW]: NEW names what small and untar make, never reused
	case $1 in
	find) find "$2/tree" -ls >/dev/null ;;
	git) git -C "$2/tree" status --porcelain >/dev/null ;;
	rm) rm -rf "$2/scratch/ab-rm" ;;
	small) "$FUSEBENCH" smallfiles -dir "$2/scratch/$3" -writers 4 -files 2500 -size 4096 ;;
	untar) mkdir "$2/scratch/$3" && tar -xf "$TAR" -C "$2/scratch/$3" ;;
	xattr) "$FUSEBENCH" getxattr -n 50000 "$2/tree/go.mod" ;;
	esac
}
: >"$tmp/times"
for w in $WORKLOADS; do
	for r in $(seq "$ROUNDS"); do
		order="old new"
		((r % 2)) || order="new old"
		for b in $order; do
			m=$tmp/mnt-$b
			if [[ $w == rm ]]; then
				mkdir -p "$src/scratch/ab-rm"
				tar -xf "$base/tree.tar" -C "$src/scratch/ab-rm"
				sync
				find "$m/scratch/ab-rm" >/dev/null
			elif [[ $w == xattr ]]; then
				run "$w" "$m"
			elif [[ $w == small || $w == untar ]]; then
				rm -rf "$src/scratch"/ab-new-*
				sync
			else
				run "$w" "$m"
				if [[ $STATE == expired ]]; then sleep 1.2; else run "$w" "$m"; fi
			fi
			start=$(date +%s%N)
			if [[ $CPU == perf ]]; then
				perf stat -x, -e task-clock -p "${pid[$b]}" -o "$tmp/stat" -- bash -c "$(declare -f run); run $w $m ab-new-$w-$r-$b"
				end=$(date +%s%N)
				cpu=$(awk -F, '/task-clock/ {print $1}' "$tmp/stat")
			else
				ticks0=$(proc_ticks "${pid[$b]}")
				run "$w" "$m" "ab-new-$w-$r-$b"
				end=$(date +%s%N)
				cpu=$((($(proc_ticks "${pid[$b]}") - ticks0) * 1000 / hz))
			fi
			echo "$w $b $(((end - start) / 1000)) $cpu" >>"$tmp/times"
		done
	done
done

median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
echo "toh-mount $old_rev (old) against the working tree (new), $STATE caches (find, git), $ROUNDS rounds, daemon CPU by $CPU, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| workload | old wall ms | new wall ms | new/old | old daemon CPU ms | new daemon CPU ms | new/old |"
echo "|---|--:|--:|--:|--:|--:|--:|"
for w in $WORKLOADS; do
	ow=$(awk -v w="$w" '$1 == w && $2 == "old" {print $3 / 1000}' "$tmp/times" | median)
	nw=$(awk -v w="$w" '$1 == w && $2 == "new" {print $3 / 1000}' "$tmp/times" | median)
	oc=$(awk -v w="$w" '$1 == w && $2 == "old" {print $4}' "$tmp/times" | median)
	nc=$(awk -v w="$w" '$1 == w && $2 == "new" {print $4}' "$tmp/times" | median)
	awk -v w="$w" -v ow="$ow" -v nw="$nw" -v oc="$oc" -v nc="$nc" \
		'BEGIN {printf "| %s | %.1f | %.1f | %.2f× | %.1f | %.1f | %.2f× |\n", w, ow, nw, nw / ow, oc, nc, nc / oc}'
done
