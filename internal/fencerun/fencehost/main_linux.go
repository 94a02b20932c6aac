package fencehost

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/fencerun"
	"github.com/toh-sandbox/toh/internal/trustedpath"
	"github.com/toh-sandbox/toh/policy"
	"github.com/toh-sandbox/toh/sandbox"
)

// HostMain is "toh-mount __fence-run": it fences the roots, runs the runner argv
// through the stage, and writes "ready" and then its [fencerun.Report] to the
// result descriptor. It exits as the stage did: with its status, or by its signal.
// Failures before the command ran are an "error" line and status 125.
func HostMain(args []string) int {
	var (
		resultFD = -1
		polJSON  string
		cwd      string
		path     string
		roots    []string
		guard    []string
	)
	args, ok := internalArgs(fencerun.HostArg, args, func(name, value string) bool {
		switch name {
		case "--result-fd":
			resultFD, _ = strconv.Atoi(value)
		case "--policy-json":
			polJSON = value
		case "--cwd":
			cwd = value
		case "--path":
			path = value
		case "--root":
			roots = append(roots, value)
		case "--guard":
			guard = append(guard, value)
		default:
			return false
		}
		return true
	})
	if !ok {
		return 125
	}
	if resultFD < 3 || len(args) < 2 || path == "" || cwd == "" || len(roots) == 0 {
		return usage("internal host of toh-exec --fence; not for direct use")
	}
	// fusermount3 (a caller other than root) is looked up in system directories
	// only; the command gets the caller's environment.
	env := trustedpath.Set()
	unix.CloseOnExec(resultFD)
	out := os.NewFile(uintptr(resultFD), "fence-result")
	// The descriptors below the result's are the runner's (its status pipe): they go
	// on to the stage at the same numbers, and to nothing else the host starts
	// (fusermount3 stays running for the mount's lifetime, and would hold them).
	var pass []*os.File
	for fd := 3; fd < resultFD; fd++ {
		unix.CloseOnExec(fd)
		pass = append(pass, os.NewFile(uintptr(fd), "runner"))
	}
	fail := func(err error) int {
		fmt.Fprintf(out, "error %s\n", oneLine(err.Error()))
		return 125
	}
	var pol policy.Execution
	if err := json.Unmarshal([]byte(polJSON), &pol); err != nil {
		return fail(fmt.Errorf("the run's policy: %w", err))
	}
	self, err := os.Executable()
	if err != nil {
		return fail(fmt.Errorf("locating toh-mount: %w", err))
	}
	run, err := New(self, pol, roots, guard)
	if err != nil {
		return fail(err)
	}
	cmd := &exec.Cmd{Path: path, Args: args[1:], Dir: cwd, Env: env,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: pass}
	// Caught from before Wrap: for a caller other than root, Wrap mounts on the host,
	// and go-fuse's last mount step opens and closes a file on that mount, served
	// by this process; killed by a default action in between, a thread would wait
	// for its own answer forever. Queued signals reach the stage once it runs.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	if err := run.Wrap(cmd); err != nil {
		return fail(err)
	}
	err = cmd.Start()
	for _, f := range pass {
		// The stage holds them now: a runner's reader sees EOF once the runner is
		// gone, not once the host is.
		f.Close()
	}
	if err != nil {
		run.Finished()
		return fail(fmt.Errorf("starting the fence stage: %w", err))
	}
	if err := run.Started(); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		run.Finished()
		return fail(err)
	}
	fmt.Fprintf(out, "ready\n")
	stop := sandbox.ForwardSignals(sigs, cmd.Process)
	_ = cmd.Wait()
	stop()
	facts, failure := run.Finished()
	rep := fencerun.Report{Roots: facts.Roots, Denials: facts.Denials, Dropped: facts.Dropped, ExecFailure: failure}
	line, _ := json.Marshal(rep)
	out.Write(append(line, '\n'))
	out.Close()

	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		// Die the same way, so toh-exec sees what the stage's child saw.
		sig := ws.Signal()
		signal.Reset(sig)
		dieBy(sig)
		time.Sleep(time.Second)
		return 128 + int(sig)
	}
	return cmd.ProcessState.ExitCode()
}

// dieBy ends the process by sig as the kernel's default action would. Go's runtime
// keeps its own handler for every signal it was not told about: it ignores a
// SIGPIPE sent by kill, and turns SIGSEGV into a crash report and exit status 2,
// so a command that died by such a signal was reported as an exit status instead.
// The disposition is set back to SIG_DFL with a raw rt_sigaction (no core file: the
// command's own, if any, is the one that counts) and the signal sent to this thread.
func dieBy(sig syscall.Signal) {
	runtime.LockOSThread()
	// Not dumpable: no core at all, whatever RLIMIT_CORE and core_pattern (a pipe
	// to a crash collector ignores a zero limit) say.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	var dfl [4]uint64 // struct sigaction, all zero: SIG_DFL, no flags, empty mask
	unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	var set unix.Sigset_t
	set.Val[(int(sig)-1)/64] |= 1 << ((uint(sig) - 1) % 64)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
}

var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func usage(msg string) int {
	fmt.Fprintf(os.Stderr, "toh-mount %s: %s\n", fencerun.HostArg, msg)
	return 125
}

// internalArgs reads the "--name value ... -- ARGV..." form both internal roles
// take, handing each option to set in order (false: unknown), and returns what
// follows the options ("--" included). A bad option is reported on stderr.
func internalArgs(role string, args []string, set func(name, value string) bool) ([]string, bool) {
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			fmt.Fprintf(os.Stderr, "toh-mount %s: missing value for %s\n", role, args[0])
			return nil, false
		}
		if !set(args[0], args[1]) {
			fmt.Fprintf(os.Stderr, "toh-mount %s: unknown option %s\n", role, args[0])
			return nil, false
		}
		args = args[2:]
	}
	return args, true
}

func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\n' || c == '\r' {
			b[i] = ' '
		}
	}
	return string(b)
}
