//go:build !linux

package canon

import "golang.org/x/sys/unix"

// OpenNoSymlinks has no openat2 to use here (see the Linux version).
func OpenNoSymlinks(string, bool) (int, error) { return -1, unix.ENOSYS }

func readlinkFd(int) (string, error) { return "", unix.ENOSYS }
