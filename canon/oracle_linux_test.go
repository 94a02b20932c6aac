package canon

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// kernelRealpath is the kernel's own answer: the path of what open(2) reaches,
// read back from /proc/self/fd. ok is false when the kernel cannot open p.
func kernelRealpath(p string) (string, bool) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer unix.Close(fd)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}
