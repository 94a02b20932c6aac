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
	"github.com/toh-sandbox/toh/internal/strictmodes"
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
// how many it detached. As root each check and detach hold the mount itself: the
// name, in its parent opened without following symlinks (see pinned), is opened
// without following, the descriptor's mount must be a FUSE mount rooted at exactly
// that path, the ENOTCONN stat is made on the descriptor and the detach goes
// through it. By path, a directory on the way swapped for a symlink, or mountpoints
// exchanged from a user's own mount namespace, sent root's detach to another mount;
// and a live FUSE daemon of the user's can answer ENOTCONN when it likes, so only
// that mount of theirs may be detached for it (found by review).
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
	var m *mountHeld
	defer func() { m.close() }()
	stale := func() bool {
		m.close()
		m = nil
		h, err := p.hold()
		if err != nil || !strings.HasPrefix(h.typ, "fuse") {
			return false
		}
		m = h
		var x unix.Statx_t
		err = unix.Statx(m.fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &x)
		return errors.Is(err, unix.ENOTCONN)
	}
	return recoverStale(mountpoint, stale, func() error {
		// The mount judged stale itself, through its descriptor: lazily, since the
		// descriptor keeps it busy.
		if err := m.detach(); err != nil {
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
// descriptor (/proc/self/fd/N/name), so a directory on the way that is swapped for a
// symlink after the open cannot redirect what is done there. A rename can still
// move a mount to that name: rename(2) refuses a mountpoint of the caller's own
// mount namespace only, so a user who made a namespace of their own before the
// mounts existed can exchange two mountpoints in directories they may rename in,
// and the mounts move for everyone (found by review). So what is checked is held
// by a descriptor of the mount itself (hold), and acted on through it, unless
// nobody but root and the caller can rename on the way (movable).
type pinned struct {
	parent         int
	name, path, at string
}

// mountHeld is a descriptor of the topmost mount at a pinned name, and what
// mountinfo says of that mount.
type mountHeld struct {
	fd      int
	id, typ string
}

// hold opens the pinned name without following it and returns it if it is the root
// of a mount (mountinfo lists the descriptor's mount at exactly p.at), else an
// error wrapping ErrNotAMountPoint.
func (p *pinned) hold() (*mountHeld, error) {
	fd, err := unix.Openat(p.parent, p.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", p.at, err)
	}
	m := &mountHeld{fd: fd}
	e, err := mountOf(fd)
	switch {
	case err != nil:
		m.close()
		return nil, err
	case e.at != p.at:
		// A directory inside a mount, not the mount's root; or a mount moved here
		// from elsewhere since the name was opened.
		m.close()
		return nil, ErrNotAMountPoint
	}
	m.id, m.typ = e.id, e.typ
	return m, nil
}

func (m *mountHeld) close() {
	if m != nil {
		unix.Close(m.fd)
	}
}

// detach detaches the held mount, whatever name it is at by now (MNT_DETACH: the
// descriptor itself keeps it busy).
func (m *mountHeld) detach() error {
	return unix.Unmount(fmt.Sprintf("/proc/self/fd/%d", m.fd), unix.MNT_DETACH)
}

// movable reports whether someone other than root and the caller might rename a
// directory from "/" down to the pinned parent, or the name in it, and so move
// another mount to it: a directory of the way they own or may write (a sticky one
// counts for the name itself, whose owner the mount hides), or one on a file system
// whose modes the local kernel does not enforce (modesEnforced: FUSE, network).
// Walked from the kept descriptor up through "..", so it judges the directories
// actually pinned. When it cannot tell, true.
func (p *pinned) movable() bool {
	euid := uint32(os.Geteuid())
	fd, err := unix.Openat(p.parent, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer func() { unix.Close(fd) }()
	for first := true; ; first = false {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || strictmodes.Replaceable(&st, euid) || !modesEnforced(fd) {
			return true
		}
		if first && st.Mode&unix.S_ISVTX != 0 && st.Mode&0o022 != 0 {
			return true
		}
		up, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return true
		}
		var ust unix.Stat_t
		if unix.Fstat(up, &ust) != nil {
			unix.Close(up)
			return true
		}
		unix.Close(fd)
		fd = up
		if ust.Dev == st.Dev && ust.Ino == st.Ino {
			return false // "/": its parent is itself
		}
	}
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
	return &pinned{parent: parent, name: name, at: mountpoint, path: fmt.Sprintf("/proc/self/fd/%d/%s", parent, name)}, nil
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

// MountType is the file system type of what is mounted at mountpoint, as the last
// (topmost) entry of /proc/self/mountinfo for that path names it ("fuse.toh" for a
// fence), or "" when nothing is mounted there. mountpoint must be absolute and
// canonical; its last component is not followed.
func MountType(mountpoint string) (string, error) {
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
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

// modesEnforced reports whether the file system fd is on is one whose owner and
// mode bits the local kernel enforces for rename: a FUSE file system's daemon
// reports them and, without default_permissions, decides renames itself, so a
// user's could show root's 0755 and let its owner rename anyway (found by review);
// network file systems decide on the server. Local disk and memory file systems
// only.
func modesEnforced(fd int) bool {
	var fs unix.Statfs_t
	if unix.Fstatfs(fd, &fs) != nil {
		return false
	}
	switch fs.Type {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC,
		unix.F2FS_SUPER_MAGIC, unix.OVERLAYFS_SUPER_MAGIC, unix.RAMFS_MAGIC, 0x2fc12fc1: // ZFS
		return true
	}
	return false
}

// mountinfoEntry is what MountType and UnmountFence read of a mountinfo line.
type mountinfoEntry struct {
	id, parent, at, typ string
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
	return mountinfoEntry{id: f[0], parent: f[1], at: unescapeMountinfo(f[4]), typ: f[sep+1]}, true
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
// and kept, and the name is opened in it without following: mountinfo must list
// the descriptor's mount (by fdinfo's mnt_id) as a fuse.toh mount at exactly that
// path. If another user could rename a directory on the way or the name itself
// (pinned.movable), that very mount is detached through its descriptor, lazily
// (the descriptor keeps it busy, so a fence in use is detached rather than
// refused, and its daemon then ends); otherwise the name is unmounted through the
// kept parent (/proc/self/fd/N/name, UMOUNT_NOFOLLOW), and a fence in use is
// refused with EBUSY. Before, the check read mountinfo by path and umount2 walked
// the path again, so a directory on the way swapped for a symlink, or two
// mountpoints exchanged from a mount namespace of the user's own, sent root's
// unmount to another mount (found by review). Other users go through fusermount3,
// which checks that they own the mount and guards its own walk.
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
	m, err := p.hold()
	if err != nil {
		return err
	}
	if err := fenceType(m.typ); err != nil {
		m.close()
		return err
	}
	if p.movable() {
		// Another user could move a mount of their choosing to this name by now:
		// detach the very mount checked, lazily (its descriptor keeps it busy).
		// A detach takes the mounts inside it too, which a plain unmount refuses
		// (EBUSY): refuse them here (found by review).
		if inside, err := mountsInside(m.id); err != nil || len(inside) > 0 {
			m.close()
			if err != nil {
				return err
			}
			return fmt.Errorf("%s: other mounts are inside it (%s): unmount them first", mountpoint, strings.Join(inside, ", "))
		}
		err = m.detach()
		m.close()
	} else {
		// Nobody else can rename on the way: a plain unmount at the name, which
		// refuses a mount still in use (EBUSY) rather than detaching it.
		m.close()
		err = unix.Unmount(p.path, unix.UMOUNT_NOFOLLOW)
	}
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			// A user namespace without the mount's ownership; try the helper.
			return fusermountUnmount(mountpoint, false)
		}
		return fmt.Errorf("unmounting %q: %w", mountpoint, err)
	}
	return nil
}

// mountsInside lists where the mounts whose parent is mount id are.
func mountsInside(id string) ([]string, error) {
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, err
	}
	var at []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if e, ok := parseMountinfo(line); ok && e.parent == id && e.id != id {
			at = append(at, e.at)
		}
	}
	return at, nil
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

// mountOf is mountinfo's entry for the mount fd is on, found by its ID (fdinfo's
// mnt_id: no request reaches the file system, so a stale mount answers too). The
// calling thread's mount table (thread-self): a thread of this process may have
// moved to a namespace of its own (abortConnection does), the main thread too.
func mountOf(fd int) (mountinfoEntry, error) {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return mountinfoEntry{}, err
	}
	id := ""
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "mnt_id:"); ok {
			id = strings.TrimSpace(v)
			break
		}
	}
	if id == "" {
		return mountinfoEntry{}, errors.New("no mnt_id in /proc/self/fdinfo")
	}
	if b, err = os.ReadFile("/proc/thread-self/mountinfo"); err != nil {
		return mountinfoEntry{}, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if e, ok := parseMountinfo(line); ok && e.id == id {
			return e, nil
		}
	}
	return mountinfoEntry{}, fmt.Errorf("mount %s is not in this namespace's mount table", id)
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
