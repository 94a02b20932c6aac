//go:build !linux

package fencerun

import (
	"errors"
	"fmt"
	"os"

	"github.com/toh-sandbox/toh/policy"
	"github.com/toh-sandbox/toh/sandbox"
)

// Run is unavailable on this platform.
type Run struct{ sandbox.Stage }

// New fails: the fence needs Linux's FUSE and mount namespaces.
func New(self string, pol policy.Execution, roots []string) (*Run, error) {
	return nil, errors.New("the fence needs Linux (FUSE in a mount namespace of the run)")
}

// StageMain is never used here.
func StageMain(args []string) int {
	fmt.Fprintf(os.Stderr, "toh-exec %s: not supported on this platform\n", StageArg)
	return 125
}
