package fusefence

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// staleMount mounts a FUSE file system at mp whose connection is already gone: the
// /dev/fuse descriptor is closed before any daemon answered, so every request on it
// fails with ENOTCONN, as on a mount whose daemon was killed.
func staleMount(t *testing.T, mp string) {
	t.Helper()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("/dev/fuse: %v", err)
	}
	defer unix.Close(fd)
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := unix.Mount("stale", mp, "fuse.toh", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		t.Fatalf("mounting a FUSE file system at %s: %v", mp, err)
	}
}

// swapper exchanges a and b (renameat2 RENAME_EXCHANGE) as fast as it can until the
// returned function is called.
func swapper(a, b string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		exchangeUntil(a, b, done)
	}()
	return func() { close(done); wg.Wait() }
}

// exchangeUntil exchanges a and b (renameat2 RENAME_EXCHANGE) as fast as it can
// until done is closed.
func exchangeUntil(a, b string, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		default:
		}
		unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	}
}

// TestRecoverStaleIsNotRedirected: as root, RecoverStale checks and detaches the
// mount at one directory entry. It used to stat the path and then detach by path,
// so a directory on the way that its owner swapped for a symlink in between sent
// the detach (MNT_DETACH, as root) to a mount of the same name elsewhere. Here base/x
// holds a stack of stale mounts at x/m, each a check-and-detach window, and trades
// places with a symlink to base/other, where a tmpfs is mounted at other/m.
// Negative control: the tmpfs stays mounted through every recovery. Positive:
// with x left in place, every stale mount is detached and counted. It runs in a
// mount namespace of its own: bwrap tests running meanwhile fail when a mount moves
// under them.
func TestRecoverStaleIsNotRedirected(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if !testutil.InOwnMountNamespace(t) {
		return
	}
	base := t.TempDir()
	x, y, other := base+"/x", base+"/y", base+"/other"
	for _, d := range []string{x + "/m", other + "/m"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("none", other+"/m", "tmpfs", 0, ""); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(other+"/m", unix.MNT_DETACH) })
	if err := os.WriteFile(other+"/m/keep", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, y); err != nil {
		t.Fatal(err)
	}
	// x is the real directory again once the swapping stops.
	settle := func() {
		if fi, err := os.Lstat(x); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if err := unix.Renameat2(unix.AT_FDCWD, x, unix.AT_FDCWD, y, unix.RENAME_EXCHANGE); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		settle()
		for range 64 {
			if unix.Unmount(x+"/m", unix.MNT_DETACH) != nil {
				break
			}
		}
	})

	const stack, rounds = 40, 15
	windows := 0
	for round := range rounds {
		for range stack {
			staleMount(t, x+"/m")
		}
		stop := swapper(x, y)
		for range 4 * stack {
			n, _ := RecoverStale(x + "/m")
			windows += n
			if _, err := os.Stat(other + "/m/keep"); err != nil {
				stop()
				t.Fatalf("round %d: RecoverStale(%s/m), while x traded places with a symlink to %s, detached the tmpfs at %s/m", round, x, other, other)
			}
		}
		stop()
		settle()
		n, err := RecoverStale(x + "/m")
		if err != nil {
			t.Fatalf("round %d: RecoverStale with x in place: %v", round, err)
		}
		windows += n
	}
	if windows != stack*rounds {
		t.Errorf("%d stale mounts detached, want %d", windows, stack*rounds)
	}
	if IsStale(x + "/m") {
		t.Errorf("%s/m is still stale", x)
	}
	t.Logf("%d stale mounts detached while x was swapped; the tmpfs stayed", windows)
}

// nsSwapper starts a thread in a mount namespace of its own, made now, before the
// mounts the test makes next: there a and b stay plain directories, so rename(2)
// exchanges them, and the mounts on them move in the test's namespace too. A user
// does this with unshare -Urm before root mounts on directories they may rename
// in. start begins the exchanges, stop ends them.
func nsSwapper(t *testing.T, a, b string) (start, stop func()) {
	t.Helper()
	ready := make(chan error)
	begin, done := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var swap func()
	swap = func() {
		defer wg.Done()
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: /proc/self (and code under test reading it) would
			// follow it into the new namespace. Keep it, idle, and try another.
			wg.Add(1)
			go swap()
			<-done
			runtime.UnlockOSThread()
			return
		}
		// Never unlocked from here: the thread ends, and its namespace with it.
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			ready <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			ready <- err
			return
		}
		ready <- nil
		select {
		case <-begin:
		case <-done:
			return
		}
		exchangeUntil(a, b, done)
	}
	wg.Add(1)
	go swap()
	if err := <-ready; err != nil {
		t.Fatalf("a mount namespace for the swapper: %v", err)
	}
	var once sync.Once
	return func() { close(begin) }, func() { once.Do(func() { close(done); wg.Wait() }) }
}

// TestExchangedMountpointsAreNotTaken: as root, UnmountFence and RecoverStale act
// on the very mount they checked. With the mountpoint's parent pinned, a rename can
// still move mounts: rename(2) refuses a mountpoint of the caller's own mount
// namespace only, so a user who made a namespace before the mounts existed can
// exchange d/m, where a fence is (stale here: any fuse.toh mount will do), with
// d/n, where another mount is (a tmpfs), between root's check and its unmount, and
// the other mount was taken (found by review, through toh-mount -u and a toh-mount
// start). d belongs to another user, as such a d would. Negative control: the tmpfs
// stays mounted through 2000 tries of each while d/m and d/n are exchanged.
// Positive: fences are unmounted and stale mounts detached meanwhile.
func TestExchangedMountpointsAreNotTaken(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if !testutil.InOwnMountNamespace(t) {
		return
	}
	d := t.TempDir() + "/d"
	for _, dir := range []string{d + "/m", d + "/n"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(d, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	start, stop := nsSwapper(t, d+"/m", d+"/n")
	defer stop()
	if err := unix.Mount("toh-test-keep", d+"/n", "tmpfs", 0, ""); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	t.Cleanup(func() {
		stop()
		for range 200 {
			if unix.Unmount(d+"/m", unix.MNT_DETACH) != nil && unix.Unmount(d+"/n", unix.MNT_DETACH) != nil {
				break
			}
		}
	})
	mounted := func() (tmpfs bool, fences int) {
		b, _ := os.ReadFile("/proc/thread-self/mountinfo")
		for line := range strings.SplitSeq(string(b), "\n") {
			if e, ok := parseMountinfo(line); ok && strings.HasPrefix(e.at, d+"/") {
				tmpfs = tmpfs || strings.Contains(line, " - tmpfs toh-test-keep ")
				if e.typ == "fuse.toh" {
					fences++
				}
			}
		}
		return tmpfs, fences
	}
	start()
	for _, c := range []struct {
		name string
		take func() bool // reports whether it unmounted a fence
	}{
		{"UnmountFence", func() bool { return UnmountFence(d+"/m") == nil }},
		{"RecoverStale", func() bool { n, _ := RecoverStale(d + "/m"); return n > 0 }},
	} {
		taken := 0
		deadline := time.Now().Add(5 * time.Second)
		for i := 0; i < 2000 && time.Now().Before(deadline); i++ {
			if _, fences := mounted(); fences == 0 {
				staleMount(t, d+"/m")
			}
			if c.take() {
				taken++
			}
			if tmpfs, _ := mounted(); !tmpfs {
				t.Fatalf("%s(%s/m), try %d, while d/m and d/n were exchanged from another mount namespace, took the tmpfs; mountinfo:\n%s", c.name, d, i+1, mountsUnder(d))
			}
		}
		if taken == 0 {
			t.Errorf("%s took no fence at all", c.name)
		}
		t.Logf("%s: %d fences taken, the tmpfs never", c.name, taken)
	}
}

// mountsUnder is what mountinfo lists beneath dir, for failure messages.
func mountsUnder(dir string) string {
	b, _ := os.ReadFile("/proc/thread-self/mountinfo")
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, dir) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestMovableDistrustsFUSE: pinned.movable judges a directory by the owner and mode
// bits fstat reports, which a FUSE daemon makes up (and, without
// default_permissions, decides renames itself): a directory inside a FUSE mount
// counts as movable however it looks (found by review), so root's -u there detaches
// the checked mount through its descriptor. Control: the same-looking directory
// on the host's disk is not movable.
func TestMovableDistrustsFUSE(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the ownership the control needs is root's")
	}
	e := newEnv(t, policy.DangerFullAccess, "dir src/d/m")
	for _, c := range []struct {
		mountpoint string
		want       bool
	}{
		{e.mnt + "/d/m", true},
		{e.src + "/d/m", false},
	} {
		if err := os.Chmod(filepath.Dir(c.mountpoint), 0o755); err != nil {
			t.Fatal(err)
		}
		p, err := pin(c.mountpoint)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.movable(); got != c.want {
			t.Errorf("movable(%s) = %v, want %v", c.mountpoint, got, c.want)
		}
		p.close()
	}
}
