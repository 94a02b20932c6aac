//go:build unix

package sandbox

import "syscall"

func newSessionAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }
