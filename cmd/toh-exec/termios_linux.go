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
func keepTerminals(streams ...any) (restore func()) {
	type saved struct {
		fd  int
		tio *unix.Termios
	}
	var kept []saved
	for _, s := range streams {
		f, ok := s.(*os.File)
		if !ok || f == nil {
			continue
		}
		fd := int(f.Fd())
		if tio, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
			kept = append(kept, saved{fd, tio})
		}
	}
	return func() {
		ignored := false
		for _, k := range kept {
			now, err := unix.IoctlGetTermios(k.fd, unix.TCGETS)
			if err != nil || *now == *k.tio {
				continue
			}
			if !ignored {
				signal.Ignore(syscall.SIGTTOU)
				ignored = true
			}
			_ = unix.IoctlSetTermios(k.fd, unix.TCSETS, k.tio)
		}
	}
}
