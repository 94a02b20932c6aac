package testutil

import (
	"fmt"
	"os"
	"testing"
)

// RequireRoot skips the test unless it runs with euid 0, or fails it where the CI leg
// declared root required (TOH_TEST_REQUIRE=root), like the other Require helpers.
func RequireRoot(t testing.TB) {
	t.Helper()
	if euid := os.Geteuid(); euid != 0 {
		missing(t, "root", fmt.Sprintf("needs euid 0, runs as euid %d", euid))
	}
}
