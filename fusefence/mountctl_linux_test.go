package fusefence

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
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
		for {
			select {
			case <-done:
				return
			default:
			}
			unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
		}
	}()
	return func() { close(done); wg.Wait() }
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
