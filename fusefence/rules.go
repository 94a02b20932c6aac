package fusefence

import (
	"path"
	"strings"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
)

// Rule names the reason of a denial in the audit log. The vocabulary is closed.
const (
	RuleReadOnly       = "read-only"              // the mode is read-only
	RuleOutside        = "outside-writable-roots" // the real target is in no writable root
	RuleProtected      = "protected"              // the target is, is beneath, or would replace a protect entry
	RulePolicyFile     = "policy-file"            // the policy file or its lock file
	RuleAuditLog       = "audit-log"              // the fence's own audit log
	RuleDeviceNode     = "device-node"            // mknod of a character or block device, in every mode
	RuleSymlinkRace    = "symlink-race"           // the tree changed between the check and the mutation
	RuleMultiplyLinked = "multiply-linked"        // content or metadata of a file with more than one link
	RulePolicyInvalid  = "policy-invalid"         // the policy file is malformed; every mutation is denied
	RuleIoctl          = "ioctl"                  // an ioctl outside the allowlist
	RuleOwnMount       = "own-mount"              // the real target lies inside this mount itself
	// RuleUnreachable: the caller could not reach the real target on the host by its
	// own rights, and only the daemon's would take it there (a link out of SOURCE).
	RuleUnreachable = "unreachable"
	// RuleProtectedSymlink: fs.protected_symlinks lets only the link's owner follow it.
	RuleProtectedSymlink = "protected-symlink"
)

// Rules lists every rule name, for validating queries.
var Rules = []string{
	RuleReadOnly, RuleOutside, RuleProtected, RulePolicyFile, RuleAuditLog, RuleDeviceNode,
	RuleSymlinkRace, RuleMultiplyLinked, RulePolicyInvalid, RuleIoctl, RuleOwnMount,
	RuleUnreachable, RuleProtectedSymlink,
}

// reach says how far a mutation's effect extends, which decides how guarded paths
// (protect entries, the policy file, the audit log) constrain it.
type reach int

const (
	// reachInode changes an existing object (content, mode, owner, times, xattrs) or
	// removes one name (unlink, rmdir) or makes one empty directory (mkdir): denied
	// at or beneath a guarded path.
	reachInode reach = iota
	// reachCarrier puts something at a name that may hold or redirect a guarded path:
	// both ends of a rename, a new symlink, a new hard link, a new non-directory.
	// Also denied at a strict ancestor of a guarded path, or `mv .git x` and
	// `mv prepared .git` (or a .git file or symlink naming another git directory)
	// would move protected content out of reach or swap in new content.
	reachCarrier
	// reachAccess widens who may change an existing object: a mode that gives the
	// group or others write, a new owner or group, a POSIX ACL. Denied at or
	// beneath a guarded path like reachInode, and also at a strict ancestor of one
	// (found by review: "chmod 0777 .git" let any local user replace .git/hooks on
	// the host later, outside every fence). Narrowing (chmod 0700 .git) stays a
	// plain reachInode.
	reachAccess
	// reachRenameTo is a plain rename's destination: reachCarrier, but for the HEAD
	// of a submodule git directory in use (guarded.heads), which a rename may
	// replace with a valid HEAD, the way git writes it (see node.renameHead).
	reachRenameTo
)

// placement is where an allowed mutation is performed: relative to the writable root
// Root, at Rel ("." for the root itself).
type placement struct {
	Root string
	Rel  string
	// head: the target is a HEAD of guarded.heads, reached by reachRenameTo. The
	// rename must bring a valid HEAD, and is performed as a copy (node.renameHead).
	head bool
}

// guarded is the fence's protected set for one policy generation: the canonical
// paths of [policy.Execution.ProtectedPaths] (the one resolution bwrap and Seatbelt
// use too), split by the rule that names a denial. It is resolved when a policy
// generation starts ([protectedOf]) and again when due (protSet, on Linux); judging
// a mutation only compares strings.
type guarded struct {
	protect []string // protect entries and the git files that redirect them: RuleProtected
	policy  []string // the policy file and its lock: RulePolicyFile
	// except holds, for a path of protect, the directories strictly within it that
	// it leaves writable (policy.ProtectedPath.Except: a git directory's modules/).
	except map[string][]string
	// heads are the paths of protect that are the HEAD of a submodule git directory
	// in use (policy.ProtectValid): denied like the rest, but a rename may replace
	// them with a valid HEAD.
	heads map[string]bool
}

// protectedOf resolves the protected set of x. It reads the file system (see
// [policy.Execution.ProtectedPaths]): the git rule applies to git directories that
// exist now, so a repository created later in the run is the run's own. Only
// workspace-write guards anything.
func protectedOf(x policy.Execution) guarded {
	var g guarded
	if x.Mode != policy.WorkspaceWrite {
		return g
	}
	for _, pp := range x.ProtectedPaths() {
		g.add(pp)
	}
	return g
}

// add guards pp under the rule its reason names.
func (g *guarded) add(pp policy.ProtectedPath) {
	if pp.Reason == policy.ProtectPolicy {
		g.policy = append(g.policy, pp.Path)
		return
	}
	g.protect = append(g.protect, pp.Path)
	g.setExcept(pp)
	if pp.Reason == policy.ProtectValid && path.Base(pp.Path) == "HEAD" {
		if g.heads == nil {
			g.heads = map[string]bool{}
		}
		g.heads[pp.Path] = true
	}
}

// setExcept records pp's except directories, replacing what an earlier resolution
// recorded for the same path.
func (g *guarded) setExcept(pp policy.ProtectedPath) {
	switch {
	case len(pp.Except) > 0:
		if g.except == nil {
			g.except = map[string][]string{}
		}
		g.except[pp.Path] = pp.Except
	case g.except != nil:
		delete(g.except, pp.Path)
	}
}

// place decides one mutation of the canonical host path target under x, whose
// protected set is prot (from [protectedOf] for the same x). It is a pure function of
// strings: the caller canonicalized target immediately before, and performs the
// mutation relative to a descriptor of the returned root, so the decision and the
// mechanism refer to the same place. audit is the fence's own audit log, which stays
// read-only too.
//
// In danger-full-access the root is "/" and nothing is guarded (the SPEC lets that
// mode write the policy file too). Device nodes are the caller's business: they are
// denied before this is consulted.
func place(x policy.Execution, prot guarded, target string, r reach, audit string) (placement, string) {
	if x.Mode == policy.DangerFullAccess {
		return placement{Root: "/", Rel: relTo(target, "/")}, ""
	}
	if x.Mode != policy.WorkspaceWrite {
		return placement{}, RuleReadOnly
	}
	var best string
	for _, root := range x.WritableRoots {
		if canon.LexicallyWithin(target, root) && len(root) > len(best) {
			best = root
		}
	}
	if best == "" {
		return placement{}, RuleOutside
	}
	head := false
	for _, g := range prot.protect {
		if guards(g, target, r) && !policy.Excepted(prot.except[g], target) {
			if r == reachRenameTo && target == g && prot.heads[g] {
				head = true
				continue
			}
			return placement{}, RuleProtected
		}
	}
	for _, g := range prot.policy {
		if guards(g, target, r) {
			return placement{}, RulePolicyFile
		}
	}
	if audit != "" && guards(audit, target, r) {
		return placement{}, RuleAuditLog
	}
	return placement{Root: best, Rel: relTo(target, best), head: head}, ""
}

// guards reports whether a mutation of reach r at target touches the guarded path g.
// target is clean and absolute (place found it within a root); g comes from the
// resolved policy and is too, and if it were not, the prefix test below could only
// match more, never less, than canon.LexicallyWithin: a stray guard denies more.
// (canon.LexicallyWithin checks both paths are clean on every call: a dozen scans
// of a long path per mutation, 1.7% of the daemon's time in untar.)
func guards(g, target string, r reach) bool {
	if prefixWithin(target, g) {
		return true
	}
	return r != reachInode && prefixWithin(g, target)
}

// prefixWithin is canon.LexicallyWithin for paths known to be clean and absolute.
func prefixWithin(path, root string) bool {
	if root == "/" || path == root {
		return true
	}
	return len(path) > len(root) && path[len(root)] == '/' && path[:len(root)] == root
}

// relTo is target relative to root, which contains it.
func relTo(target, root string) string {
	if target == root {
		return "."
	}
	if root == "/" {
		return target[1:]
	}
	return strings.TrimPrefix(target, root+"/")
}

// SafeLinkText reports whether a symlink text, found depth directories below the
// mount root, can never lead out of the mount: relative, ".." only before the first
// name, at most depth of them. The fence shows only such links as symlinks.
func SafeLinkText(text string, depth int) bool {
	if text == "" || text[0] == '/' {
		return false
	}
	ups, down := 0, false
	for _, c := range strings.Split(text, "/") {
		switch c {
		case "", ".":
		case "..":
			if down {
				return false
			}
			ups++
		default:
			down = true
		}
	}
	return ups <= depth
}
