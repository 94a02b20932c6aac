package main

// The Seatbelt rung end to end on macOS, through the built toh-exec: denials in
// Seatbelt's dialect with the marker, workspace-write inside and beside (workspaces
// under $HOME, so temp grants cannot mask a result), /tmp spelled as macOS resolves
// it, network deny, protected paths as deny rules, the sole candidate selected
// without a probe, and the Linux runners refused. Written on Linux and only compiled
// there (GOOS=darwin go vet); they run on a Mac (the Vagrant macos box runs them with
// TOH_TEST_REQUIRE=seatbelt). A missing sandbox-exec cannot be staged through the
// binary (its path is fixed); sandbox/seatbelt_darwin_test.go covers it.

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/internal/testutil"
)

func init() { subprocessRoles["seatbelt-dial"] = seatbeltDial }

// seatbeltDial is the test binary re-executed inside the sandbox as a network client:
// it connects to $TOH_TEST_DIAL and prints the server's first line.
func seatbeltDial() int {
	c, err := net.DialTimeout("tcp", os.Getenv("TOH_TEST_DIAL"), 5*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Print(line)
	return 0
}

// seatbelt runs toh-exec through the platform chain (Seatbelt alone on macOS: no
// --runner) with a probe cache beside the workspace, so the user's is never touched.
func (s *scratch) seatbelt(t *testing.T, dir string, env []string, args ...string) (envelope, runResult) {
	t.Helper()
	base := []string{"--probe-cache", filepath.Join(s.beside, "probe-cache.json")}
	if !namesPolicy(args) {
		base = append(base, "--policy", s.noPolicy)
	}
	e, r := tohJSON(t, dir, env, append(base, args...)...)
	if e.Error != nil {
		t.Fatalf("toh-exec %q: exit %d, error %+v, stderr %q", args, r.code, e.Error, r.stderr)
	}
	if e.Result == nil || e.Result.Backend != "seatbelt" || e.Result.Enforcement != "full" || *e.Result.RunnerFailed {
		t.Fatalf("toh-exec %q: facts %+v, want a Seatbelt run enforced in full (stderr %q)", args, e.Result, r.stderr)
	}
	return e, r
}

// namesPolicy reports whether toh-exec's own arguments (those before "--") name a
// policy file.
func namesPolicy(args []string) bool {
	for _, a := range args {
		if a == "--policy" || a == "--" {
			return a == "--policy"
		}
	}
	return false
}

func TestSeatbeltReadOnlyDeniesWriteWithDialectAndMarker(t *testing.T) {
	testutil.RequireSeatbelt(t)
	s := newScratch(t)
	target := filepath.Join(s.ws, "new.txt")
	e, r := s.seatbelt(t, s.ws, nil, "-c", "echo hi > new.txt")
	absent(t, target)
	s.checkCanary(t)
	if r.code == 0 || !e.Result.Denied || e.Result.Mode != "read-only" {
		t.Fatalf("exit %d facts %+v, want a denied read-only run", r.code, e.Result)
	}
	if !strings.Contains(strings.ToLower(*e.Stderr), "operation not permitted") {
		t.Fatalf("the kernel did not speak the Seatbelt dialect: %q", *e.Stderr)
	}
	if !strings.Contains(*e.Stderr, fmt.Sprintf(marker, "read-only")) {
		t.Fatalf("no denial marker in %q", *e.Stderr)
	}
	// Without --json the marker and the hint end stderr, after the command's own.
	r = toh(t, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", filepath.Join(s.beside, "probe-cache.json"), "-c", "echo hi > new.txt")
	absent(t, target)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code == 0 || len(lines) < 2 || lines[len(lines)-2] != fmt.Sprintf(marker, "read-only") ||
		!strings.HasPrefix(lines[len(lines)-1], "[sandbox: escalation available — retry this exact command once") {
		t.Fatalf("exit %d; stderr should end with the marker and the hint:\n%s", r.code, r.stderr)
	}
}

func TestSeatbeltReadOnlyKeepsTreeReadableAndDevNullWritable(t *testing.T) {
	testutil.RequireSeatbelt(t)
	s := newScratch(t)
	e, r := s.seatbelt(t, s.ws, nil, "-c", "cat notes.txt && cat /etc/hosts >/dev/null && echo sink > /dev/null && ls / >/dev/null")
	if r.code != 0 || e.Result.Denied || *e.Stdout != "workspace notes" {
		t.Fatalf("read-only run: exit %d facts %+v stdout %q stderr %q", r.code, e.Result, *e.Stdout, *e.Stderr)
	}
}

func TestSeatbeltWorkspaceWriteLandsInsideDeniesBeside(t *testing.T) {
	testutil.RequireSeatbelt(t)
	s := newScratch(t)
	inside, beside := filepath.Join(s.ws, "in.txt"), filepath.Join(s.beside, "out.txt")
	e, _ := s.seatbelt(t, s.ws, nil, "--mode", "workspace-write", "-c", "printf ok > in.txt")
	if e.Result.Denied || *e.Result.ExitCode != 0 {
		t.Fatalf("write inside the workspace: %+v %q", e.Result, *e.Stderr)
	}
	present(t, inside, "ok")
	e, _ = s.seatbelt(t, s.ws, nil, "--mode", "workspace-write", "-c", "printf no > "+beside)
	if !e.Result.Denied || *e.Result.ExitCode == 0 {
		t.Fatalf("write beside the workspace was not denied: %+v %q", e.Result, *e.Stderr)
	}
	absent(t, beside)
	s.checkCanary(t)
	if !strings.Contains(strings.ToLower(*e.Stderr), "operation not permitted") ||
		!strings.Contains(*e.Stderr, fmt.Sprintf(marker, "workspace-write")) {
		t.Fatalf("no Seatbelt dialect or workspace-write marker: %q", *e.Stderr)
	}
}

// TestSeatbeltTmpIsWritableOnlyInWorkspaceWrite: /tmp is a writable root of
// workspace-write (SPEC §3), and on macOS it is a symlink to /private/tmp. Seatbelt
// matches resolved paths, so a root spelled "/tmp" would match nothing: the write
// landing shows the root was spelled canonically. Read-only denies it.
func TestSeatbeltTmpIsWritableOnlyInWorkspaceWrite(t *testing.T) {
	testutil.RequireSeatbelt(t)
	s := newScratch(t)
	name := fmt.Sprintf("/tmp/toh-e2e-seatbelt-%d", os.Getpid())
	os.Remove(name)
	t.Cleanup(func() { os.Remove(name) })
	e, _ := s.seatbelt(t, s.ws, nil, "-c", "printf ro > "+name)
	if !e.Result.Denied {
		t.Fatalf("read-only write to /tmp: %+v %q, want denied", e.Result, *e.Stderr)
	}
	absent(t, name)
	e, _ = s.seatbelt(t, s.ws, nil, "--mode", "workspace-write", "-c", "printf ww > "+name)
	if e.Result.Denied || *e.Result.ExitCode != 0 {
		t.Fatalf("workspace-write write to /tmp: %+v %q", e.Result, *e.Stderr)
	}
	present(t, name, "ww")
}

// TestSeatbeltNetworkDeny: a listener on 127.0.0.1 that the test starts is reached
// from inside under network allow and refused under network deny, in both modes; the
// listener's own count of connections is the evidence, and the result says which
// network setting was applied.
func TestSeatbeltNetworkDeny(t *testing.T) {
	testutil.RequireSeatbelt(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	// Positive control for the server itself: reachable from outside.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("the test server is not reachable from outside: %v", err)
	}
	c.Close()
	waitFor(t, "the control connection to be accepted", func() bool { return accepted.Load() == 1 })

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"TOH_TEST_SUBPROCESS=seatbelt-dial", "TOH_TEST_DIAL=" + ln.Addr().String()}
	s := newScratch(t)
	allow, deny := filepath.Join(s.beside, "allow.json"), filepath.Join(s.beside, "deny.json")
	testutil.MakeTree(t, s.beside, `file allow.json {"version": 1, "network": "allow"}`, `file deny.json {"version": 1, "network": "deny"}`)
	for _, mode := range []string{"read-only", "workspace-write"} {
		before := accepted.Load()
		e, r := s.seatbelt(t, s.ws, env, "--policy", allow, "--mode", mode, "--", self)
		if r.code != 0 || *e.Stdout != "hello\n" || accepted.Load() != before+1 {
			t.Fatalf("%s, network allow: exit %d stdout %q stderr %q, %d connection(s)", mode, r.code, *e.Stdout, *e.Stderr, accepted.Load()-before)
		}
		if !strings.Contains(r.stdout, `"network":"allow"`) {
			t.Fatalf("%s: the result does not say network allow: %s", mode, r.stdout)
		}
		before = accepted.Load()
		e, r = s.seatbelt(t, s.ws, env, "--policy", deny, "--mode", mode, "--", self)
		// Give a connection that got through time to be counted.
		time.Sleep(200 * time.Millisecond)
		if r.code == 0 || strings.Contains(*e.Stdout, "hello") || accepted.Load() != before {
			t.Fatalf("%s, network deny: the server was reached: exit %d stdout %q, %d connection(s)", mode, r.code, *e.Stdout, accepted.Load()-before)
		}
		if !strings.Contains(r.stdout, `"network":"deny"`) {
			t.Fatalf("%s: the result does not say network deny was applied: %s", mode, r.stdout)
		}
	}
}

// TestSeatbeltProtectedPaths: in workspace-write the default protect list
// (.git/hooks, .git/config) is denied whether the paths exist or not, .git cannot be
// renamed away, a missing commondir cannot be created (Seatbelt denies names, so it
// needs no stand-in), the rest of .git stays writable, a repository the run creates
// itself is its own, and a policy file inside the workspace stays read-only.
func TestSeatbeltProtectedPaths(t *testing.T) {
	testutil.RequireSeatbelt(t)
	s := newScratch(t)
	testutil.MakeTree(t, s.ws, "dir .git", "dir .git/hooks", "file .git/config [core]\n", "file .git/description d\n")
	script := `echo evil > .git/hooks/pre-commit; echo evil >> .git/config; rm -f .git/config; mv .git .git2; ` +
		`mv .git/hooks .git/h2; echo x > .git/commondir; echo ok > .git/description; echo ok > .git/objects-like; exit 0`
	e, r := s.seatbelt(t, s.ws, nil, "--mode", "workspace-write", "-c", script)
	if r.code != 0 {
		t.Fatalf("run: exit %d %q", r.code, *e.Stderr)
	}
	absent(t, filepath.Join(s.ws, ".git/hooks/pre-commit"))
	present(t, filepath.Join(s.ws, ".git/config"), "[core]\n")
	absent(t, filepath.Join(s.ws, ".git2"))
	absent(t, filepath.Join(s.ws, ".git/h2"))
	absent(t, filepath.Join(s.ws, ".git/commondir"))
	present(t, filepath.Join(s.ws, ".git/description"), "ok\n")
	present(t, filepath.Join(s.ws, ".git/objects-like"), "ok\n")
	if !strings.Contains(strings.ToLower(*e.Stderr), "operation not permitted") {
		t.Fatalf("the protected writes were not refused by the kernel: %q", *e.Stderr)
	}

	// A repository whose hooks directory does not exist yet: it cannot be created.
	repo := filepath.Join(s.beside, "repo")
	testutil.MakeTree(t, s.beside, "dir repo", "dir repo/.git", "file repo/.git/HEAD ref: refs/heads/main\n")
	e, r = s.seatbelt(t, repo, nil, "--mode", "workspace-write", "-c",
		"mkdir .git/hooks; mkdir -p .git/hooks/sub; echo evil > .git/hooks/pre-commit; echo ok > .git/ORIG_HEAD; exit 0")
	if r.code != 0 {
		t.Fatalf("run: exit %d %q", r.code, *e.Stderr)
	}
	absent(t, filepath.Join(repo, ".git/hooks"))
	present(t, filepath.Join(repo, ".git/ORIG_HEAD"), "ok\n")

	// No repository when the run starts: the one it creates is its own (git init must
	// be able to write .git/config and .git/hooks).
	bare := filepath.Join(s.beside, "bare")
	testutil.MakeTree(t, s.beside, "dir bare")
	e, r = s.seatbelt(t, bare, nil, "--mode", "workspace-write", "-c", "mkdir -p .git/hooks && echo h > .git/hooks/post-commit && echo c > .git/config")
	if r.code != 0 || e.Result.Denied {
		t.Fatalf("a run's own repository: exit %d %+v %q", r.code, e.Result, *e.Stderr)
	}
	present(t, filepath.Join(bare, ".git/hooks/post-commit"), "h\n")
	present(t, filepath.Join(bare, ".git/config"), "c\n")

	// The policy file (and its lock) inside the workspace: never writable by the
	// command it governs (SPEC §8), while the rest of the workspace is.
	pws := filepath.Join(s.beside, "pws")
	testutil.MakeTree(t, s.beside, "dir pws", `file pws/toh.json {"version": 1, "mode": "workspace-write"}`)
	pf := filepath.Join(pws, "toh.json")
	before, _ := os.ReadFile(pf)
	e, r = s.seatbelt(t, pws, nil, "--policy", pf, "-c", `echo '{"version": 1, "mode": "danger-full-access"}' > toh.json; echo x > toh.json.lock; rm -f toh.json; echo ok > other; exit 0`)
	if r.code != 0 || e.Result.Mode != "workspace-write" {
		t.Fatalf("run: exit %d %+v %q", r.code, e.Result, *e.Stderr)
	}
	present(t, pf, string(before))
	absent(t, pf+".lock")
	present(t, filepath.Join(pws, "other"), "ok\n")
	s.checkCanary(t)
}

// TestSeatbeltSoleCandidateWithoutProbe: macOS's chain is Seatbelt alone, selected
// without a probe (SPEC §4.1): with a 1ns probe timeout and --refresh-probe, a probe
// would time out and the run fail closed; instead it runs, and no verdict is written.
func TestSeatbeltSoleCandidateWithoutProbe(t *testing.T) {
	testutil.RequireSeatbelt(t)
	s := newScratch(t)
	cacheDir := filepath.Join(s.beside, "cache")
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", filepath.Join(cacheDir, "probe.json"),
		"--refresh-probe", "--probe-timeout", "1ns", "--verbose", "--", "/bin/echo", "ran")
	if r.code != 0 || r.stdout != "ran\n" || !strings.HasPrefix(r.stderr, "toh-exec: {seatbelt; mode read-only; enforcement full;") {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	absent(t, cacheDir)

	// --runner seatbelt names the same sole candidate.
	e, r := s.seatbelt(t, s.ws, nil, "--runner", "seatbelt", "--", "/bin/echo", "ran")
	if r.code != 0 || *e.Stdout != "ran\n" {
		t.Fatalf("--runner seatbelt: exit %d %+v %q", r.code, e.Result, *e.Stderr)
	}

	// doctor probes for real, and reports the rung.
	d, r := doctorJSON(t, s.ws, "--probe-cache", filepath.Join(cacheDir, "probe.json"))
	if r.code != 0 || len(d.Rungs) != 1 || d.Rungs[0].Backend != "seatbelt" || !d.Rungs[0].OK ||
		d.Rungs[0].Enforcement["read-only"] != "full" || d.Rungs[0].Enforcement["workspace-write"] != "full" ||
		d.Effective.Backend != "seatbelt" {
		t.Fatalf("doctor: exit %d %+v (stderr %q)", r.code, d, r.stderr)
	}
	absent(t, cacheDir)
}

// TestSeatbeltLinuxRunnersFailClosed: naming a Linux runner on macOS is
// SANDBOX_UNAVAILABLE, and the command does not run.
func TestSeatbeltLinuxRunnersFailClosed(t *testing.T) {
	s := newScratch(t)
	ran := filepath.Join(s.ws, "ran")
	for _, runner := range []string{"bwrap", "landlock"} {
		e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", runner, "--mode", "workspace-write", "-c", "echo x > "+ran)
		absent(t, ran)
		if r.code != exitUnavailable || e.Error == nil || e.Error.Code != "SANDBOX_UNAVAILABLE" ||
			!strings.HasPrefix(e.Error.Message, `sandbox mode "workspace-write" is requested but no sandbox backend is usable on this host;`) {
			t.Fatalf("--runner %s: exit %d envelope %+v", runner, r.code, e)
		}
	}
}
