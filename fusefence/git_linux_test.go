package fusefence

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// gitRunner runs the host's git with a configuration of its own (HOME below the
// test's base, no system configuration), so that nothing of the machine's setup
// decides an outcome.
type gitRunner struct {
	t    *testing.T
	env  []string
	home string
}

func newGit(t *testing.T, base string) *gitRunner {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	home := filepath.Join(base, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := "[user]\n\tname = toh\n\temail = toh@example.invalid\n[init]\n\tdefaultBranch = main\n" +
		"[safe]\n\tdirectory = *\n[advice]\n\tdetachedHead = false\n[commit]\n\tgpgsign = false\n"
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return &gitRunner{t: t, home: home, env: []string{"HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C",
		"GIT_TERMINAL_PROMPT=0", "PATH=" + os.Getenv("PATH")}}
}

// run runs git in dir and returns its combined output. git changes into dir itself
// (-C): this process serves the mount, and a child it forks must not touch the
// mount before exec (Go forks with CLONE_VFORK from a thread that keeps its P, so
// a garbage collection starting meanwhile stops every goroutine, the FUSE server's
// included, and the child's chdir, which may need an answer from it, never returns).
func (g *gitRunner) run(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Dir, cmd.Env = g.home, g.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// must runs git in dir and fails the test when it fails.
func (g *gitRunner) must(dir string, args ...string) string {
	g.t.Helper()
	out, err := g.run(dir, args...)
	if err != nil {
		g.t.Fatalf("git %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return out
}

// TestNewRepositoryProtectedAfterTheBound: git init through the mount works (the
// repository is the run's own while it is younger than the bound, Config.Timeout,
// so git may write its hooks and config), and from the first mutation after the
// bound its hooks and config are protected like those of a repository that
// existed at mount: EACCES, an audit record, nothing changed, and a descriptor
// opened before is judged again. The repository itself keeps working (positive
// controls: a commit, another file in .git, the workspace).
func TestNewRepositoryProtectedAfterTheBound(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "file src/f hello")
	g := newGit(t, e.base)
	start := time.Now()
	g.must(e.mnt, "init", "-q")
	if err := exists(e.s(".git/config")); err != nil {
		t.Fatalf("git init through the mount made no .git/config: %v", err)
	}
	fd := -1
	if time.Since(start) < DefaultTimeout/2 {
		// Still the run's own: a descriptor opened now is judged again later.
		var err error
		if fd, err = unix.Open(e.m(".git/config"), unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0); err != nil {
			t.Fatalf("open .git/config for writing within the bound: %v", err)
		}
		defer unix.Close(fd)
	} else {
		t.Logf("git init took %v: skipping the descriptor opened within the bound", time.Since(start))
	}
	if recs := e.records(); len(recs) != 0 {
		t.Fatalf("git init logged denials: %+v", recs)
	}

	time.Sleep(DefaultTimeout + 300*time.Millisecond)

	err := e.unchanged("create .git/hooks/x", func() error { return writeAt(e.m(".git/hooks/x"), unix.O_CREAT|unix.O_WRONLY, "#!/bin/sh\n") })
	e.expectDenial("create .git/hooks/x after the bound", err, "create", RuleProtected, ".git/hooks/x")
	if err := absent(e.s(".git/hooks/x")); err != nil {
		t.Error(err)
	}
	err = e.unchanged("write .git/config", func() error { return writeAt(e.m(".git/config"), unix.O_WRONLY|unix.O_TRUNC, "[core]\n") })
	e.expectDenial("write .git/config after the bound", err, "open", RuleProtected, ".git/config")
	if fd >= 0 {
		err := e.unchanged("write through a descriptor opened within the bound", func() error {
			_, err := unix.Write(fd, []byte("[x]\n"))
			return err
		})
		e.expectDenial("write through a descriptor of .git/config opened within the bound", err, "write", RuleProtected, ".git/config")
	}

	// Positive controls: the repository and the workspace stay writable.
	g.must(e.mnt, "add", "f")
	g.must(e.mnt, "commit", "-qm", "one")
	if err := writeAt(e.m(".git/description"), unix.O_WRONLY|unix.O_TRUNC, "d"); err != nil {
		t.Errorf("write .git/description after the bound: %v", err)
	}
	if err := writeAt(e.m("f"), unix.O_WRONLY|unix.O_TRUNC, "changed"); err != nil {
		t.Errorf("write f after the bound: %v", err)
	}
	if recs := e.records(); len(recs) != 0 {
		t.Errorf("allowed operations logged denials: %+v", recs)
	}
}

// TestGitThroughTheFence runs git end to end through a mounted fence
// (workspace-write, the mirrored workspace the writable root): init, add, commit
// and submodule add (from a local repository) while the new repository is the
// run's own; then, once protection applies, branch, checkout, stash, worktree add
// and a commit inside the linked worktree (whose gitdir lies in the main
// repository). Negative controls, each EACCES with one audit record and nothing
// changed: hooks and config of the repository, of the submodule's gitdir
// (.git/modules/sub) and of the worktree's gitdir (.git/worktrees/wt), once each
// is older than the bound.
func TestGitThroughTheFence(t *testing.T) {
	const bound = 5 * time.Second // Config.Timeout: room for the steps within it, even under load
	e := newEnvTimeout(t, policy.WorkspaceWrite, bound, "file src/f hello", "file src/g two")
	g := newGit(t, e.base)
	sub := filepath.Join(e.base, "subsrc") // outside SOURCE, read directly
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	g.must(sub, "init", "-q")
	if err := os.WriteFile(filepath.Join(sub, "lib.txt"), []byte("lib"), 0o644); err != nil {
		t.Fatal(err)
	}
	g.must(sub, "add", "lib.txt")
	g.must(sub, "commit", "-qm", "lib")

	// Within the bound: the repository is the run's own.
	start := time.Now()
	g.must(e.mnt, "init", "-q")
	g.must(e.mnt, "add", "f", "g")
	g.must(e.mnt, "commit", "-qm", "one")
	g.must(e.mnt, "-c", "protocol.file.allow=always", "submodule", "add", "-q", sub, "sub")
	g.must(e.mnt, "commit", "-qm", "submodule")
	if took := time.Since(start); took >= bound {
		t.Fatalf("init, add, commit and submodule add took %v, more than the bound %v the test relies on", took, bound)
	}
	if b, err := os.ReadFile(e.s("sub/lib.txt")); err != nil || string(b) != "lib" {
		t.Errorf("the submodule's checkout: %q, %v", b, err)
	}
	if recs := e.records(); len(recs) != 0 {
		t.Fatalf("git logged denials within the bound: %+v", recs)
	}

	time.Sleep(bound + 300*time.Millisecond)

	// Protected now: the repository's and the submodule gitdir's hooks and config.
	denied := func(rel string, create bool) {
		t.Helper()
		flags, op := unix.O_WRONLY|unix.O_TRUNC, "open"
		if create {
			flags, op = unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, "create"
		}
		err := e.unchanged("write "+rel, func() error { return writeAt(e.m(rel), flags, "#!/bin/sh\nexit 0\n") })
		e.expectDenial("write "+rel, err, op, RuleProtected, rel)
	}
	denied(".git/hooks/pre-commit", true)
	denied(".git/config", false)
	denied(".git/modules/sub/hooks/post-checkout", true)
	denied(".git/modules/sub/config", false)

	// Everyday git under protection (positive controls).
	g.must(e.mnt, "branch", "topic")
	g.must(e.mnt, "checkout", "-q", "topic")
	if err := writeAt(e.m("f"), unix.O_WRONLY|unix.O_TRUNC, "wip"); err != nil {
		t.Fatal(err)
	}
	g.must(e.mnt, "stash", "-q")
	if b, _ := os.ReadFile(e.s("f")); string(b) != "hello" {
		t.Errorf("after git stash f is %q, want the committed %q", b, "hello")
	}
	g.must(e.mnt, "stash", "pop", "-q")
	g.must(e.mnt, "commit", "-qam", "topic work")
	g.must(e.mnt, "checkout", "-q", "main")
	wtStart := time.Now()
	g.must(e.mnt, "worktree", "add", "-q", "wt", "topic")
	wt := e.m("wt")
	if err := writeAt(filepath.Join(wt, "w"), unix.O_CREAT|unix.O_WRONLY, "in the worktree"); err != nil {
		t.Fatal(err)
	}
	g.must(wt, "add", "w")
	g.must(wt, "commit", "-qm", "from the worktree")
	if out := g.must(e.mnt, "log", "--format=%s", "-1", "topic"); strings.TrimSpace(out) != "from the worktree" {
		t.Errorf("the worktree's commit is not on topic: %q", out)
	}
	if recs := e.records(); len(recs) != 0 {
		t.Fatalf("git logged denials under protection: %+v", recs)
	}

	// The worktree's gitdir, once it is older than the bound.
	time.Sleep(time.Until(wtStart.Add(bound + 300*time.Millisecond)))
	err := e.unchanged("mkdir .git/worktrees/wt/hooks", func() error { return unix.Mkdir(e.m(".git/worktrees/wt/hooks"), 0o755) })
	e.expectDenial("mkdir .git/worktrees/wt/hooks", err, "mkdir", RuleProtected, ".git/worktrees/wt/hooks")
	denied(".git/worktrees/wt/config", true)
	denied(".git/worktrees/wt/config.worktree", true)
	denied(".git/worktrees/wt/commondir", false)

	// And the worktree still commits.
	if err := writeAt(filepath.Join(wt, "w"), unix.O_WRONLY|unix.O_TRUNC, "again"); err != nil {
		t.Fatal(err)
	}
	g.must(wt, "commit", "-qam", "again")
	g.must(e.mnt, "status", "--short")
	if recs := e.records(); len(recs) != 0 {
		t.Errorf("git logged denials: %+v", recs)
	}
	if err := absent(e.s(".git/hooks/pre-commit")); err != nil {
		t.Error(err)
	}
}

// TestExistingHookRunsThroughTheFence: a repository with a pre-commit hook made on
// the host before the mount: a commit through the mount runs the hook (it writes a
// file into the workspace), and the hook itself cannot be changed through the
// mount (negative control: EACCES, an audit record, the hook unchanged).
func TestExistingHookRunsThroughTheFence(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "file src/f hello")
	g := newGit(t, e.base)
	e.unmount()
	g.must(e.src, "init", "-q")
	hook := "#!/bin/sh\necho ran >> hook-ran\n"
	if err := os.WriteFile(e.s(".git/hooks/pre-commit"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	e.mount()

	err := e.unchanged("write the hook", func() error {
		return writeAt(e.m(".git/hooks/pre-commit"), unix.O_WRONLY|unix.O_TRUNC, "#!/bin/sh\nexit 0\n")
	})
	e.expectDenial("write the existing hook", err, "open", RuleProtected, ".git/hooks/pre-commit")
	err = e.unchanged("chmod the hook", func() error { return unix.Chmod(e.m(".git/hooks/pre-commit"), 0o644) })
	e.expectDenial("chmod the existing hook", err, "chmod", RuleProtected, ".git/hooks/pre-commit")

	g.must(e.mnt, "add", "f")
	g.must(e.mnt, "commit", "-qm", "one")
	if b, err := os.ReadFile(e.s("hook-ran")); err != nil || string(b) != "ran\n" {
		t.Errorf("the pre-commit hook did not run on a commit through the mount: %q, %v", b, err)
	}
	if b, err := os.ReadFile(e.s(".git/hooks/pre-commit")); err != nil || string(b) != hook {
		t.Errorf("the hook changed: %q, %v", b, err)
	}
	if recs := e.records(); len(recs) != 0 {
		t.Errorf("the commit logged denials: %+v", recs)
	}
}

// TestSubmoduleGitDirStaysValid: a submodule git directory in use stays writable
// within but stays a valid git directory (policy.ProtectValid): git refuses a
// submodule git directory nested in another only while the outer one is valid, so
// a command that could break it could nest one of its own, name it in .gitmodules,
// and have the user's next "git submodule update --init" run its hook (review F5;
// before 2026-12-02 it could, through the fence, which has no run end for a
// repair). Negative controls: every way to break HEAD, objects/ or refs/ is
// EACCES with its record, a rename onto HEAD brings only a valid HEAD, a
// descriptor kept on the renamed file cannot change HEAD after the check, and the
// user's update afterwards refuses the planted directory and runs nothing.
// Positive: a valid HEAD renamed into place, and commits, a branch and a checkout
// in the submodule through the mount, with no record.
func TestSubmoduleGitDirStaysValid(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite)
	g := newGit(t, e.base)
	origin := func(name string) string {
		d := filepath.Join(e.base, "origins", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		g.must(d, "init", "-q")
		g.must(d, "commit", "-q", "--allow-empty", "-m", name)
		return d
	}
	lib, lib2 := origin("lib"), origin("lib2")
	g.must(e.src, "init", "-q")
	g.must(e.src, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "lib")
	g.must(e.src, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib2, "lib2")
	g.must(e.src, "commit", "-q", "-m", "subs")
	g.must(e.src, "submodule", "deinit", "-q", "-f", "lib2")
	if err := os.RemoveAll(e.s(".git/modules/lib2")); err != nil {
		t.Fatal(err)
	}
	// A new policy generation protects the repository as it is now.
	e.unmount()
	e.mount()
	const gd = ".git/modules/lib"
	head, err := os.ReadFile(e.s(gd + "/HEAD"))
	if err != nil {
		t.Fatal(err)
	}
	renameOnto := func() error { return unix.Rename(e.m(gd+"/HEAD.lock"), e.m(gd+"/HEAD")) }
	lock := func(make func(p string) error) func() {
		return func() {
			os.Remove(e.m(gd + "/HEAD.lock"))
			if err := make(e.m(gd + "/HEAD.lock")); err != nil {
				t.Fatal(err)
			}
		}
	}
	file := func(content string) func() {
		return lock(func(p string) error { return writeAt(p, unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, content) })
	}
	breaks := []struct {
		what, op, path string
		prep           func()
		do             func() error
	}{
		{"rename HEAD away", "rename", gd + "/HEAD", nil, func() error { return unix.Rename(e.m(gd+"/HEAD"), e.m(gd+"/HEAD.away")) }},
		{"unlink HEAD", "unlink", gd + "/HEAD", nil, func() error { return unix.Unlink(e.m(gd + "/HEAD")) }},
		{"overwrite HEAD", "open", gd + "/HEAD", nil, func() error { return writeAt(e.m(gd+"/HEAD"), unix.O_WRONLY|unix.O_TRUNC, "not a ref") }},
		{"chmod HEAD", "chmod", gd + "/HEAD", nil, func() error { return unix.Chmod(e.m(gd+"/HEAD"), 0) }},
		// VT is no space to git: "ref:\vrefs/..." makes no git directory.
		{"rename an invalid HEAD over it", "rename", gd + "/HEAD", file("ref:\vrefs/heads/main\n"), renameOnto},
		{"rename a SHA-1 name that is too short over it", "rename", gd + "/HEAD", file(strings.Repeat("a", 39) + "\n"), renameOnto},
		{"rename a symlink over it", "rename", gd + "/HEAD", lock(func(p string) error { return unix.Symlink("refs/heads/main", p) }), renameOnto},
		{"rename a FIFO over it", "rename", gd + "/HEAD", lock(func(p string) error { return unix.Mkfifo(p, 0o644) }), renameOnto},
		{"rename an oversized HEAD over it", "rename", gd + "/HEAD", file("ref: refs/heads/main\n" + strings.Repeat("#", maxHead)), renameOnto},
		{"exchange HEAD", "rename", gd + "/HEAD", file(string(head)), func() error {
			return unix.Renameat2(unix.AT_FDCWD, e.m(gd+"/HEAD.lock"), unix.AT_FDCWD, e.m(gd+"/HEAD"), unix.RENAME_EXCHANGE)
		}},
		{"rmdir objects", "rmdir", gd + "/objects", nil, func() error { return unix.Rmdir(e.m(gd + "/objects")) }},
		{"rename refs away", "rename", gd + "/refs", nil, func() error { return unix.Rename(e.m(gd+"/refs"), e.m(gd+"/refs.away")) }},
		{"chmod objects", "chmod", gd + "/objects", nil, func() error { return unix.Chmod(e.m(gd+"/objects"), 0) }},
	}
	for _, b := range breaks {
		if b.prep != nil {
			b.prep()
		}
		err := e.unchanged(b.what, b.do)
		e.expectDenial(b.what, err, b.op, RuleProtected, b.path)
	}
	if err := os.Remove(e.m(gd + "/HEAD.lock")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(e.s(gd + "/HEAD")); !bytes.Equal(b, head) {
		t.Errorf("HEAD after the attempts = %q, want %q", b, head)
	}
	e.noRecords("removing the leftover lock")

	// A valid HEAD renamed into place, the way git writes it, from a descriptor
	// that stays open: what lands is what was checked.
	fd, err := unix.Open(e.m(gd+"/HEAD.lock"), unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(fd, []byte("ref: refs/heads/other\n")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Rename(e.m(gd+"/HEAD.lock"), e.m(gd+"/HEAD")); err != nil {
		t.Fatalf("renaming a valid HEAD into place: %v", err)
	}
	unix.Pwrite(fd, []byte("junk that is no HEAD at all, written after the check\n"), 0)
	unix.Close(fd)
	if b, _ := os.ReadFile(e.s(gd + "/HEAD")); string(b) != "ref: refs/heads/other\n" {
		t.Errorf("HEAD after a valid rename and a late write = %q", b)
	}
	if err := absent(e.s(gd + "/HEAD.lock")); err != nil {
		t.Error(err)
	}
	if err := os.WriteFile(e.s(gd+"/HEAD"), head, 0o644); err != nil { // back, on the host
		t.Fatal(err)
	}
	e.noRecords("a valid HEAD renamed into place")
	// The new HEAD keeps the replaced one's owner and mode, never the source's: a
	// valid HEAD.lock of mode 000 (or, as root, another user's of mode 0600) made a
	// HEAD the user's git could not read, and E broken for git (review: PWNED).
	var was unix.Stat_t
	if err := unix.Stat(e.s(gd+"/HEAD"), &was); err != nil {
		t.Fatal(err)
	}
	for _, perm := range []uint32{0, 0o600} {
		if err := writeAt(e.m(gd+"/HEAD.lock"), unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, "ref: refs/heads/main\n"); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(e.m(gd+"/HEAD.lock"), perm); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(e.s(gd+"/HEAD.lock"), 4242, 4242); err != nil { // on the host: another user's
				t.Fatal(err)
			}
		}
		if err := unix.Rename(e.m(gd+"/HEAD.lock"), e.m(gd+"/HEAD")); err != nil {
			if perm == 0 && os.Geteuid() != 0 && err == unix.EACCES {
				// A daemon that is not root cannot read it to check it: refused.
				os.Remove(e.m(gd + "/HEAD.lock"))
				continue
			}
			t.Fatalf("renaming a valid HEAD of mode %04o into place: %v", perm, err)
		}
		var now unix.Stat_t
		if err := unix.Stat(e.s(gd+"/HEAD"), &now); err != nil {
			t.Fatal(err)
		}
		if now.Mode != was.Mode || now.Uid != was.Uid || now.Gid != was.Gid {
			t.Errorf("HEAD renamed in from a file of mode %04o: mode %06o owner %d:%d, want the replaced HEAD's %06o %d:%d",
				perm, now.Mode, now.Uid, now.Gid, was.Mode, was.Uid, was.Gid)
		}
	}
	e.noRecords("valid HEADs of odd modes renamed into place")

	// git itself in the submodule, through the mount.
	g.must(e.m("lib"), "checkout", "-q", "--detach")
	g.must(e.m("lib"), "commit", "-q", "--allow-empty", "-m", "detached")
	want := strings.TrimSpace(g.must(e.m("lib"), "rev-parse", "HEAD"))
	if b, _ := os.ReadFile(e.s(gd + "/HEAD")); strings.TrimSpace(string(b)) != want {
		t.Errorf("HEAD after a commit on a detached HEAD = %q, want %s", b, want)
	}
	g.must(e.m("lib"), "checkout", "-q", "-b", "topic")
	g.must(e.m("lib"), "commit", "-q", "--allow-empty", "-m", "on topic")
	g.must(e.m("lib"), "checkout", "-q", "--detach")
	g.must(e.mnt, "status", "--short")
	e.noRecords("git in the submodule")

	// The whole chain but the break, then the user's update on the host.
	pwned := filepath.Join(e.base, "PWNED")
	g.must(e.base, "-c", "protocol.file.allow=always", "clone", "-q", "--no-checkout", "--separate-git-dir", e.m(gd+"/x"), lib2, filepath.Join(e.base, "xwt"))
	if err := os.WriteFile(e.m(gd+"/x/hooks/post-checkout"), []byte("#!/bin/sh\ntouch "+pwned+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	g.must(e.mnt, "config", "-f", ".gitmodules", "--rename-section", "submodule.lib2", "submodule.lib/x")
	e.noRecords("the chain's steps within the submodule git directory")
	out, err := g.run(e.src, "-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init", "lib2")
	t.Logf("the user's update: %v %s", err, out)
	if err := absent(pwned); err != nil {
		t.Fatal("the user's git ran a hook the command planted")
	}
}
