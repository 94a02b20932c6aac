#!/usr/bin/env bash
# Runs toh's full suite inside a macOS box (run by Vagrant as the unprivileged
# "vagrant" user, which has passwordless sudo), twice: `go vet ./...` and
# `go test ./...` as root (sudo -H) and as vagrant itself. TOH_TEST_REQUIRE=seatbelt
# makes the Seatbelt tests fail instead of skipping when sandbox-exec is unusable.
# Each pass runs in a fresh copy of the synced checkout owned by its user; both run
# even when the first fails; the exit status is 0 only if both passed.
#
#   suite-macos.sh SRC     SRC: the synced checkout (/Users/vagrant/toh-src)
set -uo pipefail

src=${1:?usage: suite-macos.sh SRC}
go=/usr/local/go/bin/go
# No VCS stamping: /usr/bin/git is a stub that fails until the Command Line Tools are
# installed, and a failing git fails every build that stamps.
goenv=(PATH=/usr/local/go/bin:/usr/bin:/bin:/usr/sbin:/sbin GOFLAGS=-buildvcs=false TOH_TEST_REQUIRE=seatbelt)

say() { printf '== vagrant: %s\n' "$*"; }

[ -f "$src/go.mod" ] || { echo "suite-macos: no checkout at $src (vagrant rsync macos)" >&2; exit 2; }
[ -x "$go" ] || { echo "suite-macos: no Go in /usr/local/go (provision with install-go.sh)" >&2; exit 2; }
say "host: macOS $(sw_vers -productVersion) ($(sw_vers -buildVersion)), $(uname -m), $("$go" version)"
if [ -x /usr/bin/sandbox-exec ] && out=$(/usr/bin/sandbox-exec -p '(version 1) (allow default)' /usr/bin/true 2>&1); then
	say "sandbox-exec: usable"
else
	say "sandbox-exec: NOT usable (${out:-missing}); the Seatbelt tests will fail (TOH_TEST_REQUIRE=seatbelt)"
fi

# suite DIR GO: go vet and go test in DIR; the inner script expands its own arguments.
# shellcheck disable=SC2016
suite=(/bin/bash -c 'cd "$1" && "$2" vet ./... && "$2" test -count=1 ./...' suite)

say "pass 1: go vet, go test ./... as root"
sudo rm -rf /var/root/toh
sudo cp -R "$src" /var/root/toh
sudo chown -R root:wheel /var/root/toh
sudo -H env "${goenv[@]}" "${suite[@]}" /var/root/toh "$go"
root_status=$?

say "pass 2: go vet, go test ./... as $(id -un) (uid $(id -u))"
rm -rf "$HOME/toh"
cp -R "$src" "$HOME/toh"
env "${goenv[@]}" "${suite[@]}" "$HOME/toh" "$go"
user_status=$?

say "result: root pass exit $root_status, $(id -un) pass exit $user_status"
[ "$root_status" = 0 ] && [ "$user_status" = 0 ]
