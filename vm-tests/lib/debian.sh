# Fetch Debian packages into the cache and extract them: the kernels and
# busybox-static. Sourced by run-matrix.sh; needs CACHE and log().
#
# apt runs against a private configuration under $CACHE/apt (its own sources list,
# lists and archive cache), so the host's apt configuration and state are never
# changed, and nothing is installed on the host. The signed Debian kernel images are
# used as they are: vmlinuz from /boot, modules from [/usr]/lib/modules.

# The suites that serve the kernels: bookworm (+ security) has 6.1; trixie (+ security)
# and bookworm-backports have 6.12. trixie keeps 6.12 for its whole life, so the 6.12
# leg does not depend on what backports moves on to; the newest 6.12 of either wins.
KERNEL_SOURCES='deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security trixie-security main'

apt_private() {
	local cmd=$1
	shift
	local a=$CACHE/apt
	"$cmd" \
		-o Dir::Etc::SourceList="$a/sources.list" \
		-o Dir::Etc::SourceParts="$a/sources.list.d" \
		-o Dir::Etc::Preferences="$a/preferences" \
		-o Dir::Etc::PreferencesParts="$a/preferences.d" \
		-o Dir::State::Lists="$a/lists" \
		-o Dir::State::status=/dev/null \
		-o Dir::Cache="$a/cache" \
		-o APT::Sandbox::User=root \
		"$@"
}

# refresh_kernel_index updates the private package lists when they are missing or
# older than a day. A failed update with lists present only warns: the cached
# kernels still serve.
refresh_kernel_index() {
	local a=$CACHE/apt
	mkdir -p "$a/lists/partial" "$a/cache/archives/partial" "$a/sources.list.d" "$a/preferences.d"
	local fresh=1
	if [ "$(cat "$a/sources.list" 2>/dev/null)" != "$KERNEL_SOURCES" ]; then
		printf '%s\n' "$KERNEL_SOURCES" >"$a/sources.list"
		fresh=0
	fi
	if [ "$fresh" = 1 ] && [ -n "$(find "$a/lists" -maxdepth 1 -name '*_Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
		return 0
	fi
	log "updating the private package lists for Debian kernels"
	if ! apt_private apt-get -qq update >"$a/update.log" 2>&1; then
		if ls "$a/lists/"*_Packages* >/dev/null 2>&1; then
			log "warning: apt-get update failed (see $a/update.log); using the lists already cached"
		else
			cat "$a/update.log" >&2
			return 1
		fi
	fi
}

# kernel_for SERIES (6.1, 6.12): prints the directory holding boot/vmlinuz-* and
# [usr/]lib/modules/*, fetching and extracting the newest linux-image-amd64 of that series.
kernel_for() {
	local series=$1 a=$CACHE/apt version pkg deb dir
	# linux-image-amd64's versions, newest first; its dependency names the image.
	version=$(apt_private apt-cache madison linux-image-amd64 2>/dev/null |
		awk -F'|' '{gsub(/ /,"",$2); print $2}' | grep -E "^${series//./\\.}\\." | head -1)
	if [ -z "$version" ]; then
		# Offline or the suite moved on: fall back to what was extracted before.
		dir=$(cat "$CACHE/kernels/$series.current" 2>/dev/null || true)
		if [ -n "$dir" ] && [ -d "$dir" ]; then
			log "warning: no $series kernel in the package lists; using cached $(basename "$dir")" >&2
			echo "$dir"
			return 0
		fi
		echo "run-matrix: no Debian $series kernel found (linux-image-amd64 ${series}.*)" >&2
		return 1
	fi
	pkg=$(apt_private apt-cache depends "linux-image-amd64=$version" 2>/dev/null |
		awk '/Depends: linux-image-/{print $2; exit}')
	dir=$CACHE/kernels/$pkg
	if [ ! -f "$dir/.extracted" ]; then
		mkdir -p "$CACHE/debs"
		deb=$(ls "$CACHE/debs/${pkg}_"*.deb 2>/dev/null | head -1 || true)
		if [ -z "$deb" ]; then
			log "downloading $pkg ($version)" >&2
			(cd "$CACHE/debs" && apt_private apt-get -qq download "$pkg") >&2
			deb=$(ls "$CACHE/debs/${pkg}_"*.deb | head -1)
		fi
		log "extracting $(basename "$deb")" >&2
		rm -rf "$dir"
		mkdir -p "$dir"
		dpkg-deb -x "$deb" "$dir"
		touch "$dir/.extracted"
	fi
	echo "$dir" >"$CACHE/kernels/$series.current"
	echo "$dir"
}

# kernel_moddir DIR prints the kernel's modules directory: lib/modules/<release>
# (bookworm) or usr/lib/modules/<release> (trixie, merged /usr).
kernel_moddir() {
	ls -d "$1"/lib/modules/*/ "$1"/usr/lib/modules/*/ 2>/dev/null | head -1 | sed 's:/$::'
}

# kernel_release DIR prints the release name (the modules directory's name).
kernel_release() {
	basename "$(kernel_moddir "$1")"
}

# kernel_modules_for DIR OUT NAME...: copies each named module (fuse, ...) that the
# kernel builds as a module, with its dependencies first, into
# OUT/lib/modules/<release>/ and lists them in toh-vm.order for the guest to load. A
# module the kernel has built in (listed in modules.builtin) is skipped.
kernel_modules_for() {
	local kdir=$1 out=$2
	shift 2
	local rel mdir dest order=()
	mdir=$(kernel_moddir "$kdir")
	rel=$(basename "$mdir")
	dest=$out/lib/modules/$rel
	mkdir -p "$dest"
	local seen=" "
	_add_module() {
		local name=$1 f deps d
		case $seen in *" $name "*) return 0 ;; esac
		seen="$seen$name "
		f=$(find "$mdir/kernel" -name "$name.ko" -o -name "$name.ko.xz" -o -name "$name.ko.zst" | head -1)
		if [ -z "$f" ]; then
			echo "run-matrix: module $name not found in $rel" >&2
			return 1
		fi
		case $f in
		*.xz) xz -dc "$f" >"$dest/$name.ko" ;;
		*.zst) zstd -qdc "$f" >"$dest/$name.ko" ;;
		*) cp "$f" "$dest/$name.ko" ;;
		esac
		deps=$(tr '\0' '\n' <"$dest/$name.ko" | sed -n 's/^depends=//p' | head -1)
		for d in ${deps//,/ }; do _add_module "$d" || return 1; done
		order+=("$name.ko")
	}
	local m
	for m in "$@"; do
		if grep -q "/$m\.ko\$" "$mdir/modules.builtin"; then
			continue
		fi
		_add_module "$m" || return 1
	done
	printf '%s\n' "${order[@]}" >"$dest/toh-vm.order"
}

# prune_kernels removes extracted kernels and .debs that no series uses any more
# (a newer Debian kernel replaced them).
prune_kernels() {
	local keep d pkg
	keep=$(cat "$CACHE"/kernels/*.current 2>/dev/null | xargs -r -n1 basename)
	for d in "$CACHE"/kernels/*/; do
		pkg=$(basename "$d")
		grep -qxF "$pkg" <<<"$keep" && continue
		log "pruning the unused kernel $pkg"
		rm -rf "$d" "$CACHE/debs/${pkg}_"*.deb
	done
}

# busybox_static prints the path of a static busybox from Debian's busybox-static,
# extracted into the cache (installing the package on the host would replace the
# dynamically linked busybox that initramfs-tools uses).
busybox_static() {
	local version dir deb
	version=$(apt_private apt-cache madison busybox-static 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); print $2; exit}')
	if [ -z "$version" ]; then
		dir=$(cat "$CACHE/busybox.current" 2>/dev/null || true)
		[ -n "$dir" ] && [ -x "$dir/busybox" ] && { echo "$dir/busybox"; return 0; }
		echo "run-matrix: busybox-static not found in the package lists" >&2
		return 1
	fi
	dir=$CACHE/busybox/${version//:/%3a}
	if [ ! -x "$dir/busybox" ]; then
		log "downloading busybox-static ($version)"
		rm -rf "$dir" "$CACHE/busybox/tmp"
		mkdir -p "$CACHE/busybox/tmp"
		(cd "$CACHE/busybox/tmp" && apt_private apt-get -qq download "busybox-static=$version") >&2
		deb=$(ls "$CACHE/busybox/tmp/"*.deb)
		dpkg-deb -x "$deb" "$CACHE/busybox/tmp/x"
		mkdir -p "$dir"
		install -m 0755 "$(ls "$CACHE"/busybox/tmp/x/{usr/,}bin/busybox 2>/dev/null | head -1)" "$dir/busybox"
		rm -rf "$CACHE/busybox/tmp"
		find "$CACHE/busybox" -mindepth 1 -maxdepth 1 ! -path "$dir" -exec rm -rf {} +
	fi
	echo "$dir" >"$CACHE/busybox.current"
	echo "$dir/busybox"
}
