# shellcheck shell=bash
# bench/fuse-lib.sh: what fuse.sh, fuse-requests.sh and fuse-ab.sh share (sourced,
# not run). Needs $repo, the repository's top directory.

# lbsame_opts are bench/fuse/lbmount's flags for the mount and cache options
# fusefence.Mount uses, so that toh against lbsame is the fence's own cost; keep
# the two in step.
# shellcheck disable=SC2034 # used by the scripts that source this file
lbsame_opts=(-allow-other -atomic-o-trunc -no-opendir -timeout 1s -negative 1s -keep-cache -cache-dir -passthrough read+create -direct-write -setattr-timeout 1s -no-flush -max-write 1040384 -killpriv-v2)

# build_fuse_mirrors BIN: builds toh-mount, go-fuse's example/loopback (from the
# module cache) and lbmount into BIN.
build_fuse_mirrors() {
	(
		cd "${repo:?}" || exit 1
		go build -o "$1/toh-mount" ./cmd/toh-mount
		go build -o "$1/loopback" github.com/hanwen/go-fuse/v2/example/loopback
		go build -o "$1/lbmount" ./bench/fuse/lbmount
	)
}

# bench_fs_mount [MIB]: puts the file system SOURCE lives on in place for FS
# ("image" or "work") and sets base (where ws/ and tree.tar live), fsdesc (for the
# report) and fs_mounted (what bench_fs_umount unmounts; empty if nothing). With MIB
# (bench/fuse.sh) the image is made if missing (REFRESH=1 remakes it) and grown to
# MIB if smaller; it is sparse, so only what a run writes takes room on WORK's disk,
# and bench_fs_umount gives that back (fstrim). Without MIB a missing image is an
# error. Needs WORK, die and note.
#
# Why an image: ext4 without a journal (this VM's root file system is one) skips
# every inode deleted in the last 60 s (300 s for directories) when it allocates
# one (find_inode_bit -> recently_deleted, 20% of toh-mount's CPU in a profile of
# untar), so each workload that made files after the previous run's copy was
# removed natively paid for all of those: native untar took 8.4 s there against
# 0.9 s on a journaled ext4, which flattered every ratio to native, and one
# target's untar varied 3x within a run. Machines with a journal (the usual ext4)
# do not do this.
bench_fs_mount() {
	local fstype img have
	fstype=$(df --output=fstype "$WORK" | tail -n 1)
	base=$WORK fsdesc=$fstype fs_mounted=""
	case ${FS:-image} in
	work) return ;;
	image) ;;
	*) die "FS=$FS: want image or work" ;;
	esac
	img=$WORK/ext4.img base=$WORK/fs
	mkdir -p "$base"
	! mountpoint -q "$base" || die "$base is mounted already (a run cut short?): umount it first"
	if [[ -n ${1:-} ]]; then
		for c in mkfs.ext4 e2fsck resize2fs fstrim; do
			command -v $c >/dev/null || die "$c is not installed (apt-get install -y e2fsprogs util-linux), or run with FS=work"
		done
		if [[ ${REFRESH:-0} == 1 || ! -f $img ]]; then
			note "making a journaled ext4 of $1 MiB (sparse) in $img"
			rm -f "$img"
			truncate -s "${1}M" "$img"
			mkfs.ext4 -q -F "$img"
		elif have=$(($(stat -c %s "$img") >> 20)) && ((have < $1)); then
			note "growing $img from $have to $1 MiB"
			truncate -s "${1}M" "$img"
			e2fsck -fy "$img" >/dev/null 2>&1
			resize2fs "$img" >/dev/null 2>&1 || die "could not grow $img: remove it or run with REFRESH=1"
		fi
	fi
	[[ -f $img ]] || die "$img is missing: run bench/fuse.sh once to prepare it (or FS=work)"
	mount -o loop "$img" "$base" || die "could not loop-mount $img (no loop devices?): run with FS=work"
	fs_mounted=$base
	fsdesc="ext4 with a journal (an image on $fstype, loop-mounted)"
}

# bench_fs_umount: unmounts what bench_fs_mount mounted, if anything, after handing
# the blocks the run freed back to WORK's disk.
bench_fs_umount() {
	if [[ -n ${fs_mounted:-} ]]; then
		# After a commit: ext4 reuses (and trims) freed blocks only once the
		# transaction that freed them is committed.
		sync -f "$fs_mounted" && fstrim "$fs_mounted" 2>/dev/null || true
		umount "$fs_mounted" 2>/dev/null || umount -l "$fs_mounted" || note "could not unmount $fs_mounted"
		fs_mounted=""
	fi
}
