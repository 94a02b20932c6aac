package fusefence

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/toh-sandbox/toh/canon"
	"golang.org/x/sys/unix"
)

// ErrNoDevFuse is wrapped by CheckDevFuse when /dev/fuse cannot be opened.
var ErrNoDevFuse = errors.New("cannot open /dev/fuse")

// CheckDevFuse reports whether this process can serve a FUSE mount, with an error
// that says what to fix. fusermount3 opens /dev/fuse with the caller's own
// privileges, so an unprivileged user needs read-write access to it.
func CheckDevFuse() error {
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return nil
	}
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENXIO):
		return fmt.Errorf("%w: %v; load the fuse kernel module (modprobe fuse) or, in a container, pass the device through (--device /dev/fuse)", ErrNoDevFuse, err)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: permission denied; add the user to the group owning /dev/fuse, or make it 0666 as most distributions do (chmod 0666 /dev/fuse)", ErrNoDevFuse)
	}
	return fmt.Errorf("%w: %v", ErrNoDevFuse, err)
}

// IsStale reports whether mountpoint is a FUSE mount whose daemon is gone: stat
// fails with ENOTCONN. The stat forces a round trip (AT_STATX_FORCE_SYNC): for up
// to the attribute timeout after the daemon died, a plain stat answers from the
// kernel's cache.
func IsStale(mountpoint string) bool {
	var x unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, mountpoint, unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &x)
	return errors.Is(err, unix.ENOTCONN)
}

// RecoverStale detaches stale mounts stacked on mountpoint (a daemon killed
// several times over leaves one each) until a live directory shows. It reports
// how many it detached. As root the check and the detach go through the
// mountpoint's parent opened without following symlinks (see pin), so a directory
// on the way that its owner swaps for a symlink cannot send the detach to a mount
// of the same name elsewhere.
func RecoverStale(mountpoint string) (int, error) {
	if os.Geteuid() != 0 {
		return recoverStale(mountpoint, func() bool { return IsStale(mountpoint) },
			func() error { return fusermountUnmount(mountpoint, true) })
	}
	p, err := pinCanonical(mountpoint)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil // nothing there, so nothing stale
	}
	if err != nil {
		return 0, err
	}
	defer p.close()
	return recoverStale(mountpoint, p.stale, func() error {
		if err := unix.Unmount(p.path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			if errors.Is(err, unix.EPERM) {
				// A user namespace without the mount's ownership; try the helper.
				return fusermountUnmount(mountpoint, true)
			}
			return fmt.Errorf("unmounting %q: %w", mountpoint, err)
		}
		return nil
	})
}

func recoverStale(mountpoint string, stale func() bool, detach func() error) (int, error) {
	for n := 0; ; n++ {
		if !stale() {
			return n, nil
		}
		if n == 64 {
			return n, fmt.Errorf("%q: still stale after detaching %d mounts", mountpoint, n)
		}
		if err := detach(); err != nil {
			return n, err
		}
	}
}

// pinned is a mountpoint's parent directory, opened from "/" without following any
// symlink and kept open, and its last name. path reaches that name through the kept
// descriptor (/proc/self/fd/N/name), so umount2(path, UMOUNT_NOFOLLOW) acts on
// whatever is mounted at that name in that very directory: a directory on the way
// that is swapped for a symlink after the open cannot redirect it, and a mount
// cannot be moved there by renaming (rename(2) refuses a mountpoint of the caller's
// mount namespace; from another one, only a directory its owner may rename), so
// what can be at that name is what was checked or a mount its owner could have
// put there anyway.
type pinned struct {
	parent     int
	name, path string
}

// pin opens the parent of mountpoint, an absolute path with no symlink on the way
// (a symlink fails with ELOOP) and a plain last name.
func pin(mountpoint string) (*pinned, error) {
	dir, name := filepath.Split(mountpoint)
	if !filepath.IsAbs(mountpoint) || name == "" || name == "." || name == ".." {
		return nil, fmt.Errorf("%q: not an absolute path below /", mountpoint)
	}
	slash, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(slash)
	rel := strings.Trim(dir, "/")
	if rel == "" {
		rel = "."
	}
	parent, err := canon.OpenBeneath(slash, rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s without following symlinks: %w", dir, err)
	}
	return &pinned{parent: parent, name: name, path: fmt.Sprintf("/proc/self/fd/%d/%s", parent, name)}, nil
}

// pinCanonical pins mountpoint, which may be relative and have symlinks in its
// directories (not in its last name, which is never followed): they are resolved
// first, and one swapped in after that fails the pin instead of redirecting it.
func pinCanonical(mountpoint string) (*pinned, error) {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return nil, err
	}
	return pin(filepath.Join(dir, filepath.Base(abs)))
}

func (p *pinned) close() { unix.Close(p.parent) }

// stale is IsStale for the pinned name, not following it.
func (p *pinned) stale() bool {
	var x unix.Statx_t
	err := unix.Statx(p.parent, p.name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &x)
	return errors.Is(err, unix.ENOTCONN)
}

// MountType is the file system type of what is mounted at mountpoint, as the last
// (topmost) entry of /proc/self/mountinfo for that path names it ("fuse.toh" for a
// fence), or "" when nothing is mounted there. mountpoint must be absolute and
// canonical; its last component is not followed.
func MountType(mountpoint string) (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	typ := ""
	for line := range strings.SplitSeq(string(b), "\n") {
		if m, ok := parseMountinfo(line); ok && m.at == mountpoint {
			typ = m.typ
		}
	}
	return typ, nil
}

// mountinfoEntry is what MountType and UnmountFence read of a mountinfo line.
type mountinfoEntry struct {
	id, at, typ string
}

// parseMountinfo reads one line of /proc/self/mountinfo:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
//
// Fields are separated by single spaces; the kernel writes space, tab, newline and
// backslash in a path as \ooo and no other white space, so the line is split on
// spaces alone (strings.Fields also splits on U+00A0 or U+0085, which a path may
// hold, and MountType used it until a mountpoint with one was misread).
func parseMountinfo(line string) (mountinfoEntry, bool) {
	f := strings.Split(line, " ")
	sep := slices.Index(f, "-")
	if len(f) < 5 || sep < 6 || sep+1 >= len(f) {
		return mountinfoEntry{}, false
	}
	return mountinfoEntry{id: f[0], at: unescapeMountinfo(f[4]), typ: f[sep+1]}, true
}

// ErrNotAMountPoint is UnmountFence's answer when nothing is mounted at the path.
var ErrNotAMountPoint = errors.New("not a mount point")

// NotFenceError is UnmountFence's answer when another kind of mount is at the path:
// it is left alone.
type NotFenceError struct{ Type string }

func (e *NotFenceError) Error() string {
	return "a " + e.Type + " mount, not a toh-mount one"
}

// UnmountFence unmounts the fence mounted at exactly mountpoint (absolute and
// canonical, the type fuse.toh) and nothing else: ErrNotAMountPoint when nothing
// is mounted there, a *NotFenceError when another kind of mount is.
//
// As root, umount2 would take any mount, so the check and the unmount must hold the
// same one. The parent directory is opened from "/" without following any symlink
// and kept; the mountpoint is opened in it, without following, to read the mount
// it is on (fdinfo's mnt_id), which mountinfo must list as a fuse.toh mount at
// exactly that path; the unmount then goes through the kept parent
// (/proc/self/fd/N/name, UMOUNT_NOFOLLOW). Before, the check read mountinfo by path
// and umount2 walked the path again: a directory on the way that its owner swapped
// for a symlink in between could send the unmount to a mount of the same name
// elsewhere (/proc, say). What can be at that name in the kept parent by the time
// of the unmount is the fence or a mount its owner could have put there anyway
// (see pinned). Other users go through fusermount3, which checks
// that they own the mount and guards its own walk.
func UnmountFence(mountpoint string) error {
	if os.Geteuid() != 0 {
		typ, err := MountType(mountpoint)
		if err != nil {
			return err
		}
		if err := fenceType(typ); err != nil {
			return err
		}
		return Unmount(mountpoint, false)
	}
	p, err := pin(mountpoint)
	if err != nil {
		return err
	}
	defer p.close()
	fd, err := unix.Openat(p.parent, p.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", mountpoint, err)
	}
	id, err := mountIDOf(fd)
	unix.Close(fd) // an open descriptor would keep the mount busy
	if err != nil {
		return err
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var m mountinfoEntry
	for line := range strings.SplitSeq(string(b), "\n") {
		if e, ok := parseMountinfo(line); ok && e.id == id {
			m = e
			break
		}
	}
	switch {
	case m.id == "":
		return fmt.Errorf("%s: its mount %s is not in this namespace's mount table", mountpoint, id)
	case m.at != mountpoint:
		// A directory inside a mount, not the mount's root.
		return ErrNotAMountPoint
	}
	if err := fenceType(m.typ); err != nil {
		return err
	}
	if err := unix.Unmount(p.path, unix.UMOUNT_NOFOLLOW); err != nil {
		if errors.Is(err, unix.EPERM) {
			// A user namespace without the mount's ownership; try the helper.
			return fusermountUnmount(mountpoint, false)
		}
		return fmt.Errorf("unmounting %q: %w", mountpoint, err)
	}
	return nil
}

// fenceType is nil for a fence's mount type, and UnmountFence's refusal otherwise.
func fenceType(typ string) error {
	switch typ {
	case "fuse.toh":
		return nil
	case "":
		return ErrNotAMountPoint
	}
	return &NotFenceError{Type: typ}
}

// mountIDOf is the ID of the mount fd is on, from /proc/self/fdinfo: no request
// reaches the file system, so a stale fence answers too.
func mountIDOf(fd int) (string, error) {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "mnt_id:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", errors.New("no mnt_id in /proc/self/fdinfo")
}

// Unmount unmounts mountpoint: umount2 as root, fusermount3 -u otherwise. lazy
// detaches it even while files are open on it (MNT_DETACH, fusermount3 -z).
func Unmount(mountpoint string, lazy bool) error {
	if os.Geteuid() == 0 {
		flags := 0
		if lazy {
			flags = unix.MNT_DETACH
		}
		err := unix.Unmount(mountpoint, flags|unix.UMOUNT_NOFOLLOW)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("unmounting %q: %w", mountpoint, err)
		}
		// EPERM as root: a user namespace without the mount's ownership; try the helper.
	}
	return fusermountUnmount(mountpoint, lazy)
}

// fusermountUnmount unmounts mountpoint with fusermount3 -u (-z when lazy).
func fusermountUnmount(mountpoint string, lazy bool) error {
	args := []string{"-u"}
	if lazy {
		args = append(args, "-z")
	}
	var stderr bytes.Buffer
	cmd := exec.Command("fusermount3", append(args, "--", mountpoint)...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("unmounting %q: %s", mountpoint, msg)
	}
	return nil
}
