package sandbox

// Ending what a confined command leaves behind (Stdio.EndLeftovers).
//
// Under bwrap a command's descendants live in the run's PID namespace and die with
// it. The Landlock rung has no PID namespace, and a process the command left in the
// background ("server &", a double fork, setsid) lived on after toh-exec returned:
// still confined, but holding whatever it was given, the user's terminal among them,
// so it could read what the user typed into the shell next. So the caller that owns
// its process (toh-exec) makes it the child subreaper of everything it starts:
// an orphan of the run is reparented to toh-exec instead of to init, and once the
// command exited and was reaped, every child toh-exec still has is one the run left
// behind. Each is killed with SIGKILL, its own descendants with it (a process with
// SIGKILL pending can neither run user code again nor fork), and reaped; what a
// killed process forked in the meantime is reparented to toh-exec and ends in the
// next round. Decisions:
//
//   - Confined runs on both rungs; a danger-full-access command is the user's own,
//     left as it would be without toh-exec. Under bwrap the command's descendants
//     die with its PID namespace, but bwrap's own pid 1 does not always: bwrap 0.8
//     killed during its set-up (a forwarded ^C or SIGTERM at that moment) leaves
//     its pid 1 waiting for the handshake forever (in eventfd_read, before it sets
//     its parent-death signal), holding a copy of every mount of the host, so a
//     FUSE mount made before it never ends (a CI run hung on one). Reparented to
//     toh-exec, it is killed here, without the wait (killLeftovers: on every bwrap
//     run the runner's pid 1 is such an orphan for a moment, and waiting for its
//     namespace's teardown cost 0.9 ms). A toh-exec killed with SIGKILL at that
//     moment still leaves it.
//   - A leftover ends right after the command does, not when its output pipes are
//     drained: a run no longer waits [PipeGrace] for a background process that holds
//     its stderr.
//   - toh-exec killed by SIGKILL cannot end them (bwrap's --die-with-parent can):
//     they are reparented to init and live on, confined, as before.
//   - A process that stays in the kernel after SIGKILL (an uninterruptible wait) is
//     not waited for beyond leftoverWait without progress; it never runs user code
//     again either way. A fork storm makes progress and is outlasted.
//   - Children this process had before the run (inherited across the execve that
//     made it toh-exec) are not the run's and are left alone (ownChildren).
//   - Not closed: under a per-user process limit that the command's storm
//     exhausts, the Go runtime may fail to start a thread during the cleanup and
//     toh-exec dies (seen once by review); a cgroup, or a PID namespace the rung
//     cannot have, would end the run's processes without that risk.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// leftoverWait bounds how long endLeftovers waits for killed processes to exit.
const leftoverWait = 5 * time.Second

// becomeSubreaper makes this process the reaper of every orphan among its
// descendants (prctl PR_SET_CHILD_SUBREAPER, Linux 3.4). It is process-wide.
func becomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("becoming the reaper of the command's leftover processes: %w", err)
	}
	return nil
}

// ownChildren returns the children this process has before a run starts: ones it
// inherited across the execve that made it toh-exec (a wrapper's "helper &; exec
// toh-exec ..."), which are not the run's (found by review). nil when there are none,
// the common case, answered by one call.
func ownChildren() (map[int]bool, error) {
	if !hasChildren() {
		return nil, nil
	}
	kids, err := childrenOf("self")
	if err != nil {
		return nil, err
	}
	own := map[int]bool{}
	for _, k := range kids {
		own[k] = true
	}
	return own, nil
}

// endLeftovers kills and reaps every child this process has but those in keep (see
// ownChildren), and every descendant of theirs, until none is left or leftoverWait
// has passed. It must only run when no other child of this process is anybody
// else's to wait for. A child in keep is never reaped, so its pid is never reused.
func endLeftovers(keep map[int]bool) error {
	deadline := time.Now().Add(leftoverWait)
	pause := 20 * time.Microsecond
	for {
		kids, err := leftoverChildren(keep)
		if err != nil || len(kids) == 0 {
			return err
		}
		killTrees(kids)
		reaped := 0
		for _, pid := range kids {
			var ws unix.WaitStatus
			if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got == pid || errors.Is(err, unix.ECHILD) {
				reaped++
			}
		}
		if reaped > 0 {
			// Progress: a fork storm (clone(CLONE_PARENT) makes new children of
			// this process) is outlasted, not given up on (found by review). Only
			// killed processes that stay unreaped are waited for at most
			// leftoverWait: they never run user code again.
			deadline = time.Now().Add(leftoverWait)
			pause = 20 * time.Microsecond
		}
		if reaped == len(kids) {
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes the command left behind were killed but have not exited after %v", len(kids)-reaped, leftoverWait)
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
}

// killLeftovers is endLeftovers without the wait, for bwrap runs: one pass that sends
// SIGKILL to every child this process has but those in keep, and to their
// descendants, and reaps none. Under bwrap such a child is the runner's pid 1, which
// outlives the runner on every run (it is reparented here while its namespace is torn
// down) and is stuck for good only when the runner died during its set-up; waiting
// for the teardown made every bwrap run 0.9 ms slower (300 interleaved rounds), so
// what is killed is left to exit (and to be reaped by init after toh-exec exits).
func killLeftovers(keep map[int]bool) error {
	kids, err := leftoverChildren(keep)
	killTrees(kids)
	return err
}

// leftoverChildren lists this process's children but those in keep.
func leftoverChildren(keep map[int]bool) ([]int, error) {
	if !hasChildren() {
		return nil, nil
	}
	all, err := childrenOf("self")
	if err != nil {
		return nil, err
	}
	var kids []int
	for _, k := range all {
		if !keep[k] {
			kids = append(kids, k)
		}
	}
	return kids, nil
}

// killTrees sends SIGKILL to each of pids and every descendant of theirs, parents
// first: a killed parent cannot fork again, so only what was forked before its kill
// can be missed, and endLeftovers finds that in its next round, as this process's
// child or beneath a dying one.
func killTrees(pids []int) {
	tree := append([]int(nil), pids...)
	for i := 0; i < len(tree); i++ {
		_ = unix.Kill(tree[i], unix.SIGKILL)
		grand, _ := childrenOf(strconv.Itoa(tree[i]))
		tree = append(tree, grand...)
	}
}

// hasChildren asks the kernel whether this process has any child, alive or not yet
// reaped, in one call (waitid without reaping, WNOHANG): ECHILD means none. It is
// the common case, and listing them from /proc costs a file per thread.
func hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WSTOPPED|unix.WCONTINUED|unix.WNOHANG|unix.WNOWAIT, nil)
	return !errors.Is(err, unix.ECHILD)
}

// childrenOf lists the children of process pid ("self" for this one) from every
// thread's children file (each thread has its own), or, on a kernel without them
// (CONFIG_PROC_CHILDREN), by scanning every process's parent. A process that is gone
// has none.
func childrenOf(pid string) ([]int, error) {
	dir := filepath.Join("/proc", pid, "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		if pid != "self" {
			return nil, nil
		}
		return nil, fmt.Errorf("listing the command's leftover processes: %w", err)
	}
	var kids []int
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "children"))
		if errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(filepath.Join(dir, t.Name())); serr == nil {
				return childrenByScan(pid)
			}
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				kids = append(kids, n)
			}
		}
	}
	return kids, nil
}

// childrenByScan finds pid's children by the parent each process in /proc names.
func childrenByScan(pid string) ([]int, error) {
	if pid == "self" {
		pid = strconv.Itoa(os.Getpid())
	}
	want, err := strconv.Atoi(pid)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing the command's leftover processes: %w", err)
	}
	var kids []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the
		// fields are counted from the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(want) {
			kids = append(kids, n)
		}
	}
	return kids, nil
}
