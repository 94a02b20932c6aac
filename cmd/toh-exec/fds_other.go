//go:build !linux

package main

import "golang.org/x/sys/unix"

// closeInheritedFDs marks every descriptor above stderr close-on-exec (see the Linux
// version); without close_range, the first 1024 are enough for the cases that matter.
func closeInheritedFDs() {
	for fd := 3; fd < 1024; fd++ {
		unix.CloseOnExec(fd)
	}
}
