#!/usr/bin/env bash
# The local kernel matrix: boots Debian's kernels under qemu (TCG, no network) with a
# busybox guest built here, runs each leg's checks inside, and prints one table.
# See vm-tests/README.md.
set -euo pipefail

VMTESTS=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VMTESTS/.." && pwd)
export PATH="/usr/local/go/bin:$PATH"

usage() {
	cat <<'EOF'
Usage: vm-tests/run-matrix.sh [--leg N]... [--jobs N] [--timeout SECONDS] [--allow-skip]

Boots each leg's Debian kernel under qemu with a busybox guest, runs the leg's checks
against static toh-exec/toh-mount builds of this checkout, and prints a table. Exits
0 when every check passed, 1 when any failed (or was skipped, unless --allow-skip),
2 on a usage or setup error.

  --leg N           run only leg N (repeatable; default: all legs)
  --jobs N          legs booted at once (default: the number of CPUs)
  --timeout S       bound for one leg's qemu run (default 600)
  --allow-skip      a skipped check (toh-mount not built yet) does not fail
  --toh-exec FILE   put this static toh-exec in the guest instead of building one
  --toh-mount FILE  put this static toh-mount in the guest instead of building one

Legs:
  1  Debian 6.1:  Landlock ABI < 5 -> Landlock partial, --require-full refuses; bwrap full; fence
  2  Debian 6.12: both rungs full for read-only (Landlock workspace-write partial by design)
  3  Debian 6.12, user.max_user_namespaces=0: bwrap fails, doctor says why, chain falls to Landlock
  4  Debian 6.12, lsm= without landlock, no user namespaces: everything fails closed (123)
  5  Debian 6.12, /dev/fuse 0600: toh-mount as an unprivileged user fails with a clear message

Cache (kernels, package lists, logs): $TOH_VM_CACHE, else /var/cache/toh-vm for root,
else ${XDG_CACHE_HOME:-~/.cache}/toh-vm.
EOF
}

# The legs: number, Debian kernel series, extra kernel command line.
LEGS=(
	"1|6.1|"
	"2|6.12|"
	"3|6.12|sysctl.user.max_user_namespaces=0"
	"4|6.12|lsm=capability,yama sysctl.user.max_user_namespaces=0"
	"5|6.12|"
)

selected=()
JOBS=$(nproc)
LEG_TIMEOUT=600
ALLOW_SKIP=0
GUEST_TOH_EXEC= # --toh-exec; never taken from the environment
GUEST_TOH_MOUNT=
while [ $# -gt 0 ]; do
	case $1 in
	--leg)
		[ $# -ge 2 ] && [[ $2 =~ ^[1-5]$ ]] || { echo "run-matrix: --leg wants 1..5" >&2; exit 2; }
		selected+=("$2")
		shift 2
		;;
	--jobs)
		[ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "run-matrix: --jobs wants a positive number" >&2; exit 2; }
		JOBS=$2
		shift 2
		;;
	--timeout)
		[ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "run-matrix: --timeout wants seconds" >&2; exit 2; }
		LEG_TIMEOUT=$2
		shift 2
		;;
	--allow-skip) ALLOW_SKIP=1; shift ;;
	--toh-exec | --toh-mount)
		[ $# -ge 2 ] && [ -f "$2" ] || { echo "run-matrix: $1 wants an existing file" >&2; exit 2; }
		f=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
		if [ "$1" = --toh-exec ]; then GUEST_TOH_EXEC=$f; else GUEST_TOH_MOUNT=$f; fi
		shift 2
		;;
	-h | --help) usage; exit 0 ;;
	*) echo "run-matrix: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
done
[ ${#selected[@]} -gt 0 ] || selected=(1 2 3 4 5)

if [ -n "${TOH_VM_CACHE:-}" ]; then
	CACHE=$TOH_VM_CACHE
elif [ "$(id -u)" = 0 ]; then
	CACHE=/var/cache/toh-vm
else
	CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/toh-vm
fi
mkdir -p "$CACHE/build" "$CACHE/kernels" "$CACHE/runs"
# One matrix at a time per cache: the build directory and the image are shared.
exec 9>"$CACHE/lock"
if ! flock -n 9; then
	echo "run-matrix: another run holds $CACHE/lock; waiting" >&2
	flock 9
fi
# On any exit, end the qemu runs this script started: each runs under timeout(1),
# whose pid boot_leg records and which passes the signal on to qemu.
run_dir=
cleanup() {
	local f
	[ -n "$run_dir" ] || return 0
	for f in "$run_dir"/leg*/timeout.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '== %s\n' "$*" >&2; }

# shellcheck source=lib/debian.sh
. "$VMTESTS/lib/debian.sh"
# shellcheck source=lib/image.sh
. "$VMTESTS/lib/image.sh"
# shellcheck source=lib/qemu.sh
. "$VMTESTS/lib/qemu.sh"

wall_start=$SECONDS

# Host tools, from Debian's packages (busybox-static is only extracted, never installed).
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v cpio >/dev/null || need+=(cpio)
[ -x /usr/bin/bwrap ] || need+=(bubblewrap)
[ -x /usr/bin/fusermount3 ] || need+=(fuse3)
command -v go >/dev/null || { echo "run-matrix: go is not installed" >&2; exit 2; }
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "run-matrix: missing ${need[*]}; install them (apt-get install ${need[*]}) or run as root" >&2
		exit 2
	fi
	log "installing ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Kernels for the selected legs.
refresh_kernel_index || { echo "run-matrix: cannot read Debian's package lists" >&2; exit 2; }
declare -A KDIR=()
for l in "${selected[@]}"; do
	IFS='|' read -r _ series _ <<<"${LEGS[l - 1]}"
	if [ -z "${KDIR[$series]:-}" ]; then
		KDIR[$series]=$(kernel_for "$series") || exit 2
	fi
done

prune_kernels

bin=$CACHE/build/bin
build_binaries "$bin" || { echo "run-matrix: build failed" >&2; exit 2; }
initrd=$CACHE/build/initramfs.cpio.gz
log "packing the initramfs"
build_initramfs "$bin" "$initrd" "${KDIR[@]}" || { echo "run-matrix: initramfs build failed" >&2; exit 2; }
log "initramfs: $(du -h "$initrd" | cut -f1); setup took $((SECONDS - wall_start))s"

run_dir=$CACHE/runs/$(date +%Y%m%d-%H%M%S)
mkdir -p "$run_dir"
# Keep the logs of the last 20 runs.
ls -1d "$CACHE"/runs/2* 2>/dev/null | head -n -20 | xargs -r rm -rf
ln -sfn "$run_dir" "$CACHE/runs/latest"

# Boot the legs, JOBS at a time (TCG with one vCPU keeps one host core busy).
running=0
for l in "${selected[@]}"; do
	IFS='|' read -r leg series extra <<<"${LEGS[l - 1]}"
	if [ "$running" -ge "$JOBS" ]; then
		wait -n || true
		running=$((running - 1))
	fi
	log "leg $leg: booting Debian $series ${extra:+($extra)}"
	boot_leg "$leg" "${KDIR[$series]}" "$initrd" "$run_dir/leg$leg" "$extra" &
	running=$((running + 1))
done
wait || true

# The table: one row per check, plus a row for a leg that did not finish.
rows=$run_dir/table.txt
: >"$rows"
for l in "${selected[@]}"; do
	IFS='|' read -r leg series extra <<<"${LEGS[l - 1]}"
	out=$run_dir/leg$leg
	{ tr -d '\r' <"$out/results.log" | grep -a '^TOH-RESULT|' || true; } | awk -F'|' -v OFS='|' '{
		for (i = 2; i <= 6; i++) sub(/^[a-z]+=/, "", $i)
		r = $7
		if (r == "ok") r = "PASS"; else if (r ~ /^SKIP/) r = r; else r = "FAIL"
		print $2, $3, $4, $5, $6, r
	}' >>"$rows"
	got=$(tr -d '\r' <"$out/results.log" | grep -ac '^TOH-RESULT|' || true)
	done_line=$(tr -d '\r' <"$out/results.log" | grep -a '^TOH-DONE|' | tail -1 || true)
	want=${done_line##*checks=}
	if [ -z "$done_line" ]; then
		st=$(cat "$out/qemu-status")
		why="no TOH-DONE (qemu exit $st"
		[ "$st" = 124 ] && why="$why: timed out after ${LEG_TIMEOUT}s"
		echo "$leg|Debian $series|guest-finished|TOH-DONE line|$why)|FAIL" >>"$rows"
	elif [ "$want" != "$got" ]; then
		echo "$leg|Debian $series|result-lines|$want|$got|FAIL" >>"$rows"
	fi
done

echo
{
	echo "LEG|KERNEL|CHECK|EXPECTED|OBSERVED|RESULT"
	cat "$rows"
} | column -t -s '|' -o ' | '
echo

pass=$(awk -F'|' '$6 == "PASS"' "$rows" | wc -l)
fail=$(awk -F'|' '$6 == "FAIL"' "$rows" | wc -l)
skip=$(awk -F'|' '$6 ~ /^SKIP/' "$rows" | wc -l)
for l in "${selected[@]}"; do
	IFS='|' read -r leg series _ <<<"${LEGS[l - 1]}"
	out=$run_dir/leg$leg
	awk -F'|' -v leg="$leg" '$1 == leg && $6 == "FAIL" {print $3}' "$rows" | while read -r check; do
		echo "-- leg $leg $check:"
		if [ "$check" = guest-finished ]; then
			echo "   last console lines ($out/console.log):"
			tr -d '\r' <"$out/console.log" | tail -10 | sed 's/^/   /'
			continue
		fi
		{ tr -d '\r' <"$out/results.log" | grep -a "^TOH-DETAIL|leg=$leg|check=$check|" || true; } |
			cut -d'|' -f4- | sed 's/^/   /' | head -20
	done
	printf 'leg %s (Debian %s): qemu %ss\n' "$leg" "$series" "$(cat "$out/seconds")"
done
wall=$((SECONDS - wall_start))
echo "$pass passed, $fail failed, $skip skipped"
echo "wall time: ${wall}s; logs: $run_dir"
if [ "$fail" -gt 0 ]; then
	exit 1
fi
if [ "$skip" -gt 0 ] && [ "$ALLOW_SKIP" = 0 ]; then
	echo "run-matrix: $skip check(s) skipped; a skipped check fails the matrix (--allow-skip to accept)" >&2
	exit 1
fi
exit 0
