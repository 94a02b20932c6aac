package sandbox

import (
	"os"

	"golang.org/x/sys/unix"
)

// pipeHeldBytes is how many bytes the pipe read by f holds (FIONREAD, TIOCINQ here).
// It goes through SyscallConn, not Fd, which would put f in blocking mode and so end
// its deadlines. See outputPipe in run.go.
func pipeHeldBytes(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil {
		return 0, err
	}
	return n, ierr
}
