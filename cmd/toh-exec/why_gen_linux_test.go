package main

// The scenarios of the why property test (why_property_linux_test.go): random trees
// and policies from a seed, the (path, op) candidates a tree offers, the operation
// itself as system calls, and tree snapshots for the positive and negative controls.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// whyScenario is one random tree and policy. Paths are relative to the tree's base;
// "$B" in a line or in the policy stands for the base (absolute link targets, roots).
type whyScenario struct {
	seed      int64
	lines     []string
	policyRel string
	lock      bool // create the policy's lock file (policy.Update would have)
	doc       policy.File
	session   string
}

// movedSuffix is the name a rename moves a path to, beside it.
const movedSuffix = ".why-moved"

func genScenario(seed int64) whyScenario {
	rng := rand.New(rand.NewSource(seed))
	p := func(prob float64) bool { return rng.Float64() < prob }
	s := whyScenario{seed: seed}
	add := func(lines ...string) { s.lines = append(s.lines, lines...) }

	add("file ws/f1 one", "file ws/a/f2 two", "file outside/canary precious", "file outside/d/o inner", "dir cfg")
	if p(.5) {
		add("file ws/a/b/f3 three")
	}
	if p(.5) {
		add("dir ws/empty")
	}
	if p(.3) {
		add("file ws/.env secret")
	}
	extra := p(.5)
	if extra {
		add("file extra/e1 e")
	}
	links := []struct {
		prob float64
		line string
	}{
		{.5, "link ws/in -> a"},                           // relative, in the tree
		{.4, "link ws/inabs -> $B/ws/a"},                  // absolute, into the root
		{.5, "link ws/out -> $B/outside/d"},               // absolute, out of every root
		{.4, "link ws/outrel -> ../outside/d"},            // relative, climbing out
		{.4, "link ws/outf -> $B/outside/canary"},         // to a file out
		{.3, "link ws/dangle -> $B/outside/missing"},      // out, to nothing
		{.3, "link ws/dangin -> a/missing"},               // in, to nothing
		{.3, "link ws/a/up -> .."},                        // climbing to the root
		{.2, "link outside/back -> $B/ws/a"},              // from outside into the root
		{.2, "link outside/d/deep -> ../../ws/a/missing"}, // from outside, to nothing in the root
	}
	for _, l := range links {
		if p(l.prob) {
			add(l.line)
		}
	}
	if extra && p(.5) {
		add("link ws/toextra -> $B/extra")
	}
	if p(.2) {
		add("hardlink ws/hl -> outside/canary")
	}

	gitDir := func(dir string) (config bool) {
		add("file "+dir+"/HEAD ref: refs/heads/main", "dir "+dir+"/objects", "dir "+dir+"/refs")
		if config = p(.7); config {
			add("file " + dir + "/config [core]")
		}
		if p(.6) {
			add("file " + dir + "/hooks/pre-commit #!/bin/sh")
		}
		return config
	}
	elsewhere := func() string {
		switch {
		case extra && p(.4):
			return "extra/gd"
		case p(.5):
			return "ws/.gd"
		}
		return "outside/gd"
	}
	switch rng.Intn(6) {
	case 0: // no repository: git init must work
	case 1: // a repository, maybe with a submodule and a worktree directory
		config := gitDir("ws/.git")
		if p(.4) {
			gitDir("ws/.git/modules/sub")
			add("file ws/sub/.git gitdir: ../.git/modules/sub")
		}
		if p(.3) {
			add("file ws/.git/worktrees/w1/HEAD ref: refs/heads/w1", "file ws/.git/worktrees/w1/commondir ../..",
				"file ws/.git/worktrees/w1/gitdir $B/outside/w1/.git")
		}
		if config && p(.3) {
			add("hardlink ws/hlconfig -> ws/.git/config") // protected content under a second name
		}
	case 2: // a .git pointer file (--separate-git-dir)
		g := elsewhere()
		gitDir(g)
		add("file ws/.git gitdir: $B/" + g)
	case 3: // a .git symlink
		g := elsewhere()
		gitDir(g)
		add("link ws/.git -> $B/" + g)
	case 4: // the workspace is a linked worktree of a repository outside
		gitDir("outside/repo/.git")
		add("file outside/repo/.git/worktrees/wt/HEAD ref: refs/heads/wt", "file outside/repo/.git/worktrees/wt/commondir ../..",
			"file outside/repo/.git/worktrees/wt/gitdir $B/ws/.git", "file ws/.git gitdir: $B/outside/repo/.git/worktrees/wt")
	case 5: // a .git directory that is no repository
		add("dir ws/.git/hooks")
	}

	switch r := rng.Float64(); {
	case r < .3:
		add("dir ws/secrets")
		if p(.5) {
			add("file ws/secrets/key.pem k")
		}
	case r < .4:
		add("file ws/secrets not a directory") // where "secrets/key.pem" needs one
	case r < .5:
		add("link ws/secrets -> a")
	}

	switch rng.Intn(3) {
	case 0:
		s.policyRel = "cfg/policy.json"
	case 1:
		s.policyRel = "ws/.toh/policy.json"
	default:
		s.policyRel = "cfg/policy.json"
		if extra {
			s.policyRel = "extra/policy.json"
		}
	}
	s.lock = p(.6)

	pickMode := func() policy.Mode {
		switch r := rng.Float64(); {
		case r < .7:
			return policy.WorkspaceWrite
		case r < .85:
			return policy.ReadOnly
		}
		return policy.DangerFullAccess
	}
	s.doc = policy.File{Version: 1, Mode: pickMode(), WorkspaceRoot: "$B/ws"}
	// Roots are never spelled through a link within a writable root ("$B/ws/in/..",
	// "$B/ws/toextra"): Resolve refuses those (policy.MovableRootError), since a
	// command could retarget the link.
	if p(.1) && slices.Contains(s.lines, "link outside/back -> $B/ws/a") {
		s.doc.WorkspaceRoot = "$B/outside/back/.." // canonicalized before cleaning: the workspace
	}
	if extra && p(.6) {
		root := "$B/extra"
		if p(.4) && slices.Contains(s.lines, "link ws/toextra -> $B/extra") {
			root = "$B/outside/../extra"
		}
		s.doc.WritableRoots = append(s.doc.WritableRoots, root)
	}
	if p(.3) {
		s.doc.WritableRoots = append(s.doc.WritableRoots, "$B/ws/a") // nested in the workspace
	}
	switch r := rng.Float64(); {
	case r < .4: // absent: the default list
	case r < .5:
		s.doc.Protect = &[]string{}
	default:
		list := []string{}
		for _, e := range []string{".git/hooks", ".git/config", ".git", "secrets", "secrets/key.pem", ".env", "a/b", "missing/deep", "cfg.toml"} {
			if p(.35) {
				list = append(list, e)
			}
		}
		s.doc.Protect = &list
	}
	if p(.3) {
		s.session = "s1"
		sess := policy.Session{Cwd: "$B/ws"}
		if p(.7) {
			sess.Events = []policy.Event{{Mode: pickMode()}}
		}
		s.doc.Sessions = map[string]policy.Session{"s1": sess}
	}
	return s
}

func (s whyScenario) policyJSON(base string) string {
	b, err := json.Marshal(s.doc)
	if err != nil {
		panic(err)
	}
	return strings.ReplaceAll(string(b), "$B", base)
}

// String is the scenario as a reproducer: the tree, the policy, the session.
func (s whyScenario) String() string {
	return fmt.Sprintf("seed %d\n  tree ($B is the base): %q\n  policy file $B/%s (lock file: %v): %s\n  session: %q",
		s.seed, s.lines, s.policyRel, s.lock, s.policyJSON("$B"), s.session)
}

// build makes the tree below base (canonical, existing) and returns the policy
// file's path.
func (s whyScenario) build(t *testing.T, base string) string {
	t.Helper()
	for _, l := range s.lines {
		testutil.MakeTree(t, base, strings.ReplaceAll(l, "$B", base))
	}
	pf := filepath.Join(base, s.policyRel)
	if err := os.MkdirAll(filepath.Dir(pf), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pf, []byte(s.policyJSON(base)), 0o644); err != nil {
		t.Fatal(err)
	}
	if s.lock {
		if err := os.WriteFile(pf+".lock", nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return pf
}

// resolveLike resolves the scenario's policy the way toh-exec does for a call from
// cwd with $TMPDIR unset (resolvePolicy: worktree roots included).
func resolveLike(pf, session, cwd string) (policy.Execution, error) {
	f, found, err := policy.Load(pf)
	if err != nil {
		return policy.Execution{}, err
	}
	req := policy.Request{SessionID: session, Cwd: cwd}
	if found {
		req.PolicyFile = pf
	}
	x, err := policy.Resolve(f, req)
	if err != nil {
		return x, err
	}
	return x.WithWorktreeRoots(), nil
}

// candidates lists spellings (relative to base) worth asking about: every entry,
// names beneath links to directories, new names in every directory, the protected
// paths and what is around them, and with dotdot also ".." after a link (the
// fence's mount resolves ".." by its own tree, so those are for bwrap only). focus
// holds those where the rules meet: links, the writable roots' own names, the
// protected paths and their directories.
func candidates(base string, x policy.Execution, dotdot bool) (all []string, focus map[string]bool) {
	set := map[string]bool{}
	focus = map[string]bool{}
	put := func(rel string) {
		if rel != "" && rel != "." && !strings.HasPrefix(rel, "../") && rel != ".." {
			set[rel] = true
		}
	}
	for _, r := range x.WritableRoots {
		if canon.LexicallyWithin(r, base) && r != base {
			focus[strings.TrimPrefix(r, base+"/")] = true
		}
	}
	filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(base, p)
		put(rel)
		switch {
		case d.IsDir():
			put(path.Join(rel, "new"))
		case d.Type()&fs.ModeSymlink != 0:
			focus[rel] = true
			fi, err := os.Stat(p)
			if err != nil || !fi.IsDir() {
				break
			}
			put(rel + "/new")
			names, _ := os.ReadDir(p)
			for i, n := range names {
				if i < 4 {
					put(rel + "/" + n.Name())
				}
			}
			if dotdot {
				up, _ := os.ReadDir(filepath.Dir(canon.Canonical(p)))
				for i, n := range up {
					if i < 3 {
						put(rel + "/../" + n.Name())
					}
				}
			}
		}
		return nil
	})
	for _, pp := range x.ProtectedPaths() {
		if canon.LexicallyWithin(pp.Path, base) && pp.Path != base {
			rel := strings.TrimPrefix(pp.Path, base+"/")
			for _, r := range []string{rel, rel + "/new", path.Dir(rel)} {
				put(r)
				focus[r] = true
			}
		}
	}
	for rel := range set {
		all = append(all, rel)
	}
	sort.Strings(all)
	return all, focus
}

// applicable reports whether op can be carried out on the host spelling p as it is
// now, so that the only reason for it to fail is a denial: write needs a regular
// file, create a missing name in an existing directory, delete a file, link or
// empty directory, rename an entry whose moved name is free.
func applicable(op policy.Op, p string) bool {
	switch op {
	case policy.OpWrite:
		fi, err := os.Stat(p)
		return err == nil && fi.Mode().IsRegular()
	case policy.OpCreate:
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
		fi, err := os.Stat(filepath.Dir(p))
		return err == nil && fi.IsDir()
	case policy.OpDelete:
		fi, err := os.Lstat(p)
		if err != nil {
			return false
		}
		if fi.IsDir() {
			names, err := os.ReadDir(p)
			return err == nil && len(names) == 0
		}
		return true
	case policy.OpRename:
		if _, err := os.Lstat(p); err != nil {
			return false
		}
		_, err := os.Lstat(p + movedSuffix)
		return errors.Is(err, fs.ErrNotExist)
	}
	return false
}

// performOp carries op out on p with the system calls a command would use, and
// says how it went: "ok" or the errno's name.
func performOp(op policy.Op, p string) string {
	var err error
	switch op {
	case policy.OpWrite:
		var fd int
		if fd, err = unix.Open(p, unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0); err == nil {
			_, err = unix.Write(fd, []byte("x"))
			unix.Close(fd)
		}
	case policy.OpCreate:
		var fd int
		if fd, err = unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644); err == nil {
			unix.Close(fd)
		}
	case policy.OpDelete:
		var st unix.Stat_t
		if err = unix.Lstat(p, &st); err == nil {
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				err = unix.Rmdir(p)
			} else {
				err = unix.Unlink(p)
			}
		}
	case policy.OpRename:
		err = unix.Renameat2(unix.AT_FDCWD, p, unix.AT_FDCWD, p+movedSuffix, unix.RENAME_NOREPLACE)
	default:
		return "unknown op " + string(op)
	}
	var errno unix.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func init() {
	// The operation inside a confined run: the test binary, copied where bwrap
	// shows it, run as "why-op OP PATH".
	subprocessRoles["why-op"] = func() int {
		if len(os.Args) != 3 {
			fmt.Fprintf(os.Stderr, "why-op: want OP PATH, got %q\n", os.Args[1:])
			return 3
		}
		fmt.Println(performOp(policy.Op(os.Args[1]), os.Args[2]))
		return 0
	}
}

// snapEntry is what a snapshot keeps of one entry: enough to see every effect the
// four operations can have, and nothing that reads or the runner change (times,
// link counts, directory sizes).
type snapEntry struct {
	typ  uint32
	perm uint32
	ino  uint64
	data string // a file's content, a link's text
}

func whySnapshot(t *testing.T, base string) map[string]snapEntry {
	t.Helper()
	out := map[string]snapEntry{}
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		e := snapEntry{typ: st.Mode & unix.S_IFMT, perm: st.Mode &^ unix.S_IFMT, ino: st.Ino}
		switch e.typ {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.data = string(b)
		case unix.S_IFLNK:
			e.data, _ = os.Readlink(p)
		}
		rel, _ := filepath.Rel(base, p)
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot of %s: %v", base, err)
	}
	return out
}

// effectProblem checks a snapshot pair against the operation's outcome: nothing
// changed unless it succeeded, and then exactly what op at the canonical target
// (relative to the base) does. "" means as expected.
func effectProblem(before, after map[string]snapEntry, op policy.Op, target string, succeeded bool) string {
	var added, removed, changed []string
	for p, b := range before {
		a, ok := after[p]
		switch {
		case !ok:
			removed = append(removed, p)
		case a != b:
			changed = append(changed, p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			added = append(added, p)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	sort.Strings(changed)
	got := fmt.Sprintf("added %q, removed %q, changed %q", added, removed, changed)
	if !succeeded {
		if len(added)+len(removed)+len(changed) != 0 {
			return "failed, but changed the tree: " + got
		}
		return ""
	}
	ok := false
	switch op {
	case policy.OpWrite:
		b := before[target]
		ok = len(added)+len(removed) == 0 && slices.Contains(changed, target)
		for _, p := range changed {
			ok = ok && before[p].ino == b.ino && after[p].data == before[p].data+"x"
		}
	case policy.OpCreate:
		ok = len(removed)+len(changed) == 0 && slices.Equal(added, []string{target}) &&
			after[target].typ == unix.S_IFREG && after[target].data == ""
	case policy.OpDelete:
		ok = len(added)+len(changed) == 0 && slices.Equal(removed, []string{target})
	case policy.OpRename:
		ok = len(changed) == 0 && len(removed) > 0 && len(added) == len(removed)
		for _, p := range removed {
			moved := target + movedSuffix + strings.TrimPrefix(p, target)
			ok = ok && (p == target || strings.HasPrefix(p, target+"/")) && after[moved] == before[p]
		}
	}
	if !ok {
		return fmt.Sprintf("succeeded, but the tree shows otherwise for %s of %s: %s", op, target, got)
	}
	return ""
}
