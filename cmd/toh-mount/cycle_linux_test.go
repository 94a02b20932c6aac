package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// daemonRSSLimit is far above what toh-mount needs to serve the trees below (a
// few MiB) and far below what a loop in the node tree reaches within seconds.
const daemonRSSLimit = 256 << 20

// guardRSS kills the daemon d (only it) as soon as its RSS passes limit, and
// reports whether it did, so a regression that makes it allocate without end
// fails the test instead of taking the machine down.
func guardRSS(t *testing.T, d *daemon, limit int64) (killed func() (bool, int64)) {
	stop := make(chan struct{})
	result := make(chan [2]int64, 1)
	go func() {
		var peak int64
		defer func() {
			if peak > limit {
				result <- [2]int64{1, peak}
			} else {
				result <- [2]int64{0, peak}
			}
		}()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-d.done:
				return
			case <-tick.C:
			}
			r := testutil.RSS(d.cmd.Process.Pid)
			peak = max(peak, r)
			if r > limit {
				d.cmd.Process.Kill()
				return
			}
		}
	}()
	var once bool
	var res [2]int64
	return func() (bool, int64) {
		if !once {
			close(stop)
			res, once = <-result, true
		}
		return res[0] == 1, res[1]
	}
}

// TestCyclicTreesBoundedMemory: trees whose links lead to an ancestor of
// themselves, through a link into the tree (ws/inabs -> SOURCE/ws/a holding
// up -> ..), through a link out of it whose directory leads back to itself, and,
// as root, through a bind mount of an ancestor. Listing and walking them through
// the mount finishes within a deadline, the daemon's RSS stays below
// daemonRSSLimit (a guard kills it past that, so a regression fails rather than
// eating the machine), the listing is what the host has (positive control), and
// the daemon still serves and judges afterwards.
func TestCyclicTreesBoundedMemory(t *testing.T) {
	testutil.RequireFUSE(t)
	tr := newTree(t, policy.WorkspaceWrite)
	testutil.MakeTree(t, tr.base,
		"dir src/ws/a", "link src/ws/a/up -> ..", "link src/ws/inabs -> "+tr.src+"/ws/a",
		"link src/outside-back -> "+tr.src+"/ws/a",
		"file outside/o/sub/f hello", "link outside/o/sub/up -> ..", "link outside/o/self -> "+tr.outside+"/o",
		"link src/ws/out -> "+tr.outside+"/o")
	if os.Geteuid() == 0 {
		testutil.MakeTree(t, tr.base, "dir src/ws/bm")
		if err := unix.Mount(tr.src+"/ws", tr.src+"/ws/bm", "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount of an ancestor: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(tr.src+"/ws/bm", unix.MNT_DETACH) })
	}
	d := startDaemon(t, tr.src, tr.mnt, tr.args()...)
	stopGuard := guardRSS(t, d, daemonRSSLimit)

	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		out, _ := cmd.CombinedOutput() // ELOOP entries make ls and find exit 1
		if ctx.Err() != nil {
			t.Errorf("%s %q did not finish within 20s (daemon RSS %d MiB)", name, args, testutil.RSS(d.cmd.Process.Pid)>>20)
		}
		return string(out)
	}
	ls := run("ls", "-la", tr.mnt+"/ws/inabs", tr.mnt+"/ws/inabs/")
	run("ls", "-laR", tr.mnt)
	run("find", "-L", tr.mnt)
	run("du", "-sL", tr.mnt)

	if killed, peak := stopGuard(); killed {
		t.Fatalf("the daemon grew past %d MiB (to %d MiB) serving a cyclic tree and was killed\n%s", daemonRSSLimit>>20, peak>>20, d.stderr)
	}
	select {
	case <-d.done:
		t.Fatalf("the daemon died: %v\n%s", d.cmd.ProcessState, d.stderr)
	default:
	}
	if !strings.Contains(ls, "inabs -> a") || !strings.Contains(ls, "up -> ..") {
		t.Errorf("ls -la ws/inabs shows:\n%s\nwant the link inabs -> a and, in it, up -> ..", ls)
	}
	if l, err := os.Readlink(tr.mnt + "/outside-back"); err != nil || l != "ws/a" {
		t.Errorf("readlink outside-back: %q, %v; want ws/a", l, err)
	}
	if _, err := os.Lstat(tr.mnt + "/ws/out/sub/up"); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("lstat ws/out/sub/up (the link out's own directory): %v, want ELOOP", err)
	}
	if os.Geteuid() == 0 {
		if _, err := os.Lstat(tr.mnt + "/ws/bm"); !errors.Is(err, syscall.ELOOP) {
			t.Errorf("lstat ws/bm (a bind mount of ws): %v, want ELOOP", err)
		}
	}
	// Still serving and judging: a write in the tree lands, one out is denied.
	if err := writeFile(tr.mnt+"/ws/a/new", "x"); err != nil {
		t.Errorf("write in the tree after the walk: %v", err)
	}
	if err := writeFile(tr.mnt+"/ws/out/sub/f", "x"); !errors.Is(err, unix.EACCES) {
		t.Errorf("write through the link out: %v, want EACCES", err)
	}
	if b, err := os.ReadFile(tr.outside + "/o/sub/f"); err != nil || string(b) != "hello" {
		t.Errorf("outside file after a denied write: %q, %v", b, err)
	}
}
