//go:build !linux

package sandbox

import "os/exec"

// startForked is os/exec's start off Linux (see fork_linux.go).
func startForked(cmd *exec.Cmd) (child, error) { return startExec(cmd) }
