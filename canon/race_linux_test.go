package canon

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toh-sandbox/toh/internal/testutil"
	"golang.org/x/sys/unix"
)

// An attacker inside the root keeps exchanging root/d (a directory) with root/l (a
// symlink to outside) while the fence creates root/d/x through OpenParentBeneath.
// Every lookup meets either the directory or the symlink, never a mix: the outcome
// must be "created inside" or ELOOP, and outside must stay untouched.
func TestOpenParentBeneathRenameExchangeRace(t *testing.T) {
	const iterations = 2000
	for _, impl := range beneathImpls(t) {
		t.Run(impl.name, func(t *testing.T) {
			base := realTempDir(t)
			var created, refused int
			// At least iterations lookups, and on until both outcomes were seen: how
			// the two threads interleave is up to the scheduler.
			swaps := exchangeRace(t, base, func(rootFd, i int) bool {
				dirFd, name, err := openParentWith(impl.open, rootFd, "d/x")
				if err != nil {
					if !errors.Is(err, unix.ELOOP) {
						t.Errorf("iteration %d: %v, want success or ELOOP", i, err)
					}
					refused++
				} else {
					if err := createAndRemove(dirFd, name, i%2 == 0); err != nil {
						t.Errorf("iteration %d: creating through the parent fd: %v", i, err)
					}
					unix.Close(dirFd)
					created++
				}
				return i >= iterations && created > 0 && refused > 0 || i >= 20*iterations
			})
			requireOutsideUntouched(t, base)
			// Positive control: both sides of the race were seen, so lookups really
			// interleaved with the exchanges.
			if created == 0 || refused == 0 {
				t.Errorf("created %d, refused %d: the race never interleaved", created, refused)
			}
			t.Logf("%d created inside, %d refused with ELOOP, %d exchanges", created, refused, swaps)
		})
	}
}

// The harness itself must be able to fail: a lookup that follows symlinks (what a
// path-string mutation does) is caught writing outside.
func TestRenameExchangeRaceCatchesNaiveLookup(t *testing.T) {
	base := realTempDir(t)
	escaped := false
	exchangeRace(t, base, func(rootFd, i int) bool {
		dirFd, err := unix.Openat(rootFd, "d", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("naive open: %v", err)
		}
		unix.Mkdirat(dirFd, "x", 0o755)
		unix.Close(dirFd)
		_, err = os.Lstat(base + "/outside/x")
		escaped = err == nil
		return escaped || i >= 100000
	})
	if !escaped {
		t.Fatal("a symlink-following lookup never escaped: the race harness cannot detect anything")
	}
}

// exchangeRace builds base/root/{d,l->base/outside} and base/outside/canary, keeps
// exchanging d and l in another goroutine, and calls step with an fd for base/root
// until it returns true. It returns the number of exchanges and leaves d a directory.
func exchangeRace(t *testing.T, base string, step func(rootFd, i int) (done bool)) int64 {
	t.Helper()
	testutil.MakeTree(t, base,
		"dir root/d",
		"link root/l -> "+base+"/outside",
		"file outside/canary do not touch",
	)
	rootFd, err := OpenRoot(base + "/root")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootFd)
	if err := unix.Renameat2(rootFd, "d", rootFd, "l", unix.RENAME_EXCHANGE); err != nil {
		t.Skipf("renameat2(RENAME_EXCHANGE) unsupported here: %v", err)
	}

	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			if err := unix.Renameat2(rootFd, "d", rootFd, "l", unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange: %v", err)
				return
			}
			swaps.Add(1)
		}
	})
	for swaps.Load() == 0 {
		runtime.Gosched()
	}
	for i := 0; !step(rootFd, i); i++ {
	}
	stop.Store(true)
	wg.Wait()

	if fi, err := os.Lstat(base + "/root/d"); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		unix.Renameat2(rootFd, "d", rootFd, "l", unix.RENAME_EXCHANGE)
	}
	return swaps.Load()
}

// createAndRemove makes name in dirFd, a directory or a file, and removes it again.
func createAndRemove(dirFd int, name string, dir bool) error {
	if dir {
		if err := unix.Mkdirat(dirFd, name, 0o755); err != nil {
			return err
		}
		return unix.Unlinkat(dirFd, name, unix.AT_REMOVEDIR)
	}
	fd, err := unix.Openat(dirFd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return unix.Unlinkat(dirFd, name, 0)
}
