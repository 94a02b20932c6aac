package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/toh-sandbox/toh/internal/testutil"
)

// launcherScript writes an executable that behaves like `toh-exec __landlock-run ...`
// by re-execing this test binary as the launcher (see TestLandlockHelperProcess).
func launcherScript(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "toh-exec")
	script := "#!/bin/sh\nshift\n" + landlockHelperEnv + "=" + landlockHelperValue + " exec '" + bin + "' '" + landlockHelperRun + "' -- launch \"$@\"\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDiagnoseThisHost(t *testing.T) {
	bwrap := testutil.RequireBwrap(t)
	abi := testutil.RequireLandlockABI(t, 1)
	cache := filepath.Join(t.TempDir(), "cache", "probe.json")
	d, err := Diagnose(context.Background(), Options{Self: launcherScript(t), ProbeTimeout: DefaultProbeTimeout, Cache: &ProbeCache{Path: cache}})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Rungs) != 2 || !d.Rungs[0].OK || !d.Rungs[1].OK {
		t.Fatalf("rungs %+v, want bwrap and landlock passing", d.Rungs)
	}
	if d.Effective.Backend != "bwrap" || !d.Confines() {
		t.Fatalf("effective %+v, want bwrap", d.Effective)
	}
	if d.Host.Bwrap.Path != bwrap || !d.Host.Bwrap.Exists || !d.Host.Bwrap.Executable {
		t.Fatalf("bwrap facts %+v, want %s found", d.Host.Bwrap, bwrap)
	}
	l := d.Rungs[1]
	if l.ABI != abi || l.Ruleset == "" {
		t.Fatalf("landlock rung %+v, want ABI %d and a ruleset", l, abi)
	}
	// The probe text doctor reports is what the real launcher prints on this kernel.
	probe := runLandlock(t, "--probe")
	if probe.code != 0 || strings.TrimSpace(probe.stdout) != l.Detail {
		t.Fatalf("launcher probe printed %q (exit %d, %q); doctor reports %q", probe.stdout, probe.code, probe.stderr, l.Detail)
	}
	// The sysctl facts are the files' values.
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil {
		want, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if got := d.Host.UserNS.MaxUserNamespaces; got == nil || *got != want {
			t.Fatalf("max_user_namespaces %v, want %d", got, want)
		}
	}
	if _, err := os.Stat("/proc/sys/kernel/unprivileged_userns_clone"); errors.Is(err, os.ErrNotExist) && d.Host.UserNS.UnprivilegedUsernsClone != nil {
		t.Fatalf("unprivileged_userns_clone reported on a kernel without it")
	}
	// bwrap's probe passed, so the namespaces it needs can be created here.
	if d.Host.UserNS.CloneErrno != "" {
		t.Fatalf("clone with bwrap's namespaces: %q, but bwrap's probe passed", d.Host.UserNS.CloneErrno)
	}
	// Doctor neither trusts nor writes the cache.
	if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("doctor wrote the probe cache (%v)", err)
	}
	if d.ProbeCache.Path != cache || d.ProbeCache.State != "missing" || d.ProbeCache.Current {
		t.Fatalf("probe cache %+v", d.ProbeCache)
	}
}

func TestDiagnoseLandlockFailureKeepsLauncherLine(t *testing.T) {
	testutil.RequireLandlockABI(t, 1)
	// A launcher that fails the way a refused ruleset does: the rung shows its line and,
	// with nothing measured to blame, says so.
	self := filepath.Join(t.TempDir(), "toh-exec")
	os.WriteFile(self, []byte("#!/bin/sh\necho 'landlock-run: enforcing the Landlock ruleset: invalid argument' >&2\nexit 125\n"), 0o755)
	d, err := Diagnose(context.Background(), Options{Self: self, BwrapPath: "/nonexistent/bwrap", ProbeTimeout: DefaultProbeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	l := d.Rungs[1]
	if l.OK || l.Detail != "landlock-run: enforcing the Landlock ruleset: invalid argument" ||
		!strings.Contains(l.Cause, "the launcher says: landlock-run: enforcing") {
		t.Fatalf("landlock rung %+v", l)
	}
	if d.Confines() || d.Effective.Backend != EffectiveNone {
		t.Fatalf("effective %+v, want none", d.Effective)
	}
}
