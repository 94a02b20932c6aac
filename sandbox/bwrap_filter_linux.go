package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// startFiltered starts cmd (bwrap, or the fence host in front of it) from an OS
// thread of its own that has first installed the bwrap rung's network-deny filter
// (seccompPlan.vsockOnly); the filter is inherited by bwrap and everything it runs.
//
// Why: --unshare-net gives the command a network namespace of its own, but AF_VSOCK
// sockets belong to no network namespace (Linux 6.18), so on a virtual machine with
// a vsock transport a network-deny command could still reach the hypervisor's side
// (found by review on this project's CI machine, a Firecracker VM;
// TestBwrapNetworkDenyRefusesVsock). bwrap's own --seccomp would need the filter
// passed as a descriptor through the fence stage too; a filter on the starting thread
// reaches every path the same way. io_uring is refused with it, as on the Landlock
// rung, because its SOCKET operation makes sockets no syscall filter sees.
//
// The thread stays until the child has been reaped: bwrap's --die-with-parent (and
// the fence host's) is PR_SET_PDEATHSIG, which fires when the thread that forked the
// process ends, not the process.
//
// The thread sets no_new_privs first unless toh-exec runs as root (which may install
// a filter without it): a seccomp filter requires one or the other. A setuid bwrap
// then runs without its privileges, and where it needs them (no unprivileged user
// namespaces) fails, as a runner failure: the run does not happen. The thread is
// onOwnThread's, so the runtime retires it instead of running other goroutines on
// a filtered thread.
func startFiltered(cmd *exec.Cmd) (child, error) {
	if !landlockSeccompArch.supported() {
		return nil, fmt.Errorf("network deny under bwrap needs a seccomp filter, which this architecture (%s) lacks", runtime.GOARCH)
	}
	type started struct {
		c   child
		err error
	}
	done := make(chan started, 1)
	reaped := make(chan struct{})
	onOwnThread(func() {
		if os.Geteuid() != 0 {
			if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
				done <- started{err: fmt.Errorf("setting no_new_privs for the network filter: %w", err)}
				return
			}
		}
		if err := installSeccomp(seccompPlan{vsockOnly: true}); err != nil {
			done <- started{err: fmt.Errorf("network deny under bwrap: %w", err)}
			return
		}
		c, err := startExec(cmd)
		done <- started{c, err}
		if err == nil {
			<-reaped
		}
	})
	r := <-done
	if r.err != nil {
		return nil, r.err
	}
	return &filteredChild{child: r.c, reaped: reaped}, nil
}

// filteredChild lets the thread that started it end once it has been reaped.
type filteredChild struct {
	child
	reaped chan struct{}
	once   sync.Once
}

func (c *filteredChild) wait() (code, sig int, err error) {
	code, sig, err = c.child.wait()
	c.once.Do(func() { close(c.reaped) })
	return code, sig, err
}
