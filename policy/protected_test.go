package policy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toh-sandbox/toh/canon"
)

// gitTree returns a canonical temporary directory and a function running git in a
// directory below it, isolated from the user's and the system's configuration.
func gitTree(t *testing.T) (string, func(dir string, args ...string)) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: the protected-path resolution of real repositories cannot be tested")
	}
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(dir string, args ...string) {
		t.Helper()
		args = append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "protocol.file.allow=always",
			"-c", "init.defaultBranch=main"}, args...)
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+home, "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %q in %s: %v\n%s", args, dir, err, out)
		}
	}
	return base, run
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	mustMkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// pathsOf renders ProtectedPaths compactly: "<path relative to base> <kind> <exists>".
func pathsOf(pps []ProtectedPath, base string) []string {
	var out []string
	for _, p := range pps {
		rel := strings.TrimPrefix(p.Path, base+"/")
		ex := "missing"
		if p.Exists {
			ex = "exists"
		}
		out = append(out, rel+" "+string(p.Kind)+" "+ex+" "+string(p.Reason))
	}
	return out
}

func wwExec(ws string, roots ...string) Execution {
	return Execution{Mode: WorkspaceWrite, WorkspaceRoot: ws, WritableRoots: append([]string{ws}, roots...),
		Protect: slices.Clone(DefaultProtect), Network: NetworkAllow}
}

func TestProtectedPathsPlainRepository(t *testing.T) {
	base, git := gitTree(t)
	ws := filepath.Join(base, "ws")
	mustMkdir(t, ws)
	git(ws, "init", "-q")
	mustWrite(t, filepath.Join(base, "toh.json"), "{}")
	x := wwExec(ws)
	x.PolicyFile = filepath.Join(base, "toh.json")
	x.Protect = append(x.Protect, "secrets/key.pem", ".envdir")
	got := pathsOf(x.ProtectedPaths(), base)
	want := []string{
		"toh.json file exists policy-file",
		"toh.json.lock absent missing policy-file",
		"ws/secrets/key.pem file missing protect",
		"ws/.envdir dir missing protect",
		"ws/.git/hooks dir exists protect",
		"ws/.git/config file exists protect",
		"ws/.git/commondir commondir missing git",
		"ws/.git/config.worktree file missing git",
		"ws/.git/modules dir missing git",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ProtectedPaths (-want +got):\n%s", diff)
	}
	// A missing hooks directory still has a git directory to live in: it is listed,
	// with a directory stand-in allowed.
	if err := os.RemoveAll(filepath.Join(ws, ".git", "hooks")); err != nil {
		t.Fatal(err)
	}
	got = pathsOf(x.ProtectedPaths(), base)
	if !slices.Contains(got, "ws/.git/hooks dir missing protect") {
		t.Errorf("missing .git/hooks not listed as a missing directory: %q", got)
	}
	for _, p := range x.ProtectedPaths() {
		if p.Entry == ".git/hooks" && p.GitDir != filepath.Join(ws, ".git") {
			t.Errorf("GitDir of %s = %q", p.Path, p.GitDir)
		}
	}
}

// The git rule: without a git directory at the start of the run, nothing under .git
// is protected, so "git init" can create it.
func TestProtectedPathsWithoutRepository(t *testing.T) {
	base := t.TempDir()
	ws, _ := filepath.EvalSymlinks(base)
	x := wwExec(ws)
	if got := x.ProtectedPaths(); len(got) != 0 {
		t.Errorf("a workspace without .git has protected paths: %+v", got)
	}
	x.Protect = []string{".git/hooks", "Makefile"}
	got := pathsOf(x.ProtectedPaths(), ws)
	if diff := cmp.Diff([]string{"Makefile dir missing protect"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Read-only and danger-full-access carry no roots: only the policy file remains.
	x = Execution{Mode: ReadOnly, WorkspaceRoot: ws, Protect: DefaultProtect, PolicyFile: filepath.Join(ws, "p.json")}
	if got := pathsOf(x.ProtectedPaths(), ws); !slices.Equal(got, []string{"p.json absent missing policy-file", "p.json.lock absent missing policy-file"}) {
		t.Errorf("read-only: %q", got)
	}
	// An empty protect list protects nothing but the policy file.
	x = wwExec(ws)
	x.Protect = nil
	if got := x.ProtectedPaths(); len(got) != 0 {
		t.Errorf("protect [] still protects: %+v", got)
	}
}

func TestProtectedPathsWorktreeAndSubmodules(t *testing.T) {
	base, git := gitTree(t)
	lib, main := filepath.Join(base, "lib"), filepath.Join(base, "main")
	mustMkdir(t, lib)
	mustMkdir(t, main)
	git(lib, "init", "-q")
	git(lib, "commit", "-q", "--allow-empty", "-m", "lib")
	git(main, "init", "-q")
	git(main, "commit", "-q", "--allow-empty", "-m", "main")
	git(main, "submodule", "add", "-q", "--name", "deps/lib", lib, "vendor/lib")
	git(main, "commit", "-q", "-m", "sub")
	git(main, "worktree", "add", "-q", filepath.Join(base, "wt"))
	wt := filepath.Join(base, "wt")

	// From the worktree: its pointer file, its own git directory, the common
	// directory, every worktree directory and the submodule's (name with a slash).
	x := wwExec(wt)
	got := pathsOf(x.ProtectedPaths(), base)
	want := []string{
		"wt/.git file exists git",
		"wt/vendor/lib dir exists git", // the submodule, not initialised in this worktree: kept whole
		"main/vendor/lib/.git file exists git",
		"main/.git/worktrees/wt/hooks dir missing protect",
		"main/.git/worktrees/wt/config file missing protect",
		"main/.git/worktrees/wt/commondir file exists git",
		"main/.git/worktrees/wt/config.worktree file missing git",
		"main/.git/worktrees/wt/modules dir missing git",
		"main/.git/hooks dir exists protect",
		"main/.git/config file exists protect",
		"main/.git/commondir commondir missing git",
		"main/.git/config.worktree file missing git",
		"main/.git/modules dir exists git",
		// The submodule git directory in use stays a valid one (review F5).
		"main/.git/modules/deps/lib/HEAD file exists git-valid",
		"main/.git/modules/deps/lib/objects dir exists git-valid",
		"main/.git/modules/deps/lib/refs dir exists git-valid",
		"main/.git/modules/deps/lib/hooks dir exists protect",
		"main/.git/modules/deps/lib/config file exists protect",
		"main/.git/modules/deps/lib/commondir commondir missing git",
		"main/.git/modules/deps/lib/config.worktree file missing git",
		"main/.git/modules/deps/lib/modules dir missing git",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("from the worktree (-want +got):\n%s", diff)
	}
	// From the main repository the same git directories are found, and so are the
	// checkouts' pointers: the linked worktree's (through its back-pointer; outside
	// this root, where backends skip it) and the submodule's (through core.worktree),
	// which the user's git follows into git directories of the command's own if it
	// can rewrite them; and the back-pointer itself, which says where to look.
	got = pathsOf(wwExec(main).ProtectedPaths(), base)
	mustContain(t, "from main: ", got, append(slices.Delete(slices.Clone(want), 1, 2), "main/.git/worktrees/wt/gitdir file exists git")...)
}

// A submodule checkout's pointer is found through core.worktree of the submodule's
// git directory, nested submodules included, and protected at its own name when it
// is a link; a submodule whose checkout directory is gone gets nothing (no stand-in
// directories for a checkout).
func TestProtectedPathsSubmoduleCheckouts(t *testing.T) {
	base, git := gitTree(t)
	inner, lib, main := filepath.Join(base, "inner"), filepath.Join(base, "lib"), filepath.Join(base, "main")
	committedRepos(t, git, inner, lib, main)
	git(lib, "-c", "protocol.file.allow=always", "submodule", "add", "-q", inner, "in")
	git(lib, "commit", "-q", "-m", "in")
	git(main, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "vendor/lib")
	git(main, "-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init", "--recursive")
	git(main, "commit", "-q", "-m", "lib")
	got := pathsOf(wwExec(main).ProtectedPaths(), base)
	mustContain(t, "", got, "main/vendor/lib/.git file exists git",
		"main/vendor/lib/in/.git file exists git",
		"main/.git/modules/vendor/lib/modules/in/hooks dir exists protect")
	// The checkout reached through a link: the link's name is protected too.
	if err := os.Rename(filepath.Join(main, "vendor"), filepath.Join(main, "vendor-real")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("vendor-real", filepath.Join(main, "vendor")); err != nil {
		t.Fatal(err)
	}
	got = pathsOf(wwExec(main).ProtectedPaths(), base)
	mustContain(t, "through a link: ", got, "main/vendor-real/lib/.git file exists git", "main/vendor link exists git")
	// Gone: nothing for the checkout.
	if err := os.RemoveAll(filepath.Join(main, "vendor-real")); err != nil {
		t.Fatal(err)
	}
	for _, p := range pathsOf(wwExec(main).ProtectedPaths(), base) {
		if strings.HasPrefix(p, "main/vendor") {
			t.Errorf("a gone checkout is protected: %q", p)
		}
	}
}

// configValue reads a value as git does: each case is compared with
// "git config --file F --get core.worktree".
func TestConfigValueMatchesGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	dir := t.TempDir()
	for i, text := range []string{
		"[core]\n\tworktree = ../../../x\n",
		"[core]\n\tworktree = a\n\tworktree = b\n",
		"[CORE]\nWorkTree=c\n",
		"[core] worktree = same-line\n",
		"[core]\nworktree = \"  quoted  # not a comment \"  # a comment\n",
		"[core]\nworktree = with   inner\tspaces   \n",
		"[core]\nworktree = cont\\\ninued\n",
		"[core]\nworktree = esc\\\"q\\\\b\\tt\n",
		"[core \"sub\"]\nworktree = not-core\n",
		"[core.sub]\nworktree = not-core\n",
		"[other]\nworktree = no\n[core]\nbare = false\n",
		"; c\n# c\n[core]\n\tworktree = ../a ; trailing\n",
		"[core]\nworktree\n",
		"[core]\nworktree =\n",
		"[core]\r\nworktree = crlf\r\n",
		"[core \"a]b\"]\nworktree = sub\n[core]\nworktree = after-odd-subsection\n",
		"[core \"a\\\"b\"]\nworktree = sub\n[core]\nworktree = after-escaped-quote\n",
		"[core]\nworktree = kept\n[core \"x\"]\nworktree = sub-only\n",
	} {
		f := filepath.Join(dir, fmt.Sprint(i))
		mustWrite(t, f, text)
		out, err := exec.Command("git", "config", "--file", f, "--get", "core.worktree").Output()
		want, wantOK := strings.TrimSuffix(string(out), "\n"), err == nil
		got, ok := configValue(f, "core", "worktree")
		if ok != wantOK || (ok && got != want) {
			t.Errorf("%q: got %q %v, git says %q %v (%v)", text, got, ok, want, wantOK, err)
		}
	}
}

// A .git pointer planted to point anywhere only ever adds read-only paths.
func TestProtectedPathsFollowPlantedPointer(t *testing.T) {
	base := t.TempDir()
	base, _ = filepath.EvalSymlinks(base)
	ws, elsewhere := filepath.Join(base, "ws"), filepath.Join(base, "elsewhere")
	mustMkdir(t, elsewhere)
	mustWrite(t, filepath.Join(ws, ".git"), "gitdir: ../elsewhere\n")
	got := pathsOf(wwExec(ws).ProtectedPaths(), base)
	want := []string{
		"ws/.git file exists git",
		"elsewhere/hooks dir missing protect",
		"elsewhere/config file missing protect",
		"elsewhere/commondir commondir missing git",
		"elsewhere/config.worktree file missing git",
		"elsewhere/modules dir missing git",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// And it never makes anything writable.
	x := wwExec(ws).WithWorktreeRoots()
	if !slices.Equal(x.WritableRoots, []string{ws}) || x.WorktreeRoots != nil {
		t.Errorf("a planted pointer added roots: %q %q", x.WritableRoots, x.WorktreeRoots)
	}
}

func TestProtectedPathsSymlinkedHooks(t *testing.T) {
	base, git := gitTree(t)
	ws := filepath.Join(base, "ws")
	mustMkdir(t, ws)
	git(ws, "init", "-q")
	hooks := filepath.Join(ws, ".git", "hooks")
	if err := os.RemoveAll(hooks); err != nil {
		t.Fatal(err)
	}
	mustMkdir(t, filepath.Join(ws, "tools", "hooks"))
	if err := os.Symlink("../tools/hooks", hooks); err != nil {
		t.Fatal(err)
	}
	got := pathsOf(wwExec(ws).ProtectedPaths(), base)
	if !slices.Contains(got, "ws/tools/hooks dir exists protect") {
		t.Errorf("a symlinked hooks directory is not represented by its target: %q", got)
	}
	if !slices.Contains(got, "ws/.git/hooks link exists protect") {
		t.Errorf("the hooks symlink's own name is not protected: %q", got)
	}
}

// Every symlink a protected spelling passes through is protected at its own name
// (bug 6): a .git symlink, an entry that is a link, a link on an entry's way (chains
// included), and a link in the text of a .git file. Links are never followed in a
// loop.
func TestProtectedPathsSymlinkNames(t *testing.T) {
	base, git := gitTree(t)
	ws := filepath.Join(base, "ws")
	mustMkdir(t, ws)
	git(ws, "init", "-q")
	if err := os.Rename(filepath.Join(ws, ".git"), filepath.Join(ws, "real.git")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(ws, "vault", "key.pem"), "k")
	for link, target := range map[string]string{
		".git": "real.git", "secrets": "hop", "hop": base + "/ws/vault", "env": "vault/key.pem",
		"loop1": "loop2", "loop2": "loop1",
	} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	x := wwExec(ws)
	x.Protect = []string{".git/hooks", "secrets/key.pem", "env", "loop1/x", "plain"}
	got := pathsOf(x.ProtectedPaths(), base)
	want := []string{
		"ws/vault/key.pem file exists protect", "ws/secrets link exists protect", "ws/hop link exists protect",
		"ws/env link exists protect",
		"ws/loop1/x dir missing protect", "ws/loop1 link exists protect", "ws/loop2 link exists protect",
		"ws/plain dir missing protect",
		"ws/.git link exists git",
		"ws/real.git/hooks dir exists protect", "ws/real.git/commondir commondir missing git",
		"ws/real.git/modules dir missing git",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("protected paths (-want +got):\n%s", diff)
	}

	// A .git file whose text passes through a link: the link is protected with the
	// pointer; one outside the root is listed too (backends skip it).
	if err := os.Remove(filepath.Join(ws, ".git")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base+"/ws/real.git", filepath.Join(base, "outlink")); err != nil {
		t.Fatal(err)
	}
	for text, link := range map[string]string{"gitdir: hop/../real.git\n": "ws/hop", "gitdir: " + base + "/outlink\n": "outlink"} {
		mustWrite(t, filepath.Join(ws, ".git"), text)
		x.Protect = []string{".git/config"}
		got = pathsOf(x.ProtectedPaths(), base)
		for _, w := range []string{"ws/.git file exists git", link + " link exists git", "ws/real.git/config file exists protect"} {
			if !slices.Contains(got, w) {
				t.Errorf("pointer %q: %q missing from %q", text, w, got)
			}
		}
	}
}

func TestLinksOn(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mustMkdir(t, filepath.Join(base, "d", "e"))
	mustWrite(t, filepath.Join(base, "f"), "")
	for link, target := range map[string]string{
		"up": "d/..", "abs": base + "/d", "rel": "abs/e", "self": "self", "tofile": "f",
	} {
		if err := os.Symlink(target, filepath.Join(base, link)); err != nil {
			t.Fatal(err)
		}
	}
	for spelling, want := range map[string][]string{
		"d/e":                 nil,
		"rel/x/y":             {"rel", "abs"},
		"up/rel/../e":         {"up", "rel", "abs"},
		"missing/rel":         nil,
		"tofile/rel":          {"tofile"},
		"d/../up/d/../tofile": {"up", "tofile"},
	} {
		var got []string
		for _, l := range linksOn(base + "/" + spelling) {
			got = append(got, strings.TrimPrefix(l, base+"/"))
		}
		if !slices.Equal(got, want) {
			t.Errorf("linksOn(%q) = %q, want %q", spelling, got, want)
		}
	}
	if got := linksOn(base + "/self/x"); len(got) != maxLinksOn {
		t.Errorf("a self-loop gave %d links, want the cap %d", len(got), maxLinksOn)
	}
	if got := linksOn("relative/path"); got != nil {
		t.Errorf("a relative spelling gave %q", got)
	}
}

func TestKindOfMissing(t *testing.T) {
	for p, want := range map[string]PathKind{
		"/w/.git/hooks": PathDir, "/w/.git/config": PathFile, "/w/.git/HEAD": PathFile,
		"/w/secrets/key.pem": PathFile, "/w/toh.json": PathFile, "/w/.env": PathDir,
		"/w/.github": PathDir, "/w/Makefile": PathDir, "/w/a.b/c": PathDir,
	} {
		if got := kindOfMissing(p); got != want {
			t.Errorf("kindOfMissing(%q) = %s, want %s", p, got, want)
		}
	}
}

func TestWithWorktreeRoots(t *testing.T) {
	base, git := gitTree(t)
	main, wt := filepath.Join(base, "main"), filepath.Join(base, "wt")
	mustMkdir(t, main)
	git(main, "init", "-q")
	git(main, "commit", "-q", "--allow-empty", "-m", "main")
	git(main, "worktree", "add", "-q", wt)
	common := filepath.Join(main, ".git")

	x := wwExec(wt, "/opt/cache").WithWorktreeRoots()
	if !slices.Equal(x.WritableRoots, []string{wt, "/opt/cache", common}) || !slices.Equal(x.WorktreeRoots, []string{common}) {
		t.Fatalf("verified worktree: roots %q, worktree roots %q", x.WritableRoots, x.WorktreeRoots)
	}
	// The added common directory keeps its hooks and config read-only.
	got := pathsOf(x.ProtectedPaths(), base)
	mustContain(t, "", got, "main/.git/hooks dir exists protect", "main/.git/config file exists protect")
	// Nothing is added outside workspace-write, nor when the common directory is
	// already writable, nor from /tmp-like roots that are neither workspace nor extra.
	ro := wwExec(wt)
	ro.Mode = ReadOnly
	ro.WritableRoots = nil
	if y := ro.WithWorktreeRoots(); y.WritableRoots != nil || y.WorktreeRoots != nil {
		t.Errorf("read-only: %+v", y)
	}
	if y := wwExec(wt, base).WithWorktreeRoots(); y.WorktreeRoots != nil {
		t.Errorf("common dir already within a root, added again: %q", y.WorktreeRoots)
	}
	y := Execution{Mode: WorkspaceWrite, WorkspaceRoot: base, WritableRoots: []string{base, wt}}
	if y = y.WithWorktreeRoots(); y.WorktreeRoots != nil {
		t.Errorf("a root that is neither the workspace nor an extra root was examined: %q", y.WorktreeRoots)
	}
	y = Execution{Mode: WorkspaceWrite, WorkspaceRoot: base, WritableRoots: []string{base}, ExtraRoots: []string{wt}}
	y.WritableRoots = []string{filepath.Join(base, "other"), wt}
	y.WorkspaceRoot = filepath.Join(base, "other")
	if y = y.WithWorktreeRoots(); !slices.Equal(y.WorktreeRoots, []string{common}) {
		t.Errorf("an extra root that is a worktree: %q", y.WorktreeRoots)
	}
}

// Each check of the trust rule, broken one at a time, refuses the pointer.
func TestWithWorktreeRootsRefusesForgedStructures(t *testing.T) {
	base, git := gitTree(t)
	main, wt := filepath.Join(base, "main"), filepath.Join(base, "wt")
	mustMkdir(t, main)
	git(main, "init", "-q")
	git(main, "commit", "-q", "--allow-empty", "-m", "main")
	git(main, "worktree", "add", "-q", wt)
	g := filepath.Join(main, ".git", "worktrees", "wt")
	added := func() bool { return wwExec(wt).WithWorktreeRoots().WorktreeRoots != nil }
	if !added() {
		t.Fatal("positive control: the real worktree is not honoured")
	}
	edit := func(p, content string) func() {
		old, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, p, content)
		return func() { mustWrite(t, p, string(old)) }
	}
	cases := []struct {
		name    string
		breakIt func() (restore func())
	}{
		{"back-pointer names another worktree", func() func() { return edit(filepath.Join(g, "gitdir"), filepath.Join(base, "other", ".git")+"\n") }},
		{"back-pointer missing", func() func() {
			p := filepath.Join(g, "gitdir")
			old, _ := os.ReadFile(p)
			os.Remove(p)
			return func() { mustWrite(t, p, string(old)) }
		}},
		{"commondir names a non-repository", func() func() {
			mustMkdir(t, filepath.Join(base, "plain", "worktrees"))
			return edit(filepath.Join(g, "commondir"), filepath.Join(base, "plain")+"\n")
		}},
		{"gitdir not below the common dir's worktrees", func() func() {
			fake := filepath.Join(base, "fake")
			mustWrite(t, filepath.Join(fake, "gitdir"), filepath.Join(wt, ".git")+"\n")
			mustWrite(t, filepath.Join(fake, "HEAD"), "ref: refs/heads/main\n")
			mustWrite(t, filepath.Join(fake, "commondir"), filepath.Join(main, ".git")+"\n")
			return edit(filepath.Join(wt, ".git"), "gitdir: "+fake+"\n")
		}},
		{"pointer to a directory inside a writable root", func() func() {
			// A structure the confined command could have built itself: everything
			// checks out, but the evidence lies in a writable root.
			fake := filepath.Join(wt, "fakecommon")
			fg := filepath.Join(fake, "worktrees", "x")
			mustWrite(t, filepath.Join(fg, "gitdir"), filepath.Join(wt, ".git")+"\n")
			mustWrite(t, filepath.Join(fg, "HEAD"), "ref: refs/heads/main\n")
			mustWrite(t, filepath.Join(fg, "commondir"), "../..\n")
			mustWrite(t, filepath.Join(fake, "HEAD"), "ref: refs/heads/main\n")
			mustMkdir(t, filepath.Join(fake, "objects"))
			mustMkdir(t, filepath.Join(fake, "refs"))
			return edit(filepath.Join(wt, ".git"), "gitdir: "+fg+"\n")
		}},
		{"pointer is not a gitdir line", func() func() { return edit(filepath.Join(wt, ".git"), g+"\n") }},
	}
	for _, c := range cases {
		restore := c.breakIt()
		if added() {
			t.Errorf("%s: pointer honoured", c.name)
		}
		restore()
		if !added() {
			t.Fatalf("%s: restoring did not restore the positive control", c.name)
		}
	}
	// A .git symlink, even to the real worktree directory, is not a pointer file.
	dotgit := filepath.Join(wt, ".git")
	os.Remove(dotgit)
	if err := os.Symlink(g, dotgit); err != nil {
		t.Fatal(err)
	}
	if added() {
		t.Error(".git symlink honoured")
	}
}

// A writable root spelled through a symlink that lies within a writable root is
// refused (bug 5): a confined command could retarget the link, and the next call
// would resolve the same spelling to another root. Each kind of spelling, the attack
// itself, and the spellings that stay accepted.
func TestCheckRootSpellings(t *testing.T) {
	// Not below /tmp, which is a writable root of every workspace-write call.
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp(home, "toh-policy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if base, err = filepath.EvalSymlinks(base); err != nil {
		t.Fatal(err)
	}
	ws, extra := filepath.Join(base, "ws"), filepath.Join(base, "extra")
	for _, d := range []string{ws + "/data", ws + "/a", ws + "/t", extra} {
		mustMkdir(t, d)
	}
	for link, target := range map[string]string{
		ws + "/link": "data", ws + "/in": "a", ws + "/tmplink": ws + "/t", base + "/outlink": extra,
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	ww := WorkspaceWrite
	check := func(f *File, req Request) error {
		t.Helper()
		x, err := Resolve(f, req)
		if err != nil {
			return err // Resolve may make the check itself
		}
		return x.CheckRootSpellings(f, req)
	}
	refused := func(what string, err error, field, link, root string) {
		t.Helper()
		var me *MovableRootError
		if !errors.As(err, &me) || !errors.Is(err, ErrMovableRoot) || me.Field != field || me.Link != link || me.Root != root {
			t.Errorf("%s: got %v, want a refusal of %s through %s in %s", what, err, field, link, root)
		}
	}

	f := &File{Version: 1, Mode: ww, WorkspaceRoot: ws, WritableRoots: []string{extra, ws + "/link"}}
	err = check(f, Request{})
	refused("a writable root through a link in the workspace", err, "writableRoots[1]", ws+"/link", ws)
	if err != nil && !strings.Contains(err.Error(), `write the directory it leads to ("`+ws+`/data")`) {
		t.Errorf("the error does not name the directory to write instead: %v", err)
	}
	// The attack the refusal stops: retargeted, the same spelling is the root "/".
	if err := os.Remove(ws + "/link"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", ws+"/link"); err != nil {
		t.Fatal(err)
	}
	if got := canon.WritableRoots(f.WritableRoots); !slices.Contains(got, "/") {
		t.Fatalf("the retargeted link does not widen the roots (test premise): %q", got)
	}
	refused("the retargeted link", check(f, Request{}), "writableRoots[1]", ws+"/link", ws)

	// A directory on the way replaced by a link (what a command without mountpoints
	// can do): accepted while it is a directory, refused once it is a link.
	f = &File{Version: 1, Mode: ww, WorkspaceRoot: ws, WritableRoots: []string{ws + "/data"}}
	if err := check(f, Request{}); err != nil {
		t.Errorf("a canonical nested root: %v", err)
	}
	if err := os.Rename(ws+"/data", ws+"/data2"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", ws+"/data"); err != nil {
		t.Fatal(err)
	}
	refused("a nested root replaced by a link", check(f, Request{}), "writableRoots[0]", ws+"/data", ws)

	refused("the workspace root through a link in itself",
		check(&File{Version: 1, Mode: ww, WorkspaceRoot: ws + "/in/.."}, Request{}), "workspaceRoot", ws+"/in", ws)
	refused("a session cwd through a link",
		check(&File{Version: 1, Mode: ww, WritableRoots: []string{ws}, Sessions: map[string]Session{"s1": {Cwd: ws + "/in"}}}, Request{SessionID: "s1"}),
		`sessions["s1"].cwd`, ws+"/in", ws)
	refused("$TMPDIR through a link in the workspace",
		check(&File{Version: 1, Mode: ww, WorkspaceRoot: ws}, Request{TmpDir: ws + "/tmplink"}), "$TMPDIR", ws+"/tmplink", ws)

	// The policy file kept behind a link in the workspace (a dotfiles ".config"
	// link in $HOME, say): retargeted, the next call would read the command's file.
	refused("the policy file through a link in the workspace",
		check(&File{Version: 1, Mode: ww, WorkspaceRoot: ws}, Request{PolicyFile: ws + "/in/policy.json"}), "the policy file", ws+"/in", ws)
	err = check(&File{Version: 1, Mode: ww, WorkspaceRoot: ws}, Request{Cwd: ws, PolicyFile: "in/policy.json"})
	refused("a relative policy file through a link", err, "the policy file", ws+"/in", ws)
	if err != nil && !strings.Contains(err.Error(), `name the file it leads to ("`+ws+`/a/policy.json")`) {
		t.Errorf("the error does not name the file to use instead: %v", err)
	}

	// Accepted: a link that lies within no writable root, the caller's own working
	// directory, and every mode without writable roots.
	for what, c := range map[string]struct {
		f   *File
		req Request
	}{
		"a link outside every root": {&File{Version: 1, Mode: ww, WorkspaceRoot: ws, WritableRoots: []string{base + "/outlink"}}, Request{}},
		"the caller's cwd":          {&File{Version: 1, Mode: ww}, Request{Cwd: ws + "/in"}},
		"read-only":                 {&File{Version: 1, Mode: ReadOnly, WorkspaceRoot: ws, WritableRoots: []string{ws + "/data"}}, Request{}},
		"a policy file through a link outside every root":       {&File{Version: 1, Mode: ww, WorkspaceRoot: ws}, Request{PolicyFile: base + "/outlink/policy.json"}},
		"a policy file in the workspace, spelled without links": {&File{Version: 1, Mode: ww, WorkspaceRoot: ws}, Request{PolicyFile: ws + "/a/policy.json"}},
		"a policy file through a link, read-only":               {&File{Version: 1, Mode: ReadOnly, WorkspaceRoot: ws}, Request{PolicyFile: ws + "/in/policy.json"}},
	} {
		if err := check(c.f, c.req); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
}

// A walk cut short by its limits protects what holds the rest: a command could make
// a thousand directories in .git/worktrees (or .git/modules) so that a real
// submodule's git directory is never reached and its configuration stays writable
// (found by review). Empty directories are not git directories and count for
// nothing; look-alikes past the limit make the whole .git read-only.
func TestProtectedPathsWalkLimitsFailSafe(t *testing.T) {
	base, git := gitTree(t)
	lib, main := filepath.Join(base, "lib"), filepath.Join(base, "main")
	committedRepos(t, git, lib, main)
	git(main, "submodule", "add", "-q", lib, "lib")
	subConfig := "main/.git/modules/lib/config file exists protect"
	wholeGit := "main/.git dir exists git"
	if got := pathsOf(wwExec(main).ProtectedPaths(), base); !slices.Contains(got, subConfig) || slices.Contains(got, wholeGit) {
		t.Fatalf("premise: %q", got)
	}
	for i := range maxGitDirs + 10 {
		mustMkdir(t, filepath.Join(main, ".git", "worktrees", fmt.Sprintf("w%04d", i)))
	}
	if got := pathsOf(wwExec(main).ProtectedPaths(), base); !slices.Contains(got, subConfig) || slices.Contains(got, wholeGit) {
		t.Errorf("empty directories in .git/worktrees changed what is protected: %d paths", len(got))
	}
	for i := range maxGitDirs + 10 {
		w := filepath.Join(main, ".git", "worktrees", fmt.Sprintf("w%04d", i))
		mustWrite(t, filepath.Join(w, "HEAD"), "ref: refs/heads/main\n")
		mustWrite(t, filepath.Join(w, "commondir"), "../..\n")
	}
	if got := pathsOf(wwExec(main).ProtectedPaths(), base); !slices.Contains(got, wholeGit) {
		t.Errorf("a walk cut short by look-alikes does not protect .git whole")
	}
}

// A submodule's checkout without core.worktree in its git directory's config (after
// git submodule deinit, which removes it) is found where its name puts it below the
// superproject's checkout; one with core.worktree in config.worktree (git
// sparse-checkout's worktreeConfig) is found there. Found by review: both left the
// checkout's .git writable, for the user's next git status to follow. A checkout
// without a .git is kept whole (a stand-in .git would break git status).
func TestProtectedPathsSubmoduleCheckoutWithoutCoreWorktree(t *testing.T) {
	base, git := gitTree(t)
	lib, main := filepath.Join(base, "lib"), filepath.Join(base, "main")
	committedRepos(t, git, lib, main)
	git(main, "submodule", "add", "-q", lib, "vendor/lib")
	git(main, "commit", "-q", "-m", "lib")
	modCfg := filepath.Join(main, ".git", "modules", "vendor", "lib", "config")
	git(main, "submodule", "deinit", "-q", "-f", "vendor/lib")
	if out, err := exec.Command("git", "config", "--file", modCfg, "--get", "core.worktree").Output(); err == nil {
		t.Fatalf("premise: deinit left core.worktree %q", out)
	}
	if got := pathsOf(wwExec(main).ProtectedPaths(), base); !slices.Contains(got, "main/vendor/lib dir exists git") {
		t.Errorf("after deinit the checkout's .git is not protected: %q", got)
	}
	// core.worktree in config.worktree only.
	mustWrite(t, filepath.Join(main, ".git", "modules", "vendor", "lib", "config.worktree"), "[core]\n\tworktree = ../../../../elsewhere\n")
	mustMkdir(t, filepath.Join(main, "elsewhere"))
	if got := pathsOf(wwExec(main).ProtectedPaths(), base); !slices.Contains(got, "main/elsewhere dir exists git") {
		t.Errorf("core.worktree in config.worktree is not followed: %q", got)
	}
}

// The submodules a checkout's .gitmodules lists: one whose .git is a git directory
// inside its checkout (git submodule add of an existing clone) has that directory's
// hooks and config protected, and one never initialised (no .git yet) has its .git
// kept from being made. Found by review: neither is reached through .git/modules.
func TestProtectedPathsSubmodulesFromGitmodules(t *testing.T) {
	base, git := gitTree(t)
	lib, main := filepath.Join(base, "lib"), filepath.Join(base, "main")
	committedRepos(t, git, lib, main)
	git(main, "clone", "-q", lib, "inner")
	git(main, "submodule", "add", "-q", lib, "inner")
	mustMkdir(t, filepath.Join(main, "never"))
	mustWrite(t, filepath.Join(main, ".gitmodules"), "[submodule \"inner\"]\n\tpath = inner\n\turl = x\n[submodule \"never\"]\n\tpath = never\n\turl = y\n[submodule \"up\"]\n\tpath = ../outside\n")
	if fi, err := os.Lstat(filepath.Join(main, "inner", ".git")); err != nil || !fi.IsDir() {
		t.Fatalf("premise: inner/.git is not a directory: %v", err)
	}
	got := pathsOf(wwExec(main).ProtectedPaths(), base)
	mustContain(t, "", got, "main/inner/.git/hooks dir exists protect",
		"main/inner/.git/config file exists protect",
		"main/never dir exists git")
	for _, p := range got {
		if strings.HasPrefix(p, "outside") {
			t.Errorf("a .gitmodules path climbing out was followed: %q", p)
		}
	}
}

// A git directory found once stays found: HEAD, objects/ and refs/ are not
// protected, and moving a submodule's or a worktree's HEAD aside in one run once
// made the next run pass the directory by, its config (or commondir) writable
// (found by review). What the walk protects (config, commondir) anchors it.
func TestProtectedPathsGitDirWithoutHead(t *testing.T) {
	base, git := gitTree(t)
	lib, main := filepath.Join(base, "lib"), filepath.Join(base, "main")
	committedRepos(t, git, lib, main)
	git(main, "submodule", "add", "-q", lib, "lib")
	git(main, "commit", "-q", "-m", "lib")
	git(main, "worktree", "add", "-q", filepath.Join(main, "wt"))
	for _, d := range []string{".git/modules/lib", ".git/worktrees/wt"} {
		if err := os.Rename(filepath.Join(main, d, "HEAD"), filepath.Join(main, d, "HEAD.aside")); err != nil {
			t.Fatal(err)
		}
	}
	got := pathsOf(wwExec(main).ProtectedPaths(), base)
	mustContain(t, "with HEAD moved aside, ", got, "main/.git/modules/lib/config file exists protect",
		"main/.git/modules/lib/hooks dir exists protect",
		"main/.git/worktrees/wt/commondir file exists git",
		"main/wt/.git file exists git")
}

// What a protected config includes is protected too: include.path (a shared file in
// the worktree, as some teams keep) and includeIf.*.path, whatever the condition,
// resolved from the config's directory, "~/" from $HOME; a missing one gets an
// empty file stand-in. Included files' own includes count (resolved from their
// directory), and so does a link on the way to one, at its own name. Found by review: a command wrote core.fsmonitor into either. A UTF-8
// byte order mark before a config's first section is skipped, as git does.
func TestProtectedPathsConfigIncludes(t *testing.T) {
	base, git := gitTree(t)
	main := filepath.Join(base, "main")
	mustMkdir(t, main)
	git(main, "init", "-q")
	mustWrite(t, filepath.Join(main, ".gitconfig.shared"), "[include]\n\tpath = .gitconfig.local\n")
	// What the link leads to is read, and its relative include resolved from the
	// link's own directory, as git does (checked with git 2.39).
	mustWrite(t, filepath.Join(main, "conf", "real.cfg"), "[include]\n\tpath = nested.cfg\n")
	if err := os.Symlink("conf/real.cfg", filepath.Join(main, ".gitconfig.link")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(main, ".git", "config")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, cfg, "\xef\xbb\xbf"+string(b)+"[include]\n\tpath = ../.gitconfig.shared\n\tpath = ../.gitconfig.link\n[includeIf \"onbranch:main\"]\n\tpath = extra.cfg\n")
	if out, err := exec.Command("git", "-C", main, "status", "--short").CombinedOutput(); err != nil {
		t.Fatalf("premise: git cannot read the config: %v\n%s", err, out)
	}
	got := pathsOf(wwExec(main).ProtectedPaths(), base)
	// .gitconfig.local is included by an included file; .gitconfig.link is a link
	// on the way to conf/real.cfg.
	mustContain(t, "", got, "main/.gitconfig.shared file exists git", "main/.gitconfig.local file missing git",
		"main/.gitconfig.link link exists git", "main/conf/real.cfg file exists git", "main/nested.cfg file missing git",
		"main/.git/extra.cfg file missing git")
}

// A workspace that is a subdirectory of a repository ("repo/sub") gets the
// enclosing repository's submodule checkouts inside it protected: a rewritten
// sub/lib/.git sent the user's git status in the repository into a git directory of
// the command's own (found by review). Nothing of the enclosing repository outside
// the workspace is listed.
func TestProtectedPathsEnclosingRepositorySubmodules(t *testing.T) {
	base, git := gitTree(t)
	lib, repo := filepath.Join(base, "lib"), filepath.Join(base, "repo")
	committedRepos(t, git, lib, repo)
	git(repo, "submodule", "add", "-q", lib, "sub/lib")
	git(repo, "submodule", "add", "-q", lib, "other")
	got := pathsOf(wwExec(filepath.Join(repo, "sub")).ProtectedPaths(), base)
	mustContain(t, "", got, "repo/sub/.git dir missing git", "repo/sub/lib/.git file exists git")
	for _, p := range got {
		if !strings.HasPrefix(p, "repo/sub/") {
			t.Errorf("%q lies outside the workspace", p)
		}
	}
}

// A workspace inside a repository ("repo/sub") gets the files the enclosing
// repository's config includes protected where they lie in it (found by review:
// a command created sub/.gitconfig.local with a core.fsmonitor the user's next
// git status in the repository ran).
func TestProtectedPathsEnclosingRepositoryIncludes(t *testing.T) {
	base, git := gitTree(t)
	repo := filepath.Join(base, "repo")
	committedRepos(t, git, repo)
	mustMkdir(t, filepath.Join(repo, "sub"))
	git(repo, "config", "include.path", "../sub/.gitconfig.local")
	got := pathsOf(wwExec(filepath.Join(repo, "sub")).ProtectedPaths(), base)
	mustContain(t, "", got, "repo/sub/.gitconfig.local file missing git")
}

// A checkout with content but no .git gets a .git stand-in, never the whole
// directory: a run could plant a submodule git directory whose core.worktree names
// a project directory, and that directory must stay writable in later runs.
func TestProtectedPathsPlantedCheckoutKeepsProjectWritable(t *testing.T) {
	base, git := gitTree(t)
	main := filepath.Join(base, "main")
	mustMkdir(t, main)
	git(main, "init", "-q")
	mustWrite(t, filepath.Join(main, "src", "app.go"), "package app\n")
	mustWrite(t, filepath.Join(main, ".git", "modules", "x", "config"), "[core]\n\tworktree = ../../../src\n")
	got := pathsOf(wwExec(main).ProtectedPaths(), base)
	if slices.Contains(got, "main/src dir exists git") || !slices.Contains(got, "main/src/.git dir missing git") {
		t.Errorf("a planted checkout with content: %q", got)
	}
}

// committedRepos makes each directory a repository with one empty commit.
func committedRepos(t *testing.T, git func(dir string, args ...string), dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		mustMkdir(t, d)
		git(d, "init", "-q")
		git(d, "commit", "-q", "--allow-empty", "-m", filepath.Base(d))
	}
}

// mustContain reports each of want that got lacks, what prefixing the message.
func mustContain(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s%q missing in %q", what, w, got)
		}
	}
}

// A git directory's modules/ may gain no entry (git would take one as the git
// directory of a submodule the user initialises next, hooks included: review F4),
// while the submodule git directories in it stay writable for commits, all but
// their hooks and configuration and their own names.
func TestProtectedPathsModulesFrozen(t *testing.T) {
	base, git := gitTree(t)
	lib, main := filepath.Join(base, "lib"), filepath.Join(base, "main")
	committedRepos(t, git, lib, main)
	git(main, "submodule", "add", "-q", "--name", "deps/lib", lib, "vendor/lib")
	modules := filepath.Join(main, ".git", "modules")
	sub := filepath.Join(modules, "deps", "lib")
	x := wwExec(main)
	var rec *ProtectedPath
	for _, pp := range x.ProtectedPaths() {
		if pp.Path == modules {
			rec = &pp
		}
	}
	if rec == nil || !rec.Exists || rec.Kind != PathDir || !slices.Equal(rec.Except, []string{sub}) {
		t.Fatalf("modules record = %+v, want an existing directory with except %q", rec, sub)
	}
	for _, c := range []struct {
		path  string
		op    Op
		allow bool
	}{
		{"modules/evil", OpCreate, false},
		{"modules/deps/evil", OpCreate, false},
		{"modules/deps/lib", OpRename, false},
		{"modules/deps/lib", OpDelete, false},
		{"modules/deps/lib", OpWrite, false},
		{"modules/deps", OpRename, false},
		{"modules", OpDelete, false},
		{"modules/deps/lib/config", OpWrite, false},
		{"modules/deps/lib/hooks/post-checkout", OpCreate, false},
		{"modules/deps/lib/index", OpWrite, true},
		{"modules/deps/lib/objects/ab", OpCreate, true},
		{"modules/deps/lib/refs/heads/main", OpRename, true},
		// It stays a valid git directory (review F5): HEAD, objects/ and refs/
		// keep their names and modes. A rename bringing a valid HEAD is the
		// fence's to allow (it reads the content); Decide cannot and denies.
		{"modules/deps/lib/HEAD", OpWrite, false},
		{"modules/deps/lib/HEAD", OpRename, false},
		{"modules/deps/lib/HEAD", OpDelete, false},
		{"modules/deps/lib/objects", OpRename, false},
		{"modules/deps/lib/objects", OpWrite, false},
		{"modules/deps/lib/refs", OpDelete, false},
		{"modules/deps/lib/refs/heads", OpDelete, true},
		{"modules/deps/lib/logs/HEAD", OpWrite, true},
	} {
		d := x.Decide(filepath.Join(main, ".git", c.path), c.op)
		if d.Allow != c.allow || !c.allow && d.Rule != RuleProtected {
			t.Errorf("%s %s: %+v, want allow=%v", c.op, c.path, d, c.allow)
		}
	}
	// Within .git kept whole, the submodule git directory is read-only too.
	x.Protect = []string{".git"}
	if d := x.Decide(filepath.Join(sub, "index"), OpWrite); d.Allow {
		t.Errorf("with .git protected whole: %+v", d)
	}
	// A stale submodule git directory (deinitialised: no checkout's .git leads
	// there) stays read-only: writable, a command could break its HEAD and make a
	// git directory of its own inside, which git then no longer refuses as nested.
	git(main, "submodule", "deinit", "-q", "-f", "vendor/lib")
	if _, err := os.Stat(filepath.Join(sub, "HEAD")); err != nil {
		t.Fatalf("premise: deinit removed the git directory: %v", err)
	}
	x = wwExec(main)
	for _, pp := range x.ProtectedPaths() {
		if pp.Path == modules && len(pp.Except) != 0 {
			t.Errorf("a stale submodule git directory is excepted: %+v", pp)
		}
	}
	if d := x.Decide(filepath.Join(sub, "index"), OpWrite); d.Allow || d.Rule != RuleProtected {
		t.Errorf("write in a stale submodule git directory: %+v", d)
	}
	// Without modules/ it is listed missing, with nothing excepted.
	if err := os.RemoveAll(modules); err != nil {
		t.Fatal(err)
	}
	if got := pathsOf(wwExec(main).ProtectedPaths(), base); !slices.Contains(got, "main/.git/modules dir missing git") {
		t.Errorf("missing modules/ not listed: %q", got)
	}
	if d := wwExec(main).Decide(filepath.Join(modules, "lib"), OpCreate); d.Allow {
		t.Errorf("create in a missing modules/: %+v", d)
	}
}

// GitObjectNameHex reads the object format git itself wrote.
func TestGitObjectNameHex(t *testing.T) {
	base, git := gitTree(t)
	for dir, want := range map[string]int{"sha1": 40, "sha256": 64} {
		d := filepath.Join(base, dir)
		mustMkdir(t, d)
		git(d, "init", "-q", "--object-format="+dir)
		if got := GitObjectNameHex(filepath.Join(d, ".git")); got != want {
			t.Errorf("%s: GitObjectNameHex = %d, want %d", dir, got, want)
		}
	}
	if got := GitObjectNameHex(filepath.Join(base, "missing")); got != 40 {
		t.Errorf("no config: %d, want 40", got)
	}
}

// ValidHead agrees with git itself: each HEAD is written into a real repository of
// each object format and git is asked whether the directory is still a git
// directory. Where ValidHead says valid, git must too (else a repair or the fence
// would keep a submodule git directory git takes for broken); in a SHA-1 repository
// they must agree exactly, and in a SHA-256 one ValidHead may only be stricter (it
// wants the repository's own name length).
func TestValidHead(t *testing.T) {
	base, git := gitTree(t)
	sha1 := "0123456789abcdef0123456789ABCDEF01234567"
	sha256 := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	heads := []string{
		"ref: refs/heads/main\n", "ref:refs/heads/x", "ref: \t refs/tags/v1", "ref:\rrefs/x", "ref:\nrefs/x",
		"ref:refs/", "ref:  refs/x",
		sha1 + "\n", sha256 + "\n", sha1 + "junk", strings.ToUpper(sha1),
		// git's isspace is space, tab, LF and CR: VT and FF make no git directory
		// (review F5, 2026-12-02: the repair took "ref:\vrefs/..." for valid).
		"ref:\vrefs/heads/main\n", "ref:\frefs/heads/main\n", "ref:\x00refs/x",
		"ref: heads/main", "ref: refs", "  ref: refs/heads/x", "ref: /etc/passwd",
		sha1[:39], sha1[:39] + "g", "", "not a ref",
	}
	for _, format := range []string{"sha1", "sha256"} {
		repo := filepath.Join(base, format)
		mustMkdir(t, repo)
		git(repo, "init", "-q", "--object-format="+format)
		hexsz := GitObjectNameHex(filepath.Join(repo, ".git"))
		for _, h := range heads {
			if err := os.WriteFile(filepath.Join(repo, ".git", "HEAD"), []byte(h), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("git", "rev-parse", "--git-dir")
			cmd.Dir = repo
			cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CEILING_DIRECTORIES="+base)
			gitSays := cmd.Run() == nil
			got := ValidHead([]byte(h), hexsz)
			if got && !gitSays || format == "sha1" && got != gitSays {
				t.Errorf("%s: ValidHead(%q, %d) = %v, git says %v", format, h, hexsz, got, gitSays)
			}
		}
		if ValidHead([]byte(sha1+"\n"), hexsz) != (format == "sha1") {
			t.Errorf("%s: a SHA-1 name must be valid only in a SHA-1 repository", format)
		}
	}
}
