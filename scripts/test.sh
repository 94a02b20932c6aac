#!/usr/bin/env bash
# The whole default test suite, from a fresh clone. As root it installs what the tests
# need (bubblewrap, fuse3), runs every package as root with the race detector, then
# runs the kernel-facing tests again as an unprivileged user. Tests that need bwrap,
# Landlock or FUSE fail instead of skipping here (TOH_TEST_REQUIRE).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

log() { printf '== %s\n' "$*"; }

if [ "$(id -u)" = 0 ]; then
	need=()
	command -v bwrap >/dev/null || need+=(bubblewrap)
	command -v fusermount3 >/dev/null || need+=(fuse3)
	command -v runuser >/dev/null || need+=(util-linux)
	command -v setfattr >/dev/null || need+=(attr)
	if [ ${#need[@]} -gt 0 ]; then
		log "installing ${need[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
	fi
	export TOH_TEST_REQUIRE=bwrap,landlock,fuse
else
	log "not root: nothing installed; missing bwrap/Landlock/FUSE make their tests skip"
fi

log "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted"; exit 1; fi
log "go vet (linux, darwin)"
go vet ./...
GOOS=darwin go vet ./...

# Not under /tmp: a Landlock workspace-write run refuses to start while toh-exec lies
# in one of its writable roots, and /tmp is one.
bindir=$(mktemp -d /var/tmp/toh-test-bin.XXXXXX)
chmod 755 "$bindir"
trap 'rm -rf "$bindir"' EXIT
go build -o "$bindir/toh-exec" ./cmd/toh-exec
# toh-exec --fence runs the toh-mount installed beside it.
go build -o "$bindir/toh-mount" ./cmd/toh-mount
export TOH_EXEC_BIN="$bindir/toh-exec"

log "go test -race ./... (as $(id -un))"
go test -race -count=1 ./...

if [ "$(id -u)" = 0 ]; then
	user=tohtest
	id -u "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
	home=$(getent passwd "$user" | cut -d: -f6)
	install -d -o "$user" -g "$user" "$home" # tests may have made the user without one
	log "kernel-facing tests as unprivileged user $user"
	pkgs=(./cmd/toh-exec ./sandbox ./canon ./policy ./fusefence ./cmd/toh-mount)
	# A program the user may run but not read (its process is then not dumpable):
	# the fence must still act for it (TestFenceRunsProgramsItCannotRead).
	install -m 0711 "$(command -v touch)" "$bindir/xonly-touch"
	for pkg in "${pkgs[@]}"; do
		name=$(basename "$pkg")
		go test -c -race -o "$bindir/$name.test" "$pkg"
	done

	# FUSE as a distribution sets it up. This machine's /dev/fuse is root-only
	# (0600) where Debian makes it 0666, so the fence packages run in a private
	# mount namespace where a 0666 node of the same device is bound over /dev/fuse.
	# The machine's own node is never changed: an interrupted run leaves nothing to
	# restore, and the mounts the tests make die with the namespace.
	fuse_dev="$((16#$(stat -c %t /dev/fuse))) $((16#$(stat -c %T /dev/fuse)))"
	mkdir "$bindir/dev"
	with_user_fuse() {
		unshare --mount --propagation private sh -ec '
			mount -t tmpfs -o mode=0755 tmpfs "$0"
			mknod -m 0666 "$0/fuse" c $1
			mount --bind "$0/fuse" /dev/fuse
			shift
			exec "$@"' "$bindir/dev" "$fuse_dev" "$@"
	}

	for pkg in "${pkgs[@]}"; do
		name=$(basename "$pkg")
		wrap=() require=bwrap,landlock
		case $pkg in ./fusefence | ./cmd/toh-mount | ./cmd/toh-exec) wrap=(with_user_fuse) require=bwrap,landlock,fuse ;; esac
		log "  $pkg"
		# Each package's tests run from a copy of its directory the user owns, so
		# testdata/ is readable and nothing is written into the checkout.
		work=$(runuser -u "$user" -- mktemp -d "$home/toh-pkg.XXXXXX")
		cp -r "$pkg/." "$work/"
		chown -R "$user" "$work"
		(cd "$work" && "${wrap[@]}" runuser -u "$user" -- env -i PATH=/usr/bin:/bin HOME="$home" \
			TOH_EXEC_BIN="$TOH_EXEC_BIN" TOH_MOUNT_BIN="$bindir/toh-mount" TOH_TEST_REQUIRE=$require \
			TOH_TEST_XONLY="$bindir/xonly-touch" \
			"$bindir/$name.test" -test.count=1)
		if [ "$pkg" = ./cmd/toh-exec ]; then
			# And once where this user cannot open /dev/fuse (the machine's own,
			# root-only node): a fenced run must refuse to start. Skips, saying so,
			# on a machine whose /dev/fuse is open to everyone.
			log "  $pkg without /dev/fuse access"
			(cd "$work" && runuser -u "$user" -- env -i PATH=/usr/bin:/bin HOME="$home" \
				TOH_EXEC_BIN="$TOH_EXEC_BIN" TOH_TEST_REQUIRE=bwrap \
				"$bindir/$name.test" -test.count=1 -test.run 'TestFenceFailsClosedWithoutFUSE' -test.v)
		fi
		rm -rf "$work"
	done
fi
log "all tests passed"
