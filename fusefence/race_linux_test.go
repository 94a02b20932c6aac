package fusefence

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// TestSwapRace: an attacker on the host keeps exchanging a directory of SOURCE with
// a symlink to outside (renameat2 RENAME_EXCHANGE) while a writer creates, writes
// and renames through the mount under that directory's name. Whatever interleaving
// happens, nothing may land outside: every mutation lands inside the root or fails.
// A first pass of the race tests; the full matrix is a follow-up.
func TestSwapRace(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "dir src/a", "link src/b -> $BASE/outside", "file src/a/seed x")
	canary := treeState(t, e.outside)

	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if err := unix.Renameat2(unix.AT_FDCWD, e.s("a"), unix.AT_FDCWD, e.s("b"), unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange: %v", err)
				return
			}
			swaps.Add(1)
		}
	}()

	deadline := time.Now().Add(2 * time.Second)
	landed, failed := 0, 0
	for i := 0; time.Now().Before(deadline); i++ {
		var err error
		switch i % 4 {
		case 0:
			err = writeAt(e.m(fmt.Sprintf("a/new%d", i)), unix.O_CREAT|unix.O_WRONLY, "x")
		case 1:
			err = writeAt(e.m("a/seed"), unix.O_WRONLY|unix.O_TRUNC, "y")
		case 2:
			err = unix.Mkdir(e.m(fmt.Sprintf("a/dir%d", i)), 0o755)
		case 3:
			err = unix.Rename(e.m("a/seed"), e.m("a/seed"))
		}
		if err == nil {
			landed++
		} else {
			failed++
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d swaps; %d mutations landed, %d failed", swaps.Load(), landed, failed)
	if d := diff(canary, treeState(t, e.outside)); d != "" {
		t.Fatalf("a mutation through the mount landed outside the root:\n%s", d)
	}
	if landed == 0 {
		t.Error("no mutation landed: the race exercised nothing")
	}
	for _, r := range e.records() {
		switch r.Rule {
		case RuleOutside, RuleSymlinkRace:
		default:
			t.Errorf("unexpected denial %+v", r)
		}
	}
	// Leave the tree as it was for the cleanup.
	os.RemoveAll(e.s("a"))
}
