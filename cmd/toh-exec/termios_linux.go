package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// keepTerminals records the settings of every terminal among a confined run's
// standard streams and returns a function that puts back any the command changed.
// A confined command holds the user's terminal as its stdin (or stdout, stderr) and
// may change its settings (stty -echo, raw mode), which would outlast the run and
// leave the user's shell echoing nothing, or everything (found by review). Only
// settings that differ are written, so a run that changed nothing costs one read
// each; SIGTTOU is ignored first, so a toh-exec in the background is not stopped
// by writing them.
//
// Output stopped with tcflow(TCOOFF) outlasts a run too, and no ioctl reads that
// state back: every terminal's output is restarted (TCOON, a no-op where it runs),
// which costs one more ioctl, two from the background. Stopped output also blocks
// toh-exec's own writes to the terminal, the copy of the command's stderr included
// (found by review: the run then hung until the user typed ^Q), so the caller puts
// the terminals back as soon as the command has exited (sandbox.Stdio.Exited),
// before that copy is drained, and again after the run. restore may run more than
// once, each time putting back what differs: Run calls Exited after every start of
// the runner, and starts bwrap again when its set-up met the host's mounts moving;
// a restore used up by the failed start would leave the next one's changes.
func keepTerminals(streams ...any) (restore func()) {
	type saved struct {
		fd          int
		tio         *unix.Termios
		ldisc, excl int
	}
	var kept []saved
	for _, s := range streams {
		f, ok := s.(*os.File)
		if !ok || f == nil {
			continue
		}
		fd := int(f.Fd())
		tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			continue
		}
		// The line discipline (N_NULL leaves a dead terminal) and exclusive mode
		// (no one else may open it: pagers, sudo, ssh) outlast a run as well
		// (found by review); both are read without side effects.
		ldisc, _ := unix.IoctlGetInt(fd, unix.TIOCGETD)
		excl, _ := unix.IoctlGetInt(fd, unix.TIOCGEXCL)
		kept = append(kept, saved{fd, tio, ldisc, excl})
	}
	return func() {
		ignored := false
		ignore := func() {
			if !ignored {
				signal.Ignore(syscall.SIGTTOU)
				ignored = true
			}
		}
		for _, k := range kept {
			// tcflow, like tcsetattr, stops a process that is not in the
			// terminal's foreground group with SIGTTOU.
			if pg, err := unix.IoctlGetInt(k.fd, unix.TIOCGPGRP); err != nil || pg != unix.Getpgrp() {
				ignore()
			}
			_ = unix.IoctlSetInt(k.fd, unix.TCXONC, unix.TCOON)
			if ld, err := unix.IoctlGetInt(k.fd, unix.TIOCGETD); err == nil && ld != k.ldisc {
				ignore()
				_ = unix.IoctlSetPointerInt(k.fd, unix.TIOCSETD, k.ldisc)
			}
			if ex, err := unix.IoctlGetInt(k.fd, unix.TIOCGEXCL); err == nil && ex != 0 && k.excl == 0 {
				_ = unix.IoctlSetInt(k.fd, unix.TIOCNXCL, 0)
			}
			now, err := unix.IoctlGetTermios(k.fd, unix.TCGETS)
			if err != nil || *now == *k.tio {
				continue
			}
			ignore()
			_ = unix.IoctlSetTermios(k.fd, unix.TCSETS, k.tio)
		}
	}
}
