package sandbox

import (
	"os"
	"path"
	"strings"

	"github.com/toh-sandbox/toh/policy"
)

// BwrapArgv translates an execution policy into bwrap's options followed by "--" and
// argv (SPEC §4.2). It does not include the bwrap program itself: the caller prepends
// the path it resolved, so this function never decides which runner confines argv.
//
// The order is part of the contract, because later mounts overlay earlier ones:
//
//	--ro-bind / /  --dev /dev  --unshare-pid  [--unshare-net]  --proc /proc  --die-with-parent
//	[--tmpfs /tmp  --bind <root> <root>...  --bind <dir> <dir>...  --ro-bind <file> <file>...]
//	--  argv...
//
// Why each part is there:
//
//   - Any mode other than workspace-write gets the read-only profile. danger-full-access
//     never reaches a provider; treating an unexpected mode as read-only fails safe.
//   - --unshare-pid is always present: without it a confined command can write through
//     /proc/<pid>/root of a host process.
//   - --unshare-net is added when pol.Network is deny (SPEC §7).
//   - /tmp is a private tmpfs, so the writable root "/tmp" gets no --bind. Every other
//     writable root is bound in pol.WritableRoots order (the workspace root first), after
//     the tmpfs: a root that lies under /tmp ($TMPDIR=/tmp/x, or a workspace under /tmp)
//     must show the host directory, and bwrap creates its mountpoint inside the tmpfs.
//     Bound before the tmpfs it would be hidden by it.
//   - The policy file and its sibling lock file "<file>.lock", when they lie within a
//     bound root, are rebound read-only after the writable binds: a confined command can
//     then neither write them nor rename or unlink them (EBUSY on a mountpoint), nor
//     hard-link them (EXDEV). Renaming a directory that holds a mountpoint is allowed,
//     though, and the mount moves with it: "mv .toh .toh2; mkdir .toh" would let the
//     command plant a new policy file at the old path. So every directory between the
//     bound root and the file is first bound onto itself, writable as before but a
//     mountpoint, which cannot be renamed or removed.
//   - These rebinds happen only for files that exist now: bwrap fails on a missing
//     source. A missing policy file means the run uses the embedded default and there is
//     nothing to protect yet; keeping a not-yet-existing policy file from being created
//     is a separate, later concern. A file under /tmp but under no bound root needs
//     nothing: the tmpfs hides the host file from the command.
//
// Writable roots are expected to be canonical (policy.Execution guarantees it) and to
// exist; a missing root makes bwrap itself fail, which classification reports as a
// runner failure, never as an unconfined run.
//
// pol.Protect is not applied here (SPEC §8 asks for read-only rebinds, including for
// paths that do not exist yet, which needs more than this translation).
func BwrapArgv(pol policy.Execution, argv []string) []string {
	out := []string{"--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid"}
	if pol.Network == policy.NetworkDeny {
		out = append(out, "--unshare-net")
	}
	out = append(out, "--proc", "/proc", "--die-with-parent")

	if pol.Mode == policy.WorkspaceWrite {
		out = append(out, "--tmpfs", "/tmp")
		var bound []string
		for _, r := range pol.WritableRoots {
			if r == "/tmp" {
				continue
			}
			bound = append(bound, r)
			out = append(out, "--bind", r, r)
		}
		out = append(out, bwrapProtectPolicyFile(pol.PolicyFile, bound)...)
	}

	out = append(out, "--")
	return append(out, argv...)
}

// bwrapProtectPolicyFile returns the options that keep the policy file f and its lock
// file from being changed or replaced through the bound roots (see [BwrapArgv]).
func bwrapProtectPolicyFile(f string, bound []string) []string {
	if f == "" || !withinAny(f, bound) {
		return nil
	}
	var files []string
	for _, p := range []string{f, f + ".lock"} {
		if _, err := os.Stat(p); err == nil {
			files = append(files, p)
		}
	}
	if len(files) == 0 {
		return nil
	}

	// Both files share their parent, so one chain of pins serves both. Outermost first:
	// an inner bind made before an outer one would be hidden by it.
	var pins []string
	for d := path.Dir(f); d != "/" && d != "."; d = path.Dir(d) {
		if strictlyWithinAny(d, bound) {
			pins = append(pins, d)
		}
	}
	var out []string
	for i := len(pins) - 1; i >= 0; i-- {
		out = append(out, "--bind", pins[i], pins[i])
	}
	for _, p := range files {
		out = append(out, "--ro-bind", p, p)
	}
	return out
}

// withinAny reports whether path lies lexically within any of roots.
func withinAny(path string, roots []string) bool {
	for _, r := range roots {
		if lexicallyWithin(path, r) {
			return true
		}
	}
	return false
}

// strictlyWithinAny reports whether path lies lexically within, and is not, one of roots.
func strictlyWithinAny(path string, roots []string) bool {
	for _, r := range roots {
		if path != r && lexicallyWithin(path, r) {
			return true
		}
	}
	return false
}

// lexicallyWithin is SPEC §3's lexical fast path of within(path, root), without the
// identity fallback. Both arguments must already be canonical (policy.Execution's
// paths are). For canonical spellings it differs from the resolving check only on
// aliases that are not symlinks (a host bind mount of a root), which the translation
// accepts to stay a plain function of its input.
func lexicallyWithin(path, root string) bool {
	return path == root || root == "/" || strings.HasPrefix(path, root+"/")
}
