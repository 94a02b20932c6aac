package fusefence

import (
	"os"

	"golang.org/x/sys/unix"
)

// openAuditFile opens (creating it 0600) the audit log at the canonical path p for
// appending, following no symlink anywhere on the way: one swapped in since p was
// checked fails (ELOOP). O_NONBLOCK: a FIFO there fails at once (ENXIO) instead of
// waiting for a reader; it means nothing for a regular file.
func openAuditFile(p string) (*os.File, error) {
	flags := unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	how := unix.OpenHow{Flags: uint64(flags), Mode: 0o600, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &how)
	for i := 0; i < 16 && (err == unix.EINTR || err == unix.EAGAIN); i++ {
		fd, err = unix.Openat2(unix.AT_FDCWD, p, &how)
	}
	if err == unix.ENOSYS { // Linux before 5.6: the last component at least
		return os.OpenFile(p, flags, 0o600)
	}
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}
