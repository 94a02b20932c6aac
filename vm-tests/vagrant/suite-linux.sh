#!/usr/bin/env bash
# Runs toh's full suite inside a Linux box (run as root by Vagrant), twice:
#   1. as root: scripts/test.sh, which also runs its kernel-facing tests as its own
#      unprivileged user (tohtest);
#   2. as the unprivileged user tohrun: scripts/test.sh again, the whole suite, with
#      TOH_TEST_REQUIRE=bwrap,landlock as in the root pass, so a rung that does not
#      work for an ordinary user fails instead of skipping.
# Each pass runs in a fresh copy of the synced checkout owned by its user; the synced
# copy is never written. Both passes run even when the first fails; the exit status
# is 0 only if both passed.
#
#   suite-linux.sh SRC     SRC: the synced checkout (/toh)
set -uo pipefail

src=${1:?usage: suite-linux.sh SRC}
user=tohrun
require=bwrap,landlock

say() { printf '== vagrant: %s\n' "$*"; }

facts() {
	say "host: $(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release), kernel $(uname -r), $(uname -m)"
	say "LSMs: $(cat /sys/kernel/security/lsm 2>/dev/null || echo unknown)"
	say "user.max_user_namespaces=$(cat /proc/sys/user/max_user_namespaces 2>/dev/null || echo -)" \
		"kernel.unprivileged_userns_clone=$(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo -)" \
		"kernel.apparmor_restrict_unprivileged_userns=$(cat /proc/sys/kernel/apparmor_restrict_unprivileged_userns 2>/dev/null || echo -)"
	if [ -r /sys/kernel/security/apparmor/profiles ]; then
		say "AppArmor bwrap profiles: $(grep -E '^(unpriv_)?bwrap ' /sys/kernel/security/apparmor/profiles | tr '\n' ' ')"
	fi
	say "$(/usr/local/go/bin/go version), bwrap $(bwrap --version 2>&1 | awk '{print $2}')"
}

# fresh_copy DEST OWNER: a copy of the synced checkout that OWNER owns (git refuses a
# repository owned by someone else, and Go's VCS stamping runs git).
fresh_copy() {
	rm -rf "$1"
	cp -a "$src" "$1"
	chown -R "$2:" "$1"
}

[ -f "$src/go.mod" ] || { echo "suite-linux: no checkout at $src (vagrant rsync NAME)" >&2; exit 2; }
[ -x /usr/local/go/bin/go ] || { echo "suite-linux: no Go in /usr/local/go (provision with install-go.sh)" >&2; exit 2; }
facts

say "pass 1: scripts/test.sh as root"
fresh_copy /root/toh root
(cd /root/toh && PATH=/usr/local/go/bin:$PATH scripts/test.sh)
root_status=$?

say "pass 2: scripts/test.sh as $user (TOH_TEST_REQUIRE=$require)"
home=$(getent passwd "$user" | cut -d: -f6)
fresh_copy "$home/toh" "$user"
(cd "$home/toh" && runuser -u "$user" -- env -i HOME="$home" USER="$user" LOGNAME="$user" \
	PATH=/usr/local/go/bin:/usr/bin:/bin TOH_TEST_REQUIRE="$require" scripts/test.sh)
user_status=$?

say "result: root pass exit $root_status, $user pass exit $user_status"
[ "$root_status" = 0 ] && [ "$user_status" = 0 ]
