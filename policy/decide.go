package policy

import (
	"fmt"
	"path"
	"strings"

	"github.com/toh-sandbox/toh/canon"
)

// Op is a kind of file mutation that [Execution.Decide] judges. The vocabulary is
// closed: [ParseOp] rejects anything else.
type Op string

const (
	// OpWrite changes what the path leads to: its content or metadata (open for
	// writing, truncate, chmod, chown, utimes, xattrs). A symlink in the last
	// component is followed.
	OpWrite Op = "write"
	// OpCreate puts a new entry (a file, symlink, fifo, ...) at the name.
	OpCreate Op = "create"
	// OpDelete removes the name: unlink, or rmdir of an empty directory.
	OpDelete Op = "delete"
	// OpRename moves the name away, or moves another entry onto it: either end of
	// a rename.
	OpRename Op = "rename"
)

// Ops lists the vocabulary in the order help texts show it.
var Ops = []Op{OpWrite, OpCreate, OpDelete, OpRename}

// ParseOp returns s as an Op, or an error naming the vocabulary.
func ParseOp(s string) (Op, error) {
	for _, op := range Ops {
		if string(op) == s {
			return op, nil
		}
	}
	return "", fmt.Errorf("unknown op %q (want write, create, delete or rename)", s)
}

// Rules of a [Decision]. Where the fence has a rule for the same reason it uses the
// same name (fusefence.RuleReadOnly, RuleOutside, RuleProtected, RulePolicyFile).
const (
	RuleAllowed          = "allowed"                // within a writable root, nothing guards it
	RuleDangerFullAccess = "danger-full-access"     // the mode confines nothing
	RuleSink             = "sink"                   // writing /dev/null, allowed in every mode (SPEC §1)
	RuleReadOnly         = "read-only"              // the mode is read-only
	RuleOutside          = "outside-writable-roots" // the target is in no writable root
	RuleProtected        = "protected"              // a protect entry, or a file git reads it through
	RulePolicyFile       = "policy-file"            // the policy file or its lock file
	RuleUnknownOp        = "unknown-op"             // an Op outside the vocabulary, denied
)

// Decision is the answer of [Execution.Decide].
type Decision struct {
	Allow bool   `json:"allow"`
	Rule  string `json:"rule"`
	Op    Op     `json:"op"`
	Mode  Mode   `json:"mode"`
	// Path is the path as asked.
	Path string `json:"path"`
	// Target is where the mutation would land: canonical (see [Execution.Decide]).
	Target string `json:"target"`
	// Root is the innermost writable root that allows the mutation (rule allowed).
	Root string `json:"root,omitempty"`
	// Guard is the protected path that denies it (rule protected, policy-file, or
	// the rule an extra guard names).
	Guard *ProtectedPath `json:"guard,omitempty"`
}

// Decide answers whether a mutation op at unsafePath is allowed under x, and by
// which rule. It is the decision the runners make, as a pure function of x, the
// file system as it is now, and unsafePath: the same writable roots, and the same
// protected paths ([Execution.ProtectedPaths]) that bwrap rebinds read-only, that
// Seatbelt denies and from which the fence's rules derive. It changes nothing;
// the answer is only as true as the moment it ran (the command that follows may
// change the tree first).
//
// The target is resolved the way the fence re-resolves a mutation (fusefence's
// package doc), so that a symlink is judged by where it really leads:
//
//   - write: canonical(unsafePath), a symlink in the last component followed;
//   - create, delete, rename: the name itself, canonical(parent) + "/" + the last
//     component, which is not followed. Trailing slashes are dropped; a last
//     component "." or ".." names the directory it resolves to.
//
// Then, in order:
//
//  1. danger-full-access allows everything (rule danger-full-access);
//  2. write to /dev/null is allowed in every mode (rule sink);
//  3. any other mode but workspace-write denies (rule read-only);
//  4. a target in no writable root is denied (outside-writable-roots);
//  5. a target at or beneath a protected path (and not strictly within one of its
//     Except directories) is denied, and so are create and
//     rename at a strict ancestor of one, since they would move protected content
//     out of reach or put something in the place a protected path needs (the
//     fence's "carrier" rule): rule protected for protect entries and the files
//     git finds them through, policy-file for the policy file and its lock, and
//     for each of extra its Reason (toh-exec passes its probe cache as
//     "probe-cache"). Delete needs an empty directory, so deleting an ancestor
//     removes nothing protected and is not refused;
//     The HEAD, objects/ and refs/ of a submodule git directory in use
//     ([ProtectValid]) count as protected too, though the fence lets a rename
//     bring a valid HEAD (it reads the content, which Decide cannot) and bwrap
//     lets the command change them and puts them back after the run;
//  6. a name op on a writable root's own name needs a root that strictly contains
//     it (a root's name lives in its parent), else outside-writable-roots;
//  7. otherwise the target is allowed (rule allowed, Root the innermost root).
//
// Protected paths that do not exist count as well: a missing protect entry cannot
// be created. What the backends make of that differs, and Decide answers for the
// policy, not for one backend: bwrap cannot keep a missing path of Kind
// [PathAbsent] from being created, the fence judges protect entries by their
// spelling below each root, and Landlock enforces no protected path at all
// (toh-exec's help lists these).
//
// An op outside the vocabulary is denied with rule unknown-op.
func (x Execution) Decide(unsafePath string, op Op, extra ...ProtectedPath) Decision {
	d := Decision{Op: op, Mode: x.Mode, Path: unsafePath}
	var nameOp, carrier bool
	switch op {
	case OpWrite:
		d.Target = canon.Canonical(unsafePath)
	case OpCreate, OpRename:
		d.Target, nameOp, carrier = canonicalName(unsafePath), true, true
	case OpDelete:
		d.Target, nameOp = canonicalName(unsafePath), true
	default:
		d.Target = canon.Canonical(unsafePath)
		return d.deny(RuleUnknownOp, nil)
	}

	switch {
	case x.Mode == DangerFullAccess:
		return d.allow(RuleDangerFullAccess, "")
	case op == OpWrite && d.Target == "/dev/null":
		return d.allow(RuleSink, "")
	case x.Mode != WorkspaceWrite:
		// read-only, and anything unexpected: fail safe.
		return d.deny(RuleReadOnly, nil)
	}

	contained, best := false, ""
	for _, r := range x.WritableRoots {
		if !canon.LexicallyWithin(d.Target, r) {
			continue
		}
		contained = true
		if nameOp && d.Target == r {
			continue // the root's own name lives in the root around it, if any
		}
		if len(r) > len(best) {
			best = r
		}
	}
	if !contained {
		return d.deny(RuleOutside, nil)
	}

	guards := x.ProtectedPaths()
	// Protect entries before the policy file, as the fence orders its rules.
	for _, pass := range []func(ProtectedPath) bool{
		func(pp ProtectedPath) bool { return pp.Reason != ProtectPolicy },
		func(pp ProtectedPath) bool { return pp.Reason == ProtectPolicy },
	} {
		for _, pp := range guards {
			if pass(pp) && guarded(pp.Path, d.Target, carrier) && !Excepted(pp.Except, d.Target) {
				return d.deny(ruleOf(pp), &pp)
			}
		}
	}
	for _, pp := range extra {
		if guarded(pp.Path, d.Target, carrier) {
			return d.deny(ruleOf(pp), &pp)
		}
	}

	if best == "" {
		return d.deny(RuleOutside, nil)
	}
	return d.allow(RuleAllowed, best)
}

func (d Decision) allow(rule, root string) Decision {
	d.Allow, d.Rule, d.Root = true, rule, root
	return d
}

func (d Decision) deny(rule string, guard *ProtectedPath) Decision {
	d.Allow, d.Rule, d.Guard = false, rule, guard
	return d
}

// Excepted reports whether target lies strictly within one of except, the
// directories a [ProtectedPath] leaves writable: their own names stay protected.
func Excepted(except []string, target string) bool {
	for _, e := range except {
		if target != e && canon.LexicallyWithin(target, e) {
			return true
		}
	}
	return false
}

// guarded reports whether a mutation at target touches the guarded path g: at or
// beneath it, or, for a carrier (create, rename), a strict ancestor of it.
func guarded(g, target string, carrier bool) bool {
	return canon.LexicallyWithin(target, g) || carrier && canon.LexicallyWithin(g, target)
}

func ruleOf(pp ProtectedPath) string {
	switch pp.Reason {
	case ProtectEntry, ProtectGit, ProtectValid:
		return RuleProtected
	case ProtectPolicy:
		return RulePolicyFile
	}
	return string(pp.Reason)
}

// canonicalName is where the name unsafePath lives: its parent directory
// canonical, the last component appended unresolved.
func canonicalName(unsafePath string) string {
	p := strings.TrimRight(unsafePath, "/")
	if p == "" {
		if unsafePath == "" {
			return ""
		}
		return "/"
	}
	dir, base := path.Split(p)
	if base == "." || base == ".." {
		return canon.Canonical(p)
	}
	if dir == "" {
		dir = "."
	}
	parent := canon.Canonical(dir)
	switch {
	case parent == "":
		return ""
	case parent == "/":
		return "/" + base
	}
	return parent + "/" + base
}
