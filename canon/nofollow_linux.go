package canon

import "golang.org/x/sys/unix"

// openNoSymlinks opens p as O_PATH without following any symlink in it, its last
// component included (a symlink there is opened itself). ENOSYS: no openat2.
func openNoSymlinks(p string) (int, error) {
	if noOpenat2.Load() {
		return -1, unix.ENOSYS
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}
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
