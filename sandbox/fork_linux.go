package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// startForked starts cmd as cmd.Start would, but with syscall.ForkExec instead of
// os.StartProcess. The first os.StartProcess of a process tests whether pidfds work,
// and the test forks and reaps a throwaway child (clone(CLONE_VFORK|CLONE_PIDFD));
// toh-exec starts exactly one program per run (bwrap, or the command on the Landlock
// rung), so that was 0.12 ms of every run (bench/README.md). What cmd.Start does
// besides is done here: the environment is cmd.Environ() (the inherited one plus PWD
// for a Dir, duplicates dropped), standard streams and ExtraFiles that are files are
// passed as they are (a nil ExtraFiles entry is closed in the child), nil standard
// streams are /dev/null, and Dir and SysProcAttr go to the fork. A stream that
// os/exec would have to copy through a pipe of its own (a Stdin that is not a file)
// keeps cmd.Start. A failure is the *fs.PathError os.StartProcess returns ("fork/exec"
// and cmd.Path, around the errno of the fork or of the child's chdir or exec), so
// the runner-failure rule reads it the same (isRunnerSpawnError).
func startForked(cmd *exec.Cmd) (child, error) {
	var files [3]*os.File
	for i, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		switch f := s.(type) {
		case nil:
			flag := os.O_WRONLY
			if i == 0 {
				flag = os.O_RDONLY
			}
			null, err := os.OpenFile(os.DevNull, flag, 0)
			if err != nil {
				return nil, err
			}
			defer null.Close()
			files[i] = null
		case *os.File:
			if f == nil {
				return startExec(cmd)
			}
			files[i] = f
		default:
			return startExec(cmd)
		}
	}
	fds := []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()}
	for _, f := range cmd.ExtraFiles {
		if f == nil {
			fds = append(fds, ^uintptr(0))
		} else {
			fds = append(fds, f.Fd())
		}
	}
	pid, err := syscall.ForkExec(cmd.Path, cmd.Args, &syscall.ProcAttr{Dir: cmd.Dir, Env: cmd.Environ(), Files: fds, Sys: cmd.SysProcAttr})
	runtime.KeepAlive(&files)
	runtime.KeepAlive(cmd.ExtraFiles)
	if err != nil {
		return nil, &fs.PathError{Op: "fork/exec", Path: cmd.Path, Err: err}
	}
	return &forkedChild{id: pid}, nil
}

// forkedChild is a command startForked started. Like os.Process (without a pidfd),
// it never signals a pid it has reaped: wait sees the exit without reaping it
// (WNOWAIT), marks the child done under the lock Signal holds, and only then reaps.
type forkedChild struct {
	id   int
	mu   sync.Mutex
	done bool
}

func (c *forkedChild) pid() int { return c.id }

func (c *forkedChild) Signal(s os.Signal) error {
	sig, ok := s.(syscall.Signal)
	if !ok {
		return fmt.Errorf("signal %v: unsupported signal type", s)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return os.ErrProcessDone
	}
	if err := syscall.Kill(c.id, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return os.NewSyscallError("kill", err)
	}
	return nil
}

func (c *forkedChild) Kill() error { return c.Signal(syscall.SIGKILL) }

func (c *forkedChild) wait() (code, sig int, err error) {
	var info unix.Siginfo
	for {
		err = unix.Waitid(unix.P_PID, c.id, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return 0, 0, os.NewSyscallError("waitid", err)
	}
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
	var ws syscall.WaitStatus
	for {
		_, err = syscall.Wait4(c.id, &ws, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return 0, 0, os.NewSyscallError("wait4", err)
	}
	if ws.Signaled() {
		return 0, int(ws.Signal()), nil
	}
	return ws.ExitStatus(), 0, nil
}

// onOwnThread runs fn, without waiting for it, on an OS thread that is locked to it
// for good, so that the runtime retires the thread when fn returns instead of
// running other goroutines on whatever fn changed about it for good (a Landlock
// domain, a seccomp filter, no_new_privs). It is never the main thread, which the
// runtime cannot retire: that would be parked, changed, for the rest of the process.
func onOwnThread(fn func()) {
	var run func()
	run = func() {
		runtime.LockOSThread() // never unlocked
		if unix.Gettid() == unix.Getpid() {
			go run()
			return
		}
		fn()
	}
	go run()
}
