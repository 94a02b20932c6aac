# bench/lib.sh: setup shared by exec.sh and exec-explain.sh (sourced, not run).
#
# After bench_setup: $repo, $work (scratch, removed on exit unless KEEP=1), $bin,
# $ws (the workspace, also the working directory), $cache, $llr (landlock-restrict, or
# "" when it could not be installed), and XDG_CONFIG_HOME pointing at an empty
# directory so every run uses toh's embedded default policy.

prog=$(basename "$0")
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLR_VERSION=${LLR_VERSION:-v0.11.2}

die() { echo "$prog: $*" >&2; exit 1; }
note() { echo "$prog: $*" >&2; }
q() { printf '%q' "$1"; }

bench_setup() {
	command -v go >/dev/null || die "go is not installed"
	# Scratch space under $HOME, not /tmp: /tmp is a writable root of workspace-write,
	# so a probe cache there would be ignored (toh-exec never trusts a cache the
	# confined command could write) and a workspace there would sit under bwrap's
	# private tmpfs.
	work=$(mktemp -d "${HOME:?}/.toh-bench.XXXXXX")
	case "$work" in /tmp/*) die "scratch directory $work lies under /tmp; set HOME elsewhere" ;; esac
	trap bench_cleanup EXIT
	bin=$work/bin ws=$work/workspace cache=$work/cache
	mkdir -p "$bin" "$ws" "$cache" "$work/config"
	export XDG_CONFIG_HOME=$work/config
	cd "$ws"
}

bench_cleanup() {
	if [[ ${KEEP:-0} == 1 ]]; then note "kept $work"; else rm -rf "$work"; fi
}

# build_toh OUT [VAR=VALUE...]: builds toh-exec from the working tree.
build_toh() {
	local out=$1
	shift
	(cd "$repo" && env "$@" go build -o "$out" ./cmd/toh-exec)
}

# build_bench NAME...: builds bench/cmd/NAME into $bin.
build_bench() {
	local n
	for n in "$@"; do
		(cd "$repo" && go build -o "$bin/$n" "./bench/cmd/$n")
	done
}

install_llr() {
	llr=""
	note "installing landlock-restrict from github.com/landlock-lsm/go-landlock@$LLR_VERSION"
	if (cd "$work" && GOBIN=$bin go install "github.com/landlock-lsm/go-landlock/cmd/landlock-restrict@$LLR_VERSION") 2>"$work/llr-install.log"; then
		llr=$bin/landlock-restrict
	else
		note "landlock-restrict could not be installed; the Landlock baseline is skipped:"
		sed 's/^/    /' "$work/llr-install.log" >&2
	fi
}

# backend_of TOH-ARGS...: which backend toh-exec picks for "true" (from --verbose).
backend_of() {
	"$@" --verbose -- true 2>&1 | sed -n 's/^toh-exec: {\([a-z]*\);.*/\1/p'
}

linkage() { file -b "$1" | grep -o 'statically linked\|dynamically linked' || echo unknown; }
