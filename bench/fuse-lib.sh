# shellcheck shell=bash
# bench/fuse-lib.sh: what fuse.sh and fuse-requests.sh share (sourced, not run).
# Needs $repo, the repository's top directory.

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
