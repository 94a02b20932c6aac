package main

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeInheritedFDs marks every descriptor above stderr close-on-exec, so that a
// confined command inherits only its standard streams: a descriptor the caller left
// open (a result fd, a log, a socket) could otherwise be written from inside the
// sandbox whatever the mode says. toh-exec itself keeps using them.
func closeInheritedFDs() {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
