package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/internal/testutil"
)

// subprocessRoles are what the test binary does when re-executed with
// TOH_TEST_SUBPROCESS=<role> (registered by platform test files).
var subprocessRoles = map[string]func() int{}

// tohExec is the binary under test: $TOH_EXEC_BIN when the test script built it,
// else one built for this test run.
var tohExec string

func TestMain(m *testing.M) {
	if sub := os.Getenv("TOH_TEST_SUBPROCESS"); sub != "" {
		if role, ok := subprocessRoles[sub]; ok {
			os.Exit(role())
		}
	}
	tohExec = os.Getenv("TOH_EXEC_BIN")
	if tohExec == "" {
		// Not under /tmp, a writable root of every workspace-write run: Landlock
		// runs refuse to start while toh-exec lies in one (ownprograms.go).
		dir, err := os.MkdirTemp("/var/tmp", "toh-exec-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		tohExec = filepath.Join(dir, "toh-exec")
		out, err := exec.Command("go", "build", "-o", tohExec, ".").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "building toh-exec: %v\n%s", err, out)
			os.Exit(1)
		}
		// toh-exec --fence runs the toh-mount beside it.
		out, err = exec.Command("go", "build", "-o", filepath.Join(dir, "toh-mount"), "../toh-mount").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "building toh-mount: %v\n%s", err, out)
			os.Exit(1)
		}
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

type runResult struct {
	stdout, stderr string
	code           int
}

// facts mirrors the result object of --json / --result-fd.
type facts struct {
	Mode          string `json:"mode"`
	Denied        bool   `json:"denied"`
	Enforcement   string `json:"enforcement"`
	RunnerFailed  *bool  `json:"runnerFailed"`
	Backend       string `json:"backend"`
	ExitCode      *int   `json:"exitCode"`
	Signal        *int   `json:"signal"`
	RunnerFailure string `json:"runnerFailure"`
}

type envelope struct {
	Result *facts `json:"result"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Stdout        *string `json:"stdout"`
	Stderr        *string `json:"stderr"`
	StdoutOmitted int64   `json:"stdoutOmitted"`
	StderrOmitted int64   `json:"stderrOmitted"`
}

// toh runs the binary in dir with a policy path that does not exist (the embedded
// default) unless args name another. A run that hangs fails the test after
// tohLimit instead of hanging the suite.
func toh(t *testing.T, dir string, env []string, args ...string) runResult {
	t.Helper()
	return runWithin(t, tohLimit, dir, env, args...)
}

// tohLimit bounds one toh-exec run of the tests.
const tohLimit = 5 * time.Minute

// runWithin runs toh-exec in dir, failing the test instead of hanging past limit.
func runWithin(t *testing.T, limit time.Duration, dir string, env []string, args ...string) runResult {
	t.Helper()
	return runBinWithin(t, limit, tohExec, dir, env, args...)
}

// runBin runs the toh-exec binary at bin in dir.
func runBin(t *testing.T, bin, dir string, args ...string) runResult {
	t.Helper()
	return runBinWithin(t, tohLimit, bin, dir, nil, args...)
}

func runBinWithin(t *testing.T, limit time.Duration, bin, dir string, env []string, args ...string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("toh-exec %q did not finish within %v (stderr %q)", args, limit, se.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running toh-exec %q: %v", args, err)
	}
	return runResult{stdout: so.String(), stderr: se.String(), code: code}
}

func tohJSON(t *testing.T, dir string, env []string, args ...string) (envelope, runResult) {
	t.Helper()
	r := toh(t, dir, env, append([]string{"--json"}, args...)...)
	var e envelope
	if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
		t.Fatalf("--json output is not one JSON object: %v\n%s\nstderr: %s", err, r.stdout, r.stderr)
	}
	return e, r
}

// scratch is a test's file system: a workspace and a sibling under the user's home
// directory (so temp grants cannot mask a result), a canary beside them, and a policy
// path that does not exist.
type scratch struct {
	home, ws, beside, canary, noPolicy string
	canaryBefore                       []byte
}

func newScratch(t *testing.T) *scratch {
	t.Helper()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp(home, "toh-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	s := &scratch{home: home, ws: filepath.Join(base, "ws"), beside: filepath.Join(base, "beside"),
		canary: filepath.Join(base, "canary"), noPolicy: filepath.Join(base, "no-policy.json")}
	testutil.MakeTree(t, base, "dir ws", "dir beside", "file ws/notes.txt workspace notes", "file canary do not touch")
	s.canaryBefore, _ = os.ReadFile(s.canary)
	return s
}

func (s *scratch) checkCanary(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(s.canary)
	if err != nil || !bytes.Equal(b, s.canaryBefore) {
		t.Fatalf("canary changed: %q, %v", b, err)
	}
}

func absent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s exists (or cannot be checked: %v); the write should have been denied", path, err)
	}
}

func present(t *testing.T, path, content string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s should have been written: %v", path, err)
	}
	if string(b) != content {
		t.Fatalf("%s = %q, want %q", path, b, content)
	}
}

const marker = "[sandbox: file access denied under %s mode]"

func TestReadOnlyDeniesWriteWithDialectAndMarker(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	target := filepath.Join(s.ws, "new.txt")
	e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "-c", "echo hi > new.txt")
	absent(t, target)
	s.checkCanary(t)
	if r.code == 0 {
		t.Fatalf("denied write exited 0")
	}
	if e.Result == nil || !e.Result.Denied || e.Result.Mode != "read-only" || e.Result.Backend != "bwrap" || e.Result.Enforcement != "full" {
		t.Fatalf("facts = %+v, want denied read-only bwrap full", e.Result)
	}
	if *e.Result.RunnerFailed {
		t.Fatalf("a denial is not a runner failure: %+v", e.Result)
	}
	if !strings.Contains(strings.ToLower(*e.Stderr), "read-only file system") {
		t.Fatalf("the kernel did not speak the bwrap dialect: %q", *e.Stderr)
	}
	if !strings.Contains(*e.Stderr, fmt.Sprintf(marker, "read-only")) {
		t.Fatalf("no denial marker in %q", *e.Stderr)
	}
	// Without --json the marker and the hint go to stderr, after the command's own.
	r = toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "-c", "echo hi > new.txt")
	absent(t, target)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) < 2 || lines[len(lines)-2] != fmt.Sprintf(marker, "read-only") ||
		!strings.HasPrefix(lines[len(lines)-1], "[sandbox: escalation available — retry this exact command once") {
		t.Fatalf("stderr should end with the marker and the hint:\n%s", r.stderr)
	}
}

func TestReadOnlyKeepsTreeReadableAndDevNullWritable(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "-c", "cat notes.txt && cat /etc/hostname >/dev/null && echo sink > /dev/null && ls / >/dev/null")
	if r.code != 0 || e.Result.Denied || *e.Stdout != "workspace notes" {
		t.Fatalf("read-only run: code %d facts %+v stdout %q stderr %q", r.code, e.Result, *e.Stdout, *e.Stderr)
	}
}

func TestWorkspaceWriteLandsInsideDeniesBeside(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	inside, beside := filepath.Join(s.ws, "in.txt"), filepath.Join(s.beside, "out.txt")
	e, _ := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "printf ok > in.txt")
	if e.Result.Denied || *e.Result.ExitCode != 0 {
		t.Fatalf("write inside the workspace: %+v %q", e.Result, *e.Stderr)
	}
	present(t, inside, "ok")
	e, _ = tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "printf no > "+beside)
	if !e.Result.Denied || *e.Result.ExitCode == 0 {
		t.Fatalf("write beside the workspace was not denied: %+v", e.Result)
	}
	absent(t, beside)
	s.checkCanary(t)
	if !strings.Contains(*e.Stderr, fmt.Sprintf(marker, "workspace-write")) {
		t.Fatalf("no workspace-write marker: %q", *e.Stderr)
	}
}

func TestTmpIsEphemeralUnderBwrap(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	name := fmt.Sprintf("/tmp/toh-e2e-ephemeral-%d", os.Getpid())
	os.Remove(name)
	r := toh(t, s.ws, []string{"TMPDIR="}, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "echo x > "+name+" && cat "+name)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "x" {
		t.Fatalf("write to the private /tmp failed: %d %q %q", r.code, r.stdout, r.stderr)
	}
	absent(t, name)
	r = toh(t, s.ws, []string{"TMPDIR="}, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "test ! -e "+name)
	if r.code != 0 {
		t.Fatalf("a second run saw the first run's /tmp file")
	}
}

func TestPIDNamespaceBlocksProcRootWrites(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	// Every /proc/<pid>/root the confined command can see leads into the sandbox's own
	// view, where only the workspace is writable.
	script := `for p in /proc/[0-9]*; do echo x > "$p/root` + s.beside + `/via-proc" 2>/dev/null; done; ` +
		`echo y > /proc/self/root` + s.ws + `/via-self; ls /proc | grep -c '^[0-9]'`
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", script)
	if r.code != 0 {
		t.Fatalf("run failed: %d %q", r.code, r.stderr)
	}
	absent(t, filepath.Join(s.beside, "via-proc"))
	present(t, filepath.Join(s.ws, "via-self"), "y\n")
	if n := strings.TrimSpace(r.stdout); n == "" || len(n) > 2 {
		t.Fatalf("the confined command sees %q processes; the PID namespace is not private", n)
	}
}

func TestNestedChildrenStayConfined(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	target := filepath.Join(s.beside, "nested")
	script := fmt.Sprintf(`bash -c 'sh -c "setsid sh -c \"echo x > %s\" ; echo y > %s.2"'; exit 0`, target, target)
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", script)
	if r.code != 0 {
		t.Fatalf("run: %d %q", r.code, r.stderr)
	}
	absent(t, target)
	absent(t, target+".2")
	if !strings.Contains(strings.ToLower(r.stderr), "read-only file system") {
		t.Fatalf("the nested writes were not refused by the kernel: %q", r.stderr)
	}
}

func TestBashEnvIsEvaluatedOnlyInside(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	hook := filepath.Join(s.beside, "bashenv.sh")
	outside := filepath.Join(s.beside, "bashenv-ran")
	inside := filepath.Join(s.ws, "bashenv-ran")
	if err := os.WriteFile(hook, []byte("echo ran > "+outside+" 2>/dev/null; echo ran > "+inside+" 2>/dev/null\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := toh(t, s.ws, []string{"BASH_ENV=" + hook}, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "true")
	if r.code != 0 {
		t.Fatalf("run: %d %q", r.code, r.stderr)
	}
	absent(t, outside)          // negative: BASH_ENV's write outside was confined
	present(t, inside, "ran\n") // positive: BASH_ENV was evaluated, inside the sandbox
}

func TestMissingOrBrokenRunnerIsUnavailable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("--runner bwrap and --bwrap exist on Linux only")
	}
	s := newScratch(t)
	noExec := filepath.Join(s.beside, "bwrap-noexec")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fatal := filepath.Join(s.beside, "bwrap-fatal")
	if err := os.WriteFile(fatal, []byte("#!/bin/sh\necho 'some noise' >&2\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(s.ws, "ran")
	for _, tc := range []struct{ name, runner, detail string }{
		{"missing", filepath.Join(s.beside, "no-such-bwrap"), "no such file or directory"},
		{"not executable", noExec, "permission denied"},
		{"fatal line", fatal, "bwrap: No permissions to creating new namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--bwrap", tc.runner, "--mode", "workspace-write", "-c", "echo x > "+ran)
			absent(t, ran)
			if r.code != exitUnavailable || e.Error == nil || e.Error.Code != "SANDBOX_UNAVAILABLE" {
				t.Fatalf("code %d envelope %+v", r.code, e)
			}
			want := `sandbox mode "workspace-write" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined.`
			if !strings.HasPrefix(e.Error.Message, want) || !strings.Contains(e.Error.Message, " Runner failure: ") ||
				!strings.Contains(strings.ToLower(e.Error.Message), strings.ToLower(tc.detail)) {
				t.Fatalf("message %q", e.Error.Message)
			}
			if !strings.Contains(*e.Stderr, "[sandbox: the sandbox runner itself failed under workspace-write mode — the command did not run") {
				t.Fatalf("no runner-failure notice: %q", *e.Stderr)
			}
		})
	}
}

func TestSignalDeathIsNeitherDenialNorRunnerFailure(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "-c", "echo 'Read-only file system' >&2; echo 'bwrap: fake' >&2; kill -KILL $$")
	if r.code != 128+9 {
		t.Fatalf("status %d, want 137", r.code)
	}
	if e.Result == nil || e.Result.Denied || *e.Result.RunnerFailed || e.Error != nil {
		t.Fatalf("a signal death was classified: %+v %+v", e.Result, e.Error)
	}
}

func TestChildExit126And127AreOrdinary(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	for _, code := range []int{0, 1, 2, 125, 126, 127} {
		e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "-c", fmt.Sprintf("exit %d", code))
		if r.code != code || e.Result == nil || *e.Result.ExitCode != code || e.Result.Denied || *e.Result.RunnerFailed {
			t.Fatalf("exit %d: status %d facts %+v error %+v", code, r.code, e.Result, e.Error)
		}
	}
	// A command that exists but cannot be executed inside is the child's 126.
	script := filepath.Join(s.ws, "noexec.sh")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o644)
	e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "-c", "./noexec.sh")
	if r.code != 126 || *e.Result.RunnerFailed {
		t.Fatalf("status %d facts %+v", r.code, e.Result)
	}
}
