package testutil

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// required reports whether the CI leg declared that feature must be present
// (TOH_TEST_REQUIRE=bwrap,landlock,fuse). Such a leg fails instead of skipping, so a
// missing install step can never turn into a green run that tested nothing.
func required(feature string) bool {
	for _, f := range strings.Split(os.Getenv("TOH_TEST_REQUIRE"), ",") {
		if strings.TrimSpace(f) == feature {
			return true
		}
	}
	return false
}

func missing(t testing.TB, feature, why string) {
	t.Helper()
	if required(feature) {
		t.Fatalf("%s is required in this test leg (TOH_TEST_REQUIRE) but unusable: %s", feature, why)
	}
	t.Skipf("%s unusable: %s", feature, why)
}

// RequireBwrap returns the bwrap path after checking it can create its namespaces.
func RequireBwrap(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		out, err := exec.Command(p, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid", "--proc", "/proc", "--", "true").CombinedOutput()
		if err != nil {
			missing(t, "bwrap", strings.TrimSpace(string(out)))
		}
		return p
	}
	missing(t, "bwrap", "not installed")
	return ""
}

// RequireLandlockABI skips (or fails, where required) unless the kernel offers at
// least Landlock ABI min.
func RequireLandlockABI(t testing.TB, min int) int {
	t.Helper()
	abi := LandlockABI()
	switch {
	case abi == 0:
		missing(t, "landlock", "the kernel offers no Landlock")
	case abi < min:
		// Landlock is there, only older than this test needs: an older kernel is a
		// fact of the host (the VM matrix tests such kernels), never a missing install.
		t.Skipf("kernel Landlock ABI %d < %d", abi, min)
	}
	return abi
}
