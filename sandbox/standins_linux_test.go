package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
	"golang.org/x/sys/unix"
)

// standInTree is a workspace whose repository lacks .git/hooks, with a protect list
// that also names a file below a missing directory, and a canary beside it.
type standInTree struct {
	dir, ws, canary string
	pol             policy.Execution
}

func newStandInTree(t *testing.T) *standInTree {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	testutil.MakeTree(t, dir,
		"file ws/.git/HEAD ref: refs/heads/main\n", "file ws/.git/config [core]\n", "dir ws/.git/objects", "dir ws/.git/refs",
		"file ws/src/main.go package main\n", "file canary do not touch")
	pol := policy.Execution{
		Mode: policy.WorkspaceWrite, WorkspaceRoot: ws, WritableRoots: []string{ws},
		Protect: append([]string{"secrets/key.pem"}, policy.DefaultProtect...), Network: policy.NetworkAllow,
	}
	return &standInTree{dir: dir, ws: ws, canary: filepath.Join(dir, "canary"), pol: pol}
}

func (s *standInTree) plan(t *testing.T) *standInPlan {
	t.Helper()
	_, plan, _ := bwrapArgv(s.pol, []string{"true"}, nil)
	if plan == nil {
		t.Fatal("no stand-in plan for a policy with protected paths")
	}
	return plan
}

// listing renders every entry below dir with its type, size and stand-in mark.
func listing(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		mark := ""
		if _, err := unix.Lgetxattr(p, standInXattr, nil); err == nil {
			mark = " marked"
		}
		size := fi.Size()
		if fi.IsDir() {
			size = 0
		}
		lines = append(lines, fmt.Sprintf("%s %s %d%s", strings.TrimPrefix(p, dir), fi.Mode().Type(), size, mark))
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func isMarked(p string) bool {
	_, err := unix.Lgetxattr(p, standInXattr, nil)
	return err == nil
}

func TestStandInsAreCreatedMarkedAndRemoved(t *testing.T) {
	s := newStandInTree(t)
	before := listing(t, s.dir)
	in, err := s.plan(t).prepare(nil)
	if err != nil {
		t.Fatal(err)
	}
	for p, dir := range map[string]bool{".git/hooks": true, "secrets": true, "secrets/key.pem": false} {
		fi, err := os.Lstat(filepath.Join(s.ws, p))
		if err != nil || fi.IsDir() != dir || !isMarked(filepath.Join(s.ws, p)) {
			t.Errorf("stand-in %s: %v, dir=%v marked=%v", p, err, err == nil && fi.IsDir(), isMarked(filepath.Join(s.ws, p)))
		}
	}
	// A missing commondir gets one holding ".", which git reads as no commondir (an
	// empty one would make git die).
	if b, err := os.ReadFile(filepath.Join(s.ws, ".git/commondir")); err != nil || string(b) != policy.CommondirStandIn || !isMarked(filepath.Join(s.ws, ".git/commondir")) {
		t.Errorf("commondir stand-in: %q, %v, marked=%v; want %q, marked", b, err, isMarked(filepath.Join(s.ws, ".git/commondir")), policy.CommondirStandIn)
	}
	// No stand-in for a path that exists.
	if isMarked(filepath.Join(s.ws, ".git/config")) {
		t.Error("an existing protected file was marked")
	}
	in.release()
	if after := listing(t, s.dir); after != before {
		t.Errorf("tree after release differs:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

// A directory created on the way that the run filled is the run's content: it stays,
// unmarked, and only the stand-in inside it goes.
func TestStandInsLeaveFilledDirectories(t *testing.T) {
	s := newStandInTree(t)
	in, err := s.plan(t).prepare(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.ws, "secrets", "notes"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	in.release()
	if _, err := os.Lstat(filepath.Join(s.ws, "secrets", "key.pem")); err == nil {
		t.Error("the stand-in inside a filled directory stayed")
	}
	if b, err := os.ReadFile(filepath.Join(s.ws, "secrets", "notes")); err != nil || string(b) != "mine" {
		t.Errorf("the run's own file: %q %v", b, err)
	}
	if isMarked(filepath.Join(s.ws, "secrets")) {
		t.Error("a filled directory kept its stand-in mark")
	}
}

// While another run uses a stand-in, the run that created it leaves it; the last run
// out removes it.
func TestStandInsSurviveWhileAnotherRunUsesThem(t *testing.T) {
	s := newStandInTree(t)
	before := listing(t, s.dir)
	a, err := s.plan(t).prepare(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.plan(t).prepare(nil) // sees a's stand-ins as existing paths
	if err != nil {
		t.Fatal(err)
	}
	a.release()
	for _, p := range []string{".git/hooks", "secrets/key.pem"} {
		if _, err := os.Lstat(filepath.Join(s.ws, p)); err != nil {
			t.Errorf("%s removed while another run mounts over it: %v", p, err)
		}
	}
	b.release()
	if after := listing(t, s.dir); after != before {
		t.Errorf("the last run out did not clean up:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

// A run that died without cleaning up (toh-exec SIGKILLed) leaves marked stand-ins;
// the next run over the same tree removes them when it ends.
func TestStandInsLeftByAKilledRunAreRemovedByTheNext(t *testing.T) {
	s := newStandInTree(t)
	before := listing(t, s.dir)
	dead, err := s.plan(t).prepare(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, hd := range dead.dirs { // what the kernel does when the process dies
		unix.Close(hd.fd)
	}
	if _, err := os.Lstat(filepath.Join(s.ws, ".git/hooks")); err != nil {
		t.Fatal("the killed run's stand-in is gone already; the test proves nothing")
	}
	next, err := s.plan(t).prepare(nil)
	if err != nil {
		t.Fatal(err)
	}
	next.release()
	if after := listing(t, s.dir); after != before {
		t.Errorf("leftovers not removed:\n--- before\n%s\n--- after\n%s", before, after)
	}
	// Negative control: an unmarked empty directory at a protected path is the
	// user's, and stays.
	hooks := filepath.Join(s.ws, ".git", "hooks")
	if err := os.Mkdir(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := s.plan(t).prepare(nil)
	if err != nil {
		t.Fatal(err)
	}
	in.release()
	if _, err := os.Lstat(hooks); err != nil {
		t.Errorf("the user's own empty hooks directory was removed: %v", err)
	}
}

// A commondir stand-in whose "." was replaced (by a concurrent run under a rung that
// does not keep protected paths) is no stand-in any more: removal goes by its
// content, as for an empty file, so it stays; one still holding "." goes, and so
// does an empty one (a run killed while making it where there is no O_TMPFILE).
func TestCommondirStandInRemovedOnlyAsMade(t *testing.T) {
	s := newStandInTree(t)
	cd := filepath.Join(s.ws, ".git", "commondir")
	for _, c := range []struct {
		body  string
		stays bool
	}{{policy.CommondirStandIn, false}, {"", false}, {"../elsewhere\n", true}} {
		in, err := s.plan(t).prepare(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cd, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		in.release()
		b, err := os.ReadFile(cd)
		if c.stays && (err != nil || string(b) != c.body) {
			t.Errorf("a marked commondir holding %q: %q, %v; want it left as it is", c.body, b, err)
		}
		if !c.stays && err == nil {
			t.Errorf("the commondir stand-in holding %q stayed", b)
		}
		os.Remove(cd)
	}
}

// A directory held exclusively (another run's cleanup, or any process) delays a run,
// then refuses it, creating nothing.
func TestStandInsRefuseWhenLockedTooLong(t *testing.T) {
	s := newStandInTree(t)
	old := standInLockTimeout
	standInLockTimeout = 200 * time.Millisecond
	defer func() { standInLockTimeout = old }()
	before := listing(t, s.dir)
	f, err := os.Open(s.ws)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := s.plan(t).prepare(nil); err == nil || !strings.Contains(err.Error(), "locking") {
		t.Fatalf("prepare under a foreign exclusive lock: %v", err)
	}
	if time.Since(start) < standInLockTimeout {
		t.Error("gave up before the timeout")
	}
	if after := listing(t, s.dir); after != before {
		t.Errorf("a refused prepare changed the tree:\n%s", after)
	}
}

// What changed between resolving the policy and preparing is refused: a git directory
// that vanished is never recreated, and a directory swapped for a symlink to outside
// is never followed.
func TestStandInsRefuseChangedTrees(t *testing.T) {
	t.Run("git directory vanished", func(t *testing.T) {
		s := newStandInTree(t)
		plan := s.plan(t)
		if err := os.RemoveAll(filepath.Join(s.ws, ".git")); err != nil {
			t.Fatal(err)
		}
		before := listing(t, s.dir)
		if _, err := plan.prepare(nil); err == nil {
			t.Fatal("prepare recreated a vanished git directory")
		}
		if after := listing(t, s.dir); after != before {
			t.Errorf("tree changed:\n%s", after)
		}
	})
	t.Run("symlink swapped in", func(t *testing.T) {
		s := newStandInTree(t)
		plan := s.plan(t)
		outside := filepath.Join(s.dir, "outside")
		testutil.MakeTree(t, s.dir, "dir outside", "link ws/secrets -> ../outside")
		if _, err := plan.prepare(nil); err == nil {
			t.Fatal("prepare followed a symlink")
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Errorf("something was created through the symlink: %v", entries)
		}
		if _, err := os.Lstat(filepath.Join(s.ws, ".git", "hooks")); err == nil {
			t.Error("a refused prepare left a stand-in")
		}
	})
}

// A protected path below an existing non-directory (bug 4) gets neither a stand-in
// nor a rebind: its blocker is pinned with a writable self-bind, and prepare only
// checks that the blocker is still the non-directory it was.
func TestStandInsBelowAFile(t *testing.T) {
	s := newStandInTree(t)
	secrets := filepath.Join(s.ws, "secrets")
	testutil.MakeTree(t, s.dir, "file ws/secrets top secret")
	argv, plan, _ := bwrapArgv(s.pol, []string{"true"}, nil)
	if i := slices.Index(argv, secrets); i < 1 || argv[i-1] != "--bind" || argv[i+1] != secrets {
		t.Errorf("the file above the protected path is not pinned: %q", argv)
	}
	for i, a := range argv {
		if strings.HasPrefix(a, secrets+"/") || a == secrets && argv[i-1] == "--ro-bind" {
			t.Errorf("argv rebinds the blocked path or the file itself: %q", argv)
		}
	}
	before := listing(t, s.dir)
	st, err := plan.prepare(nil)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	st.release()
	// .git/hooks was missing and got a stand-in; that is all prepare changed, and it
	// is gone again.
	if after := listing(t, s.dir); after != before {
		t.Errorf("tree changed:\n--- before\n%s\n--- after\n%s", before, after)
	}

	// The blocker replaced by a directory before the spawn: refused, nothing made.
	if err := os.Remove(secrets); err != nil {
		t.Fatal(err)
	}
	mustMkdirAll(t, secrets)
	before = listing(t, s.dir)
	if _, err := plan.prepare(nil); err == nil || !strings.Contains(err.Error(), "became a directory") {
		t.Errorf("prepare accepted a blocker that became a directory: %v", err)
	}
	if after := listing(t, s.dir); after != before {
		t.Errorf("a refused prepare changed the tree:\n%s", after)
	}
	// ... or removed.
	if err := os.Remove(secrets); err != nil {
		t.Fatal(err)
	}
	if _, err := plan.prepare(nil); err == nil || !strings.Contains(err.Error(), "no longer exists") {
		t.Errorf("prepare accepted a vanished blocker: %v", err)
	}
}

// A protected symlink's own name within a bound root (bug 6): bwrap cannot mount over
// a link, so the argv names no mount for it and prepare refuses before creating
// anything. A root served by the fence (pol.Fence) leaves the name to the fence.
func TestStandInsRefuseProtectedLinks(t *testing.T) {
	s := newStandInTree(t)
	dotgit := filepath.Join(s.ws, ".git")
	if err := os.Rename(dotgit, filepath.Join(s.ws, ".real")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".real", dotgit); err != nil {
		t.Fatal(err)
	}
	argv, plan, _ := bwrapArgv(s.pol, []string{"true"}, nil)
	if slices.Contains(argv, dotgit) {
		t.Errorf("argv mounts over the link (which would mount over its target): %q", argv)
	}
	before := listing(t, s.dir)
	_, err := plan.prepare(nil)
	var le *protectedLinkError
	if !errors.As(err, &le) || le.link != dotgit || le.root != s.ws {
		t.Fatalf("prepare did not refuse the protected link: %v", err)
	}
	if after := listing(t, s.dir); after != before {
		t.Errorf("a refused prepare changed the tree:\n%s", after)
	}

	fenced := s.pol
	fenced.Fence = true
	if _, plan, _ := bwrapArgv(fenced, []string{"true"}, nil); plan != nil {
		st, err := plan.prepare(nil)
		if err != nil {
			t.Fatalf("a fenced root's link was refused by bwrap: %v", err)
		}
		st.release()
	}
}

func mustMkdirAll(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

// Against real bwrap through Run: a command cannot create what is protected and
// missing, cannot remove or rename the stand-ins or the directories above them, can
// still write everywhere else (positive control), and after the run the tree holds
// exactly what it held plus the command's own files.
func TestBwrapStandInsForReal(t *testing.T) {
	bwrap := testutil.RequireBwrap(t)
	s := newStandInTree(t)
	before := listing(t, s.dir)
	attack := `cd "$1"
echo evil > .git/hooks/pre-commit
rmdir .git/hooks
mv .git/hooks .git/h2
mv .git .git2
echo evil > secrets/key.pem
rm -f secrets/key.pem
mv secrets s2
echo evil >> .git/config
echo evil > "$2"
echo ok > secrets/other
echo ok > okfile
echo ok > .git/description
exit 0
`
	c, err := newBwrapProvider(bwrap, nil).Confine([]string{"sh", "-c", attack, "sh", s.ws, s.canary}, s.pol)
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	facts, err := Run(c, s.pol, s.ws, os.Environ(), Stdio{Stderr: &stderr})
	if err != nil || facts.ExitCode != 0 {
		t.Fatalf("run: %+v %v\n%s", facts, err, stderr.String())
	}
	t.Logf("confined attack stderr:\n%s", stderr.String())
	for p, want := range map[string]string{"okfile": "ok\n", ".git/description": "ok\n", "secrets/other": "ok\n", ".git/config": "[core]\n"} {
		if b, err := os.ReadFile(filepath.Join(s.ws, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	if b, _ := os.ReadFile(s.canary); string(b) != "do not touch" {
		t.Errorf("canary changed: %q", b)
	}
	for _, p := range []string{"okfile", ".git/description", "secrets/other"} {
		os.Remove(filepath.Join(s.ws, p))
	}
	os.Remove(filepath.Join(s.ws, "secrets")) // the run's own directory now
	if after := listing(t, s.dir); after != before {
		t.Errorf("the tree differs beyond the command's own files:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

// Cleanup also runs when the command is killed by a signal, and when toh-exec itself
// receives SIGTERM (forwarded to the child).
func TestBwrapStandInsRemovedAfterSignals(t *testing.T) {
	bwrap := testutil.RequireBwrap(t)
	s := newStandInTree(t)
	before := listing(t, s.dir)
	c, err := newBwrapProvider(bwrap, nil).Confine([]string{"sh", "-c", "kill -KILL $$"}, s.pol)
	if err != nil {
		t.Fatal(err)
	}
	facts, err := Run(c, s.pol, s.ws, os.Environ(), Stdio{})
	if err != nil || !facts.Signaled && facts.ExitCode != 128+int(syscall.SIGKILL) {
		t.Fatalf("run: %+v %v", facts, err)
	}
	if after := listing(t, s.dir); after != before {
		t.Errorf("stand-ins left after a signal death:\n%s", after)
	}
}

// A termination signal while Run waits for a lock stops the run before the command
// starts, and leaves nothing behind.
func TestRunInterruptedWhilePreparing(t *testing.T) {
	bwrap := testutil.RequireBwrap(t)
	s := newStandInTree(t)
	old := standInLockTimeout
	standInLockTimeout = 20 * time.Second
	defer func() { standInLockTimeout = old }()
	before := listing(t, s.dir)
	f, err := os.Open(filepath.Join(s.ws, ".git"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(s.ws, "ran")
	c, err := newBwrapProvider(bwrap, nil).Confine([]string{"touch", ran}, s.pol)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		syscall.Kill(os.Getpid(), syscall.SIGTERM) // Run has it registered by then
	}()
	start := time.Now()
	_, err = Run(c, s.pol, s.ws, os.Environ(), Stdio{})
	var se *SpawnError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("Run under a held lock and SIGTERM: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Error("the signal did not end the wait")
	}
	if _, err := os.Lstat(ran); err == nil {
		t.Error("the command ran")
	}
	if after := listing(t, s.dir); after != before {
		t.Errorf("tree changed:\n%s", after)
	}
}
