package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
)

// BwrapArgv translates an execution policy into bwrap's options followed by "--" and
// argv (SPEC §4.2). It does not include the bwrap program itself: the caller prepends
// the path it resolved, so this function never decides which runner confines argv.
//
// The order is part of the contract, because later mounts overlay earlier ones:
//
//	--ro-bind / /  --dev /dev  --unshare-pid  --unshare-ipc  [--unshare-net]  --proc /proc
//	--ro-bind /proc/sys /proc/sys  --ro-bind-try /proc/sysrq-trigger /proc/sysrq-trigger
//	--die-with-parent  --cap-drop ALL  [--tmpfs /tmp  --bind <root> <root>...  --bind <dir> <dir>...  --ro-bind <path> <path>...]
//	--  argv...
//
// Why each part is there:
//
//   - Any mode other than workspace-write gets the read-only profile. danger-full-access
//     never reaches a provider; treating an unexpected mode as read-only fails safe.
//   - --unshare-pid is always present: without it a confined command can write through
//     /proc/<pid>/root of a host process.
//   - --unshare-net is added when pol.Network is deny (SPEC §7). AF_VSOCK sockets
//     belong to no network namespace; [Run] refuses them (and io_uring) with a
//     seccomp filter on the thread that starts bwrap (startFiltered), so the argv
//     alone does not deny the network fully.
//   - --unshare-ipc goes beyond SPEC §4.2's profile: System V shared memory,
//     semaphores and message queues, and POSIX message queues, belong to the IPC
//     namespace, and in the host's a read-only command could rewrite another
//     process's shared memory or remove its semaphores. In its own namespace the
//     command still has working IPC, private to the run.
//   - /proc/sys and /proc/sysrq-trigger are bound read-only over the new procfs,
//     beyond SPEC §4.2's profile too. Root without capabilities may still write most
//     sysctls (procfs checks the file mode against the uid, not a capability), and
//     bwrap 0.8 leaves /proc/sys writable: it covers it only when access(W_OK) says
//     it is writable, which procfs never says of the directory. A command run by root
//     could otherwise set kernel.core_pattern to a program of its choosing, which
//     the kernel then runs as root outside every namespace at the next crash (found
//     by review on this project's CI machine; TestBwrapRootCannotWriteSysctls). The
//     bind's source is the host's /proc/sys: a network sysctl still shows the
//     namespace of the process that opens it. -try: a kernel without magic SysRq has
//     no /proc/sysrq-trigger.
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
//   - A missing lock file gets no rebind (bwrap fails on a missing source) and no
//     stand-in (see below). toh-exec makes it before a workspace-write run whose
//     policy file lies in a root (policy.EnsureLock), so it is rebound like the file:
//     a directory a command made at its name stopped every later writer, which
//     refuse a lock that is not a regular file (policy.Update), and so the user's
//     tightening of the mode (found by review). A
//     missing policy file (the run uses the embedded default) within a bound root
//     refuses the run before anything starts (a *missingPolicyError, from
//     [standInPlan.prepare]): the command could create it, and every later call
//     without --mode would then run under whatever mode it wrote, danger-full-access
//     included. Neither a rebind nor a stand-in can keep a name from being created,
//     and an empty stand-in would read as a malformed policy. The error names the
//     remedies: create the file first (toh-exec policy set-mode writes it; it is then
//     rebound read-only), or keep it outside the writable roots. Within a fenced
//     root the fence denies creating it, and the run goes ahead. A file under /tmp
//     but under no bound root needs nothing: the tmpfs hides the host file from the
//     command.
//
// The provider's argv ([bwrapProvider.Confine]) also hides the deputies that exist
// on the host (deputies.go): an empty tmpfs over the caller's runtime and tmux
// directories and /dev/null over the sockets of services that run programs on
// request, last before "--". BwrapArgv, the SPEC profile and what the probe runs,
// leaves them out.
//
// Writable roots are expected to be canonical (policy.Execution guarantees it) and to
// exist; a missing root makes bwrap itself fail, which classification reports as a
// runner failure, never as an unconfined run.
//
// Protected paths (SPEC §8) are those of pol.ProtectedPaths() that lie within a bound
// root; they are kept read-only like the policy file, parents pinned, ordered
// outermost first. A protected path that does not exist gets a stand-in: an empty
// directory or file (by the path's Kind) that [Run] creates right before the spawn,
// that bwrap mounts over read-only, and that Run removes again after the run
// (standins_linux.go has the mechanism, its locking and what happens when toh-exec
// is killed). The argv names the stand-ins, so it is only complete together with Run:
// spawned directly while a protected path is missing, bwrap fails on the missing
// mount source, which is a runner failure, never an unconfined run. A missing
// commondir (policy.PathCommondir) gets a file stand-in holding "." instead, which
// git reads as no commondir. Missing paths of Kind PathAbsent (the policy file and
// its lock) get no stand-in, because their mere existence changes what the policy
// writers do; bwrap cannot keep them from being created (the sandbox package doc
// lists this).
//
// A protected path with except directories (policy.ProtectedPath.Except: a git
// directory's modules/, which may gain no entry while the submodule git directories
// in it stay writable) is bound read-only and each except directory bound writable
// again on top, from the host's tree, followed by the pins within it, which the
// recursive read-only bind had taken too; the protected paths within it (its hooks,
// its config) come later in the order and are bound read-only over that. A command
// can then write in a submodule git directory but neither add, remove nor rename an
// entry of modules/ (the except directories are mountpoints); it can change an
// except directory's own mode and times, which policy.Execution.Decide counts as
// denied. Within another read-only guard (.git kept whole), nothing is rebound.
// What keeps such a directory a valid git directory (policy.ProtectValid: its HEAD,
// objects/ and refs/) gets nothing: git replaces HEAD by a rename, which a bind
// would refuse, so Run puts back after the run what the command broke
// (heads_linux.go).
//
// A protected symlink's own name (policy.PathLink: ".git" when it is a symlink,
// ".git/hooks -> ../githooks", a protect entry that is a link or passes through one)
// cannot be kept by bwrap: a mount cannot be placed on a symlink (bwrap resolves the
// destination and would mount over what the link leads to), and nothing else stops
// a name in a writable directory from being removed and created again. A command
// could then point ".git" at a repository of its own, whose hooks git runs for the
// user next time. So such a name within a bound root gets no option, and [Run]
// refuses the run before anything starts, with an error naming the link and what to
// do: replace the link by what it names (for .git, a "gitdir: <path>" file, which
// bwrap keeps read-only), remove the entry, or serve the root through the fence,
// which denies the name itself (pol.Fence). Seatbelt and the fence protect the name
// like any protected path. The argv alone, spawned without Run, leaves the name
// writable; like the stand-ins, it is only complete together with Run.
//
// A missing protected path below an existing non-directory ("secrets/key.pem" while
// "secrets" is a regular file) cannot exist as long as that non-directory, its
// blocker, stays where it is, and no stand-in can be made below a file. So it gets
// no stand-in and no rebind; instead the blocker is pinned like the directories
// above it (bound onto itself, writable): the command can still write the file, but
// cannot remove, rename or replace it (EBUSY), and so cannot put a directory there
// and create the protected path in it. The run works, and the path stays
// uncreatable. This is stricter than the policy's own answer (policy.Execution.Decide
// lets a command delete the file, and refuses only re-creating the name), because
// bwrap cannot refuse a name once it is gone. Refusing the run instead (what earlier
// versions did, by failing to prepare a stand-in) let any command that can write a
// file at an ancestor of a protected path stop every later bwrap run of the tree.
func BwrapArgv(pol policy.Execution, argv []string) []string {
	out, _, _ := bwrapArgv(pol, argv, nil)
	return out
}

// bwrapArgv is BwrapArgv with more files to keep read-only the same way as the policy
// file (the probe cache), and the stand-ins Run must prepare (nil when none).
//
// With pol.Fence in workspace-write, every bound root is also returned as fenced: the
// run must go through a fence stage that mounts the fence on each of them. The
// protected paths inside fenced roots then get no rebind and no stand-in: the fence
// denies them itself, with a record of each attempt, where a read-only rebind would
// answer EROFS before the fence could see the operation. That includes the policy
// file and its lock, which the fence guards as its own (so an attempt on them is on
// record too); the guarded files (the probe cache, which toh-exec also hands the fence)
// keep their rebinds.
func bwrapArgv(pol policy.Execution, argv []string, guarded []string) ([]string, *standInPlan, []string) {
	args, plan, fenced, _ := bwrapArgvHiding(pol, argv, guarded, nil)
	return args, plan, fenced
}

// bwrapArgvHiding is bwrapArgv that also hides the deputies in hides (deputies.go),
// last before "--", so that an empty tmpfs or /dev/null lies over each whatever was
// bound before it ([deputyHides] never lists a place that holds a writable root).
// hostWritable are the roots bound writable: every writable root but "/tmp"
// (Confined.FenceWritable).
func bwrapArgvHiding(pol policy.Execution, argv []string, guarded []string, hides []bwrapHide) (args []string, plan *standInPlan, fenced, hostWritable []string) {
	args = []string{"--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid", "--unshare-ipc"}
	if pol.Network == policy.NetworkDeny {
		args = append(args, "--unshare-net")
	}
	args = append(args, "--proc", "/proc",
		"--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
		"--die-with-parent", "--cap-drop", "ALL")

	if pol.Mode == policy.WorkspaceWrite {
		args = append(args, "--tmpfs", "/tmp")
		var bound []string
		for _, r := range pol.WritableRoots {
			if r == "/tmp" {
				continue
			}
			bound = append(bound, r)
			args = append(args, "--bind", r, r)
		}
		hostWritable = bound
		pps := pol.ProtectedPaths()
		if pol.Fence {
			kept := pps[:0]
			for _, pp := range pps {
				if innermostRoot(pp.Path, bound) == "" {
					kept = append(kept, pp)
				}
			}
			pps = kept
		}
		for _, g := range guarded {
			if _, err := os.Stat(g); err == nil {
				pps = append(pps, policy.ProtectedPath{Path: g, Exists: true, Kind: policy.PathFile})
			} else if missingGuardable(g) {
				// A stand-in keeps the command from creating it (standins_linux.go).
				pps = append(pps, policy.ProtectedPath{Path: g, Kind: policy.PathFile})
			}
		}
		guards := bwrapGuards(pps, bound)
		args = append(args, bwrapGuardOptions(guards, bound)...)
		if len(guards) > 0 {
			plan = &standInPlan{guards: guards}
		}
		// pps still holds the policy file unless its root is fenced (the fence then
		// guards it), with what ProtectedPaths' lstat found.
		for _, pp := range pps {
			if root := innermostRoot(pp.Path, bound); pp.Path == pol.PolicyFile && !pp.Exists && root != "" {
				if plan == nil {
					plan = &standInPlan{}
				}
				plan.missingPolicy = &missingPolicyError{file: pp.Path, root: root}
			}
		}
	}

	if pol.Fence && pol.Mode == policy.WorkspaceWrite {
		fenced = slices.Clone(hostWritable) // two results a caller may change apart
	}
	args = append(args, bwrapHideOptions(hides)...)
	args = append(args, "--")
	return append(args, argv...), plan, fenced, hostWritable
}

// missingGuardable reports whether a guarded file (the probe cache) that does not
// exist gets a stand-in: nothing at all is at its name (a link, even a dangling one,
// is left alone, as before: a stand-in cannot be made there and the run would be
// refused), its directory exists, is reached through no link, and the caller may
// write it, so making the stand-in cannot fail where the command could not have
// created the file either. Otherwise the run goes on without it, and the cache is
// dropped after a run whose roots held it ([Chain.ForgetIfWritable]).
func missingGuardable(g string) bool {
	var st unix.Stat_t
	if err := unix.Lstat(g, &st); !errors.Is(err, unix.ENOENT) {
		return false
	}
	// No link on the way either: the stand-in is made by a walk that follows none,
	// and refuses the run at one (a linked ~/.cache would then fail every run).
	dir := path.Dir(g)
	if real, err := filepath.EvalSymlinks(dir); err != nil || real != dir {
		return false
	}
	return unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && unix.Access(dir, unix.W_OK) == nil
}

// standInPlan is what [Run] prepares around a bwrap spawn: every guarded path must
// exist when bwrap mounts over it (see standins_linux.go), and a guarded symlink
// (policy.PathLink) within a bound root makes prepare refuse the run.
type standInPlan struct {
	guards []bwrapGuard
	// missingPolicy, when set, refuses the run: the policy file is missing within a
	// bound root (see [BwrapArgv]).
	missingPolicy *missingPolicyError
}

// missingPolicyError refuses a bwrap run in which the policy file is missing within
// a writable root (see [BwrapArgv]).
type missingPolicyError struct{ file, root string }

func (e *missingPolicyError) Error() string {
	return fmt.Sprintf("the policy file %q does not exist and lies in the writable root %q, where a command could "+
		"create it and set the mode of every later call; create it first (toh-exec policy set-mode MODE writes it, "+
		"and bwrap then keeps it read-only), pass --policy with a file outside the writable roots, or serve the root "+
		"through the fence (--fence)", e.file, e.root)
}

// bwrapGuard is one path the bwrap rung keeps read-only.
type bwrapGuard struct {
	path   string
	root   string // the innermost bound root that contains path
	exists bool
	kind   policy.PathKind
	// base is the deepest directory (root itself, or the git directory of a ".git/..."
	// entry) that must already exist: a stand-in never creates a git directory.
	base string
	// blocker, for a missing path, is the existing non-directory strictly within root
	// that keeps it from existing ("secrets" for "secrets/key.pem" when secrets is a
	// regular file). Such a path gets no stand-in and no rebind: the blocker is pinned
	// (bound onto itself, writable), so the command can write it but cannot remove,
	// rename or replace it, and so can never make a directory of it.
	blocker string
	// except are directories strictly within path that are bound writable again
	// on top of its read-only bind (policy.ProtectedPath.Except).
	except []string
}

// nonDirAbove returns the existing non-directory strictly within root that lies
// strictly above the missing path p, or "" when p's deepest existing ancestor is a
// directory. p is canonical (as of ProtectedPaths), so its existing ancestors are no
// symlinks; one that became a symlink since is left to [standIns.ensure] to refuse.
func nonDirAbove(p, root string) string {
	if !canon.LexicallyWithin(p, root) || p == root {
		return ""
	}
	d := root
	comps := strings.Split(relBelow(p, root), "/")
	for _, c := range comps[:len(comps)-1] {
		d = path.Join(d, c)
		fi, err := os.Lstat(d)
		switch {
		case err != nil || fi.Mode()&os.ModeSymlink != 0:
			return ""
		case !fi.IsDir():
			return d
		}
	}
	return ""
}

// bwrapGuards selects the protected paths bwrap must act on: those within a bound
// root (everything else is read-only already, or hidden by the /tmp tmpfs) that exist
// or may get a stand-in. The result is sorted outermost first, then by path.
func bwrapGuards(pps []policy.ProtectedPath, bound []string) []bwrapGuard {
	var out []bwrapGuard
	seen := map[string]bool{}
	for _, pp := range pps {
		root := innermostRoot(pp.Path, bound)
		if root == "" || seen[pp.Path] || pp.Reason == policy.ProtectValid {
			// A submodule git directory's HEAD, objects/ and refs/ are put back
			// after the run instead (heads_linux.go): git must replace HEAD.
			continue
		}
		g := bwrapGuard{path: pp.Path, root: root, exists: pp.Exists, kind: pp.Kind, base: root, except: pp.Except}
		if !pp.Exists {
			g.blocker = nonDirAbove(pp.Path, root)
		}
		if !pp.Exists && pp.Kind == policy.PathAbsent && g.blocker == "" {
			continue
		}
		// A path inside its git directory may have nothing above that directory
		// created for it. One outside it (a file the config includes, beside the
		// repository or in a linked worktree's checkout) is created from the root
		// like any other.
		if pp.GitDir != "" && canon.LexicallyWithin(pp.Path, pp.GitDir) {
			if canon.LexicallyWithin(pp.GitDir, root) {
				g.base = pp.GitDir
			} else if !pp.Exists {
				// The root lies inside the git directory; a missing path there has no
				// creatable place of its own.
				continue
			}
		}
		seen[pp.Path] = true
		out = append(out, g)
	}
	sort.SliceStable(out, func(i, j int) bool { return pathLess(out[i].path, out[j].path) })
	// A guard inside another's read-only bind (and not within one of its except
	// directories) is read-only already: a stale submodule git directory's hooks
	// and config inside a kept modules/, everything inside a .git kept whole. It
	// would only cost a bind, pins and stand-ins.
	return slices.DeleteFunc(out, func(g bwrapGuard) bool {
		return slices.ContainsFunc(out, func(h bwrapGuard) bool {
			return h.path != g.path && h.readOnlyBound() && canon.LexicallyWithin(g.path, h.path) && !policy.Excepted(h.except, g.path)
		})
	})
}

// readOnlyBound reports whether g gets a read-only bind of its own: it exists or
// gets a stand-in, and is no blocker's stand-in nor a link (see bwrapGuardOptions).
func (g bwrapGuard) readOnlyBound() bool {
	return g.blocker == "" && !(g.kind == policy.PathLink && g.exists) && (g.exists || g.kind != policy.PathAbsent)
}

// bwrapGuardOptions pins every directory between a bound root and a guarded path with
// a writable self-bind (see [BwrapArgv] for why), then rebinds each guarded path
// read-only, each followed by its except directories, bound writable.
func bwrapGuardOptions(guards []bwrapGuard, bound []string) []string {
	pinSet := map[string]bool{}
	for _, g := range guards {
		if g.kind == policy.PathLink && g.exists {
			continue // Run refuses such a run (see [standInPlan.prepare])
		}
		start := path.Dir(g.path)
		if g.blocker != "" {
			start = g.blocker
		}
		for d := start; d != "/" && d != "."; d = path.Dir(d) {
			if strictlyWithinAny(d, bound) {
				pinSet[d] = true
			}
		}
	}
	// Outermost first: an inner bind made before an outer one would be hidden by it.
	pins := make([]string, 0, len(pinSet))
	for d := range pinSet {
		pins = append(pins, d)
	}
	sort.Slice(pins, func(i, j int) bool { return pathLess(pins[i], pins[j]) })
	var out []string
	for _, d := range pins {
		out = append(out, "--bind", d, d)
	}
	for _, g := range guards {
		if !g.readOnlyBound() {
			continue
		}
		out = append(out, "--ro-bind", g.path, g.path)
		// Its except directories are bound writable again on top (bwrap binds
		// from the host's tree, not from the read-only view), and the pins within
		// them after them, since the recursive read-only bind took those too.
		// Guards within them come later in this order and cover what they must.
		// (A guard within another's read-only part, .git kept whole, is not
		// here: bwrapGuards drops it, excepts and all.)
		if !g.exists {
			continue
		}
		for _, e := range g.except {
			out = append(out, "--bind", e, e)
			for _, d := range pins {
				if d != e && canon.LexicallyWithin(d, e) {
					out = append(out, "--bind", d, d)
				}
			}
		}
	}
	return out
}

// relBelow is p relative to root, which contains it ("." for root itself).
func relBelow(p, root string) string {
	switch {
	case p == root:
		return "."
	case root == "/":
		return p[1:]
	}
	return strings.TrimPrefix(p, root+"/")
}

// pathLess orders paths by depth, then by spelling.
func pathLess(a, b string) bool {
	da, db := strings.Count(a, "/"), strings.Count(b, "/")
	if da != db {
		return da < db
	}
	return a < b
}

// innermostRoot returns the longest of roots that contains p, or "".
func innermostRoot(p string, roots []string) string {
	best := ""
	for _, r := range roots {
		if canon.LexicallyWithin(p, r) && len(r) > len(best) {
			best = r
		}
	}
	return best
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
