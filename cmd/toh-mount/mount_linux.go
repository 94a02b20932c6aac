package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/fusefence"
	"github.com/toh-sandbox/toh/internal/trustedpath"
	"github.com/toh-sandbox/toh/policy"
)

func runMount(o mountOptions, stderr io.Writer) int {
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(stderr, "toh-mount: "+format+"\n", args...)
	}
	if err := shedResourceOverride(); err != nil {
		logf("could not give up CAP_SYS_RESOURCE (writes through the mount may pass their owner's quota and use root's reserved blocks): %v", err)
	}

	path := o.policy
	if path == "" {
		p, err := defaultPolicyPath()
		if err != nil {
			logf("%v", err)
			return exitPolicy
		}
		path = p
	}
	cwd, err := os.Getwd()
	if err != nil {
		logf("working directory: %v", err)
		return exitFailure
	}
	// TmpDir stays "": toh-mount's own $TMPDIR says nothing about the agent's.
	w, err := policy.NewWatcher(path, policy.Request{SessionID: o.session, Cwd: cwd, PolicyFile: path}, nil)
	if err != nil {
		logf("refusing to start: %v", err)
		return exitPolicy
	}

	if err := fusefence.CheckDevFuse(); err != nil {
		logf("%v", err)
		return exitNoFUSE
	}
	// fusermount3 (a user other than root) from the system directories only: the
	// caller's $PATH may hold a directory the mount's own callers can write.
	trustedpath.Set()
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			logf("fusermount3 not found: install fuse3 (it mounts FUSE file systems for users other than root)")
			return exitNoFUSE
		}
	}
	if n, err := fusefence.RecoverStale(o.mountpoint); err != nil {
		logf("recovering stale mount: %v", err)
		return exitFailure
	} else if n > 0 {
		logf("%s was a stale mount (its daemon died); detached %d", o.mountpoint, n)
	}
	// A live fence there would be stacked over, its audit log hidden with it; a file
	// gets a plain answer, not mount(2)'s (found by review).
	if fi, err := os.Stat(o.mountpoint); err == nil && !fi.IsDir() {
		logf("mountpoint %s is not a directory", o.mountpoint)
		return exitFailure
	}
	if at, err := canonicalMountpoint(o.mountpoint); err == nil {
		if typ, _ := fusefence.MountType(at); typ == fenceType {
			logf("%s is already served by a toh-mount: end that one first (toh-mount -u %s)", o.mountpoint, o.mountpoint)
			return exitFailure
		}
	}

	if o.cpuprofile != "" {
		f, err := os.OpenFile(o.cpuprofile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			logf("cpu profile: %v", err)
			return exitFailure
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			logf("cpu profile: %v", err)
			return exitFailure
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}

	var audit *fusefence.AuditLog
	auditIsNew := false
	if o.audit != "" {
		_, statErr := os.Lstat(o.audit)
		auditIsNew = errors.Is(statErr, os.ErrNotExist)
		if audit, err = fusefence.OpenAudit(o.audit); err != nil {
			logf("%v", err)
			return exitFailure
		}
	}
	closeAudit := func() int {
		if audit == nil {
			return exitOK
		}
		if err := audit.Close(); err != nil {
			logf("%v", err)
			return exitFailure
		}
		return exitOK
	}

	// Signals are caught from before the mount on, and acted on only once Mount has
	// returned. Mount's last step (go-fuse's poll hack) opens and closes a file on
	// the new mount, served by this very process: killed by a signal's default
	// action in between, the process would leave a thread waiting for its own
	// answer to FLUSH, unkillable, and the mount with it (seen once in CI).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	m, err := fusefence.Mount(fusefence.Config{
		Source:     o.source,
		Mountpoint: o.mountpoint,
		Policy:     w,
		Audit:      audit,
		AllowOther: os.Geteuid() == 0,
		Debug:      o.debug,
		Logf:       logf,
	})
	if err != nil {
		logf("%v", err)
		closeAudit()
		// Nothing left behind by a run that never mounted: an audit log it created
		// and never wrote goes again.
		if fi, statErr := os.Lstat(o.audit); auditIsNew && statErr == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
			os.Remove(o.audit)
		}
		return exitFailure
	}
	// Mounted and served, the poll hack's file closed: from here on an unmount only
	// waits for the mount's own users. Harnesses may wait for this line.
	logf("serving %s on %s", o.source, o.mountpoint)

	stopped := make(chan struct{})
	unmounted := m.Unmounted(logf)
	stopping := make(chan struct{})
	go func() {
		select {
		case <-sigs:
		case <-unmounted:
			logf("%s was unmounted here while still in use (a file open on it, or a copy another mount namespace holds, such as a sandbox started while it was mounted): ending it", o.mountpoint)
		}
		close(stopping)
		// Every request on the mount fails from here on, in copies other mount
		// namespaces hold too; descriptors still open on it get ENOTCONN.
		m.Stop(stopGrace, logf)
		close(stopped)
	}()
	done := make(chan struct{})
	go func() {
		m.Wait()
		close(done)
	}()
	select {
	case <-done:
		// The mount ended. If Stop ended it, the abort (MNT_FORCE) ends the
		// server inside Stop's first umount2, before Stop has detached the mount:
		// exiting now left it mounted, dead (seen under load).
		select {
		case <-stopping:
			<-stopped
		default:
		}
	case <-stopped:
	}
	return closeAudit()
}

// fenceType is the file system type a fence's mounts have in mountinfo.
const fenceType = "fuse.toh"

// canonicalMountpoint is p absolute, its directory canonical and its last component
// as it is: it must not be a symbolic link (a mountpoint never is one).
func canonicalMountpoint(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", err
	}
	at := filepath.Join(dir, filepath.Base(abs))
	fi, err := os.Lstat(at)
	switch {
	case errors.Is(err, syscall.ENOTCONN), errors.Is(err, syscall.EACCES):
		// A stale fence (its daemon died), or, to root, a user's fence without
		// allow_other: the name is what unmounting takes, not what the mount shows.
		return at, nil
	case err != nil:
		return "", err
	case fi.Mode()&os.ModeSymlink != 0:
		return "", fmt.Errorf("%s is a symbolic link, not a mountpoint", p)
	}
	return at, nil
}

// stopGrace is how long a stopping daemon waits for its requests to end after a plain
// unmount before it aborts the connection (fusefence.Fence.Stop).
const stopGrace = 2 * time.Second

func runUnmount(mountpoint string, stderr io.Writer) int {
	// Only a fence, and only at that very path: as root umount2 would take any
	// mount there, a tmpfs or /proc, and follow a symlink to another (found by
	// review). fusermount3, for other users, checks ownership itself.
	at, err := canonicalMountpoint(mountpoint)
	if err != nil {
		fmt.Fprintf(stderr, "toh-mount: %v\n", err)
		return exitFailure
	}
	var notFence *fusefence.NotFenceError
	switch err := fusefence.UnmountFence(at); {
	case errors.Is(err, fusefence.ErrNotAMountPoint):
		fmt.Fprintf(stderr, "toh-mount: %s is not a mount point\n", mountpoint)
		return exitFailure
	case errors.As(err, &notFence):
		fmt.Fprintf(stderr, "toh-mount: %s is a %s mount, not a toh-mount one: left alone\n", mountpoint, notFence.Type)
		return exitFailure
	case err != nil:
		fmt.Fprintf(stderr, "toh-mount: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// shedResourceOverride makes a daemon that holds CAP_SYS_RESOURCE (root's) run
// without it, for good: it drops it from the bounding set and executes itself
// again (same process, same arguments), so that no thread of the new image has it;
// it returns only on failure, or at once when there is nothing to shed.
//
// Why: the daemon writes other users' files with its own credentials, and with
// that capability the host file system lets those writes past the owner's disk
// quota and into the blocks it reserves for root (ext4's reserved blocks), so any
// user could fill the disk through the mount. Without it, writes through the mount
// stop where the file system stops writers without it, root's through the mount
// included. Nothing the daemon does needs it (go-fuse's splice pipes stay within
// fs.pipe-max-size). Capabilities belong to threads, and with cgo linked (go-fuse
// imports net and os/user) Go cannot change them on every thread it has started;
// an execve after the bounding-set drop does.
func shedResourceOverride() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	const c = unix.CAP_SYS_RESOURCE
	if data[c/32].Permitted&(1<<(c%32)) == 0 {
		return nil
	}
	runtime.LockOSThread() // the drop and the execve on one thread; never unlocked
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil {
		return fmt.Errorf("dropping it from the bounding set: %w", err)
	}
	return fmt.Errorf("executing toh-mount again: %w", syscall.Exec("/proc/self/exe", os.Args, os.Environ()))
}
