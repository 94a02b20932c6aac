#!/usr/bin/env bash
# Ubuntu 24.04 as it ships, made explicit (run as root by Vagrant): the AppArmor
# restriction on unprivileged user namespaces stays ON, and bwrap gets its namespaces
# only through Ubuntu's bwrap-userns-restrict profile, which is loaded here. Then it
# asserts both halves, so the suite that follows really runs on such a host:
#   - negative control: an unconfined unprivileged program (unshare -Ur) is refused;
#   - positive control: the unprivileged user's bwrap, with toh's read-only profile
#     and with --unshare-net, works.
set -euo pipefail

die() { printf 'apparmor-ubuntu: FAIL: %s\n' "$*" >&2; exit 1; }
say() { printf 'apparmor-ubuntu: %s\n' "$*"; }

user=tohrun
knob=/proc/sys/kernel/apparmor_restrict_unprivileged_userns
profile=/etc/apparmor.d/bwrap-userns-restrict

[ -e "$knob" ] || die "$knob is missing: not an Ubuntu kernel with the restriction (box $(uname -r))"
# "Left on": Ubuntu 24.04 enables it by default; set it (and keep it across boots) in
# case a box image turned it off, never the reverse.
sysctl -q -w kernel.apparmor_restrict_unprivileged_userns=1
echo 'kernel.apparmor_restrict_unprivileged_userns = 1' >/etc/sysctl.d/60-toh-apparmor-userns.conf
[ "$(cat "$knob")" = 1 ] || die "kernel.apparmor_restrict_unprivileged_userns is $(cat "$knob"), want 1"

# apparmor 4.1 (Ubuntu 25.04 and later) ships the profile in /etc/apparmor.d; Ubuntu
# 24.04 keeps it among the extra profiles of apparmor-profiles.
if [ ! -f "$profile" ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends apparmor-profiles >/dev/null
	extra=/usr/share/apparmor/extra-profiles/bwrap-userns-restrict
	[ -f "$extra" ] || die "no bwrap-userns-restrict profile in /etc/apparmor.d or $extra"
	install -m 0644 "$extra" "$profile"
fi
apparmor_parser -r "$profile"
loaded=$(grep -E '^(bwrap|unpriv_bwrap) ' /sys/kernel/security/apparmor/profiles || true)
grep -q '^bwrap (enforce)' <<<"$loaded" || die "profile bwrap is not loaded in enforce mode: ${loaded:-not loaded}"
grep -q '^unpriv_bwrap ' <<<"$loaded" || die "profile unpriv_bwrap is not loaded"
say "kernel.apparmor_restrict_unprivileged_userns = 1; loaded: $(tr '\n' ' ' <<<"$loaded")"

id -u "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
as_user() { runuser -u "$user" -- env -i PATH=/usr/bin:/bin HOME=/tmp "$@"; }

if out=$(as_user unshare --user --map-root-user true 2>&1); then
	die "unshare -Ur works for $user: the restriction does not bite, this box tests nothing hostile"
fi
say "negative control: unshare -Ur as $user is refused ($out)"

ro=(--ro-bind / / --dev /dev --unshare-pid --proc /proc --die-with-parent)
out=$(as_user /usr/bin/bwrap "${ro[@]}" -- true 2>&1) ||
	die "bwrap as $user fails under the loaded profile: $out"
out=$(as_user /usr/bin/bwrap "${ro[@]}" --unshare-net -- true 2>&1) ||
	die "bwrap --unshare-net as $user fails under the loaded profile: $out"
say "positive control: bwrap as $user works (read-only profile, and with --unshare-net)"
