package fusefence

import (
	"errors"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// fenceTree is SOURCE with symlinks that lead out, in and nowhere, protected paths
// and multiply-linked files, for checking what the mirror shows. What the fence
// allows and denies is the business of the fence cases (cases_linux_test.go).
var fenceTree = []string{
	"file src/f hello",
	"dir src/d",
	"file outside/other reachable only through out/",
	"file src/.git/hooks/pre-commit #!/bin/sh",
	"file src/.git/config [core]",
	"file src/.git/HEAD ref",
	"file src/ml shared",
	"link src/out -> $BASE/outside", // absolute, out of every root
	"link src/up -> ../outside",     // relative, climbs out of the mount
	"link src/outcanary -> $BASE/outside/canary",
	"link src/dangle -> $BASE/outside/newfile", // leads out, to nothing yet
	"link src/inabs -> $BASE/src/d",            // absolute, but into the root
	"link src/dangle-in -> $BASE/src/d/made",   // leads nowhere yet, inside the root
	"link src/rl -> d",                         // relative, stays in the mount: exposed
}

func newFenceEnv(t *testing.T) *env {
	// Hard links made on the host: one inside the root, one to the canary outside.
	return newEnv(t, policy.WorkspaceWrite, append(append([]string{}, fenceTree...), "hardlink src/ml2 -> src/ml", "hardlink src/hlout -> outside/canary")...)
}

// TestSymlinkPresentation checks what the mirror shows for each kind of link.
func TestSymlinkPresentation(t *testing.T) {
	e := newFenceEnv(t)
	got := map[string]string{}
	ents, err := os.ReadDir(e.mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		got[en.Name()] = en.Type().String()
	}
	for name, typ := range map[string]string{
		"out": "d---------", "up": "d---------", // shown as what they lead to
		"outcanary": "----------", "rl": "L---------", // rl stays in the mount
		"inabs": "L---------", // into the tree: a link with a relative text
	} {
		if got[name] != typ {
			t.Errorf("readdir: %s is %q, want %q", name, got[name], typ)
		}
		fi, err := os.Lstat(e.m(name))
		if err != nil || fi.Mode().Type().String() != typ {
			t.Errorf("lstat %s: %v, %v; want type %q", name, fi, err, typ)
		}
	}
	for _, name := range []string{"dangle", "dangle-in"} {
		if _, ok := got[name]; ok {
			t.Errorf("readdir shows %s, a link that leads out of the mount to nothing", name)
		}
		if _, err := os.Lstat(e.m(name)); !os.IsNotExist(err) {
			t.Errorf("lstat %s: %v, want ENOENT", name, err)
		}
	}
	if b, err := os.ReadFile(e.m("out/canary")); err != nil || string(b) != "precious" {
		t.Errorf("read through a link that leads out: %q, %v", b, err)
	}
	if l, err := os.Readlink(e.m("rl")); err != nil || l != "d" {
		t.Errorf("readlink rl: %q, %v", l, err)
	}
	if l, err := os.Readlink(e.m("inabs")); err != nil || l != "d" {
		t.Errorf("readlink inabs (-> $BASE/src/d): %q, %v; want the relative text \"d\"", l, err)
	}
	if fi, err := os.Lstat(e.m("inabs")); err != nil || fi.Size() != 1 {
		t.Errorf("lstat inabs: %v, %v; want the size of the text shown", fi, err)
	}
}

// TestExposedLinkMovedShallower: a relative link the mirror shows as a link (its
// ".." stay inside the mount at its depth) is moved, with the directory holding
// it, to a depth where the same text climbs out of the mount. The kernel resolves
// a FUSE symlink itself, so it must never follow the old text from the new depth:
// operations through the link are refused (EACCES: the kernel, told ESTALE by
// readlink while it still holds the link, looks it up again at once and gets it
// shown as what it leads to; it was EIO until the entry expired) and nothing
// outside changes.
// Caching link texts in the kernel (CAP_CACHE_SYMLINKS) would break this.
func TestExposedLinkMovedShallower(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "dir src/p/q", "link src/p/q/l -> ../../outside/d", "file outside/d/f precious")
	if l, err := os.Readlink(e.m("p/q/l")); err != nil || l != "../../outside/d" {
		t.Fatalf("readlink of an exposed link: %q, %v", l, err)
	}
	if err := os.Rename(e.m("p/q"), e.m("q2")); err != nil {
		t.Fatal(err)
	}
	out := treeState(t, e.outside)
	ops := []struct {
		name string
		run  func() error
	}{
		{"create", func() error { return writeAt(e.m("q2/l/new"), unix.O_CREAT|unix.O_WRONLY, "x") }},
		{"write", func() error { return writeAt(e.m("q2/l/f"), unix.O_WRONLY|unix.O_TRUNC, "x") }},
		{"mkdir", func() error { return unix.Mkdir(e.m("q2/l/dir"), 0o755) }},
		{"unlink", func() error { return unix.Unlink(e.m("q2/l/f")) }},
		{"chmod", func() error { return unix.Chmod(e.m("q2/l/f"), 0o777) }},
	}
	for _, op := range ops {
		if err := op.run(); !errors.Is(err, unix.EACCES) {
			t.Errorf("%s through a link whose text now climbs out of the mount: %v, want EACCES", op.name, err)
		}
	}
	if d := diff(out, treeState(t, e.outside)); d != "" {
		t.Fatalf("a mutation through the moved link landed outside:\n%s", d)
	}
	if l, err := os.Readlink(e.s("q2/l")); err != nil || l != "../../outside/d" {
		t.Errorf("the link itself changed: %q, %v", l, err)
	}
}

// A denial of a name that is not UTF-8 reads back with its exact bytes (see
// Event.PathBytes); the name beside it, differing only in that byte, stays apart.
func TestDenialOfNonUTF8Name(t *testing.T) {
	e := newEnv(t, policy.ReadOnly)
	for _, name := range []string{"x\xff", "x\xfe"} {
		if err := os.WriteFile(e.m(name), nil, 0o644); !errors.Is(err, unix.EACCES) {
			t.Errorf("create %q: %v, want EACCES", name, err)
		}
		recs := e.records()
		if len(recs) != 1 || recs[0].Path != name || recs[0].HostPath != e.s(name) {
			t.Errorf("create %q: records %+v, want one with path %q, hostPath %q", name, recs, name, e.s(name))
		}
	}
}

// A denial names the calling process, not the thread: FUSE reports the thread, and
// a refused write from a program's second thread was once recorded under the
// thread's id. The write is made from a thread that is not the main one (its id is
// not the process's); the record carries the process's id. Control: the thread's
// id really differs, so the record could have carried it.
func TestDenialNamesTheProcessNotTheThread(t *testing.T) {
	e := newEnv(t, policy.ReadOnly)
	type result struct {
		tid int
		err error
	}
	done := make(chan result)
	hold := make(chan struct{})
	defer close(hold)
	// Each goroutine keeps its thread until the test ends, so the next one gets
	// another; the first thread that is not the main one makes the write.
	for range 8 {
		go func() {
			runtime.LockOSThread()
			tid := unix.Gettid()
			if tid == os.Getpid() {
				done <- result{tid: tid}
				<-hold
				return
			}
			done <- result{tid: tid, err: os.WriteFile(e.m("from-a-thread"), nil, 0o644)}
			<-hold
		}()
		r := <-done
		if r.tid == os.Getpid() {
			continue
		}
		if !errors.Is(r.err, unix.EACCES) {
			t.Fatalf("create from thread %d: %v, want EACCES", r.tid, r.err)
		}
		recs := e.records()
		if len(recs) != 1 || recs[0].PID != uint32(os.Getpid()) {
			t.Fatalf("records %+v, want one with pid %d (the thread was %d)", recs, os.Getpid(), r.tid)
		}
		return
	}
	t.Fatal("no goroutine ran on a thread other than the main one")
}
