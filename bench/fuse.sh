#!/usr/bin/env bash
# bench/fuse.sh: toh-mount's speed against native and two unfenced FUSE mirrors,
# measured in one run (issue 4, "Speed"). See bench/README.md for the workloads,
# the results and what was tuned.
#
#   sudo bench/fuse.sh                     # 3 repetitions, ~10 minutes
#   sudo REPS=5 bench/fuse.sh              # the recorded run, ~15 minutes
#   sudo REPS=1 OUT=- bench/fuse.sh        # a quick look, nothing recorded
#   sudo WORKLOADS=find-warm,git-warm REPS=9 OUT=- bench/fuse.sh
#
# Targets, each mirroring the same SOURCE:
#   native    SOURCE itself
#   toh       toh-mount, workspace-write with SOURCE as the workspace root, audit log on
#   lbsame    go-fuse's loopback (fs.NewLoopbackRoot, unfenced) with toh-mount's exact
#             mount and cache options (bench/fuse/lbmount): toh/lbsame is the fence's cost
#   loopback  go-fuse's example/loopback as shipped, built from the module cache
#             (passthrough for every open, 1 s entry and attribute timeouts)
#   bindfs    Debian's bindfs with its defaults (single-threaded libfuse3)
#
# Environment:
#   REPS        repetitions of every workload on every target (3)
#   WORKLOADS   comma-separated subset of: untar find-cold find-warm git-cold git-warm
#               seq-write seq-read rm-rf smallfiles (all)
#   SEQ_MIB     size of the sequential write and read in MiB (1024)
#   WORK        scratch directory on a local disk, not tmpfs (/var/tmp/toh-fusebench);
#               the prepared tree is kept there between runs, REFRESH=1 rebuilds it
#   FS          where SOURCE lives: "image" (the default), a journaled ext4 made in
#               WORK/ext4.img and loop-mounted at WORK/fs for the run, or "work",
#               WORK's own file system (see bench_fs_mount in fuse-lib.sh for why)
#   OUT         where the report goes (bench/results); OUT=- prints only
#   TARGETS     space-separated subset of the targets (all)
#
# Needs root (drop_caches, direct mounts), go, git, tar and bindfs (installed with
# apt-get when missing). The Go tree copied is $(go env GOROOT)/src.
set -euo pipefail

prog=$(basename "$0")
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPS=${REPS:-3}
SEQ_MIB=${SEQ_MIB:-1024}
WORK=${WORK:-/var/tmp/toh-fusebench}
OUT=${OUT:-$repo/bench/results}
TARGETS=${TARGETS:-native toh lbsame loopback bindfs}
# shellcheck source=bench/fuse-lib.sh
source "$repo/bench/fuse-lib.sh"

die() { echo "$prog: $*" >&2; exit 1; }
note() { echo "$prog: $*" >&2; }

[[ $(id -u) == 0 ]] || die "run as root: the cold workloads drop the page cache and remount"
command -v go >/dev/null || die "go is not installed"
for c in git tar dd find; do command -v $c >/dev/null || die "$c is not installed"; done
if ! command -v bindfs >/dev/null && [[ " $TARGETS " == *" bindfs "* ]]; then
	note "installing bindfs (apt-get)"
	apt-get install -y bindfs >/dev/null || die "bindfs could not be installed"
fi
[[ $WORK != *[[:space:]]* ]] || die "WORK must not contain white space"
mkdir -p "$WORK"
fstype=$(df --output=fstype "$WORK" | tail -n 1)
[[ $fstype != tmpfs && $fstype != ramfs ]] || die "WORK=$WORK is on $fstype; put it on a local disk"

FS=${FS:-image}
bin=$WORK/bin etc=$WORK/etc mnt=$WORK/mnt logs=$WORK/logs
mkdir -p "$bin" "$etc" "$mnt" "$logs"

# Unmount whatever is still mounted on our mount points if the run is cut short
# (fusebench stops its daemons itself; a detached mount makes a daemon exit), then
# the image, if this run mounted it.
cleanup() {
	local m
	for m in "$mnt"/*; do
		if grep -qs " $m fuse" /proc/self/mounts; then
			umount -l "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || note "could not unmount $m"
		fi
	done
	bench_fs_umount
}
trap cleanup EXIT

# Room for the tree, its git objects and tarball (~0.5 GiB), the sequential file and
# every run's written copy (fusebench removes those only at the end).
ntargets=$(wc -w <<<"$TARGETS")
bench_fs_mount $(((REPS * ntargets + 1) * SEQ_MIB + 4096))
src=$base/ws tarball=$base/tree.tar

note "building toh-mount, go-fuse's example/loopback, lbmount and fusebench into $bin"
# What is measured is what was built now: said before the build, not after the run
# (edits made while it runs are not in the binaries).
built=$(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet HEAD -- fusefence cmd/toh-mount canon policy bench/fuse || echo ' (with uncommitted changes)')
build_fuse_mirrors "$bin"
(cd "$repo" && go build -o "$bin/fusebench" ./bench/fuse/fusebench)

goroot=$(go env GOROOT)
if [[ ${REFRESH:-0} == 1 || ! -f $src/.prepared ]]; then
	note "preparing SOURCE=$src: a copy of $goroot/src committed to git, a tarball of it, a $SEQ_MIB MiB file"
	rm -rf "$src" "$tarball"
	mkdir -p "$src/scratch"
	cp -a "$goroot/src" "$src/tree"
	tar -cf "$tarball" -C "$src/tree" .
	(
		cd "$src/tree"
		git init -q
		git add -A
		git -c user.name=bench -c user.email=bench@localhost -c gc.auto=0 commit -qm tree
		git gc -q
		git status --porcelain >/dev/null # writes the index's stat data natively
	)
	dd if=/dev/urandom of="$src/scratch/seq-read" bs=1M count="$SEQ_MIB" status=none
	touch "$src/.prepared"
fi
[[ $(stat -c %s "$src/scratch/seq-read") == $((SEQ_MIB << 20)) ]] || die "$src/scratch/seq-read is not $SEQ_MIB MiB; run with REFRESH=1"
find "$src/scratch" -mindepth 1 -maxdepth 1 ! -name seq-read -exec rm -rf {} +
nfiles=$(find "$src/tree" | wc -l)

cat >"$etc/policy.json" <<EOF
{"version": 1, "mode": "workspace-write", "workspaceRoot": "$src"}
EOF
: >"$etc/audit.log"


args=()
for t in $TARGETS; do
	m=$mnt/$t
	mkdir -p "$m"
	case $t in
	native) args+=(-target native) ;;
	toh) args+=(-target "toh=$m=$bin/toh-mount --policy $etc/policy.json --audit $etc/audit.log $src $m") ;;
	lbsame) args+=(-target "lbsame=$m=$bin/lbmount ${lbsame_opts[*]} $src $m") ;;
	loopback) args+=(-target "loopback=$m=$bin/loopback -q -allow-other -directmount $m $src") ;;
	bindfs) args+=(-target "bindfs=$m=bindfs -f $src $m") ;;
	*) die "unknown target $t" ;;
	esac
done

stamp=$(date -u +%Y-%m-%dT%H:%MZ)
load=$(cut -d' ' -f1-3 /proc/loadavg)
cmdline="REPS=$REPS${WORKLOADS:+ WORKLOADS=$WORKLOADS}${SEQ_MIB:+ SEQ_MIB=$SEQ_MIB} FS=$FS bench/fuse.sh"
note "running: $REPS repetitions; per-run times on stderr"
report=$("$bin/fusebench" -source "$src" -tar "$tarball" -logs "$logs" -reps "$REPS" \
	-seq-mib "$SEQ_MIB" ${WORKLOADS:+-workloads "$WORKLOADS"} -json "$WORK/fuse-latest.json" "${args[@]}")
denials=$(wc -l <"$etc/audit.log")

header="# toh-mount speed, $stamp

\`$cmdline\` at $built,
Linux $(uname -r), $(nproc) CPUs, $(go version | cut -d' ' -f3), SOURCE: $nfiles entries of Go's src/ on $fsdesc, load average before the run: $load.
Times: median seconds of $REPS runs (± half the interquartile range, or half the range under 4 runs).
Ratios: median of the per-repetition ratios. The toh-mount audit log recorded $denials denials."

printf '%s\n\n%s\n' "$header" "$report"
if [[ $OUT != - ]]; then
	mkdir -p "$OUT"
	printf '%s\n\n%s\n' "$header" "$report" >"$OUT/fuse-latest.md"
	cp "$WORK/fuse-latest.json" "$OUT/fuse-latest.json"
	note "wrote $OUT/fuse-latest.md"
fi
