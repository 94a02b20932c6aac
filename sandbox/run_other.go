//go:build !unix

package sandbox

import "syscall"

func newSessionAttr() *syscall.SysProcAttr { return nil }
