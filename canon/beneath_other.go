//go:build !linux

package canon

import "golang.org/x/sys/unix"

// dirFlags has no O_PATH to use: opening a directory to resolve names in it needs
// read permission on it.
const dirFlags = unix.O_RDONLY

// OpenRoot opens the directory path as O_RDONLY|O_DIRECTORY|O_CLOEXEC, to be the
// rootFd of [OpenBeneath]. path is trusted: it is opened normally, following symlinks.
func OpenRoot(path string) (int, error) {
	fd, err := ignoringEINTR(func() (int, error) {
		return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return -1, &PathError{Op: "openroot", Path: path, Err: err}
	}
	return fd, nil
}

func openBeneath(rootFd int, unsafePath string, flags int, mode uint32) (int, error) {
	return openWalk(rootFd, unsafePath, flags, mode)
}

// openDirNoFollow opens the directory name in dirFd for the next lookup.
// O_DIRECTORY keeps a FIFO or device from being opened (and blocking or acting).
func openDirNoFollow(dirFd int, name string) (int, error) {
	return openLast(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
}

// openLastPath: there is no O_PATH here.
func openLastPath(dirFd int, name string, flags int) (fd int, handled bool, err error) {
	return -1, false, nil
}
