package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// installCopy copies toh-exec and the toh-mount beside it into dir.
func installCopy(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"toh-exec", "toh-mount"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(tohExec), name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "toh-exec")
}

// tempDir makes a directory below parent that every user may enter, removed after t.
func tempDir(t *testing.T, parent string) string {
	t.Helper()
	d, err := os.MkdirTemp(parent, "toh-own-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestOwnProgramsInAWritableRootRefuseTheRun: a workspace-write run whose command
// could replace toh-exec or the toh-mount beside it (both run outside any sandbox at
// the next call) is refused before it starts, on both rungs. /tmp counts under
// Landlock (the host's) and not under bwrap (a private tmpfs). Controls: the same
// copy runs read-only, and runs under bwrap from a directory below /tmp.
func TestOwnProgramsInAWritableRootRefuseTheRun(t *testing.T) {
	s := newScratch(t)
	inWs := installCopy(t, filepath.Join(s.ws, "bin"))
	inTmp := installCopy(t, tempDir(t, "/tmp"))
	marker := filepath.Join(s.ws, "ran")
	for _, c := range []struct {
		rung, bin string
		refused   bool
	}{
		{"bwrap", inWs, true},
		{"landlock", inWs, true},
		{"landlock", inTmp, true},
		{"bwrap", inTmp, false},
	} {
		requireRung(t, c.rung, 1)
		os.Remove(marker)
		r := runBin(t, c.bin, s.ws, "--policy", s.noPolicy, "--runner", c.rung, "--mode", "workspace-write", "-c", "echo ran > ran; echo ran")
		_, statErr := os.Stat(marker)
		if c.refused {
			if r.code != exitCannotStart || !strings.Contains(r.stderr, "lies beneath the writable root") || statErr == nil {
				t.Errorf("%s from %s: exit %d, stdout %q, stderr %q; want the run refused", c.rung, c.bin, r.code, r.stdout, r.stderr)
			}
		} else if r.code != 0 || statErr != nil {
			t.Errorf("%s from %s: exit %d, stderr %q; want the run", c.rung, c.bin, r.code, r.stderr)
		}
		// Read-only: nothing can be replaced, so the same copy runs.
		r = runBin(t, c.bin, s.ws, "--policy", s.noPolicy, "--runner", c.rung, "-c", "echo ran")
		if r.code != 0 || r.stdout != "ran\n" {
			t.Errorf("%s from %s, read-only: exit %d, stderr %q", c.rung, c.bin, r.code, r.stderr)
		}
	}
	// A hard link in the workspace to the toh-mount of a copy outside it: the copy
	// is refused while the link exists, and runs once it is gone.
	hl := installCopy(t, tempDir(t, "/var/tmp"))
	inside := filepath.Join(s.ws, "mount-link")
	if err := os.Link(filepath.Join(filepath.Dir(hl), "toh-mount"), inside); err != nil {
		t.Fatal(err)
	}
	r := runBin(t, hl, s.ws, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "echo ran")
	if r.code != exitCannotStart || !strings.Contains(r.stderr, "hard links") {
		t.Errorf("a hard link in the workspace: exit %d, stderr %q; want the run refused", r.code, r.stderr)
	}
	os.Remove(inside)
	if r := runBin(t, hl, s.ws, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "echo ran"); r.code != 0 {
		t.Errorf("control: the copy without the hard link: exit %d, stderr %q", r.code, r.stderr)
	}

	// A link in the workspace to the binary outside it is what the next call runs
	// (a project's bin/ on $PATH): refused too; the binary itself runs.
	link := filepath.Join(s.ws, "toh-link")
	if err := os.Symlink(tohExec, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		bin     string
		refused bool
	}{{link, true}, {tohExec, false}} {
		r := runBin(t, c.bin, s.ws, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write", "-c", "echo ran")
		if refused := r.code == exitCannotStart && strings.Contains(r.stderr, "lies beneath the writable root"); refused != c.refused || (!c.refused && r.code != 0) {
			t.Errorf("through %s: exit %d, stderr %q; want refused %v", c.bin, r.code, r.stderr, c.refused)
		}
	}
}

// TestApprovalCommandMustBeAbsoluteAndOutOfReach: a name would be looked up in $PATH,
// and an approver within the standing mode's writable roots may have been replaced
// by an earlier run: neither is asked. Control: the same approver outside the roots
// is asked and grants.
func TestApprovalCommandMustBeAbsoluteAndOutOfReach(t *testing.T) {
	s := newScratch(t)
	esc := []string{"--mode", "workspace-write", "--sandbox-permissions", "danger-full-access", "--justification", "Needs the whole disk."}
	inWs, logInWs := approver(t, s.ws, "allowed-once")
	r := toh(t, s.ws, []string{"PATH=" + s.ws + ":" + os.Getenv("PATH")}, append([]string{"--policy", s.noPolicy, "--approval-command", filepath.Base(inWs)}, append(esc, "-c", "true")...)...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "is not an absolute path") {
		t.Errorf("a name: exit %d, stderr %q; want a usage error", r.code, r.stderr)
	}
	r = toh(t, s.ws, nil, append([]string{"--policy", s.noPolicy, "--approval-command", inWs}, append(esc, "-c", "true")...)...)
	if r.code != exitEscalation || !strings.Contains(r.stderr, "lies beneath the writable root") {
		t.Errorf("an approver in the workspace: exit %d, stderr %q; want it refused", r.code, r.stderr)
	}
	absent(t, logInWs)
	outside, logOutside := approver(t, s.beside, "allowed-once")
	r = toh(t, s.ws, nil, append([]string{"--policy", s.noPolicy, "--approval-command", outside}, append(esc, "-c", "true")...)...)
	if r.code != 0 {
		t.Errorf("control: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(logOutside); err != nil {
		t.Errorf("control: the approver outside the roots was not asked: %v", err)
	}
}

// runByName runs the toh-exec at bin as a caller that looked it up in $PATH does:
// argv[0] is "toh-exec", and path is the $PATH it hands on.
func runByName(t *testing.T, bin, dir, path string, args ...string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tohLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Args[0] = "toh-exec"
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+path)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running %s: %v", bin, err)
	}
	return runResult{stdout: so.String(), stderr: se.String(), code: cmd.ProcessState.ExitCode()}
}

// TestPathAheadOfTohExecRefusesTheRun: called by name, toh-exec is looked up in
// $PATH again at the next call, so a directory listed ahead of its own inside a
// writable root (a virtualenv's bin in the workspace, ".") is where the command could
// put a toh-exec that runs unconfined next time: a workspace-write run is refused,
// existing directory or not. Controls: the same $PATH with toh-exec's directory
// first, the same call by absolute path, and read-only all run; /tmp counts under
// Landlock and not under bwrap, as for the programs themselves.
func TestPathAheadOfTohExecRefusesTheRun(t *testing.T) {
	s := newScratch(t)
	own := filepath.Dir(tohExec)
	venv := filepath.Join(s.ws, ".venv", "bin") // missing: the command could make it
	inTmp := tempDir(t, "/tmp")
	marker := filepath.Join(s.ws, "ran")
	// A directory outside the roots holding a dangling toh-exec link into the
	// workspace, which the command could fill.
	dangling := filepath.Join(s.beside, "links")
	if err := os.Mkdir(dangling, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(s.ws, "planted"), filepath.Join(dangling, "toh-exec")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rung, path string
		refused    bool
	}{
		{"bwrap", venv + ":" + own + ":/usr/bin:/bin", true},
		{"landlock", venv + ":" + own + ":/usr/bin:/bin", true},
		{"bwrap", ".:" + own + ":/usr/bin:/bin", true},
		{"bwrap", ":" + own + ":/usr/bin:/bin", true},
		{"landlock", inTmp + ":" + own + ":/usr/bin:/bin", true},
		{"bwrap", inTmp + ":" + own + ":/usr/bin:/bin", false},
		{"bwrap", own + ":" + venv + ":.:/usr/bin:/bin", false},
		{"bwrap", dangling + ":" + own + ":/usr/bin:/bin", true},
		{"landlock", "/usr/bin:/bin:" + own + ":" + venv, false},
	} {
		requireRung(t, c.rung, 1)
		os.Remove(marker)
		ws := []string{"--policy", s.noPolicy, "--runner", c.rung, "--mode", "workspace-write", "-c", "echo ran > ran; echo ran"}
		r := runByName(t, tohExec, s.ws, c.path, ws...)
		_, statErr := os.Stat(marker)
		if c.refused {
			if r.code != exitCannotStart || !strings.Contains(r.stderr, "$PATH lists") || statErr == nil {
				t.Errorf("%s with PATH=%s: exit %d, stdout %q, stderr %q; want the run refused", c.rung, c.path, r.code, r.stdout, r.stderr)
			}
			// By absolute path the next call does not look in $PATH.
			if r := runBinWithin(t, tohLimit, tohExec, s.ws, []string{"PATH=" + c.path}, ws...); r.code != 0 {
				t.Errorf("%s with PATH=%s, called by absolute path: exit %d, stderr %q", c.rung, c.path, r.code, r.stderr)
			}
		} else if r.code != 0 || statErr != nil {
			t.Errorf("%s with PATH=%s: exit %d, stderr %q; want the run", c.rung, c.path, r.code, r.stderr)
		}
		if r := runByName(t, tohExec, s.ws, c.path, "--policy", s.noPolicy, "--runner", c.rung, "-c", "echo ran"); r.code != 0 || r.stdout != "ran\n" {
			t.Errorf("%s with PATH=%s, read-only: exit %d, stderr %q", c.rung, c.path, r.code, r.stderr)
		}
	}
	// "~/..." is $HOME's, as bash reads it, not the working directory's: called
	// from outside the workspace (the policy names it), a venv in it spelled so is
	// refused too; its control is the same $PATH with toh-exec's directory first.
	pol := filepath.Join(s.beside, "ws-policy.json")
	if err := os.WriteFile(pol, []byte(`{"version": 1, "workspaceRoot": "`+s.ws+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tilde := "~/" + strings.TrimPrefix(venv, s.home+"/")
	for _, c := range []struct {
		path    string
		refused bool
	}{{tilde + ":" + own + ":/usr/bin:/bin", true}, {own + ":" + tilde + ":/usr/bin:/bin", false}} {
		r := runByName(t, tohExec, s.beside, c.path, "--policy", pol, "--runner", "bwrap", "--mode", "workspace-write", "-c", "echo ran")
		if refused := r.code == exitCannotStart && strings.Contains(r.stderr, "$PATH lists"); refused != c.refused || (!c.refused && r.code != 0) {
			t.Errorf("PATH=%s from outside the workspace: exit %d, stderr %q; want refused %v", c.path, r.code, r.stderr, c.refused)
		}
	}
}
