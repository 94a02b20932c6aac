package sandbox

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toh-sandbox/toh/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestLauncherCapabilitiesPerCaller runs the launcher as root, as an unprivileged uid
// (which skips the bounding-set drops: without CAP_SETPCAP each would fail with
// EPERM), and as that uid holding CAP_SETPCAP through the ambient set (which must run
// them). Every confined command ends with no capability at all; the bounding set is
// emptied exactly when the caller could shrink it. Negative control: the same
// commands unconfined show the capabilities the caller held.
func TestLauncherCapabilitiesPerCaller(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireLandlockABI(t, 1)
	// The unprivileged uid must be able to run this binary: a copy in a directory
	// everyone can enter.
	dir, err := os.MkdirTemp("/var/tmp", "toh-caps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	copyExecutable(t, os.Args[0], bin)

	const none = "0000000000000000"
	cases := []struct {
		name     string
		cred     *syscall.Credential
		ambient  []uintptr
		bounding string // CapBnd of the confined command: "" means the caller's, unchanged
		eff      string // CapEff of the same command unconfined
	}{
		{name: "root", bounding: none},
		{name: "uid 65534", cred: &syscall.Credential{Uid: 65534, Gid: 65534}, eff: none},
		{name: "uid 65534 with CAP_SETPCAP", cred: &syscall.Credential{Uid: 65534, Gid: 65534},
			ambient: []uintptr{unix.CAP_SETPCAP}, bounding: none, eff: "0000000000000100"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := func(confined bool) (string, string, error) {
				args := []string{landlockHelperRun, "--", "launch", "--mode", "read-only", "--", "grep", "^Cap", "/proc/self/status"}
				cmd := exec.Command(bin, args...)
				if !confined {
					cmd = exec.Command("grep", "^Cap", "/proc/self/status")
				}
				cmd.Env = append(os.Environ(), landlockHelperEnv+"="+landlockHelperValue)
				cmd.Dir = "/"
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, AmbientCaps: c.ambient}
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				return stdout.String(), stderr.String(), err
			}
			out, errOut, err := run(true)
			if err != nil {
				t.Fatalf("confined: %v %q %q", err, out, errOut)
			}
			for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
				if !strings.Contains(out, set+":\t"+none) {
					t.Fatalf("confined %s not empty: %q", set, out)
				}
			}
			plain, _, err := run(false)
			if err != nil {
				t.Fatalf("unconfined: %v %q", err, plain)
			}
			callerBnd := field(plain, "CapBnd")
			wantBnd := c.bounding
			if wantBnd == "" {
				wantBnd = callerBnd
			}
			if got := field(out, "CapBnd"); got != wantBnd {
				t.Fatalf("confined CapBnd %s, want %s (caller's %s)", got, wantBnd, callerBnd)
			}
			if callerBnd == none || callerBnd == "" {
				t.Fatalf("negative control: the caller's bounding set is already empty (%q): an emptied one proves nothing", plain)
			}
			wantEff := c.eff
			if wantEff == "" {
				wantEff = field(plain, "CapPrm")
			}
			if got := field(plain, "CapEff"); got != wantEff || got == "" || (c.cred == nil && got == none) {
				t.Fatalf("negative control: unconfined CapEff %s, want %s", got, wantEff)
			}
		})
	}
}

func field(status, name string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, name+":\t"); ok {
			return v
		}
	}
	return ""
}

func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
