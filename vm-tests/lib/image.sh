# Build the guest: static Go binaries and one busybox initramfs for every kernel.
# Sourced by run-matrix.sh; needs REPO, CACHE and log().

# build_binaries OUT: toh-exec, toh-mount (when cmd/toh-mount has a main package) and
# the guest agent, all static (CGO_ENABLED=0). GUEST_TOH_EXEC / GUEST_TOH_MOUNT (set by
# --toh-exec / --toh-mount), when set,
# are used instead of building (they must be static). Writes OUT/toh-mount-status:
# "built", "absent" or "build-failed: <first error line>".
build_binaries() {
	local out=$1
	mkdir -p "$out"
	rm -f "$out/toh-mount"
	log "building the static guest agent"
	(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$out/toh-vm-guest" ./vm-tests/guest) || return 1
	if [ -n "${GUEST_TOH_EXEC:-}" ]; then
		log "using toh-exec $GUEST_TOH_EXEC"
		install -m 0755 "$GUEST_TOH_EXEC" "$out/toh-exec"
	else
		log "building static toh-exec"
		(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$out/toh-exec" ./cmd/toh-exec) || return 1
	fi
	if [ -n "${GUEST_TOH_MOUNT:-}" ]; then
		log "using toh-mount $GUEST_TOH_MOUNT"
		install -m 0755 "$GUEST_TOH_MOUNT" "$out/toh-mount"
		echo built >"$out/toh-mount-status"
	elif ls "$REPO"/cmd/toh-mount/*.go 2>/dev/null | grep -qv '_test\.go$'; then
		log "building static toh-mount"
		if (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$out/toh-mount" ./cmd/toh-mount) >"$out/toh-mount.log" 2>&1; then
			echo built >"$out/toh-mount-status"
		else
			log "warning: toh-mount does not build (see $out/toh-mount.log); its checks fail"
			echo "build-failed: $(grep -m1 . "$out/toh-mount.log")" >"$out/toh-mount-status"
		fi
	else
		log "cmd/toh-mount has no Go files yet; the fence checks are skipped"
		echo absent >"$out/toh-mount-status"
	fi
}

# copy_with_libs ROOT BINARY [MODE]: copies a dynamically linked host binary into ROOT
# at the same path, with every shared library ldd names (and the loader).
copy_with_libs() {
	local root=$1 bin=$2 mode=${3:-0755} lib
	install -D -m "$mode" "$bin" "$root$bin"
	for lib in $(ldd "$bin" | grep -oE '/[^ ]+'); do
		[ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
	done
}

# build_initramfs BIN OUT KERNELDIR...: packs the guest into OUT (gzip'd newc cpio).
build_initramfs() {
	local bin=$1 out=$2
	shift 2
	local root
	root=$(mktemp -d "$CACHE/build/root.XXXXXX")
	local bb
	bb=$(busybox_static) || return 1
	# busybox-static: one static binary, an applet symlink for each command.
	install -D -m 0755 "$bb" "$root/bin/busybox"
	local applet
	for applet in $("$bb" --list-full); do
		[ -e "$root/$applet" ] || { mkdir -p "$root/$(dirname "$applet")" && ln -s /bin/busybox "$root/$applet"; }
	done
	mkdir -p "$root"/{dev,proc,sys,tmp,run,etc/toh-vm,home,root,srv,var/tmp}
	install -m 0755 "$VMTESTS/guest/stage1-init.sh" "$root/init"
	install -D -m 0755 "$bin/toh-vm-guest" "$root/sbin/toh-vm-guest"
	install -D -m 0755 "$bin/toh-exec" "$root/usr/bin/toh-exec"
	if [ -f "$bin/toh-mount" ]; then
		install -D -m 0755 "$bin/toh-mount" "$root/usr/bin/toh-mount"
	fi
	cp "$bin/toh-mount-status" "$root/etc/toh-vm/toh-mount-status"
	# bwrap as Debian ships it (not setuid), and fusermount3 setuid root as fuse3 ships
	# it, each with the shared libraries it links.
	copy_with_libs "$root" /usr/bin/bwrap 0755
	copy_with_libs "$root" /usr/bin/fusermount3 4755
	local k
	for k in "$@"; do
		kernel_modules_for "$k" "$root" fuse || return 1
	done
	# Every file belongs to root in the guest (-R 0:0); modes (setuid included) are
	# kept as they are in the staging tree.
	(cd "$root" && find . | cpio --quiet -o -H newc -R 0:0 | gzip -1) >"$out.tmp"
	mv "$out.tmp" "$out"
	rm -rf "$root"
}
