package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireSeatbelt skips unless /usr/bin/sandbox-exec exists and can apply a profile
// here (a process that is itself sandboxed cannot); where the leg requires it
// (TOH_TEST_REQUIRE=seatbelt) it fails instead.
func RequireSeatbelt(t testing.TB) {
	t.Helper()
	const sandboxExec = "/usr/bin/sandbox-exec"
	if _, err := os.Stat(sandboxExec); err != nil {
		missing(t, "seatbelt", err.Error())
		return
	}
	out, err := exec.Command(sandboxExec, "-p", "(version 1) (allow default)", "--", "/usr/bin/true").CombinedOutput()
	if err != nil {
		missing(t, "seatbelt", fmt.Sprintf("%s cannot apply a profile here: %v %s", sandboxExec, err, strings.TrimSpace(string(out))))
	}
}
