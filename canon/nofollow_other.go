//go:build !linux

package canon

import "golang.org/x/sys/unix"

// openNoSymlinks has no openat2 to use here: the walk keeps plain lstat calls.
func openNoSymlinks(string) (int, error) { return -1, unix.ENOSYS }

func readlinkFd(int) (string, error) { return "", unix.ENOSYS }
