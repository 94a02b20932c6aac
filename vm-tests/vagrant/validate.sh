#!/usr/bin/env bash
# What can be checked about the Vagrant matrix without booting a box (CI cannot
# download boxes; scripts/test.sh does not run this):
#   - every provisioning script parses (bash -n), and passes shellcheck when it is
#     installed;
#   - `vagrant validate --ignore-provider` accepts the Vagrantfile on any host with
#     vagrant: it checks every machine's settings except the provider blocks, whose
#     checks need the provider's plugin (and, for VirtualBox, VBoxManage);
#   - where the vagrant-libvirt plugin is installed (Debian's vagrant package brings
#     it), `VAGRANT_DEFAULT_PROVIDER=libvirt vagrant validate` checks the libvirt
#     blocks too. It talks to no hypervisor.
# Vagrant's state directory goes to a temporary directory, not into the checkout.
# Exit status: 0 all passed; 1 a check failed; 2 vagrant is not installed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

status=0
ok() { printf 'ok    %s\n' "$*"; }
bad() { printf 'FAIL  %s\n' "$*"; status=1; }

for f in vm-tests/vagrant/*.sh; do
	if out=$(bash -n "$f" 2>&1); then ok "bash -n $f"; else bad "bash -n $f: $out"; fi
done
if command -v shellcheck >/dev/null; then
	if out=$(shellcheck -s bash vm-tests/vagrant/*.sh 2>&1); then
		ok "shellcheck vm-tests/vagrant/*.sh"
	else
		bad "shellcheck vm-tests/vagrant/*.sh:"
		printf '%s\n' "$out"
	fi
else
	printf 'skip  shellcheck: not installed (apt-get install shellcheck)\n'
fi

# The scripts the Vagrantfile names must exist (vagrant validate does not check paths
# of shell provisioners).
while read -r f; do
	if [ -f "$f" ]; then ok "Vagrantfile names $f: exists"; else bad "Vagrantfile names $f: missing"; fi
done < <(sed -n 's/.*path: "\(vm-tests\/vagrant\/[^"]*\)".*/\1/p' Vagrantfile | sort -u)

if ! command -v vagrant >/dev/null; then
	echo "vagrant is not installed (Debian: apt-get install vagrant)"
	exit 2
fi
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
export VAGRANT_DOTFILE_PATH="$state/dot" VAGRANT_CHECKPOINT_DISABLE=1 VAGRANT_NO_COLOR=1

if out=$(vagrant validate --ignore-provider 2>&1); then
	ok "vagrant validate --ignore-provider ($(vagrant --version)): $(tail -n 1 <<<"$out")"
else
	bad "vagrant validate --ignore-provider:"
	printf '%s\n' "$out"
fi
if vagrant plugin list 2>/dev/null | grep -q '^vagrant-libvirt '; then
	if out=$(VAGRANT_DEFAULT_PROVIDER=libvirt vagrant validate 2>&1); then
		ok "VAGRANT_DEFAULT_PROVIDER=libvirt vagrant validate: $(tail -n 1 <<<"$out")"
	else
		bad "VAGRANT_DEFAULT_PROVIDER=libvirt vagrant validate:"
		printf '%s\n' "$out"
	fi
else
	printf 'skip  vagrant validate with the libvirt provider: vagrant-libvirt is not installed\n'
fi
exit "$status"
