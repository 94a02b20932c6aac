//go:build !linux

package sandbox

import "syscall"

// signalSandbox is Linux's (bwrap's PID namespace); elsewhere the runner itself is
// signalled.
func signalSandbox(root int, sig syscall.Signal) bool { return false }

// followJobControl is Linux's; elsewhere toh-exec stops alone.
func followJobControl(stdin any, proc child, bwrap bool) (stop func()) { return func() {} }
