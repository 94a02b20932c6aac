package canon

import "golang.org/x/sys/unix"

// OpenNoSymlinks opens the path p as O_PATH following no symlink on the way, and
// none in its last component either: with nofollow a symlink there is opened
// itself, without it that is ELOOP too. It is for paths that were canonical when
// they were resolved: a component replaced by a symlink since fails instead of
// being followed (see CanonicalAvoiding for why a FUSE daemon needs that). ENOSYS:
// no openat2 here (Linux before 5.6, other systems); the caller decides what to do
// without it.
func OpenNoSymlinks(p string, nofollow bool) (int, error) {
	if noOpenat2.Load() {
		return -1, unix.ENOSYS
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}
	if nofollow {
		how.Flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &how)
	for i := 0; i < 16 && (err == unix.EINTR || err == unix.EAGAIN); i++ {
		fd, err = unix.Openat2(unix.AT_FDCWD, p, &how)
	}
	if err == unix.ENOSYS {
		noOpenat2.Store(true)
	}
	return fd, err
}

// readlinkFd reads the target of the symlink fd, an O_PATH descriptor of it.
func readlinkFd(fd int) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
