package fusefence

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

func TestRelativeLink(t *testing.T) {
	for _, c := range []struct{ dir, to, want string }{
		{"", "", "."},
		{"", "a/b", "a/b"},
		{"ws", "ws/a", "a"},
		{"ws/a", "ws", ".."},
		{"ws/a", "", "../.."},
		{"ws/a/b", "ws/c/d", "../../c/d"},
		{"x", "xy", "../xy"},
	} {
		got := relativeLink(c.dir, c.to)
		if got != c.want {
			t.Errorf("relativeLink(%q, %q) = %q, want %q", c.dir, c.to, got, c.want)
		}
		if !SafeLinkText(got, depthOf(c.dir)) {
			t.Errorf("relativeLink(%q, %q) = %q climbs out of the mount", c.dir, c.to, got)
		}
	}
}

// TestEscapingLinkNameIsTheLink: an absolute symlink into the tree is a symlink in
// the mirror, so unlink and rm -rf remove the link alone, never what it leads to;
// a link shown as the directory it leads to (out of the tree) is removed by rmdir.
// Removing a link is judged by the link's own path: denied where that path is
// protected (negative control), allowed for a link in the workspace that leads
// into a protected directory, which stays intact (positive control).
func TestEscapingLinkNameIsTheLink(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite,
		"file src/ws/a/keep precious", "dir src/.git/hooks", "file src/.git/hooks/pre-commit #!/bin/sh",
		"link src/ws/inabs -> $BASE/src/ws/a", "link src/ws/inabs2 -> $BASE/src/ws/a",
		"link src/ws/hk -> $BASE/src/.git/hooks", "link src/.git/hooks/l -> $BASE/src/ws/a",
		"file outside/d/c precious", "link src/ws/out -> $BASE/outside/d")
	out := treeState(t, e.outside)

	if fi, err := os.Lstat(e.m("ws/inabs")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("lstat ws/inabs: %v, %v; want a symlink", fi, err)
	}
	if err := unix.Unlink(e.m("ws/inabs")); err != nil {
		t.Errorf("unlink of an absolute link into the tree: %v", err)
	}
	if err := exists(e.s("ws/inabs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link is still on the host after unlink: %v", err)
	}
	if b, err := exec.Command("rm", "-rf", e.m("ws/inabs2")).CombinedOutput(); err != nil {
		t.Errorf("rm -rf ws/inabs2: %v\n%s", err, b)
	}
	if err := exists(e.s("ws/inabs2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link is still on the host after rm -rf: %v", err)
	}
	if b, err := os.ReadFile(e.s("ws/a/keep")); err != nil || string(b) != "precious" {
		t.Errorf("what the removed links led to changed: %q, %v", b, err)
	}

	// Judged by the link's own path.
	if err := unix.Unlink(e.m("ws/hk")); err != nil {
		t.Errorf("unlink of a link into a protected directory: %v", err)
	}
	if b, err := os.ReadFile(e.s(".git/hooks/pre-commit")); err != nil || string(b) != "#!/bin/sh" {
		t.Errorf("the protected directory a removed link led to changed: %q, %v", b, err)
	}
	err := unix.Unlink(e.m(".git/hooks/l"))
	e.expectDenial("unlink of a link inside a protected directory", err, "unlink", RuleProtected, ".git/hooks/l")
	if l, err := os.Readlink(e.s(".git/hooks/l")); err != nil || l != e.s("ws/a") {
		t.Errorf("a denied unlink changed the link: %q, %v", l, err)
	}

	// A link out is shown as its directory: the kernel sends RMDIR for its name.
	if fi, err := os.Lstat(e.m("ws/out")); err != nil || !fi.IsDir() {
		t.Fatalf("lstat ws/out: %v, %v; want the directory it leads to", fi, err)
	}
	if err := unix.Rmdir(e.m("ws/out")); err != nil {
		t.Errorf("rmdir of a link shown as its directory: %v", err)
	}
	if err := exists(e.s("ws/out")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link out is still on the host after rmdir: %v", err)
	}
	if d := diff(out, treeState(t, e.outside)); d != "" {
		t.Errorf("removing links changed what they lead to outside:\n%s", d)
	}
	if recs := e.records(); len(recs) != 0 {
		t.Errorf("allowed removals logged denials: %+v", recs)
	}
}

// TestDirectoryNeverItsOwnAncestor: a directory the mirror shows under a name
// below itself (a link out of the tree shown as its directory, whose own entries
// lead back to it) answers ELOOP there, as the kernel does for such an alias, and
// the daemon stays responsive; the rest of the tree is served as before. The
// memory bound of the same trees is TestCyclicTreesBoundedMemory (cmd/toh-mount),
// which runs the daemon in a process of its own.
// A link made through the mount whose text leaves it is used at once, as `ln -s
// /tmp t; echo x > t/f` does: the kernel still holds the SYMLINK answer's entry (a
// symlink) while the fence shows the name as what it leads to. Readlink answered
// EIO then, and such a write failed about one time in five (found by review); with
// ESTALE the kernel looks the name up again and the write reaches the fence, which
// judges it where it lands: allowed in the second writable root (positive
// control), refused outside every root (negative control).
func TestEscapingLinkUsedAtOnce(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "dir src/ws", "dir outside/d")
	out := treeState(t, e.outside)
	for i := range 100 {
		in, away := e.m(fmt.Sprintf("ws/in%d", i)), e.m(fmt.Sprintf("ws/away%d", i))
		if err := os.Symlink(e.extra, in); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(in+"/f"+fmt.Sprint(i), []byte("x"), 0o644); err != nil {
			t.Fatalf("round %d: a write through a link into the second writable root, made just before: %v", i, err)
		}
		if err := os.Symlink(e.outside+"/d", away); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(away+"/f", []byte("x"), 0o644); !errors.Is(err, unix.EACCES) {
			t.Fatalf("round %d: a write through a link out of every root, made just before: %v, want EACCES", i, err)
		}
	}
	if n := len(mustReadDir(t, e.extra)); n != 100 {
		t.Errorf("%d files in the second writable root, want 100", n)
	}
	if d := diff(out, treeState(t, e.outside)); d != "" {
		t.Errorf("writes through links out of every root changed the host:\n%s", d)
	}
}

func mustReadDir(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func TestDirectoryNeverItsOwnAncestor(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite,
		"dir src/ws/a", "link src/ws/a/up -> ..", "link src/ws/inabs -> $BASE/src/ws/a",
		"file outside/o/sub/f hello", "link outside/o/sub/up -> ..", "link outside/o/self -> $BASE/outside/o",
		"link src/ws/out -> $BASE/outside/o")
	guardMemory(t, e.mnt)
	names := func(rel string) []string {
		t.Helper()
		ents, err := os.ReadDir(e.m(rel))
		if err != nil {
			t.Fatalf("readdir %s: %v", rel, err)
		}
		var ns []string
		for _, en := range ents {
			ns = append(ns, en.Name())
		}
		return ns
	}
	if got := names("ws/inabs"); len(got) != 1 || got[0] != "up" {
		t.Errorf("ws/inabs lists %q, want [up]", got)
	}
	if l, err := os.Readlink(e.m("ws/inabs/up")); err != nil || l != ".." {
		t.Errorf("readlink ws/inabs/up: %q, %v", l, err)
	}
	if got := names("ws/inabs/up"); len(got) != 3 {
		t.Errorf("ws/inabs/up (ws) lists %q", got)
	}
	names("ws/out/sub")
	for _, rel := range []string{"ws/out/self", "ws/out/sub/up"} {
		if _, err := os.Lstat(e.m(rel)); !errors.Is(err, unix.ELOOP) {
			t.Errorf("lstat %s, a directory below itself: %v, want ELOOP", rel, err)
		}
	}
	// Positive control: the tree is still served, and mutations are still judged.
	if b, err := os.ReadFile(e.m("ws/out/sub/f")); err != nil || string(b) != "hello" {
		t.Errorf("read below the link out: %q, %v", b, err)
	}
	if err := os.WriteFile(e.m("ws/a/new"), []byte("x"), 0o644); err != nil {
		t.Errorf("write in the tree: %v", err)
	}
	err := os.WriteFile(e.m("ws/out/sub/f"), []byte("x"), 0o644)
	e.expectDenial("write through the link out", err, "open", RuleOutside, "ws/out/sub/f")
}

// fenceRSSLimit is far above what this test binary needs, race detector included,
// and far below what a loop in the node tree allocates within seconds.
const fenceRSSLimit = 4 << 30

// guardMemory ends the test binary, whose goroutines serve the fence, once it grows
// past fenceRSSLimit while the test runs, detaching mnt first: a regression that
// loops in the daemon then fails the run instead of eating the machine.
func guardMemory(t *testing.T, mnt string) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if r := testutil.RSS(0); r > fenceRSSLimit {
				fmt.Fprintf(os.Stderr, "--- FAIL: %s: the fence grew to %d MiB; detaching %s and exiting\n", t.Name(), r>>20, mnt)
				Unmount(mnt, true)
				os.Exit(3)
			}
		}
	}()
}
