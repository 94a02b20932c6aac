package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/internal/passwd"
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
// (deputySockets, pointed at one of the test's), a socket in the caller's runtime
// directory ($XDG_RUNTIME_DIR) and one in another user's (/run/user) cannot be
// connected from inside. Negative control: the
// same dials from outside connect, so the sockets work. Positive control: a socket
// that is not a deputy connects from inside the same run, so unix connect itself
// works under bwrap and the refusal is the hiding's.
func TestBwrapHidesDeputies(t *testing.T) {
	bwrap := testutil.RequireBwrap(t)
	dir := deputiesScratch(t)
	rt, ws := filepath.Join(dir, "rt"), filepath.Join(dir, "ws")
	for _, d := range []string{rt, ws} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	system, bus, other := filepath.Join(dir, "system.sock"), filepath.Join(rt, "bus"), filepath.Join(dir, "other.sock")
	// An Emacs server's socket in $TMPDIR (where Emacs keeps it without a runtime
	// directory).
	emacs := filepath.Join(dir, "tmpdir", fmt.Sprintf("emacs%d", os.Getuid()))
	if err := os.MkdirAll(emacs, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", filepath.Dir(emacs))
	targets := []string{system, bus, filepath.Join(emacs, "server")}
	// Another user's runtime directory, when this test may make one (as root).
	if other, err := os.MkdirTemp("/run/user", "toh-test-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(other) })
		targets = append(targets, filepath.Join(other, "bus"))
	} else {
		t.Logf("no directory of the test's own in /run/user (%v): that case is not run", err)
	}
	for _, p := range append(targets, other) {
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

	for _, target := range append(targets, other) {
		var stderr bytes.Buffer
		if facts, err := RunUnconfined(policy.DangerFullAccess, self, dial(target), dir, env, Stdio{Stderr: &stderr}); err != nil || facts.ExitCode != 0 {
			t.Fatalf("unconfined dial of %s: %+v %v %s", target, facts, err, stderr.String())
		}
	}
	for _, pol := range []policy.Execution{
		{Mode: policy.ReadOnly, Network: policy.NetworkAllow},
		{Mode: policy.WorkspaceWrite, WorkspaceRoot: ws, WritableRoots: []string{ws, "/tmp"}, Network: policy.NetworkAllow},
	} {
		type dialCase struct {
			target    string
			connected bool
		}
		cases := []dialCase{{other, true}}
		for _, target := range targets {
			cases = append(cases, dialCase{target, false})
		}
		for _, tc := range cases {
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

// A link another user plants in a world-writable $TMPDIR under an editor's server
// directory name does not choose what a bwrap run hides: the caller's private
// directory it points at stays visible, and one pointing at /proc/PID/fd, where
// bwrap cannot mount, does not fail the run. Control: the caller's own directory of
// that name there is hidden.
func TestBwrapIgnoresPlantedDeputyLinks(t *testing.T) {
	bwrap := testutil.RequireBwrap(t)
	dir := deputiesScratch(t)
	sticky, private := filepath.Join(dir, "sticky"), filepath.Join(dir, "private")
	for _, d := range []string{sticky, private} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(sticky, 0o777|os.ModeSticky)
	if err := os.WriteFile(filepath.Join(private, "tool"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	emacs := filepath.Join(sticky, fmt.Sprintf("emacs%d", os.Getuid()))
	os.Symlink(private, emacs)
	os.Symlink(fmt.Sprintf("/proc/%d/fd", os.Getpid()), filepath.Join(sticky, "nvim.tohuser"))
	t.Setenv("TMPDIR", sticky)
	t.Setenv("USER", "tohuser")
	pol := policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}
	run := func(script string) (Facts, error, string) {
		t.Helper()
		c, err := newBwrapProvider(bwrap, nil).Confine([]string{"/bin/sh", "-c", script}, pol)
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		facts, err := Run(c, pol, dir, os.Environ(), Stdio{Stderr: &stderr})
		return facts, err, stderr.String()
	}
	if facts, err, stderr := run("test -e " + filepath.Join(private, "tool")); err != nil || facts.RunnerFailed || facts.ExitCode != 0 {
		t.Errorf("the caller's private directory behind a planted link: %+v %v %q, want it visible", facts, err, stderr)
	}
	os.Remove(emacs)
	os.Mkdir(emacs, 0o700)
	os.WriteFile(filepath.Join(emacs, "server"), nil, 0o600)
	if facts, err, stderr := run("test -e " + filepath.Join(emacs, "server")); err != nil || facts.RunnerFailed || facts.ExitCode != 1 {
		t.Errorf("control, the caller's own %s: %+v %v %q, want it hidden (exit 1)", emacs, facts, err, stderr)
	}
}

// A caller of Run that passes a working directory the argv hides (Confine saw
// another) gets a SpawnError naming the hide, not a run in $HOME or a runner
// failure. Control: the same Confined run in the directory Confine saw.
func TestRunRefusesAHiddenWorkingDirectory(t *testing.T) {
	bwrap := testutil.RequireBwrap(t)
	dir := deputiesScratch(t)
	rt := filepath.Join(dir, "rt")
	if err := os.Mkdir(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_RUNTIME_DIR", rt)
	t.Chdir(dir)
	pol := policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}
	c, err := newBwrapProvider(bwrap, nil).Confine([]string{"true"}, pol)
	if err != nil {
		t.Fatal(err)
	}
	if facts, err := Run(c, pol, dir, os.Environ(), Stdio{}); err != nil || facts.ExitCode != 0 {
		t.Fatalf("control, in the directory Confine saw: %+v %v", facts, err)
	}
	var se *SpawnError
	if _, err := Run(c, pol, rt, os.Environ(), Stdio{}); !errors.As(err, &se) || !strings.Contains(err.Error(), "hides "+rt) {
		t.Fatalf("in the hidden %s: %v, want a SpawnError naming the hide", rt, err)
	}
}

// deputyHides lists what exists, at its real place, once, and never a place that
// holds the working directory, the workspace or a writable root, lies inside a
// writable root or workspace-write's private /tmp, lies in a hidden directory, or is
// a directory less than two levels deep.
func TestDeputyHides(t *testing.T) {
	dir := deputiesScratch(t)
	rt, tm, proj := filepath.Join(dir, "rt"), filepath.Join(dir, "tmux"), filepath.Join(dir, "proj")
	for _, d := range []string{rt, tm, proj, filepath.Join(rt, "proj")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sock, tmuxSock, inRT, inProj := filepath.Join(dir, "d.sock"), filepath.Join(tm, "default"), filepath.Join(rt, "bus"), filepath.Join(proj, "p.sock")
	for _, p := range []string{sock, tmuxSock, inRT, inProj} {
		listenUnix(t, p)
	}
	link, file := filepath.Join(dir, "link.sock"), filepath.Join(dir, "file")
	os.Symlink(sock, link)
	os.WriteFile(file, nil, 0o600)
	tmpSock := filepath.Join(t.TempDir(), "t.sock") // under /tmp
	listenUnix(t, tmpSock)
	saved := deputySockets
	deputySockets = []string{sock, link, file, filepath.Join(dir, "missing"), "relative.sock", tmpSock, inRT, inProj}
	t.Cleanup(func() { deputySockets = saved })
	env := map[string]string{"XDG_RUNTIME_DIR": rt, "TMUX": tmuxSock + ",123,0", "SCREENDIR": file, "TMUX_TMPDIR": "/"}
	getenv := func(k string) string { return env[k] }
	// Only the test's own places: the host's /run/user and /tmp add theirs.
	ours := func(hs []bwrapHide) []bwrapHide {
		var out []bwrapHide
		for _, h := range hs {
			if filepath.Dir(h.path) == filepath.Dir(tmpSock) || canon.LexicallyWithin(h.path, dir) {
				out = append(out, h)
			}
		}
		return out
	}
	opt := cmp.AllowUnexported(bwrapHide{})

	ro := policy.Execution{Mode: policy.ReadOnly, WorkspaceRoot: proj}
	want := []bwrapHide{{rt, true}, {sock, false}, {tmpSock, false}, {inProj, false}, {tmuxSock, false}}
	if d := cmp.Diff(want, ours(deputyHides(ro, getenv, proj)), opt); d != "" {
		t.Errorf("read-only (-want +got):\n%s", d)
	}
	// The working directory inside the runtime directory keeps it.
	want = []bwrapHide{{sock, false}, {tmpSock, false}, {inRT, false}, {inProj, false}, {tmuxSock, false}}
	if d := cmp.Diff(want, ours(deputyHides(ro, getenv, filepath.Join(rt, "proj"))), opt); d != "" {
		t.Errorf("read-only, working in the runtime directory (-want +got):\n%s", d)
	}
	ws := policy.Execution{Mode: policy.WorkspaceWrite, WorkspaceRoot: filepath.Join(rt, "proj"),
		WritableRoots: []string{filepath.Join(rt, "proj"), proj, "/tmp"}}
	want = []bwrapHide{{sock, false}, {inRT, false}, {tmuxSock, false}}
	if d := cmp.Diff(want, ours(deputyHides(ws, getenv, "/")), opt); d != "" {
		t.Errorf("workspace-write with roots in the runtime directory and beside it (-want +got):\n%s", d)
	}
	args := bwrapHideOptions([]bwrapHide{{rt, true}, {sock, false}})
	if d := cmp.Diff([]string{"--tmpfs", rt, "--ro-bind", "/dev/null", sock}, args); d != "" {
		t.Errorf("options (-want +got):\n%s", d)
	}
	// Another user's tmux directory in the host's /tmp: that user could remove it
	// between the look and bwrap's mount, failing the run, so it is never a hide.
	if os.Getuid() == 0 {
		other := fmt.Sprintf("/tmp/tmux-%d", 4000+os.Getpid()%1000)
		if err := os.Mkdir(other, 0o700); err == nil {
			t.Cleanup(func() { os.Remove(other) })
			os.Chown(other, 4000+os.Getpid()%1000, 4000+os.Getpid()%1000)
			for _, h := range deputyHides(ro, getenv, proj) {
				if h.path == other {
					t.Errorf("another user's %s is hidden", other)
				}
			}
		}
	}
	// Editors' server directories in $TMPDIR: the caller's own private ones, not one
	// open to others, nor a name for another user's.
	tmpdir := filepath.Join(dir, "tmpdir")
	emacs, nvim, nvimOpen := filepath.Join(tmpdir, fmt.Sprintf("emacs%d", os.Getuid())), filepath.Join(tmpdir, "nvim.tohuser"), filepath.Join(tmpdir, "nvim.other")
	for _, d := range []string{tmpdir, emacs, nvim, nvimOpen} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(nvimOpen, 0o755)
	env["TMPDIR"], env["USER"] = tmpdir, "tohuser"
	want = []bwrapHide{{rt, true}, {emacs, true}, {nvim, true}, {sock, false}, {tmpSock, false}, {inProj, false}, {tmuxSock, false}}
	if d := cmp.Diff(want, ours(deputyHides(ro, getenv, proj)), opt); d != "" {
		t.Errorf("read-only, editors' directories in $TMPDIR (-want +got):\n%s", d)
	}
	env["USER"] = "other"
	want = []bwrapHide{{rt, true}, {emacs, true}, {sock, false}, {tmpSock, false}, {inProj, false}, {tmuxSock, false}}
	if d := cmp.Diff(want, ours(deputyHides(ro, getenv, proj)), opt); d != "" {
		t.Errorf("read-only, another's Neovim directory open to all (-want +got):\n%s", d)
	}
	wantHidden := func(what, dir string) {
		t.Helper()
		if hs := deputyHides(ro, getenv, proj); !slices.Contains(hs, bwrapHide{dir, true}) {
			t.Errorf("%s %s is not hidden: %v", what, dir, hs)
		}
	}
	// Neovim names its directory after the password database, whatever $USER says.
	if e, ok := passwd.Lookup(os.Getuid()); ok {
		byName := filepath.Join(tmpdir, "nvim."+e.Name)
		if err := os.Mkdir(byName, 0o700); err != nil {
			t.Fatal(err)
		}
		env["USER"] = "someone-else"
		wantHidden("with USER=someone-else", byName)
	}
	// Links in a world-writable $TMPDIR, which anyone may plant there, hide nothing:
	// not their target (the caller's own private directory), not a place bwrap
	// cannot mount on. Nor does a private directory there that is not sticky (anyone
	// could swap it for a link before bwrap mounts). Control: the caller's own
	// directory in the sticky one is hidden.
	sticky, swappable, private := filepath.Join(dir, "sticky"), filepath.Join(dir, "swappable"), filepath.Join(dir, "private")
	for _, d := range []string{sticky, swappable, private} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(sticky, 0o777|os.ModeSticky)
	os.Chmod(swappable, 0o777)
	emacsName := fmt.Sprintf("emacs%d", os.Getuid())
	os.Symlink(private, filepath.Join(sticky, emacsName))
	os.Symlink("/proc/self/fd", filepath.Join(sticky, "nvim.tohuser"))
	os.Mkdir(filepath.Join(swappable, emacsName), 0o700)
	env["USER"] = "tohuser"
	for _, td := range []string{sticky, swappable} {
		env["TMPDIR"] = td
		for _, h := range deputyHides(ro, getenv, proj) {
			if h.path == private || canon.LexicallyWithin(h.path, td) || canon.LexicallyWithin(h.path, "/proc") {
				t.Errorf("TMPDIR=%s: %s is hidden", td, h.path)
			}
		}
	}
	os.Remove(filepath.Join(sticky, emacsName))
	os.Mkdir(filepath.Join(sticky, emacsName), 0o700)
	env["TMPDIR"] = sticky
	wantHidden("the caller's own, in a sticky TMPDIR", filepath.Join(sticky, emacsName))
	delete(env, "TMPDIR")
	delete(env, "USER")
	// zellij's socket directory in $TMPDIR (its temp_dir()), and where
	// $ZELLIJ_SOCKET_DIR names it.
	zellijTmp := filepath.Join(tmpdir, fmt.Sprintf("zellij-%d", os.Getuid()))
	if err := os.Mkdir(zellijTmp, 0o700); err != nil {
		t.Fatal(err)
	}
	env["TMPDIR"] = tmpdir
	wantHidden("zellij's in TMPDIR", zellijTmp)
	delete(env, "TMPDIR")
	zellij := filepath.Join(dir, "zellij")
	if err := os.Mkdir(zellij, 0o700); err != nil {
		t.Fatal(err)
	}
	env["ZELLIJ_SOCKET_DIR"] = zellij
	wantHidden("ZELLIJ_SOCKET_DIR's", zellij)
	delete(env, "ZELLIJ_SOCKET_DIR")
	// Directories the environment names that are not the caller's own and private.
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o755)
	for _, notOwn := range []string{"/", "/var", "/tmp", "/usr/bin", "/proc/self", open} {
		env["XDG_RUNTIME_DIR"], env["SCREENDIR"] = notOwn, notOwn
		for _, h := range deputyHides(ro, getenv, proj) {
			if h.path == notOwn {
				t.Errorf("XDG_RUNTIME_DIR=SCREENDIR=%s is hidden", notOwn)
			}
		}
	}
}

// deputiesScratch is a directory of the test's own outside /tmp, which
// workspace-write replaces and deputyHides treats apart.
func deputiesScratch(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "toh-deputies-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
