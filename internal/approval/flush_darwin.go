package approval

import "golang.org/x/sys/unix"

// flushInput discards what was typed on the terminal fd and not read yet (TIOCFLUSH
// with FREAD, 1: the input queue only).
func flushInput(fd int) { _ = unix.IoctlSetPointerInt(fd, unix.TIOCFLUSH, 1) }
