package fusefence

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/internal/strictmodes"
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
//   - Which mount is the daemon's is proved, never read off a path: right after
//     mounting, the mountpoint is opened without following symlinks and a random
//     name is looked up in it (identify); only if this daemon's root was asked that
//     name is the descriptor's mount taken as its own, by mount ID and device. A
//     stat of the mountpoint by path let a user who could swap a symlink into it
//     make a root daemon take another FUSE mount's device, and end that one on
//     stop (found by review). Without proof the daemon ends no copies and unmounts
//     nothing by force.
//   - The daemon watches its own namespace's mount table (Unmounted) for its mount
//     ID, which a rename of the mountpoint's directories does not change (matching
//     the path did: a rename of an ancestor, or a mountpoint whose name holds
//     whitespace the kernel does not escape, stopped the mount; found by review).
//     Once the ID is gone while the connection still serves, toh-mount stops as on
//     SIGTERM (Stop), which ends the copies: their requests fail with ENOTCONN, as a
//     crashed daemon's would, never pass through.
//   - As root the daemon mounts through a descriptor too (mountAt), of a
//     mountpoint resolved following only symlinks no other user can change
//     (trustedPath): mount(2) given a path follows whatever link was swapped in.
//   - As root, Stop unmounts through a descriptor of the mount it opened without
//     following symlinks and checked by mount ID (umount2 of /proc/self/fd/N), not
//     by the mountpoint's path, which a user could have pointed elsewhere.
//   - The connection is aborted through the fuse control file system. Where none is
//     mounted, a daemon running as root mounts one for the purpose in a mount
//     namespace of one thread of its own (the host's mount table never shows it);
//     an unprivileged daemon cannot, says so, and waits for the copies.
//   - toh-mount -u does not abort anything itself: the device number it would name
//     could belong to another mount by then. The daemon aborts its own connection,
//     which exists as long as it serves.

// mountAt mounts a FUSE file system with options o, as root, on the directory at
// the canonical path mp, and returns the connection's /dev/fuse descriptor for
// go-fuse to serve (its /dev/fd/N form). The directory is opened from "/" without
// following any symlink and mounted on through that descriptor (/proc/self/fd/N):
// mount(2) given the path follows symlinks, and a user who could rename in a
// directory above the mountpoint could swap one in while root mounted, so that
// the mirror of their workspace landed on a directory of their choosing
// (/etc/profile.d, read by root's next login shell; found by review). The options
// are those go-fuse's own direct mount passes.
func mountAt(slashFd int, mp string, o *fuse.MountOptions) (int, error) {
	rel := strings.TrimPrefix(mp, "/")
	if rel == "" {
		rel = "."
	}
	dirFd, err := unix.Openat2(slashFd, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("opening the mountpoint without following symlinks (was it changed while mounting?): %w", err)
	}
	defer unix.Close(dirFd)
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	source := o.FsName
	if source == "" {
		source = o.Name
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	data := []string{
		fmt.Sprintf("fd=%d", fd),
		fmt.Sprintf("rootmode=%o", unix.S_IFDIR),
		fmt.Sprintf("user_id=%d", os.Geteuid()),
		fmt.Sprintf("group_id=%d", os.Getegid()),
		fmt.Sprintf("max_read=%d", o.MaxWrite),
	}
	for _, opt := range o.Options {
		switch opt {
		case "nodev", "nosuid": // in flags already
		case "noexec":
			flags |= unix.MS_NOEXEC
		default:
			data = append(data, opt)
		}
	}
	if o.AllowOther {
		data = append(data, "allow_other")
	}
	if err := unix.Mount(source, fmt.Sprintf("/proc/self/fd/%d", dirFd), "fuse."+o.Name, flags, strings.Join(data, ",")); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// pollHack does for a mount made by mountAt what go-fuse does for its own (its
// WaitMount skips it for the /dev/fd/N form): opens go-fuse's special file on the
// mount and polls it once, so that the kernel learns at once that POLL is not
// implemented. Until it has, an epoll_ctl on a file of the mount sends POLL and
// waits for the answer with the epoll's lock held; in the daemon's own process
// (Go's runtime registers every file it opens) that waited forever (seen in the
// fence's tests). Through the daemon's own mount only (openOwnRoot).
func (f *fence) pollHack() {
	root, err := f.openOwnRoot()
	if err != nil {
		f.logf("poll probe: %v", err)
		return
	}
	defer unix.Close(root)
	fd, err := unix.Openat(root, ".go-fuse-epoll-hack", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		f.logf("poll probe: %v", err)
		return
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	unix.Close(fd)
}

// trustedPath resolves the mountpoint p for a daemon running as root: the path
// with every symlink followed, as canon.Canonical does, but following only links
// that no other user can change: in a directory owned by root or the daemon's user
// and writable by neither group nor others, or, in a sticky directory such as
// /tmp, a link owned by one of those. A user who can rename in a directory on the
// way could otherwise swap a link to a directory of their choosing in while root
// resolved and mounted (mountAt then mounted root's mirror there; found by
// review). Directories such a user could rename in stay allowed: they can only move
// their own directories into place, never root's.
func trustedPath(p string) (string, error) {
	euid := uint32(os.Geteuid())
	resolved, exists, err := canon.EachLink(p, func(link string, st *unix.Stat_t) error {
		if err := strictmodes.Link(link, st, euid); err != nil {
			return fmt.Errorf("%w: as root, give the mountpoint without it (its target, if you trust it)", err)
		}
		return nil
	})
	switch {
	case err != nil:
		return "", err
	case !exists:
		return "", &fs.PathError{Op: "resolve", Path: resolved, Err: unix.ENOENT}
	}
	return resolved, nil
}

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

// probeName is a name no one else can guess, for openOwnRoot.
func probeName() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return ".toh-identify-" + hex.EncodeToString(b[:])
}

// identify proves which mount is this daemon's and records its mount ID and
// device (ownMnt, ownDev) and tells the mirror (canon.Mirror.SetDevice). The
// mount must be served already.
func (f *fence) identify() error {
	fd, err := f.openOwnRoot()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err != nil {
		return fmt.Errorf("statx of %s: %w", f.mountpoint, err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return errors.New("the kernel gives no mount IDs (before Linux 5.8)")
	}
	dev := unix.Mkdev(stx.Dev_major, stx.Dev_minor)
	f.ownDev.Store(dev)
	f.ownMnt.Store(stx.Mnt_id)
	f.mirror.SetDevice(dev)
	return nil
}

// openOwnRoot opens the mountpoint, as an O_PATH descriptor reached from "/"
// without following any symlink, and proves it is this daemon's mount: a lookup of
// f.probe through it must reach this daemon's root (see node.Lookup). With a mount
// ID known (identify ran), that ID must match instead. Probes are one at a time
// (identify, once, at start).
func (f *fence) openOwnRoot() (int, error) {
	return f.openRootAt(f.mountpoint)
}

// openOwnRootNow is openOwnRoot where the mount is now: at the mountpoint, or,
// after a rename of a directory above it, where the mount table lists its ID.
func (f *fence) openOwnRootNow() (int, string, error) {
	fd, err := f.openRootAt(f.mountpoint)
	if err == nil {
		return fd, f.mountpoint, nil
	}
	at, lerr := f.listedAt()
	if lerr != nil || at == f.mountpoint {
		return -1, "", err
	}
	if fd, err = f.openRootAt(at); err != nil {
		return -1, "", err
	}
	return fd, at, nil
}

// listedAt is where the daemon's namespace's mount table lists the mount now.
func (f *fence) listedAt() (string, error) {
	id := f.ownMnt.Load()
	if id == 0 {
		return "", errors.New("the mount's ID is not known")
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer mi.Close()
	at, ok, err := mountListed(mi, id)
	if err == nil && !ok {
		err = fmt.Errorf("mount %d is not in this namespace's mount table", id)
	}
	return at, err
}

// unescapeMountinfo reads a path as the kernel writes it in mountinfo (\ooo for
// space, tab, newline and backslash).
func unescapeMountinfo(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+3 < len(p) && isOctal(p[i+1]) && isOctal(p[i+2]) && isOctal(p[i+3]) {
			b.WriteByte((p[i+1]-'0')<<6 | (p[i+2]-'0')<<3 | (p[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// openRootAt opens mountpoint as openOwnRoot describes.
func (f *fence) openRootAt(mountpoint string) (int, error) {
	rel := strings.TrimPrefix(mountpoint, "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(f.slashFd, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("opening %s without following symlinks: %w", mountpoint, err)
	}
	if id := f.ownMnt.Load(); id != 0 {
		var stx unix.Statx_t
		if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err != nil || stx.Mnt_id != id {
			unix.Close(fd)
			return -1, fmt.Errorf("%s is not this daemon's mount (mount %d there, not %d)", mountpoint, stx.Mnt_id, id)
		}
		return fd, nil
	}
	name := probeName()
	f.probed.Store(false)
	f.probe.Store(&name)
	var st unix.Stat_t
	err = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	f.probe.Store(nil)
	if err != unix.ENOENT || !f.probed.Load() {
		unix.Close(fd)
		return -1, fmt.Errorf("%s is not this daemon's mount: another was put at that path while it mounted (the probe's lookup: %v)", mountpoint, err)
	}
	return fd, nil
}

// forceUnmount aborts the connection and detaches the mount, as root, through a
// descriptor of the mount itself (see openOwnRoot): umount2 with MNT_FORCE, which
// makes FUSE abort the connection first, then MNT_DETACH, since the descriptor
// itself keeps the mount busy.
func (m *Fence) forceUnmount() error {
	fd, _, err := m.f.openOwnRootNow()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	proc := fmt.Sprintf("/proc/self/fd/%d", fd)
	ferr := unix.Unmount(proc, unix.MNT_FORCE)
	if ferr == nil {
		return nil
	}
	if err := unix.Unmount(proc, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmounting %s: %v (forced), %w (detached)", m.mp, ferr, err)
	}
	return nil
}

// Unmounted returns a channel closed once the mount is no longer in the daemon's own
// mount namespace while it is still served: unmounted here (toh-mount -u, umount)
// while another namespace holds a copy. It is never closed for a mount identify
// could not prove its own (a DevFD mount included) or when the mount table cannot
// be watched; the reason goes to logf.
func (m *Fence) Unmounted(logf func(string, ...any)) <-chan struct{} {
	gone := make(chan struct{})
	id := m.f.ownMnt.Load()
	if id == 0 {
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
		for {
			_, present, err := mountListed(mi, id)
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
	id := m.f.ownMnt.Load()
	if id == 0 {
		return true
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return true
	}
	defer mi.Close()
	_, listed, err := mountListed(mi, id)
	return listed || err != nil
}

// mountListed reads the mount table mi from its start and reports whether it lists
// the mount with ID id, and where (its mountpoint, unescaped; see parseMountinfo).
func mountListed(mi io.ReadSeeker, id uint64) (at string, ok bool, err error) {
	if _, err := mi.Seek(0, io.SeekStart); err != nil {
		return "", false, err
	}
	want := strconv.FormatUint(id, 10)
	sc := bufio.NewScanner(mi)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if e, ok := parseMountinfo(sc.Text()); ok && e.id == want {
			return e.at, true, nil
		}
	}
	return "", false, sc.Err()
}
