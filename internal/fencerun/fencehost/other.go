//go:build !linux

// Package fencehost is the toh-mount side of toh-exec --fence; it exists on Linux
// only.
package fencehost

import (
	"fmt"
	"os"
)

// HostMain is not supported on this platform.
func HostMain(args []string) int {
	fmt.Fprintln(os.Stderr, "toh-mount: the fence host of toh-exec --fence needs Linux")
	return 125
}

// StageMain is not supported on this platform.
func StageMain(args []string) int { return HostMain(args) }
