package main

// Protected paths and git through the built binary under real bwrap (issue 5): git
// works in workspace-write (init, add, commit, branch, checkout, stash, worktree add
// and a commit in the linked worktree, a commit in a submodule), while hooks
// and configuration of every git directory that exists when a run starts stay
// read-only, protected paths that do not exist cannot be created, nothing is left in
// the workspace, and a planted .git pointer makes nothing writable.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/internal/testutil"
	"golang.org/x/sys/unix"
)

// gitPrefix defines g, git with an identity and nothing from the user's or the
// system's configuration, for scripts run confined.
const gitPrefix = `g() { git -c user.name=t -c user.email=t@example.com -c init.defaultBranch=main -c protocol.file.allow=always "$@"; }
`

// gitScratch is a scratch with a HOME of its own for git (read-only inside runs).
type gitScratch struct {
	*scratch
	env []string
}

func newGitScratch(t *testing.T) *gitScratch {
	t.Helper()
	testutil.RequireBwrap(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	s := newScratch(t)
	home := filepath.Join(s.beside, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	return &gitScratch{scratch: s, env: []string{"GIT_CONFIG_NOSYSTEM=1", "HOME=" + home, "GIT_CONFIG_GLOBAL=/dev/null"}}
}

// committedRepo makes a repository with one empty commit beside the workspace.
func (s *gitScratch) committedRepo(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(s.beside, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	s.git(t, d, "init", "-q")
	s.git(t, d, "commit", "-q", "--allow-empty", "-m", name)
	return d
}

// cloneWithSubmodules makes a repository beside the workspace with a submodule at
// each of names (each a committed repository of that name beside it, returned in
// order), and clones it as the workspace, its submodules not initialised.
func (s *gitScratch) cloneWithSubmodules(t *testing.T, names ...string) []string {
	t.Helper()
	origin := s.committedRepo(t, "origin")
	var subs []string
	for _, n := range names {
		sub := s.committedRepo(t, n)
		s.git(t, origin, "submodule", "add", "-q", sub, n)
		subs = append(subs, sub)
	}
	s.git(t, origin, "commit", "-q", "-m", "submodules")
	if err := os.RemoveAll(s.ws); err != nil {
		t.Fatal(err)
	}
	s.git(t, s.beside, "clone", "-q", origin, s.ws)
	return subs
}

// confined runs script under bwrap in workspace-write with dir as the working
// directory (and so the workspace root).
func (s *gitScratch) confined(t *testing.T, dir, script string, args ...string) envelope {
	t.Helper()
	e, r := s.start(t, dir, script, args...)
	if e.Result == nil {
		t.Fatalf("no result: %d %+v %q", r.code, e.Error, r.stderr)
	}
	return e
}

// start is confined without requiring that the command ran.
func (s *gitScratch) start(t *testing.T, dir, script string, args ...string) (envelope, runResult) {
	t.Helper()
	argv := append([]string{"--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write",
		"--probe-cache", filepath.Join(s.beside, "cache.json"), "-c", gitPrefix + script, "sh"}, args...)
	return tohJSON(t, dir, s.env, argv...)
}

// refusedLink requires that a run was refused before it started because the
// protected symlink link lies within a writable root.
func refusedLink(t *testing.T, what, link string, e envelope, r runResult) {
	t.Helper()
	want := fmt.Sprintf("protected path %q is a symbolic link", link)
	if r.code != exitCannotStart || e.Result != nil || e.Error == nil || !strings.Contains(e.Error.Message, want) {
		t.Errorf("%s: not refused with %q: %d %+v %+v %q", what, want, r.code, e.Result, e.Error, r.stderr)
	}
}

func (s *gitScratch) mustRun(t *testing.T, dir, script string, args ...string) envelope {
	t.Helper()
	e := s.confined(t, dir, "set -e\n"+script, args...)
	if *e.Result.ExitCode != 0 {
		t.Fatalf("confined %q failed: %+v\nstdout: %s\nstderr: %s", script, e.Result, *e.Stdout, *e.Stderr)
	}
	return e
}

// withPolicy returns a copy of s whose runs use a policy file holding doc.
func (s *gitScratch) withPolicy(t *testing.T, doc string) *gitScratch {
	t.Helper()
	f, err := os.CreateTemp(s.beside, "policy-*.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(doc); err != nil {
		t.Fatal(err)
	}
	sc := *s.scratch
	sc.noPolicy = f.Name()
	return &gitScratch{scratch: &sc, env: s.env}
}

// git runs git unconfined (the user's own setup steps) and returns its output.
func (s *gitScratch) git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	args = append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main",
		"-c", "protocol.file.allow=always"}, args...)
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %q in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// treeState lists every entry below dir with type, size, content digest of small
// files and whether it carries the stand-in mark, so that "nothing changed" and "no
// artifact" can be compared exactly.
func treeState(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		line := fmt.Sprintf("%s %s", strings.TrimPrefix(p, dir), fi.Mode())
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			line += fmt.Sprintf(" %q", b)
		}
		if _, err := unix.Lgetxattr(p, "user.toh.stand-in", nil); err == nil {
			line += " STAND-IN"
		}
		lines = append(lines, line)
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// noStandIns fails when any entry below dir carries the stand-in mark.
func noStandIns(t *testing.T, dir string) {
	t.Helper()
	if st := treeState(t, dir); strings.Contains(st, "STAND-IN") {
		t.Fatalf("stand-ins left behind in %s:\n%s", dir, st)
	}
}

// refused requires that a confined attack failed. Writes fail with EROFS, which the
// bwrap dialect reports as a denial; renaming or removing a mountpoint fails with
// EBUSY, which no dialect names, so only the exit status shows it.
func refused(t *testing.T, attack string, e envelope) {
	t.Helper()
	if *e.Result.ExitCode == 0 {
		t.Errorf("%s: not refused: %+v %q", attack, e.Result, *e.Stderr)
		return
	}
	if strings.Contains(*e.Stderr, "Read-only file system") != e.Result.Denied {
		t.Errorf("%s: denied=%v but stderr %q", attack, e.Result.Denied, *e.Stderr)
	}
}

func sameTree(t *testing.T, what, before, after string) {
	t.Helper()
	if before != after {
		t.Fatalf("%s changed the tree:\n--- before\n%s\n--- after\n%s", what, before, after)
	}
}

const preCommitHook = "#!/bin/sh\necho ran >> \"$(git rev-parse --show-toplevel)/hook-ran\"\n"

// TestGitWorksWithProtectedPaths: init, add, commit, branch, checkout and stash all
// succeed confined; an existing hook runs; hooks and config cannot be planted, not
// even by renaming .git; nothing is left behind.
func TestGitWorksWithProtectedPaths(t *testing.T) {
	s := newGitScratch(t)
	// The git rule: no repository yet, so nothing under .git is protected and init
	// can create it.
	s.mustRun(t, s.ws, "g init -q")
	present(t, filepath.Join(s.ws, ".git", "HEAD"), "ref: refs/heads/main\n")
	noStandIns(t, s.ws)

	// The user installs a hook, outside the sandbox.
	hook := filepath.Join(s.ws, ".git", "hooks", "pre-commit")
	if err := os.WriteFile(hook, []byte(preCommitHook), 0o755); err != nil {
		t.Fatal(err)
	}
	s.mustRun(t, s.ws, "g add notes.txt && g commit -q -m one")
	present(t, filepath.Join(s.ws, "hook-ran"), "ran\n") // the existing hook ran, confined
	s.mustRun(t, s.ws, "g branch feature && g checkout -q feature && echo more >> notes.txt && g commit -q -am two")
	s.mustRun(t, s.ws, "g checkout -q main && echo wip >> notes.txt && g stash -q && test \"$(cat notes.txt)\" = 'workspace notes' && g stash pop -q")
	present(t, filepath.Join(s.ws, "notes.txt"), "workspace noteswip\n")
	if got := s.git(t, s.ws, "log", "--format=%s", "feature"); got != "two\none" {
		t.Fatalf("feature log = %q", got)
	}
	if got := s.git(t, s.ws, "stash", "list"); got != "" {
		t.Fatalf("stash not popped: %q", got)
	}

	// Negative: each attack on its own, so that each must be refused.
	config := filepath.Join(s.ws, ".git", "config")
	before := treeState(t, filepath.Join(s.ws, ".git"))
	for _, attack := range []string{
		`echo evil > .git/hooks/post-checkout`,
		`echo evil >> .git/hooks/pre-commit`,
		`rm .git/hooks/pre-commit`,
		`chmod 000 .git/hooks/pre-commit`,
		`printf '[core]\n\tfsmonitor = "touch PWNED"\n' >> .git/config`,
		`g config core.hooksPath /tmp`,
		`mv .git .git2`,
		`mv .git/hooks .git/hooks2`,
		`rm -rf .git/hooks`,
		`mv .git/config .git/config2`,
		`ln -f notes.txt .git/config`,
	} {
		refused(t, attack, s.confined(t, s.ws, attack))
	}
	sameTree(t, "the attacks", before, treeState(t, filepath.Join(s.ws, ".git")))
	absent(t, filepath.Join(s.ws, ".git2"))
	absent(t, filepath.Join(s.ws, "PWNED"))
	if b, _ := os.ReadFile(config); bytes.Contains(b, []byte("fsmonitor")) || bytes.Contains(b, []byte("hooksPath")) {
		t.Fatalf(".git/config was changed: %s", b)
	}
	// Positive controls: the rest of .git is writable, and with an empty protect list
	// the very same attack lands, so the refusals above are the protection's.
	s.mustRun(t, s.ws, "echo described > .git/description")
	present(t, filepath.Join(s.ws, ".git", "description"), "described\n")
	unprotected := s.withPolicy(t, `{"version": 1, "protect": []}`)
	unprotected.mustRun(t, s.ws, `echo evil > .git/hooks/post-checkout`)
	present(t, filepath.Join(s.ws, ".git", "hooks", "post-checkout"), "evil\n")
	os.Remove(filepath.Join(s.ws, ".git", "hooks", "post-checkout"))
	noStandIns(t, s.ws)
	s.checkCanary(t)
}

// TestGitLinkedWorktree: "git worktree add" in the workspace, then a run whose
// workspace root is the linked worktree commits there (its git directory and the
// common directory lie outside that root and are added, verified), while the
// worktree's and the common directory's hooks and config stay read-only, the .git
// pointer cannot be rewritten, and the main working tree stays read-only.
func TestGitLinkedWorktree(t *testing.T) {
	s := newGitScratch(t)
	s.git(t, s.ws, "init", "-q")
	if err := os.WriteFile(filepath.Join(s.ws, ".git", "hooks", "pre-commit"), []byte(preCommitHook), 0o755); err != nil {
		t.Fatal(err)
	}
	s.git(t, s.ws, "add", "notes.txt")
	s.git(t, s.ws, "commit", "-q", "-m", "one")
	os.Remove(filepath.Join(s.ws, "hook-ran"))

	s.mustRun(t, s.ws, "g worktree add -q -b feat .wt/feat")
	wt := filepath.Join(s.ws, ".wt", "feat")
	common := filepath.Join(s.ws, ".git")
	gitdir := filepath.Join(common, "worktrees", "feat")
	present(t, filepath.Join(wt, ".git"), "gitdir: "+gitdir+"\n")

	// policy show from the worktree names the added root.
	r := toh(t, wt, s.env, "policy", "show", "--policy", s.noPolicy, "--mode", "workspace-write")
	var shown struct {
		WritableRoots  []string `json:"writableRoots"`
		WorktreeRoots  []string `json:"worktreeRoots"`
		ProtectedPaths []struct {
			Path   string `json:"path"`
			Exists bool   `json:"exists"`
		} `json:"protectedPaths"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || len(shown.WorktreeRoots) != 1 || shown.WorktreeRoots[0] != common {
		t.Fatalf("policy show in the worktree: %v %s", err, r.stdout)
	}
	var protected []string
	for _, p := range shown.ProtectedPaths {
		protected = append(protected, p.Path)
	}
	for _, want := range []string{filepath.Join(common, "hooks"), filepath.Join(common, "config"), filepath.Join(gitdir, "hooks"), filepath.Join(wt, ".git")} {
		if !slices.Contains(protected, want) {
			t.Errorf("policy show does not list %s as protected: %q", want, protected)
		}
	}

	mainBefore := treeState(t, filepath.Join(s.ws, "notes.txt"))
	s.mustRun(t, wt, "echo wt > wtfile && g add wtfile && g commit -q -m in-worktree")
	if got := s.git(t, s.ws, "log", "--format=%s", "feat"); got != "in-worktree\none" {
		t.Fatalf("feat log = %q", got)
	}
	present(t, filepath.Join(wt, "hook-ran"), "ran\n") // the common hook ran for the worktree commit

	before := treeState(t, common)
	for _, attack := range []string{
		`echo evil > "$1/hooks/post-commit"`,
		`echo evil >> "$1/hooks/pre-commit"`,
		`echo '[core] fsmonitor = x' >> "$1/config"`,
		`echo evil > "$2/config"`,
		`mkdir -p "$2/hooks/x"`,
		`echo evil > "$2/hooks/post-commit"`,
		`echo "gitdir: /tmp" > .git`,
		`echo "$1" > "$2/commondir"`,
		`mv "$2" "$2-moved"`,
		`echo evil >> "$3"`, // the main working tree is not a root of this run
	} {
		e := s.confined(t, wt, attack, common, gitdir, filepath.Join(s.ws, "notes.txt"))
		refused(t, attack, e)
	}
	sameTree(t, "the attacks on the common directory", before, treeState(t, common))
	// Control: with an empty protect list the common directory's hooks are writable
	// from the worktree, so the refusals above are the protection's.
	unprotected := s.withPolicy(t, `{"version": 1, "protect": []}`)
	unprotected.mustRun(t, wt, `echo evil > "$1/hooks/post-commit"`, common)
	present(t, filepath.Join(common, "hooks", "post-commit"), "evil\n")
	os.Remove(filepath.Join(common, "hooks", "post-commit"))
	sameTree(t, "the attack on the main working tree", mainBefore, treeState(t, filepath.Join(s.ws, "notes.txt")))
	present(t, filepath.Join(wt, ".git"), "gitdir: "+gitdir+"\n")
	// The stand-ins of the worktree's missing hooks and config are gone.
	absent(t, filepath.Join(gitdir, "hooks"))
	absent(t, filepath.Join(gitdir, "config"))
	noStandIns(t, s.ws)
	s.checkCanary(t)
}

// TestGitSubmoduleAdd: "git submodule add" fails in a run, leaving nothing, since
// .git/modules gains no entry (until 2026-12-02 it succeeded); added by the user, the
// submodule's git directory has its hooks, config and checkout pointer protected in
// later runs, and stays usable: a commit in it works.
func TestGitSubmoduleAdd(t *testing.T) {
	s := newGitScratch(t)
	lib := s.committedRepo(t, "lib")
	s.git(t, s.ws, "init", "-q")
	s.git(t, s.ws, "add", "notes.txt")
	s.git(t, s.ws, "commit", "-q", "-m", "one")
	// In a run, the submodule's git directory cannot be made: .git/modules gains
	// no entry (see TestUninitialisedSubmoduleCannotBePlanted). The cost of that
	// rule, and what a failed add leaves.
	before := treeState(t, s.ws)
	e := s.confined(t, s.ws, `g submodule add -q "$1" vendor/lib`, lib)
	if *e.Result.ExitCode == 0 || !strings.Contains(*e.Stderr, ".git/modules/vendor/lib") {
		t.Fatalf("submodule add in a run: %+v %q", e.Result, *e.Stderr)
	}
	t.Logf("what a refused submodule add left in vendor/:\n%s", treeState(t, filepath.Join(s.ws, "vendor")))
	os.RemoveAll(filepath.Join(s.ws, "vendor"))
	sameTree(t, "a refused submodule add", before, treeState(t, s.ws)) // .git/config included

	s.git(t, s.ws, "submodule", "add", "-q", lib, "vendor/lib")
	s.mustRun(t, s.ws, `g commit -q -m sub`)
	present(t, filepath.Join(s.ws, "vendor", "lib", ".git"), "gitdir: ../../.git/modules/vendor/lib\n")
	if got := s.git(t, s.ws, "log", "--format=%s", "-1"); got != "sub" {
		t.Fatalf("log = %q", got)
	}

	modules := filepath.Join(s.ws, ".git", "modules", "vendor", "lib")
	before = treeState(t, modules)
	for _, attack := range []string{
		`echo evil > "$1/hooks/post-checkout"`,
		`echo '[core] fsmonitor = x' >> "$1/config"`,
		`mv "$1" "$1-moved"`,
	} {
		e := s.confined(t, s.ws, attack, modules)
		refused(t, attack, e)
	}
	sameTree(t, "the attacks on the submodule's git directory", before, treeState(t, modules))
	// The checkout's pointer leads the user's git to that directory ("git status" in
	// the superproject enters the submodule): rewritten, moved away with the checkout
	// or a parent, or removed, git would use a git directory of the command's own,
	// hooks and core.fsmonitor included (found by review).
	pointer := filepath.Join(s.ws, "vendor", "lib", ".git")
	for _, attack := range []string{
		`cp -a .git/modules/vendor/lib evil && echo "gitdir: ../../evil" > vendor/lib/.git`,
		`mv vendor/lib vendor/lib-old && mkdir vendor/lib && echo "gitdir: ../../evil" > vendor/lib/.git`,
		`mv vendor vendor-old && mkdir -p vendor/lib && echo "gitdir: ../../evil" > vendor/lib/.git`,
		`rm vendor/lib/.git`,
	} {
		e := s.confined(t, s.ws, attack)
		refused(t, attack, e)
		present(t, pointer, "gitdir: ../../.git/modules/vendor/lib\n")
		os.RemoveAll(filepath.Join(s.ws, "evil"))
	}
	// Positive control: the submodule itself stays usable from the superproject's
	// workspace, and so does git status there. (A run whose workspace root is the submodule checkout gets no access
	// to the git directory: a submodule has no back-pointer to verify, see policy.)
	s.mustRun(t, s.ws, "cd vendor/lib && echo x > f && g add f && g commit -q -m in-sub && cd ../.. && g status --short")
	if got := s.git(t, filepath.Join(s.ws, "vendor", "lib"), "log", "--format=%s", "-1"); got != "in-sub" {
		t.Fatalf("submodule log = %q", got)
	}
	noStandIns(t, s.ws)
}

// TestUninitialisedSubmoduleStaysUsable: in a plain clone of a repository with a
// submodule, the submodule's checkout is an empty directory with no .git. A run
// must not be able to put a .git there (the user's git status would follow it into
// a git directory of the command's own), and git status must still work in the run:
// a stand-in .git there made it fail ("not recognized as a git repository"; found
// by review), so the empty checkout is kept whole instead. Negative control: the
// planted pointer is refused and absent afterwards; positive: status and a commit
// elsewhere in the tree work.
func TestUninitialisedSubmoduleStaysUsable(t *testing.T) {
	s := newGitScratch(t)
	s.cloneWithSubmodules(t, "lib")
	if ents, err := os.ReadDir(filepath.Join(s.ws, "lib")); err != nil || len(ents) != 0 {
		t.Fatalf("premise: lib is not an empty checkout: %v %v", ents, err)
	}
	e := s.confined(t, s.ws, `echo "gitdir: ../evil" > lib/.git`)
	refused(t, "a .git planted in the uninitialised submodule", e)
	absent(t, filepath.Join(s.ws, "lib", ".git"))
	s.mustRun(t, s.ws, "g status --short >/dev/null && echo x > new.txt && g add new.txt && g commit -q -m new")
	if got := s.git(t, s.ws, "log", "--format=%s", "-1"); got != "new" {
		t.Fatalf("log = %q", got)
	}
	noStandIns(t, s.ws)
}

// TestUninitialisedSubmoduleCannotBePlanted: git takes an existing
// .git/modules/<name> as the git directory of a submodule it initialises, so a
// command that made one, with a hook, for a submodule not yet initialised had the
// user's next "git submodule update --init" run that hook, unconfined (review F4,
// 2026-12-02). A git directory's modules/ now gains no entry in a run (a stand-in
// while missing), and the submodule git directories in it stay writable. Negative
// controls: planting refused, with modules/ missing and existing, and the user's
// update afterwards runs no hook of the command's; positive: a commit in an
// initialised submodule and in the superproject, and the update itself.
func TestUninitialisedSubmoduleCannotBePlanted(t *testing.T) {
	s := newGitScratch(t)
	lib2 := s.cloneWithSubmodules(t, "lib", "lib2")[1]
	modules := filepath.Join(s.ws, ".git", "modules")
	pwned := filepath.Join(s.beside, "PWNED")
	// The plant: a git directory for lib2 with a post-checkout hook, which the
	// user's update checks out with.
	plant := func(name string) string {
		return fmt.Sprintf(`mkdir -p .git/modules && g clone -q --no-checkout --separate-git-dir .git/modules/%[1]s "$1" "${TMPDIR:-/tmp}/%[1]s" &&
printf '#!/bin/sh\ntouch %[2]q\n' > .git/modules/%[1]s/hooks/post-checkout && chmod +x .git/modules/%[1]s/hooks/post-checkout`, name, pwned)
	}

	// Nothing initialised: modules/ is missing, and stays so.
	absent(t, modules)
	for _, attack := range []string{plant("lib2"), "mkdir -p .git/modules/lib2"} {
		e := s.confined(t, s.ws, attack, lib2)
		refused(t, attack, e)
		t.Logf("%s: %s", attack, *e.Stderr)
		absent(t, modules)
	}
	noStandIns(t, s.ws)

	// lib initialised by the user: modules/ exists, lib2 is still missing there.
	s.git(t, s.ws, "submodule", "update", "-q", "--init", "lib")
	before := treeState(t, modules)
	for _, attack := range []string{
		plant("lib2"),
		"mkdir .git/modules/lib2",
		"mv .git/modules/lib .git/modules/lib2",
		"mv .git/modules .git/modules-old && mkdir -p .git/modules/lib2",
		"ln -s ../../elsewhere .git/modules/lib2",
	} {
		e := s.confined(t, s.ws, attack, lib2)
		refused(t, attack, e)
		t.Logf("%s: %s", attack, *e.Stderr)
		absent(t, filepath.Join(modules, "lib2"))
	}
	sameTree(t, "the attacks on .git/modules", before, treeState(t, modules))
	// Positive: commits in the initialised submodule and in the superproject.
	s.mustRun(t, s.ws, "cd lib && echo x > f && g add f && g commit -q -m in-sub && cd .. && g status --short >/dev/null && g add lib && g commit -q -m bump")
	if got := s.git(t, filepath.Join(s.ws, "lib"), "log", "--format=%s", "-1"); got != "in-sub" {
		t.Fatalf("submodule log = %q", got)
	}
	noStandIns(t, s.ws)
	// The user's update: lib2 is cloned afresh, and nothing of the command's runs.
	s.git(t, s.ws, "submodule", "update", "-q", "--init")
	if _, err := os.Stat(pwned); err == nil {
		t.Fatal("the user's git submodule update ran a hook the command planted")
	}
	present(t, filepath.Join(s.ws, "lib2", ".git"), "gitdir: ../.git/modules/lib2\n")
	if _, err := os.Stat(filepath.Join(modules, "lib2", "hooks", "post-checkout")); err == nil {
		t.Fatal("lib2's git directory holds the planted hook")
	}
}

// TestStaleSubmoduleGitDirStaysReadOnly: a submodule git directory no checkout
// uses any more (deinitialised, or left from a submodule removed upstream) stays
// read-only in a run. Writable, a command could make a git directory of its own
// inside it (old/x) and move its HEAD away, after which git no longer refuses
// old/x as nested in a valid git directory; a .gitmodules that then names lib2
// "old/x" had the user's next "git submodule update --init" run its hook (review
// of 96a43b7, F5). Negative control: the plant is refused and old is unchanged,
// and the user's update after the rename runs nothing of the command's.
func TestStaleSubmoduleGitDirStaysReadOnly(t *testing.T) {
	s := newGitScratch(t)
	lib2, old := s.cloneWithSubmodules(t, "lib2")[0], s.committedRepo(t, "old")
	s.git(t, s.ws, "submodule", "add", "-q", old, "old")
	s.git(t, s.ws, "commit", "-q", "-m", "old")
	s.git(t, s.ws, "submodule", "deinit", "-q", "-f", "old")
	stale := filepath.Join(s.ws, ".git", "modules", "old")
	before := treeState(t, stale)
	pwned := filepath.Join(s.beside, "PWNED")
	e := s.confined(t, s.ws, fmt.Sprintf(`g clone -q --no-checkout --separate-git-dir .git/modules/old/x "$1" "${TMPDIR:-/tmp}/x" &&
printf '#!/bin/sh\ntouch %q\n' > .git/modules/old/x/hooks/post-checkout && chmod +x .git/modules/old/x/hooks/post-checkout &&
mv .git/modules/old/HEAD .git/modules/old/HEAD.away`, pwned), lib2)
	refused(t, "a git directory planted in a stale submodule git directory", e)
	for _, attack := range []string{
		"mv .git/modules/old/HEAD .git/modules/old/HEAD.away",
		"echo evil > .git/modules/old/hooks/post-checkout",
		"echo '[core] fsmonitor = x' >> .git/modules/old/config",
		"mkdir .git/modules/old/refs/x",
	} {
		refused(t, attack, s.confined(t, s.ws, attack))
	}
	sameTree(t, "the attacks on the stale git directory", before, treeState(t, stale))
	s.mustRun(t, s.ws, "g config -f .gitmodules --rename-section submodule.lib2 submodule.old/x")
	cmd := exec.Command("git", "-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init", "lib2")
	cmd.Dir, cmd.Env = s.ws, append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	t.Logf("the user's update: %v %s", err, out)
	if _, err := os.Stat(pwned); err == nil {
		t.Fatal("the user's git submodule update ran a hook the command planted")
	}
	noStandIns(t, s.ws)
}

// TestSubmoduleGitDirStaysValid: a submodule git directory in use stays writable
// (commits), so a command can break it: move its HEAD away, and make a git
// directory of its own inside it (lib/x), which git refuses as another submodule's
// only while lib is valid; a .gitmodules naming lib2 "lib/x" then had the user's
// next "git submodule update --init" use lib/x (review, F5). After a bwrap run
// toh-exec puts back what the command left invalid, and says so. Negative control:
// after the whole chain git refuses lib/x, and the user's update and status run
// nothing of the command's; positive: a commit on lib's detached HEAD stays.
func TestSubmoduleGitDirStaysValid(t *testing.T) {
	s := newGitScratch(t)
	lib2 := s.cloneWithSubmodules(t, "lib", "lib2")[1]
	s.git(t, s.ws, "submodule", "update", "-q", "--init", "lib")
	gd := filepath.Join(s.ws, ".git", "modules", "lib")
	head, err := os.ReadFile(filepath.Join(gd, "HEAD"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ breaks, fixed string }{
		{"mv .git/modules/lib/HEAD .git/modules/lib/HEAD.away", "HEAD"},
		{"printf 'not a ref' > .git/modules/lib/HEAD", "HEAD"},
		{`printf 'ref:\vrefs/heads/main\n' > .git/modules/lib/HEAD`, "HEAD"}, // no space to git (review, 2026-12-02)
		{"rm -rf .git/modules/lib/HEAD && mkdir .git/modules/lib/HEAD", "HEAD"},
		{"mkdir .git/modules/lib/HEAD.toh-restore && mv .git/modules/lib/HEAD .git/modules/lib/HEAD.away", "HEAD"},
		{"mv .git/modules/lib/refs .git/modules/lib/refs.away", "an empty refs/"},
		{"mv .git/modules/lib/objects .git/modules/lib/objects.away && echo x > .git/modules/lib/objects", "an empty objects/"},
		{"mv .git/modules/lib/objects .git/modules/lib/objects.away && ln -s /nonexistent-toh .git/modules/lib/objects", "an empty objects/"},
		{"chmod 0 .git/modules/lib/objects", "the permissions of objects/"},
	} {
		if strings.HasPrefix(c.breaks, "chmod") && os.Geteuid() == 0 {
			continue // root searches any directory, and so does root's git
		}
		e := s.mustRun(t, s.ws, c.breaks)
		if !strings.Contains(*e.Stderr, "put back "+c.fixed) {
			t.Errorf("%s: no note of what was put back: %q", c.breaks, *e.Stderr)
		}
		if got, _ := os.ReadFile(filepath.Join(gd, "HEAD")); !bytes.Equal(got, head) {
			t.Errorf("%s: HEAD is %q, want %q", c.breaks, got, head)
		}
		for _, d := range []string{"objects", "refs"} {
			if fi, err := os.Stat(filepath.Join(gd, d)); err != nil || !fi.IsDir() {
				t.Errorf("%s: %s is not a directory: %v", c.breaks, d, err)
			}
		}
		// What the command put aside comes back by the user's hand.
		for _, d := range []string{"objects", "refs"} {
			if _, err := os.Stat(filepath.Join(gd, d+".away")); err == nil {
				os.RemoveAll(filepath.Join(gd, d))
				if err := os.Rename(filepath.Join(gd, d+".away"), filepath.Join(gd, d)); err != nil {
					t.Fatal(err)
				}
			}
		}
		junk, _ := filepath.Glob(filepath.Join(gd, "*.toh-*"))
		for _, j := range append(junk, filepath.Join(gd, "HEAD.away")) {
			os.RemoveAll(j)
		}
	}
	// A directory it cannot enter any more is at least named (a user who is not
	// root; root enters any directory).
	if os.Geteuid() != 0 {
		e := s.mustRun(t, s.ws, "chmod 0 .git/modules/lib")
		if !strings.Contains(*e.Stderr, "could not be checked after the run") {
			t.Errorf("chmod 0 of the git directory: no warning: %q", *e.Stderr)
		}
		if err := os.Chmod(gd, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The whole chain, then the user's update.
	pwned := filepath.Join(s.beside, "PWNED")
	s.mustRun(t, s.ws, fmt.Sprintf(`g clone -q --no-checkout --separate-git-dir .git/modules/lib/x "$1" "${TMPDIR:-/tmp}/x"
printf '#!/bin/sh\ntouch %[1]q\n' > .git/modules/lib/x/hooks/post-checkout && chmod +x .git/modules/lib/x/hooks/post-checkout
g -C .git/modules/lib/x config core.fsmonitor 'touch %[1]q; false'
mv .git/modules/lib/HEAD .git/modules/lib/HEAD.away
g config -f .gitmodules --rename-section submodule.lib2 submodule.lib/x`, pwned), lib2)
	cmd := exec.Command("git", "-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init", "lib2")
	cmd.Dir, cmd.Env = s.ws, append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	t.Logf("the user's update: %v %s", err, out)
	cmd = exec.Command("git", "status", "--short")
	cmd.Dir, cmd.Env = s.ws, append(os.Environ(), s.env...)
	out, err = cmd.CombinedOutput()
	t.Logf("the user's status: %v %s", err, out)
	if _, err := os.Stat(pwned); err == nil {
		t.Fatal("the user's git ran a hook or fsmonitor the command planted")
	}
	if b, _ := os.ReadFile(filepath.Join(s.ws, "lib2", ".git")); strings.Contains(string(b), "modules/lib/x") {
		t.Fatalf("lib2 leads to the command's git directory: %q", b)
	}
	// Positive: a commit on the detached HEAD is the command's to make, and stays.
	s.mustRun(t, s.ws, "cd lib && echo z > z && g add z && g commit -q -m detached")
	want := s.git(t, filepath.Join(s.ws, "lib"), "rev-parse", "HEAD")
	if got, _ := os.ReadFile(filepath.Join(gd, "HEAD")); strings.TrimSpace(string(got)) != want {
		t.Errorf("HEAD after a commit = %q, want %s", got, want)
	}
	noStandIns(t, s.ws)
}

// TestNestedSubmoduleCommit: a submodule's own modules/ is kept like the
// superproject's, and the git directories in it stay writable: a commit in a nested
// submodule works. Under bwrap that needs the nested except directories rebound
// inside the outer one's (review of 96a43b7: they were not, and the commit failed
// with EROFS). Negative control: neither modules/ gains an entry.
func TestNestedSubmoduleCommit(t *testing.T) {
	s := newGitScratch(t)
	inner, mid, origin := s.committedRepo(t, "inner"), s.committedRepo(t, "mid"), s.committedRepo(t, "origin")
	s.git(t, mid, "submodule", "add", "-q", inner, "inner")
	s.git(t, mid, "commit", "-q", "-m", "inner")
	s.git(t, origin, "submodule", "add", "-q", mid, "mid")
	s.git(t, origin, "commit", "-q", "-m", "mid")
	if err := os.RemoveAll(s.ws); err != nil {
		t.Fatal(err)
	}
	s.git(t, s.beside, "-c", "protocol.file.allow=always", "clone", "-q", "--recurse-submodules", origin, s.ws)
	nested := filepath.Join(s.ws, ".git", "modules", "mid", "modules")
	if _, err := os.Stat(filepath.Join(nested, "inner", "HEAD")); err != nil {
		t.Fatalf("premise: no nested submodule git directory: %v", err)
	}
	s.mustRun(t, s.ws, "cd mid/inner && echo y > y && g add y && g commit -q -m in-inner && cd .. && g add inner && g commit -q -m bump")
	if got := s.git(t, filepath.Join(s.ws, "mid", "inner"), "log", "--format=%s", "-1"); got != "in-inner" {
		t.Fatalf("nested submodule log = %q", got)
	}
	for _, attack := range []string{"mkdir .git/modules/mid/modules/evil", "mkdir .git/modules/evil", "echo x > .git/modules/mid/modules/inner/hooks/post-checkout"} {
		e := s.confined(t, s.ws, attack)
		refused(t, attack, e)
	}
	absent(t, filepath.Join(nested, "evil"))
	absent(t, filepath.Join(s.ws, ".git", "modules", "evil"))
	absent(t, filepath.Join(nested, "inner", "hooks", "post-checkout"))
	noStandIns(t, s.ws)
}

// TestConfigWorktreeCannotBeCreated: with extensions.worktreeConfig on, git reads
// .git/config.worktree after the protected config, so a command that could create it
// could set core.fsmonitor for the user's next git command (found by review; it was
// left to backends that deny names). bwrap now keeps an empty stand-in there during
// the run, which git reads as no settings. Negative control: the create is refused
// and nothing is left; positive: git status and a commit work in the run.
func TestConfigWorktreeCannotBeCreated(t *testing.T) {
	s := newGitScratch(t)
	s.git(t, s.ws, "init", "-q")
	s.git(t, s.ws, "config", "extensions.worktreeConfig", "true")
	s.git(t, s.ws, "commit", "-q", "--allow-empty", "-m", "one")
	cw := filepath.Join(s.ws, ".git", "config.worktree")
	e := s.confined(t, s.ws, `printf '[core]\n\tfsmonitor = echo planted\n' > .git/config.worktree`)
	refused(t, "creating .git/config.worktree", e)
	absent(t, cw)
	s.mustRun(t, s.ws, "g status --short >/dev/null && echo x > f && g add f && g commit -q -m two")
	absent(t, cw)
	noStandIns(t, s.ws)
}

// TestCommondirCannotBeCreated: ".git/commondir" created in an ordinary repository
// sends git to the directory it names for config and hooks, so a command could
// have the user's next "git status" run a core.fsmonitor of its own, unconfined.
// bwrap can only hold names that exist; a missing commondir gets a stand-in holding
// ".", which git reads as the git directory itself, what no commondir means.
// Negative controls: creating, replacing, removing or renaming it is refused, and
// no git command outside the run sees a commondir afterwards (before 2026-12-02 the
// creation landed: bwrap gave a missing commondir no stand-in). Positive: git works
// inside the run while the stand-in is there, and nothing is left after it.
func TestCommondirCannotBeCreated(t *testing.T) {
	s := newGitScratch(t)
	s.git(t, s.ws, "init", "-q")
	s.git(t, s.ws, "commit", "-q", "--allow-empty", "-m", "one")
	cd := filepath.Join(s.ws, ".git", "commondir")
	evil := filepath.Join(s.ws, "evil")
	for _, attack := range []string{
		`mkdir -p evil/hooks && g init -q --bare evil && printf '[core]\n\tfsmonitor = "touch PWNED"\n' >> evil/config && echo "$PWD/evil" > .git/commondir`,
		`echo "$PWD/evil" >> .git/commondir`,
		`rm -f .git/commondir && echo "$PWD/evil" > .git/commondir`,
		`mv .git/commondir .git/cd2`,
	} {
		refused(t, attack, s.confined(t, s.ws, attack))
		absent(t, cd)
	}
	s.git(t, s.ws, "status", "--short")
	absent(t, filepath.Join(s.ws, "PWNED"))
	absent(t, filepath.Join(s.ws, ".git", "cd2"))
	os.RemoveAll(evil)
	e := s.mustRun(t, s.ws, `cat .git/commondir && g status --short >/dev/null && echo x > f && g add f && g commit -q -m two && g rev-parse --git-common-dir`)
	if want := ".\n" + filepath.Join(s.ws, ".git") + "\n"; *e.Stdout != want {
		t.Errorf("inside the run: %q, want the stand-in's \".\" and the git directory as common directory %q", *e.Stdout, want)
	}
	if got := s.git(t, s.ws, "log", "--format=%s"); got != "two\none" {
		t.Errorf("log after the run = %q", got)
	}
	absent(t, cd)
	noStandIns(t, s.ws)

	// A protect entry naming it gets the same stand-in (review: it got a
	// directory, and every git command in the run failed).
	named := s.withPolicy(t, `{"version": 1, "protect": [".git/hooks", ".git/config", ".git/commondir"]}`)
	e = named.mustRun(t, s.ws, `cat .git/commondir && echo y > f && g add f && g commit -q -m three`)
	if *e.Stdout != ".\n" {
		t.Errorf("a protect entry .git/commondir: the stand-in holds %q, want \".\"", *e.Stdout)
	}
	absent(t, cd)
	noStandIns(t, s.ws)
}

// TestConfigIncludeCannotBeCreated: a file the protected config includes is
// configuration too. Missing, it got no stand-in under bwrap until 2026-12-02, so a
// command could create it with a core.fsmonitor that the user's next "git status"
// ran unconfined. Now it gets an empty one, which git reads as no settings.
// Negative controls: creating either include (one beside the repository, one in
// .git) is refused, and git outside the run afterwards runs nothing planted;
// positive: git works inside the run with the stand-ins there, and nothing is left.
func TestConfigIncludeCannotBeCreated(t *testing.T) {
	s := newGitScratch(t)
	s.git(t, s.ws, "init", "-q", "-b", "main")
	s.git(t, s.ws, "config", "include.path", "../.gitconfig.shared")
	s.git(t, s.ws, "config", "includeIf.onbranch:main.path", "extra.cfg")
	// An include that happens to be named commondir gets an empty stand-in like
	// any other, not a commondir's "." (which git would fail to read as config).
	s.git(t, s.ws, "config", "--add", "include.path", "conf/commondir")
	s.git(t, s.ws, "commit", "-q", "--allow-empty", "-m", "one")
	shared, extra := filepath.Join(s.ws, ".gitconfig.shared"), filepath.Join(s.ws, ".git", "extra.cfg")
	for _, attack := range []string{
		`printf '[core]\n\tfsmonitor = "touch PWNED"\n' > .gitconfig.shared`,
		`printf '[core]\n\tfsmonitor = "touch PWNED"\n' > .git/extra.cfg`,
		`rm -f .gitconfig.shared; printf '[core]\n\tfsmonitor = "touch PWNED"\n' > .gitconfig.shared`,
	} {
		refused(t, attack, s.confined(t, s.ws, attack))
		absent(t, shared)
		absent(t, extra)
	}
	s.git(t, s.ws, "status", "--short")
	absent(t, filepath.Join(s.ws, "PWNED"))
	s.mustRun(t, s.ws, `test -f .gitconfig.shared && test ! -s .gitconfig.shared && test -f .git/extra.cfg && test -f .git/conf/commondir && test ! -s .git/conf/commondir && g status --short >/dev/null && echo x > f && g add f && g commit -q -m two`)
	if got := s.git(t, s.ws, "log", "--format=%s"); got != "two\none" {
		t.Errorf("log after the run = %q", got)
	}
	absent(t, shared)
	absent(t, extra)
	absent(t, filepath.Join(s.ws, ".git", "conf"))
	noStandIns(t, s.ws)

	// A linked worktree as the workspace: its git directory and the common one lie
	// outside the root, and an include inside the worktree's checkout is created
	// from the root (review: such an include got no stand-in).
	s.mustRun(t, s.ws, "g worktree add -q -b feat .wt/feat")
	wt := filepath.Join(s.ws, ".wt", "feat")
	local := filepath.Join(wt, "local.cfg")
	s.git(t, s.ws, "config", "--add", "include.path", local)
	refused(t, "creating the worktree's include", s.confined(t, wt, `printf '[core]\n\tfsmonitor = "touch PWNED"\n' > local.cfg`))
	absent(t, local)
	s.git(t, wt, "status", "--short")
	absent(t, filepath.Join(wt, "PWNED"))
	s.mustRun(t, wt, `test -f local.cfg && echo w > w && g add w && g commit -q -m in-worktree`)
	absent(t, local)
	noStandIns(t, wt)
}

// TestNestedAndLinkedConfigIncludes: a file an included file includes is
// configuration too, and a link on the way to an include would let a command
// point git at a file of its own (both found by review, older than the include
// stand-ins). Negative controls: creating the nested include is refused, and a
// workspace with a link on the way is refused before anything runs, naming it;
// positive: git works in the run with the nested stand-in, nothing is left.
func TestNestedAndLinkedConfigIncludes(t *testing.T) {
	s := newGitScratch(t)
	s.git(t, s.ws, "init", "-q")
	if err := os.WriteFile(filepath.Join(s.ws, ".gitconfig.shared"), []byte("[include]\n\tpath = .gitconfig.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.git(t, s.ws, "config", "include.path", "../.gitconfig.shared")
	s.git(t, s.ws, "commit", "-q", "--allow-empty", "-m", "one")
	local := filepath.Join(s.ws, ".gitconfig.local")
	refused(t, "creating the nested include", s.confined(t, s.ws, `printf '[core]\n\tfsmonitor = "touch PWNED"\n' > .gitconfig.local`))
	absent(t, local)
	s.git(t, s.ws, "status", "--short")
	absent(t, filepath.Join(s.ws, "PWNED"))
	s.mustRun(t, s.ws, `test -f .gitconfig.local && test ! -s .gitconfig.local && g status --short >/dev/null`)
	absent(t, local)
	noStandIns(t, s.ws)

	if err := os.MkdirAll(filepath.Join(s.ws, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.ws, "conf", "real.cfg"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(s.ws, ".gitconfig.link")
	if err := os.Symlink("conf/real.cfg", link); err != nil {
		t.Fatal(err)
	}
	s.git(t, s.ws, "config", "--add", "include.path", "../.gitconfig.link")
	e, r := s.start(t, s.ws, `rm .gitconfig.link && printf '[core]\n\tfsmonitor = "touch PWNED"\n' > .gitconfig.link`)
	refusedLink(t, "a link on the way to an include", link, e, r)
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was changed: %v, %v", fi, err)
	}
	s.git(t, s.ws, "status", "--short")
	absent(t, filepath.Join(s.ws, "PWNED"))
}

// TestEnclosingRepositorySubmoduleInWorkspace: with the workspace a subdirectory
// of a repository, a submodule checkout of that repository inside the workspace
// keeps its .git pointer (found by review: rewritten, the user's git status in the
// repository followed it into a git directory of the command's own). Negative
// control: the rewrite is refused and the pointer unchanged; positive: a file in the
// submodule checkout and one beside it are written.
func TestEnclosingRepositorySubmoduleInWorkspace(t *testing.T) {
	s := newGitScratch(t)
	lib := s.committedRepo(t, "lib")
	s.git(t, s.ws, "init", "-q")
	s.git(t, s.ws, "commit", "-q", "--allow-empty", "-m", "one")
	s.git(t, s.ws, "submodule", "add", "-q", lib, "sub/lib")
	sub := filepath.Join(s.ws, "sub")
	pointer := filepath.Join(sub, "lib", ".git")
	before, err := os.ReadFile(pointer)
	if err != nil {
		t.Fatal(err)
	}
	e := s.confined(t, sub, `echo "gitdir: ../../evil" > lib/.git`)
	refused(t, "rewriting the enclosing repository's submodule pointer", e)
	present(t, pointer, string(before))
	s.mustRun(t, sub, "echo x > lib/f && echo y > g")
	present(t, filepath.Join(sub, "lib", "f"), "x\n")
	noStandIns(t, s.ws)
}

// TestPlantedGitPointerMakesNothingWritable: a .git file is content a confined
// command can write. Neither a pointer to an arbitrary directory nor one to another
// repository's real worktree directory (whose back-pointer names another worktree)
// makes anything writable. The positive control is TestGitLinkedWorktree.
func TestPlantedGitPointerMakesNothingWritable(t *testing.T) {
	s := newGitScratch(t)
	victim := filepath.Join(s.beside, "victim")
	testutil.MakeTree(t, s.beside, "file victim/canary secret", "file victim/HEAD ref: refs/heads/main\n", "dir victim/objects", "dir victim/refs")
	other := filepath.Join(s.beside, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	s.git(t, other, "init", "-q")
	s.git(t, other, "commit", "-q", "--allow-empty", "-m", "other")
	s.git(t, other, "worktree", "add", "-q", filepath.Join(s.beside, "other-wt"))
	otherGit := filepath.Join(other, ".git")
	otherAdmin := filepath.Join(otherGit, "worktrees", "other-wt")

	for _, target := range []string{victim, otherAdmin} {
		// The plant happens in a confined run, as an attacker's would.
		s.mustRun(t, s.ws, `printf 'gitdir: %s\n' "$1" > .git`, target)
		r := toh(t, s.ws, s.env, "policy", "show", "--policy", s.noPolicy, "--mode", "workspace-write")
		if strings.Contains(r.stdout, "worktreeRoots") {
			t.Fatalf("pointer to %s honoured: %s", target, r.stdout)
		}
		victimBefore, otherBefore := treeState(t, victim), treeState(t, otherGit)
		e := s.confined(t, s.ws, `echo pwned > "$1/canary"; echo pwned > "$1/new"; echo pwned > "$2/objects/pwned"; echo pwned >> "$2/HEAD"; exit 0`, victim, otherGit)
		if *e.Result.ExitCode != 0 {
			t.Fatalf("%+v %q", e.Result, *e.Stderr)
		}
		sameTree(t, "a run behind a pointer to "+target, victimBefore, treeState(t, victim))
		sameTree(t, "a run behind a pointer to "+target, otherBefore, treeState(t, otherGit))
		// The pointer itself is protected once it exists (it is the root's .git file).
		e = s.confined(t, s.ws, `echo "gitdir: /" > .git`)
		if *e.Result.ExitCode == 0 {
			t.Errorf("the existing pointer could be rewritten")
		}
		os.Remove(filepath.Join(s.ws, ".git"))
	}
	noStandIns(t, s.beside)
	s.checkCanary(t)
}

// TestProtectedMissingPathsLeaveNoArtifacts: a protected path that does not exist
// cannot be created during a run and is gone afterwards, whether the command succeeds,
// fails, is killed, or toh-exec itself receives SIGTERM; after a SIGKILL of toh-exec
// the marked stand-ins stay until the next run over the tree ends.
func TestProtectedMissingPathsLeaveNoArtifacts(t *testing.T) {
	s := newGitScratch(t)
	s.git(t, s.ws, "init", "-q")
	if err := os.RemoveAll(filepath.Join(s.ws, ".git", "hooks")); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(s.beside, "policy.json")
	if err := os.WriteFile(policyFile, []byte(`{"version": 1, "mode": "workspace-write", "protect": [".git/hooks", ".git/config", "secrets/key.pem"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--policy", policyFile, "--runner", "bwrap", "--probe-cache", filepath.Join(s.beside, "cache.json")}
	before := treeState(t, s.ws)

	// During the run the stand-ins are there and read-only.
	e, _ := tohJSON(t, s.ws, s.env, append(base, "-c", `test -d .git/hooks && test -f secrets/key.pem && ! test -s secrets/key.pem || exit 9
echo evil > .git/hooks/pre-commit; echo evil > secrets/key.pem; mkdir .git/hooks/x; echo ok > own; exit 0`)...)
	if e.Result == nil || *e.Result.ExitCode != 0 {
		t.Fatalf("stand-ins not in place during the run: %+v %q", e.Result, *e.Stderr)
	}
	present(t, filepath.Join(s.ws, "own"), "ok\n") // positive control
	os.Remove(filepath.Join(s.ws, "own"))
	sameTree(t, "a successful run", before, treeState(t, s.ws))

	for _, script := range []string{"exit 3", "kill -KILL $$"} {
		tohJSON(t, s.ws, s.env, append(base, "-c", script)...)
		sameTree(t, script, before, treeState(t, s.ws))
	}

	// SIGTERM to toh-exec is forwarded; cleanup still runs. Both signals are sent
	// once the command runs: bwrap 0.8 killed during its own set-up leaves its pid 1
	// waiting for a handshake forever, holding a copy of every mount (a fusefence
	// test's unmount then hung in CI).
	running := filepath.Join(s.ws, ".running")
	cmd := exec.Command(tohExec, append(base, "-c", "echo > .running; sleep 30")...)
	cmd.Dir, cmd.Env = s.ws, append(os.Environ(), s.env...)
	waitRunning := func() {
		t.Helper()
		for range 1000 {
			if _, err := os.Lstat(running); err == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("the command never ran")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitRunning()
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	os.Remove(running)
	sameTree(t, "a SIGTERMed toh-exec", before, treeState(t, s.ws))

	// SIGKILL: nothing can run in toh-exec; the marked stand-ins stay ...
	cmd = exec.Command(tohExec, append(base, "-c", "echo > .running; sleep 30")...)
	cmd.Dir, cmd.Env = s.ws, append(os.Environ(), s.env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitRunning()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	time.Sleep(100 * time.Millisecond) // bwrap dies with its parent
	os.Remove(running)
	if st := treeState(t, s.ws); !strings.Contains(st, "/.git/hooks drwxr-xr-x STAND-IN") {
		t.Fatalf("expected the killed run's marked stand-ins:\n%s", st)
	}
	// ... until the next run over the tree ends.
	tohJSON(t, s.ws, s.env, append(base, "-c", "true")...)
	sameTree(t, "the run after a SIGKILLed one", before, treeState(t, s.ws))
}

// protectScratch is a scratch whose runs use a workspace-write policy file beside the
// workspace with the given protect list, under bwrap.
type protectScratch struct {
	*scratch
	base []string
}

func newProtectScratch(t *testing.T, protect string) *protectScratch {
	t.Helper()
	testutil.RequireBwrap(t)
	s := newScratch(t)
	return &protectScratch{scratch: s, base: s.policyArgs(t, protect)}
}

// policyArgs writes a workspace-write policy file with the protect list (a JSON
// array) and returns the options that run under it with bwrap.
func (s *scratch) policyArgs(t *testing.T, protect string) []string {
	t.Helper()
	f, err := os.CreateTemp(s.beside, "policy-*.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, `{"version": 1, "mode": "workspace-write", "protect": %s}`, protect); err != nil {
		t.Fatal(err)
	}
	return []string{"--policy", f.Name(), "--runner", "bwrap", "--probe-cache", filepath.Join(s.beside, "cache.json")}
}

func (s *protectScratch) run(t *testing.T, script string, args ...string) envelope {
	t.Helper()
	e, r := tohJSON(t, s.ws, nil, append(append(slices.Clone(s.base), "-c", script, "sh"), args...)...)
	if e.Result == nil {
		t.Fatalf("no result: %d %+v %q", r.code, e.Error, r.stderr)
	}
	return e
}

// TestProtectEntryBelowAFile (bug 4): protect lists "secrets/key.pem" while
// "secrets" is a regular file. Runs work (they used to fail with 124 because no
// stand-in can be made below a file); the file stays writable, but it cannot be
// removed, renamed or replaced during a run, so no directory "secrets" can be made
// and "secrets/key.pem" can never be created. Without the entry the same attacks
// land (positive control).
func TestProtectEntryBelowAFile(t *testing.T) {
	s := newProtectScratch(t, `["secrets/key.pem"]`)
	secrets := filepath.Join(s.ws, "secrets")
	if err := os.WriteFile(secrets, []byte("top secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Positive: an ordinary run works, writes land, and the file itself stays writable.
	e := s.run(t, `echo ok > own && echo more >> secrets`)
	if *e.Result.ExitCode != 0 {
		t.Fatalf("a run with a protect entry below a file failed: %+v %q", e.Result, *e.Stderr)
	}
	present(t, filepath.Join(s.ws, "own"), "ok\n")
	present(t, secrets, "top secret\nmore\n")
	os.Remove(filepath.Join(s.ws, "own"))

	attacks := []string{
		`rm secrets && mkdir secrets && echo evil > secrets/key.pem`,
		`mv secrets s2 && mkdir secrets && echo evil > secrets/key.pem`,
		`mkdir -p d && echo evil > d/key.pem && ln -sfn d secrets`,
		`mkdir -p d && echo evil > d/key.pem && mv -T d secrets`,
	}
	for _, attack := range attacks {
		refused(t, attack, s.run(t, attack))
		present(t, secrets, "top secret\nmore\n")
		absent(t, filepath.Join(s.ws, "s2"))
		os.RemoveAll(filepath.Join(s.ws, "d"))
	}
	noStandIns(t, s.ws)
	s.checkCanary(t)

	// Positive control: without the entry the first attacks land, so the refusals
	// above are the protection's.
	open := &protectScratch{scratch: s.scratch, base: s.policyArgs(t, `[]`)}
	for _, attack := range attacks[:3] {
		if e := open.run(t, attack); *e.Result.ExitCode != 0 {
			t.Fatalf("%s: failed without protection: %+v %q", attack, e.Result, *e.Stderr)
		}
		fi, err := os.Stat(secrets)
		if err != nil || !fi.IsDir() {
			t.Fatalf("%s: secrets is not a directory without protection: %v", attack, err)
		}
		present(t, filepath.Join(secrets, "key.pem"), "evil\n")
		for _, p := range []string{secrets, filepath.Join(s.ws, "s2"), filepath.Join(s.ws, "d")} {
			os.RemoveAll(p)
		}
		if err := os.WriteFile(secrets, []byte("top secret\nmore\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProtectedSymlinkNames (bug 6): a .git that is a symlink, and a protect entry
// that is one, are protected at their own names too. bwrap cannot mount over a
// symlink, so a run in which such a name lies within a writable root is refused
// before the command starts (the command could otherwise point .git at a repository
// of its own, whose hooks git runs for the user next time); why denies replacing
// the name. Positive controls: without protection the attack lands; a link outside
// every writable root refuses nothing; and the remedy the error names (a "gitdir:"
// file instead of the link) gives working runs that still cannot redirect git.
func TestProtectedSymlinkNames(t *testing.T) {
	s := newGitScratch(t)
	s.git(t, s.ws, "init", "-q")
	gitdir := filepath.Join(s.ws, ".gitdir")
	if err := os.Rename(filepath.Join(s.ws, ".git"), gitdir); err != nil {
		t.Fatal(err)
	}
	dotgit := filepath.Join(s.ws, ".git")
	if err := os.Symlink(".gitdir", dotgit); err != nil {
		t.Fatal(err)
	}
	s.git(t, s.ws, "add", "notes.txt")
	s.git(t, s.ws, "commit", "-q", "-m", "one")
	ran := filepath.Join(s.ws, "ran")
	link := func() string {
		t.Helper()
		target, err := os.Readlink(dotgit)
		if err != nil {
			t.Fatalf(".git is no longer a symlink: %v", err)
		}
		return target
	}

	// Negative: refused before anything runs, naming the link; nothing changed.
	const attack = `touch ran; rm .git && g init -q && printf '#!/bin/sh\necho pwned\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit`
	before := treeState(t, s.ws)
	e, r := s.start(t, s.ws, attack)
	refusedLink(t, "a symlinked .git", dotgit, e, r)
	absent(t, ran)
	if link() != ".gitdir" {
		t.Fatalf(".git was retargeted: %s", link())
	}
	sameTree(t, "a refused run", before, treeState(t, s.ws))
	// why agrees: the link's own name may not be removed or replaced.
	for _, op := range []string{"delete", "rename", "create"} {
		r := toh(t, s.ws, s.env, "why", "--policy", s.noPolicy, "--mode", "workspace-write", "--path", ".git", "--op", op)
		if r.code != exitWhyDenied || !strings.Contains(r.stdout, "protected") {
			t.Errorf("why %s .git: %d %q", op, r.code, r.stdout)
		}
	}

	// Positive control: with an empty protect list the attack lands, so the refusal is
	// the protection's.
	unprotected := s.withPolicy(t, `{"version": 1, "protect": []}`)
	unprotected.mustRun(t, s.ws, attack)
	if fi, err := os.Lstat(dotgit); err != nil || !fi.IsDir() {
		t.Fatalf("without protection .git was not replaced: %v", err)
	}
	os.RemoveAll(dotgit)
	os.Remove(ran)
	if err := os.Symlink(".gitdir", dotgit); err != nil {
		t.Fatal(err)
	}

	// A protect entry that is itself a symlink, and one that passes through one.
	testutil.MakeTree(t, s.ws, "file real/key.pem k", "link secrets -> real", "link env -> real/key.pem")
	for _, entry := range []string{"env", "secrets/key.pem"} {
		entryScratch := s.withPolicy(t, fmt.Sprintf(`{"version": 1, "protect": [%q]}`, entry))
		name := filepath.Join(s.ws, strings.Split(entry, "/")[0])
		e, r := entryScratch.start(t, s.ws, `touch ran; ln -sfn notes.txt "$1"`, name)
		refusedLink(t, "protect "+entry, name, e, r)
		absent(t, ran)
	}
	if target, _ := os.Readlink(filepath.Join(s.ws, "secrets")); target != "real" {
		t.Fatalf("secrets was retargeted: %q", target)
	}

	// The remedy: .git as a "gitdir:" file. Runs work, git works, and the pointer
	// cannot be rewritten.
	os.Remove(filepath.Join(s.ws, "secrets"))
	os.Remove(filepath.Join(s.ws, "env"))
	os.RemoveAll(filepath.Join(s.ws, "real"))
	if err := os.Remove(dotgit); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dotgit, []byte("gitdir: "+gitdir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.mustRun(t, s.ws, "echo two >> notes.txt && g commit -q -am two")
	if got := s.git(t, s.ws, "log", "--format=%s"); got != "two\none" {
		t.Fatalf("log = %q", got)
	}
	refused(t, "rewrite the pointer", s.confined(t, s.ws, `echo "gitdir: /tmp" > .git`))
	refused(t, "remove the pointer", s.confined(t, s.ws, `rm .git`))
	present(t, dotgit, "gitdir: "+gitdir+"\n")

	// A symlink on the way that lies outside every writable root refuses nothing:
	// it is read-only there anyway.
	via := filepath.Join(s.beside, "via")
	if err := os.Symlink(gitdir, via); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dotgit, []byte("gitdir: "+via+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.mustRun(t, s.ws, "echo three >> notes.txt && g commit -q -am three")
	refused(t, "write hooks through the outside link", s.confined(t, s.ws, `echo evil > "$1/hooks/pre-commit"`, via))
	noStandIns(t, s.ws)
	s.checkCanary(t)
}

// TestWritableRootThroughLinkIsRefused (bug 5): a writableRoots entry spelled through
// a symlink inside the workspace is refused before anything runs (a command could
// retarget the link, and the next run would make "/" writable). The same attack on a
// canonical entry, replacing the directory by a link where nothing pins it (under
// Landlock), lands, and the next run is refused instead of widened. Positive
// controls: the canonical spelling works, and so does a link outside every root.
func TestWritableRootThroughLinkIsRefused(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	testutil.MakeTree(t, s.ws, "dir data", "link link -> data")
	testutil.MakeTree(t, s.beside, "dir extra", "link outlink -> extra")
	ran := filepath.Join(s.ws, "ran")
	const attack = `touch "$1"; mv data data2 && ln -s / data; echo pwned > "$2"`
	runWith := func(runner, script string, roots ...string) (envelope, runResult) {
		t.Helper()
		b, _ := json.Marshal(roots)
		f, err := os.CreateTemp(s.beside, "policy-*.json")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, `{"version": 1, "mode": "workspace-write", "workspaceRoot": %q, "protect": [], "writableRoots": %s}`, s.ws, b)
		f.Close()
		return tohJSON(t, s.ws, nil, "--policy", f.Name(), "--runner", runner, "--probe-cache", filepath.Join(s.beside, "cache.json"),
			"-c", script, "sh", ran, s.canary, filepath.Join(s.beside, "outlink", "f"))
	}
	refusedRoot := func(what, link string, e envelope, r runResult) {
		t.Helper()
		want := fmt.Sprintf("passes through the symbolic link %q, which lies in the writable root %q", link, s.ws)
		if r.code != exitPolicy || e.Result != nil || e.Error == nil || !strings.Contains(e.Error.Message, want) {
			t.Fatalf("%s: not refused with %q: %d %+v %+v", what, want, r.code, e.Result, e.Error)
		}
		absent(t, ran)
		s.checkCanary(t)
	}

	e, r := runWith("bwrap", attack, filepath.Join(s.ws, "link"))
	refusedRoot("a root through a link in the workspace", filepath.Join(s.ws, "link"), e, r)

	// Positive: a link outside every root is a fine spelling; the run lands.
	if e, _ := runWith("bwrap", `touch "$1"; echo ok > "$3"`, filepath.Join(s.beside, "outlink")); e.Result == nil || *e.Result.ExitCode != 0 {
		t.Fatalf("a root through a link outside every root: %+v %+v", e.Result, e.Error)
	}
	present(t, ran, "")
	present(t, filepath.Join(s.beside, "extra", "f"), "ok\n")
	os.Remove(ran)

	// The canonical spelling is accepted, and under bwrap the nested root is a
	// mountpoint: the replacement fails (EBUSY) and nothing widens.
	if e, _ := runWith("bwrap", attack, filepath.Join(s.ws, "data")); e.Result == nil || *e.Result.ExitCode == 0 {
		t.Fatalf("the canonical root under bwrap: %+v %+v", e.Result, e.Error)
	}
	present(t, ran, "")
	os.Remove(ran)
	if fi, err := os.Lstat(filepath.Join(s.ws, "data")); err != nil || !fi.IsDir() {
		t.Fatalf("bwrap let the nested root be replaced: %v", err)
	}
	// Under Landlock nothing pins it: the replacement lands (the canary write is
	// still denied), and the next run is refused instead of making "/" writable.
	testutil.RequireLandlockABI(t, 1)
	e, _ = runWith("landlock", attack, filepath.Join(s.ws, "data"))
	if e.Result == nil || e.Result.Backend != "landlock" {
		t.Fatalf("the canonical root under Landlock: %+v %+v", e.Result, e.Error)
	}
	s.checkCanary(t)
	os.Remove(ran)
	if target, err := os.Readlink(filepath.Join(s.ws, "data")); err != nil || target != "/" {
		t.Fatalf("premise: the command could not replace the root by a link under Landlock: %q %v", target, err)
	}
	for _, runner := range []string{"landlock", "bwrap"} {
		e, r := runWith(runner, attack, filepath.Join(s.ws, "data"))
		refusedRoot("the run after the replacement ("+runner+")", filepath.Join(s.ws, "data"), e, r)
	}
}

// A policy file that does not exist but lies in a writable root (the default
// ~/.config/toh/policy.json of a workspace-write run in $HOME, or a --policy path
// in the workspace) could be created by the command, and would then set the mode of
// every later call. Neither rung can keep a name from being created, so both refuse
// the run before anything starts (sandbox.BwrapArgv; the Landlock launcher's plan).
// Controls: the same command with the policy file outside the workspace runs, and
// writes; with the file created first, bwrap runs and keeps it read-only.
func TestMissingPolicyFileInWritableRootRefusesTheRun(t *testing.T) {
	s := newScratch(t)
	plant := `mkdir -p .toh .config/toh && p='{"version": 1, "mode": "danger-full-access"}' && ` +
		`printf '%s' "$p" > .toh/policy.json && printf '%s' "$p" > .config/toh/policy.json && echo planted`
	inWs := filepath.Join(s.ws, ".toh", "policy.json")
	asDefault := []string{"HOME=" + s.ws, "XDG_CONFIG_HOME="}
	for _, rung := range []string{"bwrap", "landlock"} {
		requireRung(t, rung, 1)
		for _, c := range []struct {
			name string
			env  []string
			args []string
		}{
			{"--policy in the workspace", nil, []string{"--policy", inWs}},
			{"the default path in $HOME", asDefault, nil},
		} {
			args := append(append([]string{}, c.args...), "--runner", rung, "--mode", "workspace-write", "-c", plant)
			r := toh(t, s.ws, c.env, args...)
			if r.code == 0 || strings.Contains(r.stdout, "planted") || !strings.Contains(r.stderr, "does not exist") {
				t.Errorf("%s, %s: exit %d, stdout %q, stderr %q; want the run refused", rung, c.name, r.code, r.stdout, r.stderr)
			}
			absent(t, inWs)
			absent(t, filepath.Join(s.ws, ".config", "toh", "policy.json"))
		}
	}

	// Control: with the policy file outside the workspace, the same command runs.
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--mode", "workspace-write", "-c", plant)
	if r.code != 0 || r.stdout != "planted\n" {
		t.Fatalf("control: the command did not run with the policy file outside the workspace: %d %q %q", r.code, r.stdout, r.stderr)
	}
	os.RemoveAll(filepath.Join(s.ws, ".toh"))
	os.RemoveAll(filepath.Join(s.ws, ".config"))

	// Control: created first, the policy file is kept read-only by bwrap and the run goes ahead.
	testutil.RequireBwrap(t)
	os.Mkdir(filepath.Dir(inWs), 0o755)
	if r := toh(t, s.ws, nil, "policy", "set-mode", "--policy", inWs, "workspace-write"); r.code != 0 {
		t.Fatalf("policy set-mode: %d %q", r.code, r.stderr)
	}
	before, _ := os.ReadFile(inWs)
	r = toh(t, s.ws, nil, "--policy", inWs, "--runner", "bwrap", "-c", `echo '{"version": 1, "mode": "danger-full-access"}' > .toh/policy.json`)
	if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "read-only file system") {
		t.Errorf("existing policy file: exit %d, stderr %q; want a read-only file system", r.code, r.stderr)
	}
	if after, _ := os.ReadFile(inWs); !bytes.Equal(before, after) {
		t.Errorf("the policy file changed: %q", after)
	}
}

// TestPolicyFileBehindALinkInTheWorkspaceIsRefused: a policy file reached through a
// symbolic link that lies in a writable root (a dotfiles-style ".toh -> elsewhere")
// is refused before anything runs, on both rungs: the command could replace the link
// by a directory holding its own policy file, and the next call would run in the mode
// that file names. Controls: the attack itself, run with the policy named by its
// target, replaces the link and makes the next call through the old spelling
// danger-full-access (the premise); named by its target, the same command runs.
func TestPolicyFileBehindALinkInTheWorkspaceIsRefused(t *testing.T) {
	s := newScratch(t)
	real := filepath.Join(s.beside, "policy.json")
	if r := toh(t, s.ws, nil, "policy", "set-mode", "--policy", real, "workspace-write"); r.code != 0 {
		t.Fatalf("policy set-mode: %d %q", r.code, r.stderr)
	}
	link := filepath.Join(s.ws, ".toh")
	if err := os.Symlink(s.beside, link); err != nil {
		t.Fatal(err)
	}
	viaLink := filepath.Join(link, "policy.json")
	attack := `rm .toh && mkdir .toh && echo '{"version": 1, "mode": "danger-full-access"}' > .toh/policy.json && echo replaced`
	for _, rung := range []string{"bwrap", "landlock"} {
		requireRung(t, rung, 1)
		r := toh(t, s.ws, nil, "--policy", viaLink, "--runner", rung, "-c", attack)
		if r.code != exitPolicy || strings.Contains(r.stdout, "replaced") || !strings.Contains(r.stderr, "passes through the symbolic link") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want the run refused", rung, r.code, r.stdout, r.stderr)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s: the link was replaced", rung)
		}
	}
	// Control: named by its target, the run goes ahead (and the attack works, which
	// is why the spelling through the link is refused).
	r := toh(t, s.ws, nil, "--policy", real, "-c", attack)
	if r.code != 0 || r.stdout != "replaced\n" {
		t.Fatalf("control: %d %q %q", r.code, r.stdout, r.stderr)
	}
	e, _ := tohJSON(t, s.ws, nil, "--policy", viaLink, "-c", "true")
	if e.Result.Mode != "danger-full-access" {
		t.Fatalf("premise: the replaced link did not change the next call's mode: %+v", e.Result)
	}
}

// TestNestedRepositoryCannotShadowTheEnclosingOne: with the workspace a directory
// inside a repository ("repo/sub"), a command cannot make sub/.git, a repository of
// its own that every git command run in sub would use instead (its core.fsmonitor
// runs unconfined at the user's next "git status"). bwrap keeps the name with an
// empty stand-in, the fence denies it. Controls: afterwards git in sub still finds
// the enclosing repository; in a workspace inside no repository, "git init" works.
func TestNestedRepositoryCannotShadowTheEnclosingOne(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	repo := filepath.Dir(s.ws)
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	shadow := `git init -q . && git config core.fsmonitor "touch fsmonitor-ran; false" && echo shadowed`
	// The workspace itself as a bare repository whose config names it as worktree.
	bare := `mkdir -p objects refs && echo "ref: refs/heads/main" > HEAD && ` +
		`printf '[core]
	repositoryformatversion = 0
	bare = false
	worktree = %s
	fsmonitor = "touch fsmonitor-ran; false"
' "$PWD" > config && echo shadowed`
	for _, extra := range [][]string{nil, {"--fence"}} {
		for _, script := range []string{shadow, bare} {
			args := append(append([]string{"--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write"}, extra...), "-c", script)
			r := toh(t, s.ws, nil, args...)
			if r.code == 0 || strings.Contains(r.stdout, "shadowed") {
				t.Errorf("%q %.20q: exit %d, stdout %q, stderr %q; want it refused", extra, script, r.code, r.stdout, r.stderr)
			}
			exec.Command("git", "-C", s.ws, "status").Run()
			absent(t, filepath.Join(s.ws, "fsmonitor-ran"))
			os.RemoveAll(filepath.Join(s.ws, "objects"))
			os.RemoveAll(filepath.Join(s.ws, "refs"))
			os.RemoveAll(filepath.Join(s.ws, "config"))
		}
		absent(t, filepath.Join(s.ws, ".git"))
		absent(t, filepath.Join(s.ws, "HEAD"))
		top, err := exec.Command("git", "-C", s.ws, "rev-parse", "--show-toplevel").Output()
		if err != nil || strings.TrimSpace(string(top)) != repo {
			t.Errorf("%q: git in the workspace finds %q (%v), want the enclosing %s", extra, top, err, repo)
		}
	}
	// Control: inside no repository, the run's "git init" works (its repository is
	// the run's own).
	os.RemoveAll(filepath.Join(repo, ".git"))
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", shadow)
	if r.code != 0 || !strings.Contains(r.stdout, "shadowed") {
		t.Errorf("control: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// Access a bwrap run widened on the directories above protected paths is taken back
// after it (sandbox/access_linux.go): "chmod 0777 .git", "chmod o+w ." on the root
// and a default ACL granting another user write on .git would let any local user
// replace .git/hooks once the run ended. Controls: the same commands on a directory
// above no protected path (sub) keep their effect, so the run did change modes; a
// narrowing of .git (0700) is kept.
func TestBwrapTakesBackWidenedAccess(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	if out, err := exec.Command("git", "init", "-q", s.ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	git := filepath.Join(s.ws, ".git")
	for _, d := range []string{s.ws, git} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Named for the caller: under bwrap a user other than root has only its own ID
	// mapped, and an ACL entry for an unmapped one is EINVAL. Any ACL added counts.
	acl := "0s" + base64.StdEncoding.EncodeToString(aclGranting(uint32(os.Getuid())))
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c",
		"chmod 0777 .git && chmod o+w . && setfattr -n system.posix_acl_default -v "+acl+" .git && "+
			"mkdir sub && chmod 0777 sub && setfattr -n system.posix_acl_default -v "+acl+" sub && echo widened")
	if r.code != 0 || r.stdout != "widened\n" {
		t.Fatalf("the run could not widen access (the check needs it): exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	mode := func(p string) os.FileMode {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	hasACL := func(p string) bool {
		_, err := unix.Getxattr(p, "system.posix_acl_default", make([]byte, 256))
		return err == nil
	}
	if m := mode(git); m != 0o755 || hasACL(git) {
		t.Errorf(".git: mode %04o, default ACL %v after the run, want 0755 and none", m, hasACL(git))
	}
	if m := mode(s.ws); m != 0o755 {
		t.Errorf("workspace root: mode %04o after the run, want 0755", m)
	}
	if m := mode(filepath.Join(s.ws, "sub")); m != 0o777 || !hasACL(filepath.Join(s.ws, "sub")) {
		t.Errorf("control sub: mode %04o, default ACL %v, want the run's 0777 and ACL kept", m, hasACL(filepath.Join(s.ws, "sub")))
	}
	for _, want := range []string{"widened access to " + git, "widened access to " + s.ws + ","} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
		}
	}
	// Others given write while the owner's own access is taken away, so that a
	// user other than root could not open the directory to put it back.
	r = toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "chmod 0333 .git")
	if m := mode(git); r.code != 0 || m != 0o755 || !strings.Contains(r.stderr, "mode 0333 back to 0755") {
		t.Errorf("chmod 0333 .git: exit %d, mode %04o after, stderr %q; want 0755 put back", r.code, m, r.stderr)
	}
	// The sticky bit taken from a root others may write lets them rename .git.
	if err := os.Chmod(s.ws, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	r = toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "chmod -t .")
	if fi, err := os.Stat(s.ws); err != nil || fi.Mode()&os.ModeSticky == 0 || r.code != 0 {
		t.Errorf("chmod -t on a root others may write: exit %d, mode %v after (%q); want the sticky bit back", r.code, fi.Mode(), r.stderr)
	}
	os.Chmod(s.ws, 0o755)
	r = toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "chmod 0700 .git")
	if r.code != 0 || mode(git) != 0o700 || r.stderr != "" {
		t.Errorf("narrowing: exit %d, mode %04o, stderr %q; want it kept, quietly", r.code, mode(git), r.stderr)
	}
}

// TestPolicyLockCannotBeTakenByTheCommand: a policy file written without toh-exec
// (an editor, a harness) has no lock file beside it yet. Under bwrap, a command that
// made a directory at the lock's name made every later writer fail, so the user
// could no longer tighten the mode it ran under (found by review). toh-exec creates
// the lock before the run, and bwrap keeps it read-only with the policy file; the
// tightening then works, and the next run is read-only.
func TestPolicyLockCannotBeTakenByTheCommand(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	pf := filepath.Join(s.ws, ".toh", "policy.json")
	os.MkdirAll(filepath.Dir(pf), 0o755)
	if err := os.WriteFile(pf, []byte(`{"version": 1, "mode": "workspace-write"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := toh(t, s.ws, nil, "--policy", pf, "--runner", "bwrap", "-c", "mkdir .toh/policy.json.lock && echo took-it; rm -f .toh/policy.json.lock && echo removed-it; true")
	if strings.Contains(r.stdout, "took-it") || strings.Contains(r.stdout, "removed-it") {
		t.Errorf("the command took or removed the lock: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if fi, err := os.Lstat(pf + ".lock"); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("lock file: %v %v", fi, err)
	}
	if r := toh(t, s.ws, nil, "policy", "set-mode", "--policy", pf, "read-only"); r.code != 0 {
		t.Fatalf("tightening after the run: %d %q", r.code, r.stderr)
	}
	e, _ := tohJSON(t, s.ws, nil, "--policy", pf, "--runner", "bwrap", "-c", "echo x > after")
	if e.Result == nil || e.Result.Mode != "read-only" || !e.Result.Denied {
		t.Fatalf("the next run: %+v %+v", e.Result, e.Error)
	}
	absent(t, filepath.Join(s.ws, "after"))
}
