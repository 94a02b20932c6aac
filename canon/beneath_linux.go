package canon

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// dirFlags opens a directory only to resolve names in it: O_PATH needs no read or
// search permission on the directory itself and has no side effects.
const dirFlags = unix.O_PATH

// OpenRoot opens the directory path as O_PATH|O_DIRECTORY|O_CLOEXEC, to be the rootFd
// of [OpenBeneath]. path is trusted: it is opened normally, following symlinks.
func OpenRoot(path string) (int, error) {
	fd, err := ignoringEINTR(func() (int, error) {
		return unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return -1, &PathError{Op: "openroot", Path: path, Err: err}
	}
	return fd, nil
}

// noOpenat2 is set once openat2 answered ENOSYS; it will not come back.
var noOpenat2 atomic.Bool

func openBeneath(rootFd int, unsafePath string, flags int, mode uint32) (int, error) {
	if !noOpenat2.Load() {
		fd, err := openat2Beneath(rootFd, unsafePath, flags, mode)
		switch err {
		case unix.ENOSYS:
			noOpenat2.Store(true)
		case unix.EPERM:
			// A seccomp filter, or a real EPERM that the walk will report again.
		default:
			return fd, err
		}
	}
	return openWalk(rootFd, unsafePath, flags, mode)
}

func openat2Beneath(rootFd int, unsafePath string, flags int, mode uint32) (int, error) {
	p, trailingSlash, err := cleanBeneath(unsafePath)
	if err != nil {
		return -1, err
	}
	if trailingSlash {
		p += "/"
	}
	// openat2 rejects a mode without O_CREAT or O_TMPFILE, where open(2) ignores it.
	if flags&unix.O_CREAT == 0 && flags&unix.O_TMPFILE != unix.O_TMPFILE {
		mode = 0
	}
	how := unix.OpenHow{
		Flags:   uint64(flags) | unix.O_CLOEXEC,
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	// EAGAIN: a concurrent rename or mount made the kernel unsure it stayed beneath.
	for range 32 {
		fd, err := unix.Openat2(rootFd, p, &how)
		if err != unix.EAGAIN && err != unix.EINTR {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// openDirNoFollow opens the directory name in dirFd for the next lookup.
func openDirNoFollow(dirFd int, name string) (int, error) {
	fd, _, err := openLastPath(dirFd, name, unix.O_PATH|unix.O_DIRECTORY)
	return fd, err
}

// openLastPath handles final opens with O_PATH exactly: such an fd has no side
// effects, so the name can be opened without O_DIRECTORY and the object actually
// held be checked, with no second look that a swap could fool.
func openLastPath(dirFd int, name string, flags int) (fd int, handled bool, err error) {
	if flags&unix.O_PATH == 0 {
		return -1, false, nil
	}
	fd, err = ignoringEINTR(func() (int, error) {
		return unix.Openat(dirFd, name, (flags|unix.O_NOFOLLOW|unix.O_CLOEXEC)&^unix.O_DIRECTORY, 0)
	})
	if err != nil {
		return -1, true, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, true, err
	}
	typ := st.Mode & unix.S_IFMT
	switch {
	case typ == unix.S_IFLNK && flags&unix.O_NOFOLLOW == 0:
		err = unix.ELOOP // only O_PATH|O_NOFOLLOW from the caller may name a symlink
	case typ != unix.S_IFDIR && flags&unix.O_DIRECTORY != 0:
		err = unix.ENOTDIR
	default:
		return fd, true, nil
	}
	unix.Close(fd)
	return -1, true, err
}
