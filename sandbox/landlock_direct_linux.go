package sandbox

// The Landlock rung without the re-exec: [Run] applies the launcher's plan to one OS
// thread of toh-exec and starts the command from that thread.
//
// Why: the launcher stage is a second Go program start on every run (about 1.5 ms of
// 2.3 ms for the stage alone on the reference machine), which put toh-exec's Landlock
// rung at 1.7x go-landlock's landlock-restrict where issue 3 asks for 1.3x.
//
// Why it is the same confinement: everything the launcher applies is per thread —
// the Landlock domain, no_new_privs, the seccomp filter (installed without TSYNC) and
// the capability sets all live in the thread's credentials — and clone(2) copies the
// calling thread's credentials into the child, which keeps them across execve as it
// would have kept the launcher's. The plan is built by the same code from the same
// flags, parsed back from the launcher argv ([Confined] keeps both), and the same
// failures are fatal. The child is confined from its first instruction, where the
// launcher process ran unconfined until it restricted itself.
//
// Why the rest of toh-exec stays unconfined: the goroutine locks itself to its
// thread before restricting it and never unlocks, so the Go scheduler runs nothing
// else there and retires the thread when the goroutine returns, right after the
// start; threads the runtime creates meanwhile are cloned by its template thread, not
// by a locked one. The main thread is never the restricted one: the runtime could not
// retire it (runtime.mexit parks it for good) and kill(2) of the process is checked
// against it.
//
// Why the command cannot reach back into toh-exec: the restricted thread shares the
// command's Landlock domain, in which Landlock allows ptrace and (signal scope or
// not) signals, and it shares toh-exec's memory and thread group with unrestricted
// threads. Two things keep the command away from it:
//
//   - toh-exec makes itself non-dumpable first (PR_SET_DUMPABLE 0): ptrace,
//     /proc/PID/mem, process_vm_writev and pidfd_getfd on any of its threads then
//     need CAP_SYS_PTRACE, which the command never holds
//     (TestLandlockDirectParentNotPtraceable shows the attach succeeding without it).
//   - The command is held at its exec until the restricted thread is gone. A signal
//     to that thread (kill(2) with its id, tgkill, pidfd_send_signal on /proc/TID, a
//     SIGIO owner) is a signal to toh-exec: SIGKILL ended the run with no result,
//     SIGSTOP froze it, SIGSEGV made the runtime crash with status 2. The window
//     was not microseconds: the thread must be scheduled again after the vfork and
//     return through os/exec, and a static program listing /proc/PPID/task reached
//     it in 18 of 40 runs of toh-exec on a loaded 2-CPU machine, where the launcher
//     stage, outside the command's domain on this ABI 7 kernel, was never reachable.
//     So the command is started with PTRACE_TRACEME (SysProcAttr.Ptrace): it stops
//     with SIGTRAP once its execve succeeded, before its first instruction; the
//     restricted thread, its tracer, detaches it into a SIGSTOP stop (holdAtExec)
//     and returns; the caller waits until that thread no longer exists (its pidfd,
//     then tgkill saying ESRCH: waitThreadGone) and only then sends SIGCONT. From
//     the command's first instruction on, no thread of toh-exec is in its domain.
//     TestLandlockDirectCommandCannotSignalItsStarter keeps the thread alive after
//     the start and shows it reached without the hold and out of reach with it;
//     TestLandlockDirectHoldLeavesNoTrace shows the command runs untraced and not
//     stopped. The hold costs a few context switches: `toh-exec --runner landlock
//     -- true` took a median 4.71 ms against 4.54 ms without it (300 interleaved
//     runs, load ~2 on 2 CPUs; p90 9.5 against 7.2 ms).
//
// The hold needs PTRACE_TRACEME from a thread without capabilities: Yama's
// ptrace_scope 2 and 3 refuse it, and so does a tracer of toh-exec itself (strace -f,
// a debugger, whose tracer takes the new child first), and so may a seccomp profile
// (as container runtimes may install). Under Yama Confine leaves the run to the
// launcher stage (landlockDirectUsable); every other refusal shows at the start,
// where the child fails before its exec and Run starts the launcher stage instead
// (holdRefusedError): the Landlock rung is meant for exactly such containers, and
// must not fail every run there. If toh-exec dies between the hold and
// the SIGCONT (a SIGKILL from its own caller), the command stays stopped, confined
// and harmless, until someone kills it: its process group is orphaned from the
// start (a session of its own), so the kernel sends it no SIGHUP/SIGCONT.
//
// What the command can still do to toh-exec, on either path (the launcher stage is no
// better): renice it and change its scheduling, since setpriority(2) and
// sched_setattr(2) need only the same uid and Landlock governs neither; that slows
// toh-exec, nothing more. Setting its rlimits with prlimit(2) could kill it (an
// address-space limit made toh-exec die of "out of memory" with status 2 and a
// traceback, and no result; a CPU limit on the fence host made a fenced run read as
// "the command did not run"): the seccomp filter refuses prlimit64 on any other
// process (EPERM) in every mode, on every architecture that has the filter
// (TestLandlockCommandCannotSetItsStartersLimits; workspace-write with the network
// allowed ran without a filter until review found that). Only bwrap's PID namespace
// hides toh-exec altogether. On a kernel without Landlock's signal scope (ABI < 6, or the erratum
// unfixed) it can also signal toh-exec through any of its threads.
// TestLandlockDirectRetiresItsThread checks that no thread of the process is left
// with no_new_privs or a seccomp filter.
//
// The working directory: the thread unshares its file-system context (CLONE_FS) and
// changes into the run's directory while it still holds its capabilities, as toh-exec
// did before starting the launcher, so a root caller whose directory only
// CAP_DAC_OVERRIDE lets it enter keeps working; the command is looked up in PATH there,
// with execvp(3)'s rules, as the launcher did. The environment is fixed first as
// exec.Cmd would give it to the launcher (with no Env: the inherited one plus PWD of
// the run's directory), so PATH and PWD are the launcher's too.
//
// Failures the launcher would have reported with exit 125 and one "landlock-run: "
// line (the plan, a rule path, the lookup, execve) are reported with that same line as
// the run's runner failure, and the line is written to stderr, as the launcher would
// have. The partial-enforcement notice is written to stderr before the start.
//
// Where a [Stage] runs between toh-exec and the command (the fence), Run keeps the
// launcher argv: the fence host and stage must not run restricted.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// launcherFailure is a failure of the Landlock rung before the command ran; line is
// the launcher's "landlock-run: " line for it.
type launcherFailure struct{ line string }

func (e *launcherFailure) Error() string { return e.line }

// holdRefusedError is a direct start refused because the command could not be held at
// its exec: PTRACE_TRACEME failed with EPERM in the child (a tracer of toh-exec took
// the child first, Yama, or a seccomp profile that refuses ptrace, as some container
// runtimes install). Nothing ran; [Run] then starts the launcher stage instead, which
// needs no ptrace.
type holdRefusedError struct{ err error }

func (e *holdRefusedError) Error() string { return e.err.Error() }
func (e *holdRefusedError) Unwrap() error { return e.err }

func landlockDirectFail(err error) error {
	return &launcherFailure{line: landlockFailureLine(err)}
}

// startLandlocked starts cmd (Path and Args are replaced by f's command) confined by
// the plan for f. A failure before the command runs is a *launcherFailure.
func startLandlocked(cmd *exec.Cmd, f landlockFlags) (child, error) {
	p, err := startLandlockedThread(cmd, f)
	var lf *launcherFailure
	var hr *holdRefusedError
	if !errors.As(err, &hr) && errors.As(err, &lf) && cmd.Stderr != nil {
		_, _ = io.WriteString(cmd.Stderr, lf.line+"\n")
	}
	return p, err
}

func startLandlockedThread(cmd *exec.Cmd, f landlockFlags) (child, error) {
	plan, err := newLandlockPlan(f, LandlockABI(), landlockErrata(), landlockSeccompArch.supported())
	if err != nil {
		return nil, landlockDirectFail(err)
	}
	// The restricted thread shares this process's memory with threads that are not
	// restricted, and the command's domain is that thread's: Landlock lets a process
	// ptrace another in its own domain. A non-dumpable process can be ptraced (or
	// read through /proc/PID/mem, process_vm_writev, pidfd_getfd) only with
	// CAP_SYS_PTRACE, which the command never holds. Never undone: the command's
	// descendants may outlive it.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, landlockDirectFail(fmt.Errorf("making toh-exec non-dumpable: %w", err))
	}
	done := make(chan restrictedStart, 1)
	// Not on the main thread (onOwnThread): besides being parked for good, it is the
	// thread whose credentials kill(2) of this process is checked against, so the
	// command, in the same domain, could signal toh-exec through it whatever
	// Landlock's signal scope says.
	onOwnThread(func() { done <- startOnRestrictedThread(cmd, f, plan) })
	r := <-done
	if r.err != nil || !r.held {
		return r.proc, r.err
	}
	// The command is stopped before its first instruction. Let it go only once the
	// thread that started it, the one thread of toh-exec in its Landlock domain, is
	// gone: from then on nothing of toh-exec shares its domain.
	if err := waitThreadGone(r.tid, r.pidfd); err != nil {
		_ = r.proc.Kill()
		_, _, _ = r.proc.wait()
		return nil, landlockDirectFail(err)
	}
	if plan.abiPartial && cmd.Stderr != nil {
		// Before the command's first instruction, as the launcher prints it before
		// its exec; only now, so that a start that falls back to the launcher stage
		// (holdRefusedError) does not print it twice.
		_, _ = io.WriteString(cmd.Stderr, landlockNoticePartial+"\n")
	}
	if err := r.proc.Signal(unix.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = r.proc.Kill()
		_, _, _ = r.proc.wait()
		return nil, landlockDirectFail(fmt.Errorf("resuming the command: %w", err))
	}
	return r.proc, nil
}

// restrictedStart is what the restricted thread hands back: the start's error, and
// for a command held at its exec, the thread's id and a pidfd of it (-1 on kernels
// before 6.9, which have no thread pidfds).
type restrictedStart struct {
	err   error
	proc  child // the started command, when err is nil
	held  bool
	tid   int
	pidfd int
}

// Test hooks: landlockDirectHold false starts the command without holding it at its
// exec (the exposure TestLandlockDirectCommandCannotSignalItsStarter shows), and
// landlockDirectAfterStart runs on the restricted thread right after the start, so a
// test can keep that thread alive.
var (
	landlockDirectHold       = true
	landlockDirectAfterStart func()
)

// startOnRestrictedThread runs on a locked thread: working directory, lookup,
// restriction, start, and the hold of the command at its exec.
func startOnRestrictedThread(cmd *exec.Cmd, f landlockFlags, plan landlockPlan) restrictedStart {
	fail := func(err error) restrictedStart { return restrictedStart{err: landlockDirectFail(err), pidfd: -1} }
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fail(fmt.Errorf("unsharing the working directory: %w", err))
	}
	// The environment the launcher would have had, fixed before Dir is cleared: with
	// no Env, exec.Cmd gives the inherited one plus PWD=Dir, and the lookup below
	// needs its PATH.
	cmd.Env = cmd.Environ()
	if cmd.Dir != "" {
		if err := unix.Chdir(cmd.Dir); err != nil {
			return fail(fmt.Errorf("working directory %q: %w", cmd.Dir, err))
		}
		cmd.Dir = ""
	}
	path, err := lookPathEnv(f.argv[0], cmd.Env)
	if err != nil {
		return fail(fmt.Errorf("command %q: %w", f.argv[0], err))
	}
	cmd.Path, cmd.Args = path, f.argv
	res := restrictedStart{held: landlockDirectHold, tid: unix.Gettid(), pidfd: -1}
	if res.held {
		// Opened before the restriction, though none governs it: the caller polls
		// it to see this thread end.
		if fd, err := unix.PidfdOpen(res.tid, unix.PIDFD_THREAD); err == nil {
			res.pidfd = fd
		}
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Ptrace = true
	}
	failHeld := func(err error) restrictedStart {
		if res.pidfd >= 0 {
			unix.Close(res.pidfd)
		}
		return fail(err)
	}
	if err := plan.apply(); err != nil {
		return failHeld(err)
	}
	if plan.abiPartial && !res.held && cmd.Stderr != nil {
		_, _ = io.WriteString(cmd.Stderr, landlockNoticePartial+"\n")
	}
	proc, err := startForked(cmd)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if res.held && errors.Is(err, unix.EPERM) {
			r := failHeld(err)
			r.err = &holdRefusedError{err: fmt.Errorf("holding %q at its exec: PTRACE_TRACEME: %w", f.argv[0], err)}
			return r
		}
		if plan.abiPartial && res.held && cmd.Stderr != nil {
			// As the launcher: the notice, then the one failure line.
			_, _ = io.WriteString(cmd.Stderr, landlockNoticePartial+"\n")
		}
		return failHeld(fmt.Errorf("executing %q: %w", f.argv[0], err))
	}
	if res.held {
		if err := holdAtExec(proc.pid()); err != nil {
			_ = proc.Kill()
			_, _, _ = proc.wait()
			return failHeld(err)
		}
	}
	res.proc = proc
	if landlockDirectAfterStart != nil {
		landlockDirectAfterStart()
	}
	return res
}

// holdAtExec runs on the thread that started the command, which is its tracer
// (SysProcAttr.Ptrace: PTRACE_TRACEME right before execve). A traced process stops
// with SIGTRAP once its execve succeeded, before the new program's first
// instruction; detaching it with SIGSTOP turns that stop into an ordinary stop, which
// outlasts this thread and ends with the SIGCONT the caller sends once this thread is
// gone. A command that died before it stopped is left for Wait to report.
func holdAtExec(pid int) error {
	code, status, err := waitChildState(pid)
	if err != nil {
		return fmt.Errorf("waiting for the command to reach its exec: %w", err)
	}
	switch {
	case code == cldTrapped && status == int32(unix.SIGTRAP):
	case code == cldExited || code == cldKilled || code == cldDumped:
		return nil
	default:
		return fmt.Errorf("the command stopped (code %d, signal %d) before its exec completed", code, status)
	}
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, uintptr(unix.SIGSTOP), 0, 0); errno != 0 {
		return fmt.Errorf("detaching the command into a stop: %w", errno)
	}
	code, status, err = waitChildState(pid)
	if err != nil {
		return fmt.Errorf("waiting for the command to stop: %w", err)
	}
	switch {
	case code == cldStopped && status == int32(unix.SIGSTOP):
	case code == cldExited || code == cldKilled || code == cldDumped:
	default:
		return fmt.Errorf("the command did not stop after its exec (code %d, signal %d)", code, status)
	}
	return nil
}

// si_code values of SIGCHLD (include/uapi/asm-generic/siginfo.h).
const (
	cldExited  = 1
	cldKilled  = 2
	cldDumped  = 3
	cldTrapped = 4
	cldStopped = 5
)

// waitChildState waits for pid to stop or end and returns waitid's si_code and
// si_status, leaving the state for later waits (WNOWAIT): Wait still reaps it.
func waitChildState(pid int) (code, status int32, err error) {
	var info unix.Siginfo
	for {
		err = unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return 0, 0, err
	}
	// The SIGCHLD fields of siginfo_t: si_pid, si_uid, si_status after the three
	// ints, aligned to 8 bytes on 64-bit architectures.
	raw := (*[unsafe.Sizeof(info)]byte)(unsafe.Pointer(&info))
	off := 12
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16
	}
	status = *(*int32)(unsafe.Pointer(&raw[off+8]))
	return info.Code, status, nil
}

// waitThreadGone waits until the thread tid of this process no longer exists (its
// pidfd, where there is one, reports the exit; then its id no longer names a thread
// of this process), for at most landlockThreadEndLimit.
func waitThreadGone(tid, pidfd int) error {
	deadline := time.Now().Add(landlockThreadEndLimit)
	if pidfd >= 0 {
		defer unix.Close(pidfd)
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, int(time.Until(deadline)/time.Millisecond)+1)
			if n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) || time.Now().After(deadline) {
				break
			}
		}
	}
	pid := unix.Getpid()
	for pause := time.Duration(0); ; pause = min(2*pause+10*time.Microsecond, time.Millisecond) {
		if err := unix.Tgkill(pid, tid, 0); errors.Is(err, unix.ESRCH) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the thread that started the command (%d) did not end within %v", tid, landlockThreadEndLimit)
		}
		time.Sleep(pause)
	}
}

// landlockDirectUsable says whether Run may start the command itself: the hold at its
// exec needs PTRACE_TRACEME from a thread without capabilities, which Yama refuses
// at ptrace_scope 2 (admin-only attach) and 3 (no attach) on every run, so there the
// launcher stage confines the command from the start. Refusals that depend on the
// moment (toh-exec traced by strace -f or a debugger, whose tracer takes the new
// child first; a seccomp profile that refuses ptrace) show at the start, where Run
// falls back to the launcher stage (holdRefusedError): not worth a read of
// /proc/self/status on every run.
func landlockDirectUsable() bool {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil {
		return true // no Yama
	}
	scope, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && scope < 2
}

// landlockThreadEndLimit bounds the wait for the restricted thread to end; the
// runtime ends it right after its goroutine returns.
const landlockThreadEndLimit = 5 * time.Second

// lookPathEnv is exec.LookPath with the PATH of env (the last PATH= entry, as
// os/exec dedups) and the thread's working directory: a name with a slash is used as
// it is, otherwise the first executable regular file along PATH wins (an empty entry
// is "."), relative results included, as execvp(3) would.
func lookPathEnv(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		if err := isExecutable(file); err != nil {
			return "", err
		}
		return file, nil
	}
	for _, dir := range PathDirs(env) {
		p := filepath.Join(dir, file)
		if !strings.Contains(p, "/") {
			p = "./" + p // execve(2) would otherwise be handed a bare name
		}
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

func isExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return unix.EISDIR
	}
	return unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS)
}
