package sandbox

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// signalSandbox delivers sig where a terminal's signal would have gone had the
// command run without toh-exec in the foreground: to every process of the run's
// PID namespace that is still in the process group the command started in (a
// shell's pipeline included, a daemon that made a session of its own not). It
// spares the two processes that are bwrap's own: bwrap outside, which would die
// by the signal (it forwards none: containers/bubblewrap#369), and the namespace's
// init, which a signal from an ancestor namespace reaches and kills. Either death
// kills every process of the run at once, so that before 2026-12-02 Ctrl-C, or a
// SIGTERM to toh-exec, ended a bwrap run without the command's own handlers: a git
// interrupted that way left index.lock, a make its half-written targets (found
// by review; the Landlock rung execs the command itself and always forwarded).
//
// root is the process Run started (bwrap, or a stage that starts it). It reports
// false when no init of a PID namespace is among root's descendants yet (bwrap
// still setting up, before the command started): the caller then signals root,
// ending a run that has not begun. Each process is signalled through a pidfd
// opened before its group is checked again, so a pid reused meanwhile is never
// signalled.
func signalSandbox(root int, sig syscall.Signal) bool {
	init := namespaceInit(root)
	if init == 0 {
		return false
	}
	group, ok := procGroup(init)
	if !ok {
		return false
	}
	seen := map[int]bool{init: true}
	queue := kids(init)
	for len(queue) > 0 && len(seen) < maxSandboxProcs {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		queue = append(queue, kids(p)...)
		fd, err := unix.PidfdOpen(p, 0)
		if err != nil {
			continue // gone
		}
		if g, ok := procGroup(p); ok && g == group {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		unix.Close(fd)
	}
	return true
}

// maxSandboxProcs bounds the walks of signalSandbox: a run that forks without end
// cannot hold the signal's delivery.
const maxSandboxProcs = 1 << 14

// namespaceInit is the first descendant of root (root included) that is the init
// of a PID namespace below this process's, or 0.
func namespaceInit(root int) int {
	self := nsDepth(os.Getpid())
	seen := map[int]bool{}
	queue := []int{root}
	for len(queue) > 0 && len(seen) < maxSandboxProcs {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		if d, last := nsPid(p); d > self && last == 1 {
			return p
		}
		queue = append(queue, kids(p)...)
	}
	return 0
}

// nsDepth is how many PID namespaces p is seen in (0 when unknown).
func nsDepth(p int) int {
	d, _ := nsPid(p)
	return d
}

// nsPid reads p's NSpid line: how many PID namespaces see it, and its pid in the
// innermost.
func nsPid(p int) (depth, inner int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
	if err != nil {
		return 0, 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return len(f), n
		}
	}
	return 0, 0
}

// kids is childrenOf (leftovers_linux.go) by number, nothing when p is gone.
func kids(p int) []int {
	k, _ := childrenOf(strconv.Itoa(p))
	return k
}

// procGroup is p's process group, as this process's /proc numbers it.
func procGroup(p int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid pgrp ...: comm may hold anything but the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return 0, false
	}
	g, err := strconv.Atoi(f[2])
	return g, err == nil
}

// followJobControl makes a confined command stop and continue with toh-exec, as
// it would as part of the terminal's job: the command runs in a session of its own
// (see spawn), so the terminal's ^Z (SIGTSTP) reaches toh-exec alone. Before
// 2026-12-02 toh-exec stopped and the command ran on, reading what the user typed
// into the shell next (found by review). Now SIGTSTP stops the command's
// processes (those signalSandbox reaches under bwrap; the command's process group,
// which it leads, otherwise) with SIGSTOP, then toh-exec itself; the SIGCONT of
// "fg" or "bg" continues them. It applies only while stdin is a terminal: with a
// pipe or a file nothing can be read from the user's typing. Not covered: a job
// continued in the background ("bg", or started with "&") that reads the terminal
// is not stopped by the kernel (SIGTTIN), as it is outside the terminal's session.
// The returned function ends the following once the command was reaped.
func followJobControl(stdin any, proc child, bwrap bool) (stop func()) {
	f, ok := stdin.(*os.File)
	if !ok || f == nil {
		return func() {}
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return func() {}
	}
	jobs := make(chan os.Signal, 2)
	signal.Notify(jobs, syscall.SIGTSTP, syscall.SIGCONT)
	send := func(sig syscall.Signal) {
		if bwrap {
			if !signalSandbox(proc.pid(), sig) {
				_ = proc.Signal(sig) // bwrap still setting up
			}
			return
		}
		_ = unix.Kill(-proc.pid(), sig)
	}
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case s := <-jobs:
				if s == syscall.SIGTSTP {
					send(syscall.SIGSTOP)
					_ = unix.Kill(os.Getpid(), unix.SIGSTOP)
				} else {
					send(syscall.SIGCONT)
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(jobs)
		close(done)
		<-ended
	}
}
