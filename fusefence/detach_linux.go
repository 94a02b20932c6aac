package fusefence

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Ending a mount that other mount namespaces hold copies of.
//
// A sandbox started while the mount was up holds a copy of it (bwrap's --ro-bind /
// / copies every mount below), and the connection lives as long as any copy does.
// Unmounting in the daemon's own namespace (toh-mount -u, umount, fusermount3 -u)
// removes only that one: the daemon went on serving the copies, unreachable for
// its user and no longer asked to, until the last such sandbox ended, and a
// SIGTERM after that waited for them too when no fuse control file system was
// mounted (this machine's case). Decisions:
//
//   - The daemon watches its own namespace's mount table (Unmounted); once its
//     mount is gone from it while the connection still serves, toh-mount stops as
//     on SIGTERM (Stop), which ends the copies: their requests fail with ENOTCONN,
//     as a crashed daemon's would, never pass through.
//   - The connection is aborted through the fuse control file system. Where none is
//     mounted, a daemon running as root mounts one for the purpose in a mount
//     namespace of one thread of its own (the host's mount table never shows it);
//     an unprivileged daemon cannot, says so, and waits for the copies.
//   - toh-mount -u does not abort anything itself: the device number it would name
//     could belong to another mount by then. The daemon aborts its own connection,
//     which exists as long as it serves.

// abortConnection aborts the FUSE connection of the mount whose device is dev
// through the fuse control file system: the one at /sys/fs/fuse/connections, or,
// as root where none is mounted there, one mounted in a private mount namespace.
func abortConnection(dev uint64) error {
	if dev == 0 {
		return errors.New("the mount's device is not known")
	}
	err := writeAbort(dev)
	if !errors.Is(err, fs.ErrNotExist) || os.Geteuid() != 0 {
		return err
	}
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, and the namespace only it is in, end with
		// this goroutine.
		runtime.LockOSThread()
		done <- abortInOwnNamespace(dev)
	}()
	if perr := <-done; perr != nil {
		return fmt.Errorf("%w; mounting the fuse control file system in a namespace of its own: %w", err, perr)
	}
	return nil
}

// abortInOwnNamespace moves the calling thread, which must be locked and never
// given back, to a new mount namespace, mounts the fuse control file system there
// and aborts dev's connection.
func abortInOwnNamespace(dev uint64) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the namespace's mounts private: %w", err)
	}
	if err := unix.Mount("fusectl", fuseConnections, "fusectl", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount: %w", err)
	}
	return writeAbort(dev)
}

const fuseConnections = "/sys/fs/fuse/connections"

func writeAbort(dev uint64) error {
	f, err := os.OpenFile(fmt.Sprintf("%s/%d/abort", fuseConnections, unix.Minor(dev)), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("1")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Unmounted returns a channel closed once the mount is no longer in the daemon's own
// mount namespace while it is still served: unmounted here (toh-mount -u, umount)
// while another namespace holds a copy. It is never closed for a mount whose device
// is unknown (a DevFD mount) or when the mount table cannot be watched; the reason
// goes to logf.
func (m *Fence) Unmounted(logf func(string, ...any)) <-chan struct{} {
	gone := make(chan struct{})
	dev := m.f.ownDev.Load()
	if dev == 0 || m.f.mountpoint == "" {
		return gone
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		logf("not watching for an unmount from outside: %v", err)
		return gone
	}
	ended := make(chan struct{})
	go func() {
		m.server.Wait()
		close(ended)
	}()
	go func() {
		defer mi.Close()
		want := fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))
		for {
			present, err := mountListed(mi, want, m.f.mountpoint)
			if err != nil {
				logf("not watching for an unmount from outside: %v", err)
				return
			}
			select {
			case <-ended:
				return
			default:
			}
			if !present {
				// Unmounted here. Without copies the server ends by itself in a
				// moment; only one that goes on serving is reported.
				select {
				case <-ended:
				case <-time.After(250 * time.Millisecond):
					close(gone)
				}
				return
			}
			// The kernel marks the file POLLPRI|POLLERR when this namespace's
			// mount table changed since it was last read. A second's timeout
			// looks again for the server's end.
			fds := []unix.PollFd{{Fd: int32(mi.Fd()), Events: unix.POLLPRI}}
			if _, err := unix.Poll(fds, 1000); err != nil && err != unix.EINTR {
				logf("not watching for an unmount from outside: poll: %v", err)
				return
			}
		}
	}()
	return gone
}

// mountedHere reports whether the daemon's own mount namespace still lists the
// mount (true when that cannot be told).
func (m *Fence) mountedHere() bool {
	dev := m.f.ownDev.Load()
	if dev == 0 || m.f.mountpoint == "" {
		return true
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return true
	}
	defer mi.Close()
	listed, err := mountListed(mi, fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev)), m.f.mountpoint)
	return listed || err != nil
}

// mountListed reads the mount table mi from its start and reports whether it lists
// a mount of device want ("major:minor") at mountpoint.
func mountListed(mi *os.File, want, mountpoint string) (bool, error) {
	if _, err := mi.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	esc := escapeMountinfo(mountpoint)
	sc := bufio.NewScanner(mi)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		f := bytes.Fields(sc.Bytes())
		if len(f) > 4 && string(f[2]) == want && string(f[4]) == esc {
			return true, nil
		}
	}
	return false, sc.Err()
}

// escapeMountinfo spells p as the kernel writes it in mountinfo: space, tab, newline
// and backslash in octal.
func escapeMountinfo(p string) string {
	return strings.NewReplacer(`\`, `\134`, " ", `\040`, "\t", `\011`, "\n", `\012`).Replace(p)
}
