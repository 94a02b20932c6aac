package sandbox

import (
	"path"
	"sort"
	"strings"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
)

// SeatbeltProfile translates an execution policy into the SBPL profile of SPEC §4.2.
// It is text built from pol and pol.ProtectedPaths() (which reads the file system to
// find git directories), so it builds and is tested on every platform.
//
// The read-only profile is exactly
//
//	(version 1) (allow default) (deny file-write*) (allow file-write* (literal "/dev/null"))
//
// and workspace-write appends, in this order:
//
//   - ` (allow file-write* (subpath "<root>") ...)`: one form holding one subpath per
//     writable root, in pol.WritableRoots order;
//   - ` (deny file-write* (subpath "<path>"))` for every protected path within a
//     writable root, existing or not, in ProtectedPaths order, except the policy file
//     and its lock, which get ` (deny file-write* (literal "<path>"))` after them,
//     and a path with Except directories (a git directory's modules/), which gets
//     ` (deny file-write* (require-all (subpath "<path>") (require-not (subpath
//     "<except>")) ...))`: what lies within them stays writable, and their own
//     names are kept like the directories below (their mode and times are not,
//     as under bwrap, whose writable rebind of them is a pin);
//   - ` (deny file-write-create file-write-unlink (literal "<dir>"))` for every
//     directory strictly between a writable root and a protected path, outermost
//     first (see "Renames" below).
//
// The HEAD, objects/ and refs/ of a submodule git directory in use
// (policy.ProtectValid) get no rule: git replaces HEAD by a rename, and SBPL cannot
// judge the content a rename brings. Unlike under bwrap, nothing puts them back
// after the run, so on macOS a command can break such a directory and nest a git
// directory of its own in it for the user's next "git submodule update --init"
// (review F5, 2026-12-02; not tested: this machine has no macOS).
//
// The denials come after the allow because in SBPL the last matching rule wins.
// Unlike bwrap's rebinds they need no existing file: Seatbelt matches path strings,
// so they also stop creation, and need no stand-ins. Protected paths outside every
// writable root get no rule: (deny file-write*) covers them.
//
// Renames: Seatbelt matches the path an operation names, not the object, so a subpath
// denial of ".git/hooks" alone would not stop "mv .git .git2; edit .git2/hooks/x; mv
// .git2 .git", nor "mkdir -p x/hooks; ...; mv x .git" where .git does not exist. The
// directories between a root and a protected path therefore may be neither removed
// or renamed away (file-write-unlink, which the sandbox checks for the source of a
// rename and for rmdir) nor created or renamed onto (file-write-create, checked for
// mkdir and the destination of a rename). Creating, writing and removing files inside
// them stays allowed: those operations name the entries, not the directory. The cost:
// a directory on the way to a protected path that does not exist yet (".github" for a
// protected ".github/workflows") cannot be created by the command, and git cannot
// remove a linked worktree's or a submodule's git directory from inside the sandbox
// (bwrap's pins refuse the same). This reading of the sandbox's rename checks comes
// from Apple's published profiles and has not been tested on macOS by this project;
// neither has the whole protected-path profile. Hard links: a command may be able to
// link a protected file to a writable name and write through it; the profile does not
// name file-link operations, whose semantics could not be verified here.
//
// Network deny appends ` (deny network*)` in every mode (SPEC §7).
//
// Seatbelt matches the kernel's resolved paths, so the roots must be canonical as macOS
// spells them: /tmp is /private/tmp there, and a root spelled "/tmp" would match
// nothing. policy.Execution's roots are canonical on the host that resolved them.
//
// Any mode other than workspace-write gets the read-only profile (danger-full-access
// never reaches a provider). A workspace-write policy without writable roots also gets
// no allow form: "(allow file-write*)" with no filter would allow every write.
func SeatbeltProfile(pol policy.Execution) string {
	var pps []policy.ProtectedPath
	if pol.Mode == policy.WorkspaceWrite && len(pol.WritableRoots) > 0 {
		pps = pol.ProtectedPaths()
	}
	return seatbeltProfile(pol, pps)
}

// seatbeltProfile is SeatbeltProfile with the protected paths given, so that golden
// tests can show git directories without a repository on disk.
func seatbeltProfile(pol policy.Execution, pps []policy.ProtectedPath) string {
	var b strings.Builder
	b.WriteString(`(version 1) (allow default) (deny file-write*) (allow file-write* (literal "/dev/null"))`)

	if pol.Mode == policy.WorkspaceWrite && len(pol.WritableRoots) > 0 {
		b.WriteString(" (allow file-write*")
		for _, r := range pol.WritableRoots {
			b.WriteString(" (subpath " + seatbeltQuote(r) + ")")
		}
		b.WriteString(")")

		var literals []string
		ancestors := map[string]bool{}
		for _, pp := range pps {
			root := innermostRoot(pp.Path, pol.WritableRoots)
			if root == "" || pp.Reason == policy.ProtectValid {
				continue // git replaces HEAD by a rename; see below
			}
			for d := path.Dir(pp.Path); d != root && canon.LexicallyWithin(d, root); d = path.Dir(d) {
				ancestors[d] = true
			}
			if pp.Reason == policy.ProtectPolicy {
				literals = append(literals, pp.Path)
				continue
			}
			if len(pp.Except) == 0 {
				b.WriteString(" (deny file-write* (subpath " + seatbeltQuote(pp.Path) + "))")
				continue
			}
			// Within the record, not as a later allow: an allow would also undo
			// other records' denials there (.git kept whole).
			b.WriteString(" (deny file-write* (require-all (subpath " + seatbeltQuote(pp.Path) + ")")
			for _, e := range pp.Except {
				b.WriteString(" (require-not (subpath " + seatbeltQuote(e) + "))")
				ancestors[e] = true
			}
			b.WriteString("))")
		}
		for _, f := range literals {
			b.WriteString(" (deny file-write* (literal " + seatbeltQuote(f) + "))")
		}
		dirs := make([]string, 0, len(ancestors))
		for d := range ancestors {
			dirs = append(dirs, d)
		}
		sort.Slice(dirs, func(i, j int) bool { return pathLess(dirs[i], dirs[j]) })
		for _, d := range dirs {
			b.WriteString(" (deny file-write-create file-write-unlink (literal " + seatbeltQuote(d) + "))")
		}
	}

	if pol.Network == policy.NetworkDeny {
		b.WriteString(" (deny network*)")
	}
	return b.String()
}

// SeatbeltArgv returns sandbox-exec's arguments for running argv under pol:
// "-p", the profile, "--", argv. The caller prepends the sandbox-exec path it resolved.
// The profile is one argv element, so no shell quoting is involved.
func SeatbeltArgv(pol policy.Execution, argv []string) []string {
	out := make([]string, 0, 3+len(argv))
	out = append(out, "-p", SeatbeltProfile(pol), "--")
	return append(out, argv...)
}

// seatbeltQuote returns s as an SBPL string literal. Only `\` and `"` are special
// inside one; with every `\` doubled, no other escape sequence can be formed, and with
// every `"` escaped, a root cannot close the string and inject rules.
func seatbeltQuote(s string) string {
	return `"` + seatbeltEscaper.Replace(s) + `"`
}

var seatbeltEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)
