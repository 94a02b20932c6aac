package fencehost

import (
	"fmt"
	"os/exec"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Which callers a fence acts for, for a caller other than root.
//
// Such a run's fences are mounted on the host by fusermount3 and exist there until
// the stage holds its copies (hostmounts_linux.go). Meanwhile any process of the
// same user can reach them, and keep what it reached (a working directory, an
// O_PATH descriptor of the mount's root, which takes no request to open) after
// they are detached. A concurrent confined run of that user whose writable roots
// cover the fence directory (its workspace $HOME, with the directory under
// ~/.cache) wrote through another run's fence into that run's workspace, outside
// its own roots, and its refusals were recorded as the other run's (found by
// review). So each fence acts only for the run's own processes: those in the
// user namespace the stage was started in, or in one created beneath it (bwrap
// makes one). A process of another run is in the machine's user namespace or one
// created beneath that, never beneath the stage's, and cannot join the stage's:
// setns needs ptrace access to a process in it, which Landlock's scoping and
// bwrap's PID namespace deny. The check costs a few system calls per mutation
// (reads are never refused, see fusefence.Config.Admit).

// nsGetParent is NS_GET_PARENT (linux/nsfs.h: _IO(0xb7, 0x2)): a descriptor of the
// user namespace that owns the one given.
const nsGetParent = 0xb702

// maxUserNSDepth is the kernel's limit on nested user namespaces.
const maxUserNSDepth = 32

// nsID names a namespace by its nsfs inode.
type nsID struct{ dev, ino uint64 }

// stageNS is the stage's user namespace, set once it has started; until then
// the fence acts for nobody.
type stageNS struct{ id atomic.Pointer[nsID] }

// learn records the user namespace of the started stage.
func (s *stageNS) learn(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return fmt.Errorf("the fence stage has not started")
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", &st); err != nil {
		return fmt.Errorf("the fence stage's user namespace: %w", err)
	}
	s.id.Store(&nsID{uint64(st.Dev), st.Ino})
	return nil
}

// admit reports whether the thread tid is in the stage's user namespace or one
// created beneath it.
func (s *stageNS) admit(tid uint32) bool {
	want := s.id.Load()
	if want == nil {
		return false
	}
	fd, err := unix.Open("/proc/"+strconv.FormatUint(uint64(tid), 10)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	for range maxUserNSDepth + 1 {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			break
		}
		if uint64(st.Dev) == want.dev && st.Ino == want.ino {
			unix.Close(fd)
			return true
		}
		parent, err := unix.IoctlRetInt(fd, nsGetParent)
		unix.Close(fd)
		if err != nil {
			return false // the machine's own namespace, or one this process cannot see
		}
		fd = parent
	}
	unix.Close(fd)
	return false
}
