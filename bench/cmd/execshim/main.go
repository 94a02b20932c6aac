// Command execshim is the floor for a Go front end to a runner, in two shapes:
//
//	execshim ARGV...          replaces itself with ARGV (execve: no fork, no wait)
//	execshim -parent ARGV...  starts ARGV the way toh-exec's spawn does (own session,
//	                          stderr through a pipe copied by a goroutine, termination
//	                          signals forwarded), waits, and exits with its status
//	execshim                  exits 0 (a bare Go runtime start)
//
// bench/exec-explain.sh times both in front of raw bwrap and the Landlock launcher, so
// what toh-exec adds can be split into what any Go program in its place would pay and
// what toh-exec's own work costs.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		return
	}
	if args[0] == "-parent" {
		os.Exit(parent(args[1:]))
	}
	err := syscall.Exec(args[0], args, os.Environ())
	fmt.Fprintf(os.Stderr, "execshim: %s: %v\n", args[0], err)
	os.Exit(127)
}

func parent(argv []string) int {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "execshim: -parent needs a command")
		return 2
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout = os.Stdin, os.Stdout
	cmd.Stderr = struct{ io.Writer }{os.Stderr} // not an *os.File: a pipe and a copying goroutine
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "execshim: %v\n", err)
		return 127
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return 127
	}
	return 0
}
