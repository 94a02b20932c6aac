package fusefence

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// Unmount unmounts mountpoint: umount2 as root, fusermount3 -u otherwise. lazy
// detaches it even while files are open on it (MNT_DETACH, fusermount3 -z).
func Unmount(mountpoint string, lazy bool) error {
	if os.Geteuid() == 0 {
		flags := 0
		if lazy {
			flags = unix.MNT_DETACH
		}
		err := unix.Unmount(mountpoint, flags)
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
