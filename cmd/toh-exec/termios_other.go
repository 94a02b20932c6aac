//go:build !linux

package main

// keepTerminals is Linux-only (see termios_linux.go); elsewhere a command's changes
// to the terminal's settings outlast the run.
func keepTerminals(...any) (restore func()) { return func() {} }
