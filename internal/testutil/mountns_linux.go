package testutil

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// privateMountsEnv names the test a child process runs in a mount namespace of its
// own (see InOwnMountNamespace).
const privateMountsEnv = "TOH_TEST_OWN_MOUNT_NAMESPACE"

// InOwnMountNamespace runs the calling test again in a child test process with a
// mount namespace of its own (propagation private, as os/exec sets it up for
// CLONE_NEWNS), and reports whether the caller is that child, where the test's body
// runs; in the parent it returns false after the child ended, with its verdict.
//
// For tests that move mounts around, renaming the directories that hold them: bwrap
// remounts every mount it copies and fails when one moves meanwhile ("Can't bind
// mount /oldroot/ on /newroot/ ... No such file or directory"), which broke bwrap
// tests running at the same time in other packages. Mounts made in the child's
// namespace are invisible to the rest of the machine; renames are not, but the
// directories renamed hold no mounts out here. Needs root.
func InOwnMountNamespace(t *testing.T) bool {
	t.Helper()
	if os.Getenv(privateMountsEnv) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("a mount namespace of its own needs root")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), privateMountsEnv+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Fatalf("in a mount namespace of its own: %v\n%s", err, out)
	case strings.Contains(string(out), "--- SKIP: "+t.Name()):
		t.Skipf("in a mount namespace of its own:\n%s", out)
	case !strings.Contains(string(out), "--- PASS: "+t.Name()):
		t.Fatalf("in a mount namespace of its own, the test did not run:\n%s", out)
	}
	t.Logf("in a mount namespace of its own:\n%s", out)
	return false
}
