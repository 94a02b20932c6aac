package fusefence

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// TestStalenessBound: changes made to SOURCE from outside show through the mount
// within DefaultTimeout, even where the kernel cached a negative entry, attributes,
// a directory listing (FOPEN_CACHE_DIR) and pages (a file open read-write reads
// through the page cache); a passthrough read shows them at once.
func TestStalenessBound(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "file src/f v1", "file src/p v1", "file src/g v1", "file src/d/old")
	if _, err := os.Stat(e.m("ext")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat of a missing file: %v", err)
	}
	rw, err := os.OpenFile(e.m("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	readF := func() string {
		buf := make([]byte, 32)
		n, _ := rw.ReadAt(buf, 0)
		return string(buf[:n])
	}
	list := func() []string {
		ents, _ := os.ReadDir(e.m("d"))
		var names []string
		for _, de := range ents {
			names = append(names, de.Name())
		}
		return names
	}
	mode := func() os.FileMode {
		fi, err := os.Stat(e.m("g"))
		if err != nil {
			return 0
		}
		return fi.Mode()
	}
	if got := readF(); got != "v1" {
		t.Fatalf("read: %q", got)
	}
	if got := list(); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("listing: %q", got)
	}
	if b, err := os.ReadFile(e.m("p")); err != nil || string(b) != "v1" {
		t.Fatalf("read: %q, %v", b, err)
	}
	if got := mode(); got != 0o644 {
		t.Fatalf("mode %v", got)
	}
	changed := time.Now()
	for _, c := range []func() error{
		func() error { return os.WriteFile(e.s("ext"), []byte("new"), 0o644) },
		func() error { return os.WriteFile(e.s("f"), []byte("version 2"), 0o644) },
		func() error { return os.WriteFile(e.s("p"), []byte("version 2"), 0o644) },
		func() error { return os.WriteFile(e.s("d/new"), nil, 0o644) },
		func() error { return os.Chmod(e.s("g"), 0o600) },
	} {
		if err := c(); err != nil {
			t.Fatal(err)
		}
	}
	if e.fence.f.passthrough.Load() {
		// Nothing of p is cached: the kernel reads the host file.
		if b, err := os.ReadFile(e.m("p")); err != nil || string(b) != "version 2" {
			t.Errorf("passthrough read right after an outside change: %q, %v", b, err)
		}
	}
	for {
		_, errExt := os.Stat(e.m("ext"))
		f, names, m := readF(), list(), mode()
		b, errP := os.ReadFile(e.m("p"))
		if errExt == nil && f == "version 2" && slices.Equal(names, []string{"new", "old"}) && m == 0o600 && errP == nil && string(b) == "version 2" {
			break
		}
		if time.Since(changed) > DefaultTimeout+500*time.Millisecond {
			t.Fatalf("%v after the host changed, the mount shows: ext %v, f %q, d %q, g %v, p %q (%v)", time.Since(changed), errExt, f, names, m, b, errP)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("outside changes visible after %v (bound %v)", time.Since(changed), DefaultTimeout)
}

// TestAliasInvalidation: a file created through a link shown as its target is
// visible at once under its own name, though the kernel had cached its absence.
func TestAliasInvalidation(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "dir src/d", "link src/dangle-in -> $BASE/src/d/made")
	if _, err := os.Stat(e.m("d/made")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat before: %v", err)
	}
	if err := writeAt(e.m("dangle-in"), unix.O_CREAT|unix.O_WRONLY, "x"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := os.Stat(e.m("d/made"))
		if err == nil {
			break
		}
		if time.Since(start) > DefaultTimeout/4 {
			t.Fatalf("d/made still %v %v after it was created through dangle-in", err, time.Since(start))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDirCacheBound: directories whose entries were read keep their host
// descriptor (dirCache) for at most the cache timeout. A directory replaced on the
// host shows its new contents within the bound; the descriptors are bounded in
// number and closed once expired.
func TestDirCacheBound(t *testing.T) {
	tree := []string{"file src/d2/a"}
	for i := range maxCachedDirs + 100 {
		tree = append(tree, fmt.Sprintf("dir src/many/%d", i))
	}
	e := newEnv(t, policy.WorkspaceWrite, tree...)
	held := func() int {
		ents, _ := os.ReadDir("/proc/self/fd")
		n := 0
		for _, de := range ents {
			if l, err := os.Readlink("/proc/self/fd/" + de.Name()); err == nil && strings.HasPrefix(l, e.src+"/") {
				n++
			}
		}
		return n
	}
	base := held()
	if _, err := os.Stat(e.m("d2/a")); err != nil {
		t.Fatal(err)
	}
	// The control: the lookup of d2/a left d2's descriptor cached.
	if held() != base+1 {
		t.Fatalf("%d descriptors into SOURCE after a lookup in d2, want %d", held(), base+1)
	}
	changed := time.Now()
	if err := os.Rename(e.s("d2"), e.s("d2-moved")); err != nil {
		t.Fatal(err)
	}
	testutil.MakeTree(t, e.src, "file d2/b")
	for {
		_, errA := os.Stat(e.m("d2/a"))
		_, errB := os.Stat(e.m("d2/b"))
		if errors.Is(errA, os.ErrNotExist) && errB == nil {
			break
		}
		if time.Since(changed) > DefaultTimeout+500*time.Millisecond {
			t.Fatalf("%v after d2 was replaced on the host: d2/a %v, d2/b %v", time.Since(changed), errA, errB)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Every directory below many/ is looked up in: at most maxCachedDirs are kept.
	ents, err := os.ReadDir(e.m("many"))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		if _, err := os.Stat(e.m("many/" + de.Name() + "/x")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat many/%s/x: %v", de.Name(), err)
		}
	}
	if n := held(); n > base+maxCachedDirs || n < base+maxCachedDirs/2 {
		t.Errorf("%d descriptors into SOURCE after lookups in %d directories, want about %d, at most %d", n-base, len(ents), maxCachedDirs, maxCachedDirs)
	}
	// Expired ones are swept within two timeouts.
	deadline := time.Now().Add(2*DefaultTimeout + time.Second)
	for held() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d descriptors into SOURCE still held %v after the last lookup", held()-base, 2*DefaultTimeout+time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMutationsLeaveNoDescriptors: the parent descriptor a decision opens (see
// judge) is closed whatever becomes of the mutation: done, refused at its other
// end (link, rename), or refused after the decision (a symlink's xattrs). Only the
// directory cache's expiring descriptors may stay, and they go within two
// timeouts.
func TestMutationsLeaveNoDescriptors(t *testing.T) {
	const timeout = 100 * time.Millisecond
	e := newEnvTimeout(t, policy.WorkspaceWrite, timeout, "file src/d/f hello", "file src/d/a a", "link src/d/sl -> f", "dir src/.git/hooks")
	held := func() []string {
		ents, _ := os.ReadDir("/proc/self/fd")
		var open []string
		for _, de := range ents {
			if l, err := os.Readlink("/proc/self/fd/" + de.Name()); err == nil && strings.HasPrefix(l, e.src+"/") {
				open = append(open, l)
			}
		}
		return open
	}
	base := len(held())
	steps := []struct {
		what    string
		run     func() error
		refused bool
	}{
		{"create", func() error { return writeAt(e.m("d/new"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, "n") }, false},
		{"open for writing", func() error { return writeAt(e.m("d/f"), unix.O_WRONLY|unix.O_TRUNC, "w") }, false},
		{"mkdir", func() error { return unix.Mkdir(e.m("d/sub"), 0o755) }, false},
		{"mkfifo", func() error { return unix.Mkfifo(e.m("d/fifo"), 0o644) }, false},
		{"symlink", func() error { return unix.Symlink("f", e.m("d/sl2")) }, false},
		{"chmod", func() error { return unix.Chmod(e.m("d/f"), 0o600) }, false},
		{"utimes", func() error { return unix.UtimesNano(e.m("d/f"), []unix.Timespec{{Sec: 1}, {Sec: 2}}) }, false},
		{"setxattr", func() error { return unix.Setxattr(e.m("d/f"), "user.k", []byte("v"), 0) }, false},
		{"link", func() error { return unix.Link(e.m("d/new"), e.m("d/hl")) }, false},
		{"unlink", func() error { return unix.Unlink(e.m("d/hl")) }, false},
		{"rename", func() error { return unix.Rename(e.m("d/new"), e.m("d/new2")) }, false},
		{"rmdir", func() error { return unix.Rmdir(e.m("d/sub")) }, false},
		// Refused after the first end was granted, or after the decision.
		{"link into a protected directory", func() error { return unix.Link(e.m("d/a"), e.m(".git/hooks/x")) }, true},
		{"rename into a protected directory", func() error { return unix.Rename(e.m("d/a"), e.m(".git/hooks/pre-commit")) }, true},
		{"lsetxattr of a symlink", func() error { return unix.Lsetxattr(e.m("d/sl"), "trusted.k", []byte("v"), 0) }, true},
	}
	for _, st := range steps {
		err := st.run()
		if refused := err != nil; refused != st.refused {
			t.Fatalf("%s: %v, want refused %v", st.what, err, st.refused)
		}
	}
	deadline := time.Now().Add(2*timeout + time.Second)
	for len(held()) > base {
		if time.Now().After(deadline) {
			t.Fatalf("descriptors into SOURCE still held %v after the last mutation: %q", 2*timeout+time.Second, held())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
