#!/usr/bin/env bash
# Provisions a Debian or Ubuntu box for toh's suite (run as root by Vagrant): what
# scripts/test.sh and the tests need from the distribution, and the unprivileged user
# the suite runs as a second time.
set -euo pipefail

# tohrun: the unprivileged user of the second pass (no sudo, no extra groups).
# scripts/test.sh makes its own (tohtest) for its kernel-facing pass.
user=tohrun

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# bubblewrap, fuse3, attr, util-linux (runuser): what the tests exercise; git: gofmt's
# file list, VCS stamping and the git tests; gcc and libc6-dev: -race needs cgo;
# curl and ca-certificates: install-go.sh.
apt-get install -y -qq --no-install-recommends \
	bubblewrap fuse3 attr util-linux git gcc libc6-dev curl ca-certificates rsync >/dev/null

id -u "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
echo "setup-linux: $(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release), kernel $(uname -r), bwrap $(bwrap --version 2>&1 | awk '{print $2}')"
