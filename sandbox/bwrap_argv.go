package sandbox

import (
	"os"
	"path"
	"sort"
	"strings"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
)

// BwrapArgv translates an execution policy into bwrap's options followed by "--" and
// argv (SPEC §4.2). It does not include the bwrap program itself: the caller prepends
// the path it resolved, so this function never decides which runner confines argv.
//
// The order is part of the contract, because later mounts overlay earlier ones:
//
//	--ro-bind / /  --dev /dev  --unshare-pid  [--unshare-net]  --proc /proc  --die-with-parent
//	--cap-drop ALL  [--tmpfs /tmp  --bind <root> <root>...  --bind <dir> <dir>...  --ro-bind <file> <file>...]
//	--  argv...
//
// Why each part is there:
//
//   - Any mode other than workspace-write gets the read-only profile. danger-full-access
//     never reaches a provider; treating an unexpected mode as read-only fails safe.
//   - --unshare-pid is always present: without it a confined command can write through
//     /proc/<pid>/root of a host process.
//   - --unshare-net is added when pol.Network is deny (SPEC §7).
//   - --cap-drop ALL goes beyond SPEC §4.2's exact profile, deliberately: bwrap run by
//     root (not setuid) keeps every capability in the sandbox, and with CAP_SYS_ADMIN
//     "mount -o remount,bind,rw /" undoes the read-only root (demonstrated on this
//     project's CI machine). For other users bwrap already leaves no capability, and
//     the option changes nothing.
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
// pol.Protect entries (relative to each bound root) that exist when the argv is built
// are rebound read-only the same way as the policy file, parents pinned. A protected
// path that does not exist yet is NOT kept from being created: SPEC §8 asks for that
// too, without leaving mountpoint artifacts in the workspace, and it is not built yet.
func BwrapArgv(pol policy.Execution, argv []string) []string {
	return bwrapArgv(pol, argv, nil)
}

// bwrapArgv is BwrapArgv with more files to keep read-only the same way as the policy
// file (the probe cache).
func bwrapArgv(pol policy.Execution, argv []string, guarded []string) []string {
	out := []string{"--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid"}
	if pol.Network == policy.NetworkDeny {
		out = append(out, "--unshare-net")
	}
	out = append(out, "--proc", "/proc", "--die-with-parent", "--cap-drop", "ALL")

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
		var files []string
		if pol.PolicyFile != "" {
			files = append(files, pol.PolicyFile, pol.PolicyFile+".lock")
		}
		for _, r := range bound {
			for _, p := range pol.Protect {
				files = append(files, path.Join(r, p))
			}
		}
		out = append(out, bwrapGuardFiles(append(files, guarded...), bound)...)
	}

	out = append(out, "--")
	return append(out, argv...)
}

// bwrapGuardFiles returns the options that keep each existing file of files (the
// policy file, its lock file, the probe cache) from being changed or replaced through
// the bound roots (see [BwrapArgv]).
func bwrapGuardFiles(files []string, bound []string) []string {
	var present []string
	pinSet := map[string]bool{}
	for _, f := range files {
		if f == "" || !withinAny(f, bound) {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			continue
		}
		present = append(present, f)
		for d := path.Dir(f); d != "/" && d != "."; d = path.Dir(d) {
			if strictlyWithinAny(d, bound) {
				pinSet[d] = true
			}
		}
	}
	if len(present) == 0 {
		return nil
	}
	// Outermost first: an inner bind made before an outer one would be hidden by it.
	pins := make([]string, 0, len(pinSet))
	for d := range pinSet {
		pins = append(pins, d)
	}
	sort.Slice(pins, func(i, j int) bool {
		di, dj := strings.Count(pins[i], "/"), strings.Count(pins[j], "/")
		if di != dj {
			return di < dj
		}
		return pins[i] < pins[j]
	})
	var out []string
	for _, d := range pins {
		out = append(out, "--bind", d, d)
	}
	for _, p := range present {
		out = append(out, "--ro-bind", p, p)
	}
	return out
}

// withinAny reports whether path lies lexically within any of roots.
func withinAny(path string, roots []string) bool {
	for _, r := range roots {
		if canon.LexicallyWithin(path, r) {
			return true
		}
	}
	return false
}

// strictlyWithinAny reports whether path lies lexically within, and is not, one of roots.
func strictlyWithinAny(path string, roots []string) bool {
	for _, r := range roots {
		if path != r && canon.LexicallyWithin(path, r) {
			return true
		}
	}
	return false
}
