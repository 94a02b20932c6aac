package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// RequireFUSE skips the test unless this process can serve a FUSE mount: /dev/fuse
// opens read-write, and, without root, fusermount3 is installed. Where the CI leg
// declared FUSE required (TOH_TEST_REQUIRE=fuse) it fails instead.
func RequireFUSE(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		missing(t, "fuse", fmt.Sprintf("cannot open /dev/fuse: %v", err))
		return
	}
	f.Close()
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			missing(t, "fuse", "fusermount3 not installed")
		}
	}
}
