package fusefence

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

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
// how many it detached.
func RecoverStale(mountpoint string) (int, error) {
	for n := 0; ; n++ {
		if !IsStale(mountpoint) {
			return n, nil
		}
		if n == 64 {
			return n, fmt.Errorf("%q: still stale after detaching %d mounts", mountpoint, n)
		}
		if err := Unmount(mountpoint, true); err != nil {
			return n, err
		}
	}
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
		// ID parent major:minor root mountpoint options [optional...] - type source super
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if len(f) < 5 || sep < 0 || sep+1 >= len(f) {
			continue
		}
		if unescapeMountinfo(f[4]) == mountpoint {
			typ = f[sep+1]
		}
	}
	return typ, nil
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
