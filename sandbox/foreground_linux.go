package sandbox

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// signalSandbox delivers sig where a terminal's signal would have gone had the
// command run without toh-exec in the foreground: to every process of the run's
// PID namespace that is still in the process group the command started in (a
// shell's pipeline included, a daemon that made a session of its own not). It
// spares the two processes that are bwrap's own: bwrap outside, which would die
// by the signal (it forwards none: containers/bubblewrap#369), and the namespace's
// init, which a signal from an ancestor namespace reaches and kills. Either death
// kills every process of the run at once, so that before 2026-12-02 Ctrl-C, or a
// SIGTERM to toh-exec, ended a bwrap run without the command's own handlers: a git
// interrupted that way left index.lock, a make its half-written targets (found
// by review; the Landlock rung execs the command itself and always forwarded).
//
// root is the process Run started (bwrap, or a stage that starts it). It reports
// false when no init of a PID namespace is among root's descendants yet (bwrap
// still setting up, before the command started): the caller then signals root,
// ending a run that has not begun. Each process is signalled through a pidfd
// opened before its group is checked again, so a pid reused meanwhile is never
// signalled.
func signalSandbox(root int, sig syscall.Signal) bool {
	init := namespaceInit(root)
	if init == 0 {
		return false
	}
	_, group, _, ok := procStat(init)
	if !ok {
		return false
	}
	// The deepest and youngest first: a terminal signals a group at once, and one
	// at a time in the other order a pipeline's "cat" could see its input end
	// (sleep killed) and exit 0 before its own signal came, and the shell take
	// that for a handled ^C (seen in CI).
	var all []int
	descendants(init, func(p int) bool {
		all = append(all, p)
		return false
	})
	for _, p := range slices.Backward(all) {
		withPidfd(p, func(fd int) {
			if _, g, _, ok := procStat(p); ok && g == group {
				_ = unix.PidfdSendSignal(fd, sig, nil, 0)
			}
		})
	}
	return true
}

// maxSandboxProcs bounds the walks of descendants: a run that forks without end
// cannot hold a signal's delivery.
const maxSandboxProcs = 1 << 14

// descendants visits root's descendants (not root), nearest first, until visit
// returns true or maxSandboxProcs were seen.
func descendants(root int, visit func(p int) bool) {
	seen := map[int]bool{root: true}
	queue := kids(root)
	for len(queue) > 0 && len(seen) < maxSandboxProcs {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		if visit(p) {
			return
		}
		queue = append(queue, kids(p)...)
	}
}

// withPidfd runs fn with a pidfd of p, unless p is gone. Whatever fn checks of p
// through /proc after the open is then known to be of the process the pidfd names.
func withPidfd(p int, fn func(fd int)) {
	fd, err := unix.PidfdOpen(p, 0)
	if err != nil {
		return
	}
	fn(fd)
	unix.Close(fd)
}

// namespaceInit is the first descendant of root (root included) that is the init
// of a PID namespace below this process's, or 0.
func namespaceInit(root int) int {
	self := nsDepth(os.Getpid())
	if d, last := nsPid(root); d > self && last == 1 {
		return root
	}
	init := 0
	descendants(root, func(p int) bool {
		if d, last := nsPid(p); d > self && last == 1 {
			init = p
			return true
		}
		return false
	})
	return init
}

// nsDepth is how many PID namespaces p is seen in (0 when unknown).
func nsDepth(p int) int {
	d, _ := nsPid(p)
	return d
}

// nsPid reads p's NSpid line: how many PID namespaces see it, and its pid in the
// innermost.
func nsPid(p int) (depth, inner int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
	if err != nil {
		return 0, 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return len(f), n
		}
	}
	return 0, 0
}

// kids is childrenOf (leftovers_linux.go) by number, nothing when p is gone.
func kids(p int) []int {
	k, _ := childrenOf(strconv.Itoa(p))
	return k
}

// followJobControl makes a confined command stop and continue with toh-exec, as
// it would as part of the terminal's job: the command runs in a session of its own
// (see spawn), so the terminal's ^Z (SIGTSTP) reaches toh-exec alone. Before
// 2026-12-02 toh-exec stopped and the command ran on, reading what the user typed
// into the shell next (found by review). Now SIGTSTP stops every process of the
// run (stopRun), whatever its process group or session, then toh-exec itself; the
// SIGCONT of "fg" or "bg" continues them. A run that cannot be stopped is ended
// instead (SIGKILL): it would read the terminal on. Where the kernel discards a
// terminal's SIGTSTP (toh-exec's process group is orphaned, as under a harness's
// pty), toh-exec is not stopped and the run goes on at once, as for any program
// (stopSelf). It applies only while stdin is a terminal: with a pipe or a file
// nothing can be read from the user's typing. Not covered, and not coverable with
// signals (found by review): a run can continue itself while toh-exec is stopped
// (a timer that sends it SIGCONT; the kernel's SIGHUP and SIGCONT to a process group
// orphaned when a member is killed) and read on; a pty that toh-exec owns and
// relays, or a cgroup freezer, would close that. Nor is a job continued in the
// background ("bg", or started with "&") that reads the terminal stopped by the
// kernel (SIGTTIN), as it is outside the terminal's session. And under Landlock a
// toh-exec killed (SIGKILL) while stopped leaves the run stopped for good (bwrap's
// die-with-parent ends it).
// The returned function ends the following once the command was reaped.
func followJobControl(stdin any, proc child, bwrap bool) (stop func()) {
	f, ok := stdin.(*os.File)
	if !ok || f == nil {
		return func() {}
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return func() {}
	}
	jobs := make(chan os.Signal, 2)
	signal.Notify(jobs, syscall.SIGTSTP, syscall.SIGCONT)
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		var held []int // pidfds of the processes stopped here: SIGCONT is theirs only
		release := func(sig syscall.Signal) {
			for _, fd := range held {
				_ = unix.PidfdSendSignal(fd, sig, nil, 0)
				unix.Close(fd)
			}
			held = nil
		}
		defer release(unix.SIGCONT)
		for {
			select {
			case s := <-jobs:
				if s == syscall.SIGCONT {
					release(unix.SIGCONT)
					continue
				}
				stopped, ok := stopRun(proc, bwrap)
				held = append(held, stopped...)
				if !ok {
					// Processes still ran after every pass: end the run rather
					// than stop with it reading the terminal.
					release(unix.SIGKILL)
					runProcesses(proc, bwrap, func(fd, _ int) { _ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) })
					_ = proc.Kill()
					fmt.Fprintln(os.Stderr, "toh-exec: the run could not be stopped (its processes kept running); it was ended")
					continue
				}
				stopSelf()
				// Continued ("fg", "bg"), or the kernel discarded the stop: the run
				// goes on either way.
				release(unix.SIGCONT)
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(jobs)
		close(done)
		<-ended
	}
}

// stopSelf stops this process the way a terminal's SIGTSTP stops any program, and
// returns once it was continued, or at once where the kernel discards the stop: a
// SIGTSTP with the default action, sent to this very thread, which stops in its
// return from the kill until SIGCONT. The kernel discards it where the process
// group is orphaned (no shell in the session to continue it: a harness's pty, the
// init of a PID namespace), which toh-exec once guessed from its ancestors, and
// stopped for good, or ignored ^Z, where the guess was wrong (found by reviews).
// The default action is set with rt_sigaction itself for the moment: the Go
// runtime keeps its own handler once os/signal was asked for SIGTSTP, and
// signal.Reset does not remove it.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old kernelSigaction
	dfl := kernelSigaction{} // SIG_DFL
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGTSTP), uintptr(unsafe.Pointer(&dfl)), uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
		_ = unix.Kill(os.Getpid(), unix.SIGSTOP)
		return
	}
	_ = unix.Tgkill(os.Getpid(), unix.Gettid(), unix.SIGTSTP)
	unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGTSTP), uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
}

// kernelSigaction is the kernel's struct sigaction on 64-bit Linux (amd64, arm64).
type kernelSigaction struct {
	handler, flags, restorer uintptr
	mask                     uint64
}

// stopRun stops every process of the run with SIGSTOP, in passes until one finds
// no thread of any of them running (a process may fork until it stops, a thread
// outlive its process's main thread or that thread sit in a ptrace stop, and a
// process blocked in the kernel stops when it returns; all found by review), at
// most stopPasses of them; ok is false when threads still ran after the last. It
// returns a pidfd of each process it signalled, for the SIGCONT that continues
// them.
func stopRun(proc child, bwrap bool) (stopped []int, ok bool) {
	have := map[int]bool{}
	for range stopPasses {
		running := 0
		runProcesses(proc, bwrap, func(fd, p int) {
			if unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0) != nil {
				return // gone
			}
			if !have[p] {
				if dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
					have[p] = true
					stopped = append(stopped, dup)
				}
			}
			if threadsRunning(p) {
				running++
			}
		})
		if running == 0 {
			return stopped, true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return stopped, false
}

const stopPasses = 50

// threadsRunning reports whether a thread of p is neither stopped, traced, dead,
// nor in an uninterruptible wait in the kernel (D): such a thread has the SIGSTOP
// just sent pending and stops before it runs its own code again, and one blocked
// for long (a slow disk, a hung network file system) must not have the run killed
// as unstoppable. A read of a terminal waits interruptibly (S).
func threadsRunning(p int) bool {
	dir := "/proc/" + strconv.Itoa(p) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, t := range tasks {
		switch procState(dir + t.Name()) {
		case 'T', 't', 'Z', 'X', 'D', 0:
		default:
			return true
		}
	}
	return false
}

// runProcesses calls fn with a pidfd of every process of the run: the descendants
// of the init of its PID namespace under bwrap (orphans are reparented to that init
// or a subreaper below it, so none is missed), or of bwrap itself while there is no
// namespace yet; otherwise the descendants of this process, which is the child
// subreaper of its runs (leftovers_linux.go), so a process that detached is still
// among them. The processes come from one scan of /proc, with no cap: a run of more
// processes than a walk would take is still stopped whole (found by review).
func runProcesses(proc child, bwrap bool, fn func(fd, p int)) {
	root := os.Getpid()
	if bwrap {
		if root = namespaceInit(proc.pid()); root == 0 {
			withPidfd(proc.pid(), func(fd int) { fn(fd, proc.pid()) })
			return
		}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, _, ok := procStat(p); ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	queue := slices.Clone(children[root])
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		queue = append(queue, children[p]...)
		withPidfd(p, func(fd int) { fn(fd, p) })
	}
}

// procStat reads p's parent, process group and session from /proc/p/stat.
func procStat(p int) (ppid, pgrp, sid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return 0, 0, 0, false
	}
	ppid, e1 := strconv.Atoi(f[1])
	pgrp, e2 := strconv.Atoi(f[2])
	sid, e3 := strconv.Atoi(f[3])
	return ppid, pgrp, sid, e1 == nil && e2 == nil && e3 == nil
}

// procState is the state letter (R, S, D, T, t, Z, ...) in the stat file of the
// /proc directory dir (a process's or a thread's), 0 when gone.
func procState(dir string) byte {
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
