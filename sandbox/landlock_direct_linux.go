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
// Why the command cannot reach back into toh-exec: while the restricted thread lives
// (from the start until its goroutine returns, microseconds after the command's
// execve) it shares the command's Landlock domain, in which Landlock allows ptrace,
// and it shares toh-exec's memory with unrestricted threads. So toh-exec makes itself
// non-dumpable first (PR_SET_DUMPABLE 0): ptrace, /proc/PID/mem, process_vm_writev
// and pidfd_getfd on it then need CAP_SYS_PTRACE, which the command never holds
// (TestLandlockDirectParentNotPtraceable shows the attach succeeding without it). A
// signal to that thread within the window, or to toh-exec on a kernel without
// Landlock's signal scope (ABI < 6), can still kill toh-exec: the command then runs
// on, confined, without its report, as it could under the launcher stage on such
// kernels. TestLandlockDirectRetiresItsThread checks that no thread of the
// process is left with no_new_privs or a seccomp filter.
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
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// launcherFailure is a failure of the Landlock rung before the command ran; line is
// the launcher's "landlock-run: " line for it.
type launcherFailure struct{ line string }

func (e *launcherFailure) Error() string { return e.line }

func landlockDirectFail(err error) error {
	return &launcherFailure{line: landlockFailureLine(err)}
}

// startLandlocked starts cmd (Path and Args are replaced by f's command) confined by
// the plan for f. A failure before the command runs is a *launcherFailure.
func startLandlocked(cmd *exec.Cmd, f landlockFlags) error {
	err := startLandlockedThread(cmd, f)
	var lf *launcherFailure
	if errors.As(err, &lf) && cmd.Stderr != nil {
		_, _ = io.WriteString(cmd.Stderr, lf.line+"\n")
	}
	return err
}

func startLandlockedThread(cmd *exec.Cmd, f landlockFlags) error {
	plan, err := newLandlockPlan(f, LandlockABI(), landlockErrata(), landlockSeccompArch.supported())
	if err != nil {
		return landlockDirectFail(err)
	}
	// The restricted thread shares this process's memory with threads that are not
	// restricted, and the command's domain is that thread's: Landlock lets a process
	// ptrace another in its own domain. A non-dumpable process can be ptraced (or
	// read through /proc/PID/mem, process_vm_writev, pidfd_getfd) only with
	// CAP_SYS_PTRACE, which the command never holds. Never undone: the command's
	// descendants may outlive it.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return landlockDirectFail(fmt.Errorf("making toh-exec non-dumpable: %w", err))
	}
	done := make(chan error, 1)
	var run func()
	run = func() {
		// Never unlocked: the runtime retires this thread when the goroutine returns,
		// instead of running other goroutines on a restricted thread.
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: the runtime cannot end it and parks it for good
			// instead, and kill(2) of this process is checked against its
			// credentials, so the command, in the same domain, could signal
			// toh-exec through it whatever Landlock's signal scope says. Leave it
			// unrestricted (parked once this returns) and go on elsewhere.
			go run()
			return
		}
		done <- startOnRestrictedThread(cmd, f, plan)
	}
	go run()
	return <-done
}

// startOnRestrictedThread runs on a locked thread: working directory, lookup,
// restriction, start.
func startOnRestrictedThread(cmd *exec.Cmd, f landlockFlags, plan landlockPlan) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return landlockDirectFail(fmt.Errorf("unsharing the working directory: %w", err))
	}
	// The environment the launcher would have had, fixed before Dir is cleared: with
	// no Env, exec.Cmd gives the inherited one plus PWD=Dir, and the lookup below
	// needs its PATH.
	cmd.Env = cmd.Environ()
	if cmd.Dir != "" {
		if err := unix.Chdir(cmd.Dir); err != nil {
			return landlockDirectFail(fmt.Errorf("working directory %q: %w", cmd.Dir, err))
		}
		cmd.Dir = ""
	}
	path, err := lookPathEnv(f.argv[0], cmd.Env)
	if err != nil {
		return landlockDirectFail(fmt.Errorf("command %q: %w", f.argv[0], err))
	}
	cmd.Path, cmd.Args = path, f.argv
	if err := plan.apply(); err != nil {
		return landlockDirectFail(err)
	}
	if plan.abiPartial && cmd.Stderr != nil {
		_, _ = io.WriteString(cmd.Stderr, landlockNoticePartial+"\n")
	}
	if err := cmd.Start(); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return landlockDirectFail(fmt.Errorf("executing %q: %w", f.argv[0], err))
	}
	return nil
}

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
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
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
