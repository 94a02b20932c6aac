package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/internal/testutil"
)

func TestHelpAndMisuse(t *testing.T) {
	s := newScratch(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := toh(t, s.ws, nil, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
			t.Fatalf("%q: code %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	ran := filepath.Join(s.ws, "ran")
	for _, args := range [][]string{
		{},
		{"--no-such-flag", "--", "touch", ran},
		{"--mode", "rw", "--", "touch", ran},
		{"--mode", "", "--", "touch", ran},
		{"--runner", "docker", "--", "touch", ran},
		{"--probe-timeout", "0", "--", "touch", ran},
		{"--result-fd", "1", "--", "touch", ran},
		{"policy"},
		{"policy", "frobnicate"},
		{"policy", "set-mode", "--policy", s.noPolicy, "writable"},
	} {
		r := toh(t, s.ws, nil, args...)
		if r.code != exitUsage || r.stdout != "" || !strings.HasPrefix(r.stderr, "toh-exec: ") {
			t.Fatalf("%q: code %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
		}
		absent(t, ran)
	}
}

func TestMalformedPolicyRefusesToRun(t *testing.T) {
	s := newScratch(t)
	ran := filepath.Join(s.ws, "ran")
	for name, doc := range map[string]string{
		"json":        `{"version": 1, "mode": `,
		"unknown key": `{"version": 1, "mode": "read-only", "sandbox": "off"}`,
		"mode":        `{"version": 1, "mode": "full-access"}`,
		"version":     `{"version": 2, "mode": "read-only"}`,
		"relative":    `{"version": 1, "workspaceRoot": "proj"}`,
		"event mode":  `{"version": 1, "sessions": {"s": {"cwd": "/", "events": [{"mode": "yolo"}]}}}`,
		"surrogate":   `{"version": 1, "workspaceRoot": "/var/tmp/\ud800"}`,
	} {
		t.Run(name, func(t *testing.T) {
			pf := filepath.Join(s.beside, "policy.json")
			if err := os.WriteFile(pf, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, mode := range []string{"read-only", "danger-full-access"} {
				e, r := tohJSON(t, s.ws, nil, "--policy", pf, "--mode", mode, "--", "touch", ran)
				absent(t, ran)
				if r.code != exitPolicy || e.Error == nil || e.Error.Code != "POLICY_INVALID" || e.Result != nil {
					t.Fatalf("code %d envelope %+v", r.code, e)
				}
			}
			r := toh(t, s.ws, nil, "policy", "validate", pf)
			if r.code != exitPolicy || !strings.Contains(r.stderr, pf) {
				t.Fatalf("validate: %d %q", r.code, r.stderr)
			}
		})
	}
}

func TestPolicyCommandsAndSessions(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	pf := filepath.Join(s.beside, "policy.json")
	show := func(args ...string) map[string]any {
		t.Helper()
		r := toh(t, s.beside, nil, append([]string{"policy", "show", "--policy", pf}, args...)...)
		if r.code != 0 {
			t.Fatalf("policy show: %d %q", r.code, r.stderr)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := show(); m["mode"] != "read-only" || m["workspaceRoot"] != s.beside {
		t.Fatalf("default: %v", m)
	}
	if r := toh(t, s.ws, nil, "policy", "new-session", "--policy", pf, "--session", "s-1", "--cwd", s.ws); r.code != 0 {
		t.Fatalf("new-session: %d %q", r.code, r.stderr)
	}
	if r := toh(t, s.ws, nil, "policy", "validate", pf); r.code != 0 || !strings.Contains(r.stdout, "valid") {
		t.Fatalf("validate: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if m := show("--session", "s-1"); m["mode"] != "read-only" || m["workspaceRoot"] != s.ws {
		t.Fatalf("session before set-mode: %v", m)
	}
	// The session's mode switch takes effect on the next call; the session's cwd is
	// the workspace root wherever the call is made from.
	target := filepath.Join(s.ws, "via-session")
	r := toh(t, s.beside, nil, "--policy", pf, "--session", "s-1", "--runner", "bwrap", "--", "touch", target)
	if r.code == 0 {
		t.Fatalf("read-only session wrote")
	}
	absent(t, target)
	if r := toh(t, s.ws, nil, "policy", "set-mode", "--policy", pf, "--session", "s-1", "workspace-write"); r.code != 0 {
		t.Fatalf("set-mode: %d %q", r.code, r.stderr)
	}
	if m := show("--session", "s-1"); m["mode"] != "workspace-write" {
		t.Fatalf("session after set-mode: %v", m)
	}
	r = toh(t, s.beside, nil, "--policy", pf, "--session", "s-1", "--runner", "bwrap", "--", "touch", target)
	if r.code != 0 {
		t.Fatalf("workspace-write session: %d %q", r.code, r.stderr)
	}
	present(t, target, "")
	// --mode replaces only the deployment mode: the session's log still wins.
	if m := show("--session", "s-1", "--mode", "read-only"); m["mode"] != "workspace-write" {
		t.Fatalf("--mode overrode a session: %v", m)
	}
	if r := toh(t, s.ws, nil, "--policy", pf, "--session", "nope", "--", "true"); r.code != exitPolicy {
		t.Fatalf("unknown session: %d %q", r.code, r.stderr)
	}
	s.checkCanary(t)
}

func TestDangerFullAccessRunsUnconfined(t *testing.T) {
	s := newScratch(t)
	target := filepath.Join(s.beside, "free")
	e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--mode", "danger-full-access", "--bwrap", "/nonexistent", "-c", "printf free > "+target+"; exit 3")
	if r.code != 3 {
		t.Fatalf("status %d %q", r.code, r.stderr)
	}
	present(t, target, "free")
	var m map[string]any
	json.Unmarshal([]byte(r.stdout), &m)
	res := m["result"].(map[string]any)
	if len(res) != 3 || res["mode"] != "danger-full-access" || res["denied"] != false || res["exitCode"] != float64(3) {
		t.Fatalf("danger facts carry more than {mode, denied, exit}: %v", res)
	}
	_ = e
}

func TestCommandNotFound(t *testing.T) {
	s := newScratch(t)
	for _, mode := range []string{"read-only", "danger-full-access"} {
		e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--mode", mode, "--", "toh-no-such-command")
		if r.code != exitNotFound || e.Error == nil || e.Error.Code != "COMMAND_NOT_FOUND" {
			t.Fatalf("%s: %d %+v", mode, r.code, e)
		}
	}
}

func TestResultFD(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tohExec, "--policy", s.noPolicy, "--runner", "bwrap", "--result-fd", "3", "-c", "echo out; echo x > denied")
	cmd.Dir = s.ws
	cmd.ExtraFiles = []*os.File{wr}
	out, _ := cmd.Output()
	wr.Close()
	line, _ := readAll(rd)
	if string(out) != "out\n" {
		t.Fatalf("stdout %q", out)
	}
	var e envelope
	if err := json.Unmarshal(line, &e); err != nil || e.Result == nil || !e.Result.Denied || e.Stdout != nil {
		t.Fatalf("result fd: %q %v", line, err)
	}
}

func readAll(f *os.File) ([]byte, error) {
	defer f.Close()
	var b []byte
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			return b, nil
		}
	}
}

// descendantsOf lists the PIDs whose cmdline is exactly argv and whose ancestry leads
// to root.
func descendantsOf(root int, argv ...string) []int {
	want := strings.Join(argv, "\x00") + "\x00"
	var found []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if string(b) != want {
			continue
		}
		for p := pid; p > 1; p = ppid(p) {
			if p == root {
				found = append(found, pid)
				break
			}
		}
	}
	return found
}

func ppid(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDescendantsStayObservableAndKillable(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	a, b := fmt.Sprintf("1001.%d", os.Getpid()), fmt.Sprintf("1002.%d", os.Getpid())
	cmd := exec.Command(tohExec, "--policy", s.noPolicy, "--runner", "bwrap", "-c", "sleep "+a+" & sleep "+b+"; wait")
	cmd.Dir = s.ws
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var pa, pb []int
	waitFor(t, "both sleeps to be visible on the host", func() bool {
		pa, pb = descendantsOf(cmd.Process.Pid, "sleep", a), descendantsOf(cmd.Process.Pid, "sleep", b)
		return len(pa) == 1 && len(pb) == 1
	})
	// Killable one by one from the host...
	if err := syscall.Kill(pb[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed descendant to go", func() bool { return len(descendantsOf(cmd.Process.Pid, "sleep", b)) == 0 })
	if len(descendantsOf(cmd.Process.Pid, "sleep", a)) != 1 {
		t.Fatal("killing one descendant took the other with it")
	}
	// ...and all at once: killing toh-exec takes the whole sandbox down.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitFor(t, "the remaining descendant to die with toh-exec", func() bool {
		return !processExists(pa[0], "sleep", a)
	})
}

func processExists(pid int, argv ...string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && string(b) == strings.Join(argv, "\x00")+"\x00"
}

// TestInheritedDescriptorsDoNotReachTheCommand: descriptors the caller leaves open,
// the result fd included, are not inherited by the confined command, which could
// otherwise write through them whatever the mode says.
func TestInheritedDescriptorsDoNotReachTheCommand(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	leaked := filepath.Join(s.beside, "leaked")
	f, err := os.Create(leaked)
	if err != nil {
		t.Fatal(err)
	}
	rd, wr, _ := os.Pipe()
	for _, rung := range []string{"bwrap", "landlock"} {
		cmd := exec.Command(tohExec, "--policy", s.noPolicy, "--runner", rung, "--result-fd", "4", "-c",
			"echo forged >&3; echo forged >&4; ls /proc/self/fd")
		cmd.Dir = s.ws
		cmd.ExtraFiles = []*os.File{f, wr}
		out, err := cmd.Output()
		if err != nil && cmd.ProcessState.ExitCode() == exitUnavailable {
			t.Fatalf("%s: %v", rung, err)
		}
		if fds := strings.Fields(string(out)); len(fds) != 4 || fds[3] != "3" {
			t.Fatalf("%s: the command sees descriptors %q, want 0 1 2 and ls's own", rung, fds)
		}
	}
	f.Close()
	wr.Close()
	if b, _ := os.ReadFile(leaked); len(b) != 0 {
		t.Fatalf("written through an inherited descriptor: %q", b)
	}
	results, _ := readAll(rd)
	if strings.Contains(string(results), "forged") || strings.Count(string(results), "\n") != 2 {
		t.Fatalf("result fd carries %q, want exactly toh-exec's two result lines", results)
	}
}

// TestDeletedWorkingDirectoryIsCannotStart: a working directory removed under
// toh-exec is a failure to start (124, CANNOT_START), not an invalid policy.
// Control: from the same directory before its removal, the call runs.
func TestDeletedWorkingDirectoryIsCannotStart(t *testing.T) {
	s := newScratch(t)
	gone := filepath.Join(s.ws, "gone")
	for _, remove := range []bool{false, true} {
		os.MkdirAll(gone, 0o755)
		script := `cd "$1" && shift && exec "$@"`
		if remove {
			script = `cd "$1" && rmdir "$1" && shift && exec "$@"`
		}
		cmd := exec.Command("sh", "-c", script, "sh", gone, tohExec, "--json", "--policy", s.noPolicy, "--", "true")
		out, err := cmd.Output()
		var e envelope
		json.Unmarshal(out, &e)
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		switch {
		case !remove && code != 0:
			t.Fatalf("control: exit %d %s", code, out)
		case remove && (code != exitCannotStart || e.Error == nil || e.Error.Code != "CANNOT_START"):
			t.Fatalf("removed: exit %d, %s; want %d CANNOT_START", code, out, exitCannotStart)
		}
	}
}
