//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"os"

	"github.com/toh-sandbox/toh/policy"
)

var errLandlockNotLinux = errors.New("landlock: Landlock is Linux-only")

// LandlockLauncherMain fails: there is no Landlock to apply on this platform.
func LandlockLauncherMain(args []string) int {
	fmt.Fprintln(os.Stderr, landlockFailurePrefix+"Landlock is Linux-only")
	return landlockExitFailure
}

// LandlockABI is 0: Landlock is Linux-only.
func LandlockABI() int { return 0 }

// LandlockEnforcement refuses every policy: Landlock is Linux-only.
func LandlockEnforcement(pol policy.Execution, abi int) (Enforcement, error) {
	return "", errLandlockNotLinux
}
