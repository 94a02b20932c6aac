//go:build !linux

package sandbox

import (
	"errors"
	"os/exec"
)

// launcherFailure is a failure of the Landlock rung before the command ran.
type launcherFailure struct{ line string }

func (e *launcherFailure) Error() string { return e.line }

// holdRefusedError is Linux-only (landlock_direct_linux.go).
type holdRefusedError struct{ err error }

func (e *holdRefusedError) Error() string { return e.err.Error() }

// startLandlocked is never reached: only the Linux Landlock provider sets
// Confined.landlock.
func startLandlocked(cmd *exec.Cmd, f landlockFlags) (child, error) {
	return nil, &launcherFailure{line: landlockFailureLine(errors.New("Landlock is Linux-only"))}
}
