//go:build !linux

package sandbox

import (
	"errors"
	"os/exec"
)

func startFiltered(*exec.Cmd) (child, error) {
	return nil, errors.New("network deny under bwrap is implemented on Linux only")
}
