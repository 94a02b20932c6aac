// Package fencehost is the toh-mount side of toh-exec --fence: the host that serves
// one run's fences ("toh-mount __fence-run") and the stage that mounts them in the
// run's own mount namespace ("toh-mount __fence-stage"). The design and its
// decisions are in package fencerun's documentation.
package fencehost

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/fusefence"
	"github.com/toh-sandbox/toh/internal/fencerun"
	"github.com/toh-sandbox/toh/policy"
	"github.com/toh-sandbox/toh/sandbox"
)

// The stage and the host talk over a SOCK_SEQPACKET pair, one message per step; the
// first byte says which.
const (
	msgFD    = 'F' // stage: root index, with the /dev/fuse descriptor attached
	msgAck   = 'A' // host: the fence for that descriptor answers
	msgErr   = 'E' // stage: a failure before the exec, then it exits
	msgReady = 'R' // stage: every root is fenced
	msgGo    = 'G' // host: exec the runner
	msgExec  = 'X' // stage: the exec of the runner failed
)

// stepTimeout bounds each step of the stage's setup as the host waits for it.
const stepTimeout = 30 * time.Second

// Run is the fence of one toh-exec run: it turns the runner's command into the
// stage, serves what the stage mounts, and collects the denials.
type Run struct {
	self  string
	pol   policy.Execution
	roots []string
	// guard are files every fence keeps read-only besides the policy's protected
	// paths (fusefence.Config.Guard).
	guard []string
	// umask is the process's umask when the run was prepared: the stage restores
	// it before the exec, since serving a fence sets this process's umask to 0
	// (fusefence.Mount) and a stage started after that would pass 0 on.
	umask int

	conn  *net.UnixConn
	child *os.File

	// For a caller other than root: the fences are mounted by fusermount3 on
	// mountpoints in the user's fence directory, one per root, before the stage
	// starts, holding lock; the stage binds them onto the roots.
	lock       *os.File
	hostMounts []string
	// mountDir is the user's fence directory (hostmounts_linux.go); the stage
	// hides it in the run's namespace.
	mountDir string
	// stage is the stage's process, and ns its user namespace: the fences act
	// only for processes in it or beneath it (admit_linux.go).
	stage *exec.Cmd
	ns    stageNS

	mu      sync.Mutex
	denials []sandbox.Denial
	dropped int
	// closed is set once the records are collected: a denial after that (a
	// leftover process of a Landlock run) is never answered, so it cannot be
	// refused without being on record; the host's exit then fails it with
	// ENOTCONN.
	closed bool
}

// never is not closed: a denial after the records were collected waits on it
// until the host exits.
var never = make(chan struct{})

// New prepares the fence for a run confined by pol whose runner argv expects roots
// to be fenced. self is the absolute path of the toh-mount binary (the stage).
func New(self string, pol policy.Execution, roots, guard []string) (*Run, error) {
	if self == "" {
		return nil, errors.New("the toh-mount binary is unknown")
	}
	rs := append([]string(nil), roots...)
	// Outermost first: a root inside another is mounted through the outer fence.
	sort.SliceStable(rs, func(i, j int) bool { return strings.Count(rs[i], "/") < strings.Count(rs[j], "/") })
	// Read without changing it (Umask sets and returns the old value).
	mask := unix.Umask(0o022)
	unix.Umask(mask)
	return &Run{self: self, pol: pol, roots: rs, guard: guard, umask: mask}, nil
}

// Wrap turns cmd into the fence stage, in a new mount namespace (and a new user
// namespace mapping only the caller's IDs, for a caller other than root), with the
// runner's program and argv as the stage's arguments.
func (r *Run) Wrap(cmd *exec.Cmd) error {
	r.stage = cmd
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fence: socketpair: %w", err)
	}
	parent := os.NewFile(uintptr(fds[0]), "fence-stage")
	c, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		unix.Close(fds[1])
		return fmt.Errorf("fence: %w", err)
	}
	r.conn = c.(*net.UnixConn)
	r.child = os.NewFile(uintptr(fds[1]), "fence-stage")

	args := []string{r.self, fencerun.StageArg, "--fd", strconv.Itoa(3 + len(cmd.ExtraFiles)), "--cwd", cmd.Dir, "--path", cmd.Path,
		"--umask", strconv.FormatInt(int64(r.umask), 8)}
	if os.Geteuid() != 0 {
		if err := r.mountOnHost(); err != nil {
			r.cleanup()
			return err
		}
		args = append(args, "--hide", r.mountDir)
		for i, root := range r.roots {
			args = append(args, "--bind", r.hostMounts[i], "--root", root)
		}
	} else {
		for _, root := range r.roots {
			args = append(args, "--root", root)
		}
	}
	args = append(args, "--")
	cmd.Args = append(args, cmd.Args...)
	cmd.Path = r.self
	cmd.ExtraFiles = append(cmd.ExtraFiles, r.child)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	attr := cmd.SysProcAttr
	attr.Cloneflags |= unix.CLONE_NEWNS
	if uid := os.Geteuid(); uid != 0 {
		gid := os.Getegid()
		attr.Cloneflags |= unix.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		// The stage keeps the caller's ID inside the new user namespace (so the
		// command's own ID stays what it was); an exec by a non-root ID clears the
		// capabilities that come with a new namespace, so CAP_SYS_ADMIN, needed to
		// mount, crosses the stage's exec as an ambient capability. The stage
		// clears it again before it execs the runner.
		attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	}
	return nil
}

// Started serves each descriptor the stage mounts and lets the stage exec the
// runner once every root is fenced.
func (r *Run) Started() error {
	r.child.Close()
	r.child = nil
	if os.Geteuid() != 0 {
		if err := r.ns.learn(r.stage); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	src := staticPolicy{x: r.pol}
	for {
		r.conn.SetReadDeadline(time.Now().Add(stepTimeout))
		n, oobn, _, _, err := r.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			return fmt.Errorf("fence: waiting for the fence stage: %w", err)
		}
		if n == 0 {
			return errors.New("fence: the fence stage exited before the command started")
		}
		switch buf[0] {
		case msgErr:
			return fmt.Errorf("fence: %s", buf[1:n])
		case msgReady:
			// The stage holds its own copies of the fences now; the host's
			// mountpoints go before the command can run.
			if err := r.detachHostMounts(); err != nil {
				return fmt.Errorf("fence: %w", err)
			}
			// Nothing is left in the private directory: it goes now, so a host
			// killed during the run leaves nothing behind on the host.
			r.cleanup()
			if _, err := r.conn.Write([]byte{msgGo}); err != nil {
				return fmt.Errorf("fence: %w", err)
			}
			return nil
		case msgFD:
			fd, err := receivedFD(oob[:oobn])
			if err != nil {
				return fmt.Errorf("fence: %w", err)
			}
			i, err := strconv.Atoi(string(buf[1:n]))
			if err != nil || i < 0 || i >= len(r.roots) {
				unix.Close(fd)
				return fmt.Errorf("fence: the stage sent a bad root index %q", buf[1:n])
			}
			unix.CloseOnExec(fd)
			root := r.roots[i]
			if _, err := fusefence.Mount(fusefence.Config{
				Source:     root,
				Mountpoint: root,
				Policy:     src,
				DevFD:      fd,
				OnDeny:     r.record,
				Guard:      r.guard,
			}); err != nil {
				unix.Close(fd)
				return fmt.Errorf("fence: serving %s: %w", root, err)
			}
			if _, err := r.conn.Write([]byte{msgAck}); err != nil {
				return fmt.Errorf("fence: %w", err)
			}
		default:
			return fmt.Errorf("fence: unexpected message %q from the stage", buf[:n])
		}
	}
}

// Finished returns the run's denial records, and the stage's exec failure if the
// runner never started.
func (r *Run) Finished() (*sandbox.FenceFacts, string) {
	if r.child != nil {
		r.child.Close()
	}
	r.cleanup()
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	failure := ""
	if r.conn != nil {
		// The stage is gone: whatever it sent is already queued.
		r.conn.SetReadDeadline(time.Now())
		buf := make([]byte, 4096)
		for {
			n, err := r.conn.Read(buf)
			if err != nil || n == 0 {
				break
			}
			if buf[0] == msgExec {
				failure = string(buf[1:n])
			}
		}
		r.conn.Close()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return &sandbox.FenceFacts{
		Roots:   append([]string{}, r.roots...),
		Denials: append([]sandbox.Denial{}, r.denials...),
		Dropped: r.dropped,
	}, failure
}

// mountOnHost mounts one fence per root, through fusermount3 as toh-mount does for
// such a caller, on mountpoints in a directory only the caller can enter, inside the
// run's window (hostmounts_linux.go).
//
// Why not mount inside the stage's user namespace, as for root: a FUSE file system
// mounted there can only show the IDs that namespace maps (the caller's own), and
// the kernel refuses every write to an inode whose owner or group it cannot map
// (HAS_UNMAPPED_ID), so a workspace directory of another group would be unwritable.
// Mounted by fusermount3, the fence shows the host's IDs as they are. The price is
// that the mounts exist in the host's namespace while the stage starts, in a 0700
// directory; they are detached before the command runs, and the rules in
// hostmounts_linux.go keep other namespaces that copied them meanwhile unharmed.
func (r *Run) mountOnHost() error {
	dir, err := mountDir(r.pol)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	r.mountDir = dir
	lock, err := lockMountDir(dir)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	r.lock = lock
	src := staticPolicy{x: r.pol}
	for i, root := range r.roots {
		mp, err := prepareMountpoint(dir, i)
		if err != nil {
			return fmt.Errorf("fence: %w", err)
		}
		if _, err := fusefence.Mount(fusefence.Config{Source: root, Mountpoint: mp, Policy: src, OnDeny: r.record, Admit: r.ns.admit, Guard: r.guard}); err != nil {
			return fmt.Errorf("fence: serving %s: %w", root, err)
		}
		r.hostMounts = append(r.hostMounts, mp)
	}
	return nil
}

// detachHostMounts lazily unmounts the host's copies of the fences; the run's
// namespace keeps its own, so the fences go on serving it. The mountpoints stay
// (see hostmounts_linux.go).
func (r *Run) detachHostMounts() error {
	for len(r.hostMounts) > 0 {
		mp := r.hostMounts[len(r.hostMounts)-1]
		if err := fusefence.Unmount(mp, true); err != nil {
			return err
		}
		r.hostMounts = r.hostMounts[:len(r.hostMounts)-1]
	}
	return nil
}

// cleanup detaches what mountOnHost left, whatever happened, and ends the run's
// window.
func (r *Run) cleanup() {
	if r.lock == nil {
		return
	}
	_ = r.detachHostMounts()
	r.lock.Close()
	r.lock = nil
}

// record keeps one denial; it runs inside the denied FUSE request.
func (r *Run) record(ev fusefence.Event) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		<-never
	}
	defer r.mu.Unlock()
	if len(r.denials) >= fencerun.MaxDenials {
		r.dropped++
		return
	}
	r.denials = append(r.denials, sandbox.Denial{Op: ev.Op, Path: ev.HostPath, Rule: ev.Rule, PID: ev.PID})
}

// staticPolicy is the run's policy, fixed for its lifetime like the runner's.
type staticPolicy struct{ x policy.Execution }

func (s staticPolicy) Current() (policy.Execution, uint64, error) { return s.x, 1, nil }

func receivedFD(oob []byte) (int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return -1, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, got...)
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("the stage sent %d descriptors, want 1", len(fds))
	}
	return fds[0], nil
}

// StageMain is "toh-mount __fence-stage": it runs in the run's new mount namespace,
// mounts a FUSE file system on each root and hands its descriptor to the host, then
// execs the runner. It never returns when the exec succeeds.
func StageMain(args []string) int {
	var (
		fd    = -1
		umask = -1
		cwd   string
		path  string
		roots []string
		binds = map[int]string{}
		hide  string
	)
	args, ok := internalArgs(fencerun.StageArg, args, func(name, value string) bool {
		switch name {
		case "--fd":
			fd, _ = strconv.Atoi(value)
		case "--cwd":
			cwd = value
		case "--path":
			path = value
		case "--umask":
			if m, err := strconv.ParseUint(value, 8, 12); err == nil {
				umask = int(m)
			}
		case "--root":
			roots = append(roots, value)
		case "--bind":
			binds[len(roots)] = value
		case "--hide":
			hide = value
		default:
			return false
		}
		return true
	})
	if !ok {
		return 125
	}
	if fd < 3 || umask < 0 || len(args) < 2 || path == "" || cwd == "" {
		fmt.Fprintf(os.Stderr, "toh-mount %s: internal stage of toh-exec --fence; not for direct use\n", fencerun.StageArg)
		return 125
	}
	argv := args[1:]
	// Capabilities are per thread: the ambient set is cleared, and the runner
	// exec'd, on this one thread (main's), or a thread still holding the ambient
	// CAP_SYS_ADMIN could be the one that execs.
	runtime.LockOSThread()
	unix.CloseOnExec(fd)
	s := stage{fd: fd}
	if len(binds) > 0 && hide == "" {
		fmt.Fprintf(os.Stderr, "toh-mount %s: --bind without --hide\n", fencerun.StageArg)
		return 125
	}
	if err := s.setup(cwd, roots, binds, hide); err != nil {
		s.send(msgErr, err.Error(), -1)
		return 125
	}
	if s.send(msgReady, "", -1) != nil || s.wait(msgGo) != nil {
		return 125
	}
	// No capability the stage was given for mounting may reach the runner.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		s.send(msgExec, fmt.Sprintf("toh-mount: fence stage: clearing ambient capabilities: %v", err), -1)
		return 125
	}
	// The command gets the caller's umask, whatever the host's is by now.
	unix.Umask(umask)
	err := unix.Exec(path, argv, os.Environ())
	s.send(msgExec, fmt.Sprintf("toh-mount: fence stage: exec %s: %v", path, err), -1)
	return 127
}

type stage struct{ fd int }

func (s stage) setup(cwd string, roots []string, binds map[int]string, hide string) error {
	// Nothing mounted here may reach the host: the new namespace starts with the
	// host's propagation (often shared).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the run's mounts private: %w", err)
	}
	if len(binds) > 0 {
		return s.bindAll(cwd, roots, binds, hide)
	}
	uid, gid := os.Getuid(), os.Getgid()
	for i, root := range roots {
		var st unix.Stat_t
		if err := unix.Stat(root, &st); err != nil {
			return fmt.Errorf("writable root %s: %w", root, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("writable root %s: not a directory", root)
		}
		dev, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening /dev/fuse: %w (the fence needs FUSE: load the fuse module and give this user read-write access to /dev/fuse, as distributions do with mode 0666)", err)
		}
		data := fmt.Sprintf("fd=%d,rootmode=%o,user_id=%d,group_id=%d,default_permissions", dev, st.Mode&unix.S_IFMT, uid, gid)
		if err := unix.Mount("toh", root, "fuse.toh", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
			unix.Close(dev)
			return fmt.Errorf("mounting the fence on %s: %w", root, err)
		}
		err = s.send(msgFD, strconv.Itoa(i), dev)
		unix.Close(dev)
		if err != nil {
			return err
		}
		if err := s.wait(msgAck); err != nil {
			return err
		}
	}
	// The inherited working directory is the one underneath a fenced root; enter
	// it again by name, through the fence.
	if err := unix.Chdir(cwd); err != nil {
		return fmt.Errorf("entering the working directory %s: %w", cwd, err)
	}
	return nil
}

// bindAll binds the fences the host mounted on the host onto the roots. Each
// mountpoint is opened before any bind: once an outer root is fenced, a mountpoint
// spelled through it would be reached through that fence instead.
//
// Then the user's fence directory is hidden under an empty read-only tmpfs: the
// command must not reach its window lock (a process it leaves behind holding that
// lock would stall every later fenced run of the user until setup times out), nor
// the copies of the host's mounts this namespace took while they were attached.
func (s stage) bindAll(cwd string, roots []string, binds map[int]string, hide string) error {
	fds := make([]int, len(roots))
	for i := range roots {
		src, ok := binds[i]
		if !ok {
			return fmt.Errorf("no fence for %s", roots[i])
		}
		fd, err := unix.Open(src, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening the fence for %s: %w", roots[i], err)
		}
		defer unix.Close(fd)
		fds[i] = fd
	}
	for i, root := range roots {
		if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", fds[i]), root, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding the fence onto %s: %w", root, err)
		}
	}
	if err := unix.Mount("tmpfs", hide, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
		"mode=0,size=4k,nr_inodes=1"); err != nil {
		return fmt.Errorf("hiding the fence directory %s: %w", hide, err)
	}
	if err := unix.Chdir(cwd); err != nil {
		return fmt.Errorf("entering the working directory %s: %w", cwd, err)
	}
	return nil
}

func (s stage) send(kind byte, text string, fd int) error {
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	if err := unix.Sendmsg(s.fd, append([]byte{kind}, text...), oob, nil, 0); err != nil {
		return fmt.Errorf("talking to the fence host: %w", err)
	}
	return nil
}

func (s stage) wait(kind byte) error {
	buf := make([]byte, 16)
	n, err := unix.Read(s.fd, buf)
	if err != nil {
		return fmt.Errorf("waiting for the fence host: %w", err)
	}
	if n == 0 || buf[0] != kind {
		return errors.New("the fence host went away")
	}
	return nil
}
