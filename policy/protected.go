package policy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/toh-sandbox/toh/canon"
)

// PathKind says what a protected path is when it exists, or what may stand in for it
// while it does not.
type PathKind string

const (
	// PathDir: a directory, or, while missing, a path an empty directory may stand in
	// for.
	PathDir PathKind = "dir"
	// PathFile: anything but a directory, or, while missing, a path an empty regular
	// file may stand in for.
	PathFile PathKind = "file"
	// PathAbsent: a missing path for which no stand-in of any kind may be put in
	// place, because its mere existence changes what its reader does (an empty policy
	// file is malformed, and the policy writers must lock the one lock file they
	// create), or because it is the name of a link that is gone.
	// Backends that can deny a name (Seatbelt, the fence) deny creating it; bwrap,
	// which can only mount over names that exist, cannot (see package sandbox).
	PathAbsent PathKind = "absent"
	// PathCommondir: a git directory's missing commondir, for which a regular file
	// holding "." may stand in ([CommondirStandIn]). git resolves a relative commondir
	// against the git directory, so "." names the git directory itself, which is
	// where git looks when there is no commondir: checked with git 2.39, the same
	// config, hooks, objects, refs and worktrees, only paths of the common directory
	// printed absolute ("git rev-parse --git-common-dir"). An empty one would make git
	// die, and a missing one cannot be held by bwrap.
	PathCommondir PathKind = "commondir"
	// PathLink: an existing symbolic link met on the way to a protected path (the
	// entry itself, a directory on its way, a .git symlink, or a link that the text
	// of a .git file or commondir passes through). Path is the link's own name, not
	// canonical in its last component: retargeting, replacing or removing the link
	// would make the protected spelling lead elsewhere, so the name itself is
	// protected, while what it leads to is protected by its own record. bwrap cannot
	// mount over a symlink and refuses to run when such a name lies within a root
	// it binds (see package sandbox).
	PathLink PathKind = "link"
)

// CommondirStandIn is the content of a stand-in of Kind [PathCommondir].
const CommondirStandIn = ".\n"

// ProtectReason says why a path is protected.
type ProtectReason string

const (
	// ProtectEntry: a protect entry, relative to a writable root or, for entries
	// under ".git/", to one of the root's git directories.
	ProtectEntry ProtectReason = "protect"
	// ProtectGit: a file through which git finds or configures a git directory whose
	// entries are protected: the root's .git pointer file, a git directory's
	// commondir, and config.worktree beside a protected config. Rewriting any of them
	// would let git read hooks or configuration from somewhere unprotected.
	ProtectGit ProtectReason = "git"
	// ProtectPolicy: the policy file or its sibling lock file (SPEC §8).
	ProtectPolicy ProtectReason = "policy-file"
	// ProtectValid: HEAD, objects/ and refs/ of a submodule git directory in use (an
	// Except directory of a modules/ record), which keep it a valid git directory
	// (git's is_git_directory: a valid HEAD, objects/ and refs/ it can search). git
	// refuses a submodule git directory nested in another only while the outer one
	// is valid: a command that broke one could have the user's next "git submodule
	// update --init" use a git directory of its own inside it, with its hooks
	// (review F5, 2026-12-02). Their own names are kept (objects/ and refs/ have
	// themselves as Except: what lies within stays writable), and HEAD may be
	// replaced with a valid HEAD by a rename, the way git writes it: backends that
	// can check the content allow that and deny the rest (the fence); the others
	// leave these records to a repair after the run (bwrap, see package sandbox)
	// or to nobody (Seatbelt).
	ProtectValid ProtectReason = "git-valid"
)

// ProtectedPath is one path that stays read-only in workspace-write.
type ProtectedPath struct {
	// Path is canonical and absolute. A protected symlink is represented by what it
	// leads to, and, in a record of Kind PathLink, by its own name.
	Path string `json:"path"`
	// Exists reports whether Path existed when [Execution.ProtectedPaths] looked.
	Exists bool `json:"exists"`
	// Kind is PathDir, PathFile or PathLink for an existing path; for a missing one,
	// the kind of stand-in allowed (PathDir, PathFile, PathCommondir), or PathAbsent.
	Kind   PathKind      `json:"kind"`
	Reason ProtectReason `json:"reason"`
	// Entry is the protect entry the path comes from ("" for the policy file, its lock,
	// a .git pointer file and commondir).
	Entry string `json:"entry,omitempty"`
	// GitDir is the git directory a ".git/..." entry, or a file the git directory's
	// config includes, was applied to ("" otherwise). Nothing above it may be
	// created on the behalf of a path inside it: a repository that does not exist
	// when the run starts is the run's own.
	GitDir string `json:"gitDir,omitempty"`
	// Except lists directories strictly within Path that stay writable: what lies
	// strictly within one is not protected by this record (other records may still
	// protect it), while the directory's own name is. Only a git directory's
	// modules/ has them, its submodule git directories (see [Execution.ProtectedPaths]).
	Except []string `json:"except,omitempty"`
}

// gitFileNames are the names git itself keeps as files in a git directory. A missing
// protected path with one of these names gets a file stand-in (see [kindOfMissing]).
var gitFileNames = map[string]bool{
	"config": true, "HEAD": true, "index": true, "packed-refs": true, "description": true,
	"shallow": true, "FETCH_HEAD": true, "ORIG_HEAD": true, "MERGE_HEAD": true,
	"COMMIT_EDITMSG": true, "gitdir": true,
}

// isEmptyDir reports whether d is a directory with no entries.
func isEmptyDir(d string) bool {
	f, err := os.Open(d)
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && err == io.EOF
}

// homeDir is $HOME, where git looks for "~/" in an include; "" when unset.
func homeDir() string {
	h, _ := os.UserHomeDir()
	return h
}

// kindOfMissing is the documented rule for what may stand in for a missing protected
// path: a commondir's stand-in (PathCommondir) for a last component "commondir"; a
// file when its last component is a name git keeps as a file (config, HEAD,
// index, ...) or has an extension (a dot after its first character: "key.pem",
// "toh.json"); a directory otherwise (hooks, .github, .env). A stand-in of the wrong
// kind still keeps the name from being created; it only surprises readers during the
// run. Creating the real file or directory once makes its kind the real one.
func kindOfMissing(p string) PathKind {
	base := path.Base(p)
	if base == "commondir" {
		// A protect entry ".git/commondir" names what is protected anyway; its
		// stand-in must be one git can read (an empty one, or a directory, makes
		// git die: found by review).
		return PathCommondir
	}
	if gitFileNames[base] || strings.Contains(base[1:], ".") {
		return PathFile
	}
	return PathDir
}

// ProtectedPaths resolves what stays read-only under x into canonical absolute paths,
// one record per path, first occurrence kept. Every backend (bwrap, Seatbelt, the
// fence) derives its rules from this one list. It reads the file system (lstat, the
// small files git uses as pointers, directory listings below git directories) and
// changes nothing; the result is only as true as the moment it ran.
//
// In order:
//
//  1. the policy file and its sibling lock file "<file>.lock", when x.PolicyFile is
//     set (PathAbsent when missing: the policy writers create them);
//  2. for each writable root r, in x.WritableRoots order, and each protect entry e:
//     - e not under ".git/": canonical(r/e);
//     - e ".git" or under ".git/": the same suffix below each git directory that
//     belongs to r (the root's .git directory or what its .git file points to, their
//     common directory, <common>/worktrees/*, submodule git directories below
//     modules/, recursively; and r itself when it is a git directory). Then, for
//     each of those git directories, its commondir (PathCommondir when missing), and
//     config.worktree when ".git/config" or ".git" is protected (a file stand-in
//     when missing: git reads an empty one as no settings), its modules/ (a
//     directory stand-in when missing) with its submodule git directories in use
//     (a checkout's .git leads there) as Except, and r/.git itself when it is a
//     pointer file. Then the .git
//     of each submodule checkout and linked worktree whose git directory was found,
//     where its checkout directory exists (gitDirsOf's checkouts).
//
// The git rule: entries under ".git/" apply to git directories that exist when this
// runs. A workspace without a repository gets no such entries, so "git init" in a run
// works (it must create .git/config and .git/hooks), and the repository it creates is
// the run's own, hooks and configuration included (git commands the user runs there
// later run its hooks). One exception: a root without a repository of its own that
// lies inside one (a workspace "repo/sub") gets r/.git and r/HEAD protected, so that
// no repository of the command's (r/.git, or r itself as a bare repository) can
// shadow the enclosing one for git commands run in r; "git init" there is refused. A
// repository made deeper (r/x/.git, or r/x as a bare one) is not prevented. See the
// package doc, "Protected paths", for why commondir and the pointer file are
// protected and what stays open.
//
// Symbolic links: a protected spelling that passes through symlinks (the entry
// itself a link, a link on its way, a .git symlink, links in the text of a .git file
// or a commondir) is protected at what it leads to and, in a record of Kind
// [PathLink] each, at every link's own name: otherwise a command could retarget
// ".git" or ".git/hooks" and so make git use hooks and configuration of its own,
// while everything toh protects stays untouched. The reason and entry of such a
// record are those of the path the link leads to (reason "git" for the links of
// pointers); a link that is gone by the time its record is made is PathAbsent, so
// that no stand-in takes its name.
//
// Missing paths get a Kind by [kindOfMissing]. Paths may lie outside every writable
// root (a pointer can lead anywhere); they are read-only there anyway, and backends
// skip them.
func (x Execution) ProtectedPaths() []ProtectedPath {
	var out []ProtectedPath
	seen := map[string]bool{}
	// missing is the Kind of pp when it does not exist; "" for kindOfMissing's.
	add := func(pp ProtectedPath, missing PathKind) {
		if !path.IsAbs(pp.Path) || seen[pp.Path] {
			return
		}
		seen[pp.Path] = true
		fi, err := os.Lstat(pp.Path)
		switch {
		case err == nil && fi.Mode()&os.ModeSymlink != 0:
			pp.Exists, pp.Kind = true, PathLink
		case err == nil && fi.IsDir():
			pp.Exists, pp.Kind = true, PathDir
		case err == nil:
			pp.Exists, pp.Kind = true, PathFile
		case missing != "":
			pp.Kind = missing
		default:
			pp.Kind = kindOfMissing(pp.Path)
		}
		out = append(out, pp)
	}
	if x.PolicyFile != "" {
		// Neither gets a stand-in: an empty policy file would read as malformed, and the
		// writers must create the one lock file they all lock.
		add(ProtectedPath{Path: x.PolicyFile, Reason: ProtectPolicy}, PathAbsent)
		add(ProtectedPath{Path: x.PolicyFile + ".lock", Reason: ProtectPolicy}, PathAbsent)
	}

	// addIncludes protects the files the git directory d's config includes, for
	// what they hold is configuration too: a shared "../.gitconfig.shared", or an
	// includeIf's file in .git (found by review). Includes of included files count
	// too, and so do the links on the way to each, as for protect entries: a
	// command that retargeted one would have git read a file of its own. Missing,
	// an included file gets an empty file stand-in, never a directory (which would
	// break git's reading): git reads an empty included file as no settings, as it
	// does a missing one. Until 2026-12-02 none of this held under bwrap, and a
	// command could create such a file with a core.fsmonitor of its own.
	addIncludes := func(d string) {
		for _, inc := range configIncludesDeep(d+"/config", homeDir()) {
			add(ProtectedPath{Path: canon.Canonical(inc), Reason: ProtectGit, Entry: ".git/config", GitDir: d}, PathFile)
			for _, l := range linksOn(inc) {
				add(ProtectedPath{Path: l, Reason: ProtectGit, Entry: ".git/config", GitDir: d}, PathAbsent)
			}
		}
	}

	var plain, git []string // git holds the suffixes after ".git": "" or "/hooks"
	gitConfig := false
	for _, e := range x.Protect {
		if e == ".git" || strings.HasPrefix(e, ".git/") {
			git = append(git, strings.TrimPrefix(e, ".git"))
			gitConfig = gitConfig || e == ".git" || e == ".git/config"
		} else {
			plain = append(plain, e)
		}
	}
	for _, r := range x.WritableRoots {
		if !path.IsAbs(r) {
			continue
		}
		for _, e := range plain {
			add(ProtectedPath{Path: canon.Canonical(r + "/" + e), Reason: ProtectEntry, Entry: e}, "")
			for _, l := range linksOn(r + "/" + e) {
				add(ProtectedPath{Path: l, Reason: ProtectEntry, Entry: e}, PathAbsent)
			}
		}
		if len(git) == 0 {
			continue
		}
		dirs, pointer, links, checkouts, modules, truncated := gitDirsOf(r)
		if truncated {
			// Part of the structure was not reached: every git directory found
			// that holds the rest (the outermost ones) is protected whole, so
			// nothing below it can be changed, at the price of commits in the run.
			for _, d := range dirs {
				if !slices.ContainsFunc(dirs, func(o string) bool { return o != d && canon.LexicallyWithin(d, o) }) {
					add(ProtectedPath{Path: d, Reason: ProtectGit, Entry: ".git", GitDir: d}, "")
				}
			}
		}
		top, inside := "", false
		if len(dirs) == 0 && pointer == "" && len(links) == 0 {
			top, inside = enclosingRepository(r)
		}
		if inside {
			// No repository of its own, inside someone's: a ".git" made here would
			// shadow the enclosing repository for every git command run in r, the
			// user's next one included, with hooks and configuration of the command's
			// own. Missing, it gets a directory stand-in, which git's discovery passes
			// over (found by review). r itself would be taken for a bare repository
			// with HEAD, objects/ and refs/ (and its config read, core.worktree and
			// core.fsmonitor included): HEAD gets a file stand-in, which is no valid
			// HEAD. objects, refs and config are common names in a project.
			add(ProtectedPath{Path: r + "/.git", Reason: ProtectGit, Entry: ".git"}, "")
			add(ProtectedPath{Path: r + "/HEAD", Reason: ProtectGit, Entry: "HEAD"}, "")
			// And what of the enclosing repository lies in r: its submodules'
			// checkouts (a rewritten "sub/lib/.git" sends the user's git status in
			// the repository into a git directory of the command's; found by
			// review), their git directories where they are inside, and the links
			// on the way. The rest of its structure is outside r, read-only anyway.
			ed, _, el, ec, em, _ := gitDirsOf(top)
			if gitConfig {
				// Its configuration lies outside r, read-only, but what it
				// includes may lie in r (found by review).
				for _, d := range ed {
					if !canon.LexicallyWithin(d, r) {
						addIncludes(d)
					}
				}
			}
			dirs, modules = slices.DeleteFunc(ed, func(d string) bool { return !canon.LexicallyWithin(d, r) }), em
			links = slices.DeleteFunc(el, func(l string) bool { return !canon.LexicallyWithin(l, r) })
			checkouts = slices.DeleteFunc(ec, func(sp string) bool {
				return !canon.LexicallyWithin(canon.Canonical(path.Dir(sp)), r)
			})
		}
		if pointer != "" {
			add(ProtectedPath{Path: pointer, Reason: ProtectGit}, "")
		}
		for _, l := range links {
			add(ProtectedPath{Path: l, Reason: ProtectGit}, PathAbsent)
		}
		for _, sp := range checkouts {
			// Named, not followed: a .git that is itself a link is protected at its
			// own name by linksOn. An empty checkout without one (a submodule never
			// initialised, or deinitialised) is kept whole instead: a stand-in .git
			// in it, file or directory, makes git status in the superproject fail
			// ("not recognized as a git repository"; found by review). A checkout
			// with content gets the stand-in: a planted submodule config naming a
			// project directory as its checkout must not make that directory
			// read-only in later runs.
			dir := canon.Canonical(path.Dir(sp))
			if _, err := os.Lstat(dir + "/.git"); err != nil && errors.Is(err, os.ErrNotExist) && isEmptyDir(dir) {
				add(ProtectedPath{Path: dir, Reason: ProtectGit}, "")
			} else {
				add(ProtectedPath{Path: dir + "/.git", Reason: ProtectGit}, "")
			}
			for _, l := range linksOn(sp) {
				add(ProtectedPath{Path: l, Reason: ProtectGit}, PathAbsent)
			}
		}
		for _, d := range dirs {
			for _, suffix := range git {
				add(ProtectedPath{Path: canon.Canonical(d + suffix), Reason: ProtectEntry, Entry: ".git" + suffix, GitDir: d}, "")
				for _, l := range linksOn(d + suffix) {
					add(ProtectedPath{Path: l, Reason: ProtectEntry, Entry: ".git" + suffix, GitDir: d}, PathAbsent)
				}
			}
			add(ProtectedPath{Path: d + "/commondir", Reason: ProtectGit, GitDir: d}, PathCommondir)
			if gitConfig {
				addIncludes(d)
				// Missing, it gets an empty file stand-in: git reads an empty
				// config.worktree as no settings (checked with git 2.39), and
				// without one a command could create it with core.fsmonitor where
				// extensions.worktreeConfig is on (found by review).
				add(ProtectedPath{Path: d + "/config.worktree", Reason: ProtectGit, Entry: ".git/config", GitDir: d}, "")
			}
			// modules/ may gain no entry: git takes an existing modules/<name> as
			// the git directory of a submodule it initialises, hooks and
			// configuration included, so a command that made one for a submodule
			// not yet initialised would have the user's next "git submodule update
			// --init" run a hook of its own, unconfined (review F4, 2026-12-02).
			// Which names git will use is the command's to change (.gitmodules,
			// the index), so the whole directory is kept, but for the submodule git
			// directories in use in it: commits there must work. A stale one stays
			// read-only: git refuses a git directory nested in another only while
			// the outer one is valid, and a writable one the command could break,
			// with a git directory of its own inside, unnoticed (review). Missing,
			// modules/ gets a directory stand-in.
			var except []string
			for _, m := range modules[d] {
				except = append(except, canon.Canonical(m))
			}
			add(ProtectedPath{Path: canon.Canonical(d + "/modules"), Reason: ProtectGit, GitDir: d, Except: except}, PathDir)
			for _, l := range linksOn(d + "/modules") {
				add(ProtectedPath{Path: l, Reason: ProtectGit, GitDir: d}, PathAbsent)
			}
			for _, e := range except {
				add(ProtectedPath{Path: e + "/HEAD", Reason: ProtectValid, GitDir: e}, PathFile)
				for _, n := range []string{"/objects", "/refs"} {
					add(ProtectedPath{Path: e + n, Reason: ProtectValid, GitDir: e, Except: []string{e + n}}, PathDir)
				}
			}
		}
	}
	return out
}

// WithWorktreeRoots returns x with the common git directory of every linked worktree
// among its roots added as a writable root, so that git can commit in the worktree:
// a commit writes objects and refs to the common directory and the index and HEAD to
// the worktree's own directory below it. Only x.WorkspaceRoot and x.ExtraRoots are
// examined, only in workspace-write, and only a pointer that passes every check of
// the package doc's "Linked worktrees" is honoured. A common directory that already
// lies within a writable root is not added again. The added roots are also listed in
// WorktreeRoots, so that a reader of the policy sees where they came from.
//
// The hooks and configuration of an added directory stay read-only like those of any
// other git directory: it is a git directory of the worktree's root (see
// [Execution.ProtectedPaths]).
//
// This is a step after [Resolve], not part of it, on purpose: a consumer that judges
// protected paths by joining root and entry (as the fence did before adopting
// ProtectedPaths) would see the common directory's hooks as an unprotected part of a
// writable root. toh-exec and [Watcher] (toh-mount) call it; a consumer that does not
// stays stricter (git in a linked worktree is then refused its common directory),
// never looser.
func (x Execution) WithWorktreeRoots() Execution {
	if x.Mode != WorkspaceWrite {
		return x
	}
	writable := x.WritableRoots
	var added []string
	for _, r := range append([]string{x.WorkspaceRoot}, x.ExtraRoots...) {
		c, ok := verifiedWorktree(r, writable)
		if !ok || withinAnyRoot(c, writable) {
			continue
		}
		added = append(added, c)
		writable = append(writable[:len(writable):len(writable)], c)
	}
	if len(added) == 0 {
		return x
	}
	x.WritableRoots = writable
	x.WorktreeRoots = added
	return x
}

// enclosingRepository returns the nearest directory above r that holds a ".git" (a
// directory, a pointer file or a link), where git's discovery from r would find a
// repository. It does not stop where git would (a file system boundary,
// GIT_CEILING_DIRECTORIES): protecting one name too many only refuses "git init" in
// r.
func enclosingRepository(r string) (string, bool) {
	for d := path.Dir(r); ; d = path.Dir(d) {
		if _, err := os.Lstat(canon.HostSpelling(path.Join(d, ".git"))); err == nil {
			return d, true
		}
		if d == "/" {
			return "", false
		}
	}
}

func withinAnyRoot(p string, roots []string) bool {
	for _, r := range roots {
		if canon.LexicallyWithin(p, r) {
			return true
		}
	}
	return false
}

// ErrMovableRoot matches every [*MovableRootError].
var ErrMovableRoot = errors.New("writable root spelled through a symbolic link that a confined command may retarget")

// MovableRootError refuses a call whose writable root is spelled through a symbolic
// link that itself lies within a writable root: a confined command may retarget such
// a link (or replace a directory on the way by one), and the next call would then
// canonicalize the same spelling to a different root, "/" for a link retargeted to
// "/". Refusing makes that attack fail loud instead of widening the next run.
type MovableRootError struct {
	// Field names the spelling in the policy file ("writableRoots[0]",
	// "workspaceRoot", `sessions["s-42"].cwd`) or the request ("$TMPDIR", "the
	// policy file").
	Field    string
	Spelling string
	// Link is the symbolic link's own name; Root the writable root that holds it.
	Link, Root string
	// Target is what the spelling leads to now, the spelling to write instead.
	Target string
}

// policyFileField is [MovableRootError.Field] for the policy file's own path.
const policyFileField = "the policy file"

func (e *MovableRootError) Error() string {
	if e.Field == policyFileField {
		return fmt.Sprintf("policy: the policy file %q passes through the symbolic link %q, which lies in the writable root %q, so a confined "+
			"command could retarget it and choose the policy (and mode) of later calls; name the file it leads to (%q) instead",
			e.Spelling, e.Link, e.Root, e.Target)
	}
	return fmt.Sprintf("policy: %s %q passes through the symbolic link %q, which lies in the writable root %q, so a confined "+
		"command could retarget it and move this root for later calls; write the directory it leads to (%q) instead",
		e.Field, e.Spelling, e.Link, e.Root, e.Target)
}

func (e *MovableRootError) Is(target error) bool { return target == ErrMovableRoot }

// CheckRootSpellings returns a [*MovableRootError] when a spelling from which x's
// writable roots were resolved (f and req are what [Resolve] made x from) passes
// through a symbolic link whose own name lies within one of x.WritableRoots: the
// session's cwd, else f.WorkspaceRoot; each f.WritableRoots entry; req.TmpDir; and
// req.PolicyFile, whose links would let a command choose the next call's policy.
// It returns nil for modes without writable roots.
//
// The caller's working directory (req.Cwd, used when neither the session nor the
// file names a workspace) is not checked: it is where the caller is, not a spelling
// kept from call to call. A spelling through a directory that lies within a writable
// root is accepted while it holds no link: a command that replaces that directory by
// a link is refused at the next call. Only links that exist are seen; one created
// later at a missing component is refused when it exists.
func (x Execution) CheckRootSpellings(f *File, req Request) error {
	if x.Mode != WorkspaceWrite || len(x.WritableRoots) == 0 {
		return nil
	}
	if f == nil {
		f = Default()
	}
	type spelling struct{ field, p string }
	var sps []spelling
	if sess, ok := f.Sessions[req.SessionID]; ok && req.SessionID != "" {
		sps = append(sps, spelling{fmt.Sprintf("sessions[%q].cwd", req.SessionID), sess.Cwd})
	} else if f.WorkspaceRoot != "" {
		sps = append(sps, spelling{"workspaceRoot", f.WorkspaceRoot})
	}
	for i, r := range f.WritableRoots {
		sps = append(sps, spelling{fmt.Sprintf("writableRoots[%d]", i), r})
	}
	if path.IsAbs(req.TmpDir) {
		sps = append(sps, spelling{"$TMPDIR", req.TmpDir})
	}
	if pf := req.PolicyFile; pf != "" {
		// Kept from call to call like a root: a link on its way that a command can
		// retarget chooses the policy, and so the mode, of every later call. The
		// protected path is only where the link leads now.
		if !path.IsAbs(pf) && path.IsAbs(req.Cwd) {
			pf = path.Join(req.Cwd, pf)
		}
		sps = append(sps, spelling{policyFileField, pf})
	}
	for _, sp := range sps {
		for _, l := range linksOn(sp.p) {
			for _, r := range x.WritableRoots {
				if l != r && canon.LexicallyWithin(l, r) {
					return &MovableRootError{Field: sp.field, Spelling: sp.p, Link: l, Root: r, Target: canon.Canonical(sp.p)}
				}
			}
		}
	}
	return nil
}
