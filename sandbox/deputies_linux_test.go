package sandbox

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// listenUnix makes a listening unix socket at p for the test's lifetime; a dial
// succeeds on its backlog without an accept.
func listenUnix(t *testing.T, p string) {
	t.Helper()
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// A bwrap run hides the deputies it knows of, in both modes: a listed system socket
// (deputySockets, pointed at one of the test's) and a socket in the caller's runtime
// directory ($XDG_RUNTIME_DIR) cannot be connected from inside. Negative control: the
// same dials from outside connect, so the sockets work. Positive control: a socket
// that is not a deputy connects from inside the same run, so unix connect itself
// works under bwrap and the refusal is the hiding's.
func TestBwrapHidesDeputies(t *testing.T) {
	bwrap := testutil.RequireBwrap(t)
	dir, err := os.MkdirTemp("/var/tmp", "toh-deputies-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt, ws := filepath.Join(dir, "rt"), filepath.Join(dir, "ws")
	for _, d := range []string{rt, ws} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	system, bus, other := filepath.Join(dir, "system.sock"), filepath.Join(rt, "bus"), filepath.Join(dir, "other.sock")
	for _, p := range []string{system, bus, other} {
		listenUnix(t, p)
	}
	saved := deputySockets
	deputySockets = []string{system}
	t.Cleanup(func() { deputySockets = saved })
	t.Setenv("XDG_RUNTIME_DIR", rt)
	// A copy of this binary outside /tmp, which workspace-write replaces.
	self := filepath.Join(dir, "helper")
	testutil.CopyExecutable(t, os.Args[0], self)
	env := append(os.Environ(), landlockHelperEnv+"="+landlockHelperValue)
	dial := func(target string) []string {
		return []string{self, landlockHelperRun, "--", "op", "dial-unix", target}
	}

	for _, target := range []string{system, bus, other} {
		var stderr bytes.Buffer
		if facts, err := RunUnconfined(policy.DangerFullAccess, self, dial(target), dir, env, Stdio{Stderr: &stderr}); err != nil || facts.ExitCode != 0 {
			t.Fatalf("unconfined dial of %s: %+v %v %s", target, facts, err, stderr.String())
		}
	}
	for _, pol := range []policy.Execution{
		{Mode: policy.ReadOnly, Network: policy.NetworkAllow},
		{Mode: policy.WorkspaceWrite, WorkspaceRoot: ws, WritableRoots: []string{ws, "/tmp"}, Network: policy.NetworkAllow},
	} {
		for _, tc := range []struct {
			target    string
			connected bool
		}{{system, false}, {bus, false}, {other, true}} {
			c, err := newBwrapProvider(bwrap, nil).Confine(dial(tc.target), pol)
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			facts, err := Run(c, pol, ws, env, Stdio{Stderr: &stderr})
			if err != nil || (facts.ExitCode == 0) != tc.connected {
				t.Errorf("%s: dial %s: %+v %v %q, want connected=%v", pol.Mode, tc.target, facts, err, stderr.String(), tc.connected)
			}
		}
	}
}

// deputyHides lists what exists, at its real place, once, and never a place that
// holds a writable root or lies in workspace-write's private /tmp.
func TestDeputyHides(t *testing.T) {
	dir, err := os.MkdirTemp("/var/tmp", "toh-deputies-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt, tm := filepath.Join(dir, "rt"), filepath.Join(dir, "tmux")
	for _, d := range []string{rt, tm, filepath.Join(rt, "proj")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sock, tmuxSock := filepath.Join(dir, "d.sock"), filepath.Join(tm, "default")
	listenUnix(t, sock)
	listenUnix(t, tmuxSock)
	link, file := filepath.Join(dir, "link.sock"), filepath.Join(dir, "file")
	os.Symlink(sock, link)
	os.WriteFile(file, nil, 0o600)
	tmpSock := filepath.Join(t.TempDir(), "t.sock") // under /tmp
	listenUnix(t, tmpSock)
	saved := deputySockets
	deputySockets = []string{sock, link, file, filepath.Join(dir, "missing"), "relative.sock", tmpSock}
	t.Cleanup(func() { deputySockets = saved })
	env := map[string]string{"XDG_RUNTIME_DIR": rt, "TMUX": tmuxSock + ",123,0", "SCREENDIR": file}
	getenv := func(k string) string { return env[k] }

	ro := policy.Execution{Mode: policy.ReadOnly}
	want := []bwrapHide{{rt, true}, {sock, false}, {tmpSock, false}, {tmuxSock, false}}
	if d := cmp.Diff(want, deputyHides(ro, getenv), cmp.AllowUnexported(bwrapHide{})); d != "" {
		t.Errorf("read-only (-want +got):\n%s", d)
	}
	ws := policy.Execution{Mode: policy.WorkspaceWrite, WritableRoots: []string{filepath.Join(rt, "proj"), "/tmp"}}
	want = []bwrapHide{{sock, false}, {tmuxSock, false}}
	if d := cmp.Diff(want, deputyHides(ws, getenv), cmp.AllowUnexported(bwrapHide{})); d != "" {
		t.Errorf("workspace-write with a root in the runtime directory (-want +got):\n%s", d)
	}
	args := bwrapHideOptions([]bwrapHide{{rt, true}, {sock, false}})
	if d := cmp.Diff([]string{"--tmpfs", rt, "--ro-bind", "/dev/null", sock}, args); d != "" {
		t.Errorf("options (-want +got):\n%s", d)
	}
}
