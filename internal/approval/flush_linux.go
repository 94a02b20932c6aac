package approval

import "golang.org/x/sys/unix"

// flushInput discards what was typed on the terminal fd and not read yet.
func flushInput(fd int) { _ = unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH) }
