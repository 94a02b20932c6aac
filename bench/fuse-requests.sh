#!/usr/bin/env bash
# bench/fuse-requests.sh: which FUSE requests a workload makes through each mirror,
# and how long the kernel waited for each kind, from the kernel's own tracepoints
# (fuse:fuse_request_send and fuse:fuse_request_end, recorded with perf). It
# explains a ratio of bench/fuse.sh: more requests, or slower ones. With
# MEASURE=daemon it shows instead what each request costs the daemon: its CPU time,
# context switches, futex and nanosleep calls, per request and per thread.
#
#   sudo bench/fuse-requests.sh                          # rm-rf on toh, lbsame, bindfs
#   sudo WORKLOAD=untar TARGETS="toh loopback" bench/fuse-requests.sh
#   sudo MEASURE=daemon REPS=3 bench/fuse-requests.sh    # the daemons' side of rm-rf
#
# Environment:
#   WORKLOAD  rm-rf (remove the tree, extracted natively), untar (extract it) or
#             git-cold (git status of the prepared tree, on a fresh mount after
#             drop_caches, as bench/fuse.sh's git-cold) (rm-rf)
#   TARGETS   space-separated subset of toh lbsame loopback bindfs (toh lbsame bindfs)
#   REPS      runs per target, in turn (1)
#   MEASURE   requests (the kernel's tracepoints, above) or daemon (perf stat of the
#             daemon's threads; a Go daemon's sysmon is the thread that sleeps most) (requests)
#   WORK, FS  bench/fuse.sh's scratch directory and file system, whose prepared tree
#             this reuses (/var/tmp/toh-fusebench, image; run bench/fuse.sh once first)
#
# Latencies are per request, from the send to the answer, for the mirror's own
# connection only (other FUSE mounts are left out). FORGET is not a request and
# does not show. Needs root and perf (Debian's linux-perf).
set -euo pipefail

prog=$(basename "$0")
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORKLOAD=${WORKLOAD:-rm-rf}
TARGETS=${TARGETS:-toh lbsame bindfs}
REPS=${REPS:-1}
MEASURE=${MEASURE:-requests}
WORK=${WORK:-/var/tmp/toh-fusebench}
# shellcheck source=bench/fuse-lib.sh
source "$repo/bench/fuse-lib.sh"

die() { echo "$prog: $*" >&2; exit 1; }
note() { echo "$prog: $*" >&2; }

[[ $(id -u) == 0 ]] || die "run as root: perf records kernel tracepoints and the runs drop the page cache"
command -v perf >/dev/null || die "perf is not installed (apt-get install linux-perf)"
[[ $(perf list 2>/dev/null) == *fuse:fuse_request_send* ]] || die "this kernel has no fuse:fuse_request_send tracepoint"
case $WORKLOAD in rm-rf | untar | git-cold) ;; *) die "WORKLOAD=$WORKLOAD: want rm-rf, untar or git-cold" ;; esac
case $MEASURE in requests | daemon) ;; *) die "MEASURE=$MEASURE: want requests or daemon" ;; esac

daemon="" fs_mounted=""
bin=$WORK/bin etc=$WORK/etc
mnt=$WORK/mnt/requests data=$WORK/requests.perf
cleanup() {
	if grep -qs " $mnt fuse" /proc/self/mounts; then
		umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || note "could not unmount $mnt"
	fi
	if [[ -n $daemon ]]; then wait "$daemon" 2>/dev/null || true; fi
	if [[ -n ${src:-} ]]; then rm -rf "$src/scratch/requests"; fi
	rm -f "$data" "$data.reqs" "$data.threads"
	bench_fs_umount
}
trap cleanup EXIT
bench_fs_mount
src=$base/ws tarball=$base/tree.tar
[[ -f $tarball ]] || die "$tarball is missing: run bench/fuse.sh once to prepare it"
mkdir -p "$bin" "$etc" "$mnt" "$src/scratch"
policy=$etc/requests-policy.json
printf '{"version": 1, "mode": "workspace-write", "workspaceRoot": "%s"}\n' "$src" >"$policy"

note "building toh-mount, go-fuse's example/loopback and lbmount into $bin"
build_fuse_mirrors "$bin"

# summarize CONNECTION: per request kind, from perf script on stdin: count, mean and
# median latency, and the total the workload waited on that kind.
summarize() {
	awk -v conn="$1" '
		{
			for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) t = substr($i, 1, length($i) - 1)
			if (!match($0, /connection [0-9]+ req [0-9]+/)) next
			split(substr($0, RSTART, RLENGTH), f, " ")
			if (f[2] != conn) next
			if ($0 ~ /fuse_request_send/) {
				if (match($0, /\(FUSE_[A-Z0-9_]+\)/)) op = substr($0, RSTART + 6, RLENGTH - 7)
				else if (match($0, /opcode [0-9]+/)) op = "OPCODE_" substr($0, RSTART + 7, RLENGTH - 7)
				start[f[4]] = t; kind[f[4]] = op
			} else if (f[4] in start) {
				printf "%s %.1f\n", kind[f[4]], (t - start[f[4]]) * 1e6
				delete start[f[4]]
			}
		}' | sort -k1,1 -k2,2n | awk '
		function flush() {
			if (op != "") printf "%-16s %7d %10.1f %10.1f %9.3f\n", op, n, sum / n, v[int((n + 1) / 2)], sum / 1e6
		}
		$1 != op { flush(); op = $1; n = 0; sum = 0; delete v }
		{ v[++n] = $2; sum += $2; total += $2; all += 1 }
		END {
			flush()
			printf "%-16s %7d %10s %10s %9.3f\n", "all", all, "", "", total / 1e6
		}' | sort -k5,5nr
}

# measure_daemon TARGET REP CONN CMD...: runs CMD under perf stat of the daemon's
# threads, inside a perf stat that counts the connection's answered requests (the
# fuse:fuse_request_end tracepoint, filtered by connection), and prints per thread
# and in all, with the totals per request.
measure_daemon() {
	local target=$1 rep=$2 conn=$3 t0 t1 reqs
	shift 3
	t0=$(date +%s%N)
	perf stat -x, -o "$data.reqs" -a -e fuse:fuse_request_end --filter "connection == $conn" -- \
		perf stat -x, --per-thread -o "$data.threads" \
		-e task-clock,context-switches,syscalls:sys_enter_futex,syscalls:sys_enter_nanosleep \
		-p "$daemon" -- "$@" 2>/dev/null
	t1=$(date +%s%N)
	reqs=$(awk -F, '$3 ~ /fuse_request_end/ { print $1 + 0 }' "$data.reqs")
	printf '\n%s, %s, run %d: %.3f s (under perf stat), %d requests\n' "$WORKLOAD" "$target" "$rep" "$(((t1 - t0) / 1000000))e-3" "$reqs"
	awk -F, -v reqs="$reqs" '
		/^#/ || NF < 4 || $2 ~ /not counted/ { next }
		{ thr = $1; v = $2 + 0; ev = $4
			if (ev ~ /task-clock/) cpu[thr] += v
			else if (ev ~ /context-switches/) cs[thr] += v
			else if (ev ~ /futex/) fx[thr] += v
			else if (ev ~ /nanosleep/) ns[thr] += v
			seen[thr] = 1 }
		END {
			for (t in seen) if (ns[t] > top) { top = ns[t]; sysmon = t }
			printf "%-24s %9s %9s %8s %10s\n", "thread", "cpu ms", "switches", "futex", "nanosleep"
			for (t in seen) if (cpu[t] > 0 || cs[t] > 0) {
				printf "%-24s %9.1f %9d %8d %10d\n", t (t == sysmon && top > 1000 ? " (sysmon)" : ""), cpu[t], cs[t], fx[t], ns[t]
				C += cpu[t]; S += cs[t]; F += fx[t]; N += ns[t] }
			printf "%-24s %9.1f %9d %8d %10d\n", "all", C, S, F, N
			if (reqs > 0) printf "%-24s %9.1f %9.2f %8.2f %10.2f\n", "per request (cpu in µs)", C * 1000 / reqs, S / reqs, F / reqs, N / reqs
		}' "$data.threads"
}

run_one() {
	local target=$1 rep=$2
	case $target in
	toh) "$bin/toh-mount" --policy "$policy" --audit "$etc/requests-audit.log" "$src" "$mnt" 2>/dev/null & ;;
	lbsame) "$bin/lbmount" "${lbsame_opts[@]}" "$src" "$mnt" 2>/dev/null & ;;
	loopback) "$bin/loopback" -q -allow-other -directmount "$mnt" "$src" >/dev/null 2>&1 & ;; # as bench/fuse.sh runs it
	bindfs) bindfs -f "$src" "$mnt" & ;;
	*) die "unknown target $target" ;;
	esac
	daemon=$!
	for _ in $(seq 100); do
		grep -qs " $mnt fuse" /proc/self/mounts && break
		sleep 0.05
	done
	grep -qs " $mnt fuse" /proc/self/mounts || die "$target did not mount $mnt"
	local conn
	conn=$(stat -c %d "$mnt") # the connection number the tracepoints print is the mount's device

	rm -rf "$src/scratch/requests"
	mkdir -p "$src/scratch/requests"
	local cmd
	if [[ $WORKLOAD == rm-rf ]]; then
		tar -xf "$tarball" -C "$src/scratch/requests"
		cmd=(rm -rf "$mnt/scratch/requests")
	elif [[ $WORKLOAD == git-cold ]]; then
		cmd=(git -C "$mnt/tree" status --porcelain)
	else
		cmd=(tar -xf "$tarball" -C "$mnt/scratch/requests")
	fi
	sync
	echo 3 >/proc/sys/vm/drop_caches
	local t0 t1
	if [[ $MEASURE == daemon ]]; then
		measure_daemon "$target" "$rep" "$conn" "${cmd[@]}"
		umount "$mnt"
		wait "$daemon" 2>/dev/null || true
		daemon=""
		return
	fi
	t0=$(date +%s%N)
	perf record -q -o "$data" -e fuse:fuse_request_send -e fuse:fuse_request_end -a -- "${cmd[@]}" 2>/dev/null
	t1=$(date +%s%N)
	printf '\n%s, %s, run %d: %.3f s (under perf)\n' "$WORKLOAD" "$target" "$rep" "$(((t1 - t0) / 1000000))e-3"
	printf '%-16s %7s %10s %10s %9s\n' request count "mean µs" "median µs" "total s"
	perf script -i "$data" 2>/dev/null | summarize "$conn"

	umount "$mnt"
	wait "$daemon" 2>/dev/null || true
	daemon=""
}

for rep in $(seq "$REPS"); do
	for target in $TARGETS; do
		run_one "$target" "$rep"
	done
done
