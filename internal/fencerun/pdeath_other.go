//go:build !linux

package fencerun

import "syscall"

// dieWithParent does nothing: New refuses to fence anywhere but Linux.
func dieWithParent(*syscall.SysProcAttr) {}
