package fencehost

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
// created beneath it. A thread whose namespaces this process may not read (one
// running a program it cannot read is not dumpable, and its namespaces are then
// root's to read, found by review: such a program's writes were refused, and its
// refusals went unrecorded) is judged by its parent instead, up to a bound: a
// process of another run never has a parent in the stage's namespace, since an
// orphan goes to a subreaper or init of its own ancestry.
func (s *stageNS) admit(tid uint32) bool {
	want := s.id.Load()
	if want == nil {
		return false
	}
	// pin holds the ancestor being judged, once it is one: its PID cannot name
	// another process while it is alive, so it is checked alive after its
	// namespace was read. The thread itself waits in the request being judged.
	pid, pin := int(tid), -1
	defer func() {
		if pin >= 0 {
			unix.Close(pin)
		}
	}()
	for range maxUserNSDepth {
		in, err := inUserNS(pid, *want)
		if pin >= 0 && unix.PidfdSendSignal(pin, 0, nil, 0) != nil {
			return false // it exited meanwhile: the namespace read may be another's
		}
		if err != unix.EACCES {
			return in && err == nil
		}
		next, npin, err := pinnedParent(pid)
		if pin >= 0 {
			unix.Close(pin)
		}
		pin = npin
		if err != nil {
			return false
		}
		pid = next
	}
	return false
}

// inUserNS reports whether process pid is in the user namespace want or beneath it;
// EACCES when this process may not read pid's namespaces.
func inUserNS(pid int, want nsID) (bool, error) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	for range maxUserNSDepth + 1 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return false, err
		}
		if uint64(st.Dev) == want.dev && st.Ino == want.ino {
			unix.Close(fd)
			return true, nil
		}
		parent, err := unix.IoctlRetInt(fd, nsGetParent)
		unix.Close(fd)
		if err != nil {
			return false, nil // the machine's own namespace, or one this process cannot see
		}
		fd = parent
	}
	unix.Close(fd)
	return false, nil
}

// pinnedParent returns the parent of process pid and a pidfd of it, taken so that
// it is pid's parent: pid's parent is read again after the pidfd is open, and an
// exited parent hands its children to a subreaper before its PID can name another
// process, so an unchanged PPid means the pidfd is of the parent.
func pinnedParent(pid int) (int, int, error) {
	ppid, err := parentOf(pid)
	if err != nil {
		return 0, -1, err
	}
	pfd, err := unix.PidfdOpen(ppid, 0)
	if err != nil {
		return 0, -1, err
	}
	if again, err := parentOf(pid); err != nil || again != ppid {
		unix.Close(pfd)
		return 0, -1, unix.ESRCH
	}
	return ppid, pfd, nil
}

// parentOf reads the PPid of process pid from /proc/PID/status, which anyone may
// read.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			ppid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || ppid <= 0 {
				return 0, unix.ESRCH
			}
			return ppid, nil
		}
	}
	return 0, unix.ESRCH
}
