package main

import (
	"bytes"
	"fmt"
	"golang.org/x/sys/unix"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toh-sandbox/toh/internal/testutil"
)

// approver writes an approval command that logs the request it got and answers.
func approver(t *testing.T, dir, answer string) (path, log string) {
	t.Helper()
	path, log = filepath.Join(dir, "approve-"+strings.ReplaceAll(answer, " ", "_")), filepath.Join(dir, "approvals.log")
	script := fmt.Sprintf("#!/bin/sh\ncat >> %s\nprintf '%%s\\n' '%s'\n", log, answer)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, log
}

func TestEscalationValidationNeverAsks(t *testing.T) {
	s := newScratch(t)
	ask, log := approver(t, s.beside, "allowed-once")
	ran := filepath.Join(s.beside, "ran")
	for _, tc := range []struct {
		args []string
		text string
	}{
		{[]string{"--sandbox-permissions", "workspace-write"}, "invalid escalation: sandbox_permissions requires a justification"},
		{[]string{"--justification", "I need to write the build output"}, "invalid escalation: justification is only valid together with sandbox_permissions"},
		{[]string{"--sandbox-permissions", "workspace-write", "--justification", "  \t "}, "invalid justification: expected a non-empty sentence"},
		{[]string{"--sandbox-permissions", "read-only", "--justification", "Reading is enough."}, `sandbox escalation to "read-only" is not strictly wider than this call's current "read-only" mode`},
		{[]string{"--mode", "workspace-write", "--sandbox-permissions", "workspace-write", "--justification", "Same mode."}, `sandbox escalation to "workspace-write" is not strictly wider than this call's current "workspace-write" mode`},
	} {
		args := append([]string{"--policy", s.noPolicy, "--approval-command", ask}, tc.args...)
		e, r := tohJSON(t, s.ws, nil, append(args, "--", "touch", ran)...)
		if r.code != exitEscalation || e.Error == nil || e.Error.Message != tc.text || !strings.Contains(*e.Stderr, tc.text) {
			t.Fatalf("%q: code %d envelope %+v", tc.args, r.code, e.Error)
		}
		absent(t, ran)
		absent(t, log)
	}
}

func TestApprovedEscalationLandsExactlyTheDeniedWrite(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	pf := filepath.Join(s.beside, "policy.json")
	os.WriteFile(pf, []byte(`{"version": 1, "mode": "read-only"}`), 0o644)
	before, _ := os.ReadFile(pf)
	target := filepath.Join(s.ws, "out.txt")
	base := []string{"--policy", pf, "--runner", "bwrap", "-c", "printf built > out.txt"}

	e, _ := tohJSON(t, s.ws, nil, base...)
	if !e.Result.Denied {
		t.Fatalf("standing mode did not deny: %+v", e.Result)
	}
	absent(t, target)

	ask, log := approver(t, s.beside, "allowed-once")
	e, r := tohJSON(t, s.ws, nil, append([]string{"--approval-command", ask, "--sandbox-permissions", "workspace-write",
		"--justification", "The build writes out.txt."}, base...)...)
	if r.code != 0 || e.Result == nil || e.Result.Mode != "workspace-write" || e.Result.Denied {
		t.Fatalf("approved retry: %d %+v %+v", r.code, e.Result, e.Error)
	}
	present(t, target, "built")
	req, _ := os.ReadFile(log)
	for _, want := range []string{`"subject":"command"`, `"currentMode":"read-only"`, `"requestedMode":"workspace-write"`, `"justification":"The build writes out.txt."`} {
		if !bytes.Contains(req, []byte(want)) {
			t.Fatalf("approval request lacks %s: %s", want, req)
		}
	}
	// Nothing was persisted: the policy file is byte-identical and the next call is
	// denied again.
	if after, _ := os.ReadFile(pf); !bytes.Equal(before, after) {
		t.Fatalf("the grant changed the policy file: %s", after)
	}
	os.Remove(target)
	e, _ = tohJSON(t, s.ws, nil, base...)
	if !e.Result.Denied {
		t.Fatalf("the grant outlived its call: %+v", e.Result)
	}
	absent(t, target)
	// Beside the workspace stays denied: the grant widened the mode, not the root.
	beside := filepath.Join(s.beside, "x")
	e, _ = tohJSON(t, s.ws, nil, "--policy", pf, "--runner", "bwrap", "--approval-command", ask, "--sandbox-permissions", "workspace-write",
		"--justification", "Try outside.", "-c", "echo x > "+beside)
	if !e.Result.Denied {
		t.Fatalf("a workspace-write grant wrote beside the root: %+v", e.Result)
	}
	absent(t, beside)
	s.checkCanary(t)
}

func TestEscalationRefusals(t *testing.T) {
	s := newScratch(t)
	ran := filepath.Join(s.beside, "ran")
	esc := []string{"--sandbox-permissions", "danger-full-access", "--justification", "Needs the whole disk."}
	for _, tc := range []struct {
		answer, code, text string
	}{
		{"rejected", "ESCALATION_REJECTED", `the user rejected escalating this command to "danger-full-access"`},
		{"cancelled", "ESCALATION_CANCELLED", `approval for escalating to "danger-full-access" was cancelled`},
		{"sure, go ahead", "ESCALATION_CANCELLED", `approval for escalating to "danger-full-access" was cancelled`},
	} {
		ask, _ := approver(t, s.beside, tc.answer)
		e, r := tohJSON(t, s.ws, nil, append(append([]string{"--policy", s.noPolicy, "--approval-command", ask}, esc...), "--", "touch", ran)...)
		if r.code != exitEscalation || e.Error == nil || e.Error.Code != tc.code || e.Error.Message != tc.text {
			t.Fatalf("%s: %d %+v", tc.answer, r.code, e.Error)
		}
		absent(t, ran)
	}
	// approval "never" rejects deterministically without asking.
	pf := filepath.Join(s.beside, "never.json")
	os.WriteFile(pf, []byte(`{"version": 1, "approval": "never"}`), 0o644)
	ask, log := approver(t, s.beside, "allowed-once")
	os.Remove(log)
	e, r := tohJSON(t, s.ws, nil, append(append([]string{"--policy", pf, "--approval-command", ask}, esc...), "--", "touch", ran)...)
	if r.code != exitEscalation || e.Error.Message != `the user rejected escalating this command to "danger-full-access"` {
		t.Fatalf("never: %d %+v", r.code, e.Error)
	}
	absent(t, ran)
	absent(t, log)
	// No terminal and no command: unavailable.
	cmd := exec.Command(tohExec, append(append([]string{"--policy", s.noPolicy, "--json"}, esc...), "--", "touch", ran)...)
	cmd.Dir = s.ws
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, _ := cmd.Output()
	if cmd.ProcessState.ExitCode() != exitEscalation || !strings.Contains(string(out),
		`sandbox escalation to \"danger-full-access\" requires approval, but no approval channel is available`) {
		t.Fatalf("no channel: %d %s", cmd.ProcessState.ExitCode(), out)
	}
	absent(t, ran)
}

// The approval command decides for every later call, so it must lie outside every
// root any call under the policy could write, not only this call's: a read-only call
// asked an approver in the workspace, which an earlier workspace-write session call
// (made without --approval-command) had rewritten to say allowed-once (found by
// review). Refused before it is asked; one outside every root is asked (the
// positive control).
func TestApproverInAnyCallsRootIsRefused(t *testing.T) {
	s := newScratch(t)
	other := filepath.Join(s.beside, "other-session")
	if err := os.MkdirAll(filepath.Join(s.ws, "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(other, 0o755)
	pf := filepath.Join(s.beside, "policy.json")
	os.WriteFile(pf, fmt.Appendf(nil, `{"version": 1, "mode": "read-only", "workspaceRoot": %q, "sessions": {
		"build": {"cwd": %q, "events": [{"mode": "workspace-write"}]},
		"other": {"cwd": %q}}}`, s.ws, s.ws, other), 0o644)
	ran := filepath.Join(s.beside, "ran")
	esc := []string{"--policy", pf, "--sandbox-permissions", "danger-full-access", "--justification", "Needs the disk."}
	for _, dir := range []string{filepath.Join(s.ws, "tools"), other} {
		ask, log := approver(t, dir, "allowed-once")
		e, r := tohJSON(t, s.ws, nil, append(append(esc, "--approval-command", ask), "--", "touch", ran)...)
		if r.code != exitEscalation || e.Error == nil || e.Error.Code != "ESCALATION_UNAVAILABLE" || !strings.Contains(e.Error.Message, "lies beneath the writable root") {
			t.Fatalf("approver %s: code %d %+v", ask, r.code, e.Error)
		}
		absent(t, log)
		absent(t, ran)
	}
	ask, log := approver(t, s.beside, "allowed-once")
	if _, r := tohJSON(t, s.ws, nil, append(append(esc, "--approval-command", ask), "--", "touch", ran)...); r.code != 0 {
		t.Fatalf("approver outside every root: %d %s", r.code, r.stderr)
	}
	present(t, ran, "")
	req, _ := os.ReadFile(log)
	if !bytes.Contains(req, []byte(`"requestedMode":"danger-full-access"`)) {
		t.Fatalf("approval request: %s", req)
	}
}

// An approver that another local user could replace (a group- or world-writable
// file or directory above it, or one owned by someone else) would let that user
// approve the caller's escalations: it is refused unasked (ESCALATION_UNAVAILABLE),
// naming what to fix. Control: the same approver with the modes mended is asked
// and the approved command runs.
func TestApproverOthersCouldReplaceIsRefused(t *testing.T) {
	s := newScratch(t)
	ran := filepath.Join(s.beside, "ran")
	esc := []string{"--policy", s.noPolicy, "--sandbox-permissions", "danger-full-access", "--justification", "Needs the disk."}
	open := filepath.Join(s.beside, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	ask, log := approver(t, open, "allowed-once")
	cases := []struct {
		what string
		set  func() error
	}{
		{"world-writable directory", func() error { return os.Chmod(open, 0o777) }},
		{"group-writable directory", func() error { return os.Chmod(open, 0o775) }},
		{"group-writable approver", func() error { return os.Chmod(ask, 0o775) }},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, struct {
			what string
			set  func() error
		}{"approver owned by another user", func() error { return os.Chown(ask, 65534, 65534) }})
	}
	mend := func() {
		t.Helper()
		if err := os.Chmod(open, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(ask, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(ask, os.Geteuid(), os.Getegid()); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		mend()
		if err := c.set(); err != nil {
			t.Fatal(err)
		}
		e, r := tohJSON(t, s.ws, nil, append(append(esc, "--approval-command", ask), "--", "touch", ran)...)
		if r.code != exitEscalation || e.Error == nil || e.Error.Code != "ESCALATION_UNAVAILABLE" || !strings.Contains(e.Error.Message, "could be replaced by another user") {
			t.Fatalf("%s: code %d %+v", c.what, r.code, e.Error)
		}
		absent(t, log)
		absent(t, ran)
	}
	mend()
	if _, r := tohJSON(t, s.ws, nil, append(append(esc, "--approval-command", ask), "--", "touch", ran)...); r.code != 0 {
		t.Fatalf("approver only its owner can change: %d %s", r.code, r.stderr)
	}
	present(t, ran, "")
}

// An approver named through a link in a sticky directory: the link's owner can
// point it elsewhere at any moment, so it is refused unless the link is root's or
// the caller's, whatever it points to now (found by review: another user's link in
// /var/tmp to a root-owned approver was swapped to their own between the check and
// the run, 1 win in 43, and their approver ran as root). Control: the caller's own
// link there is followed, and the approver answers.
func TestApproverThroughAnotherUsersLinkIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root: a link of another user's")
	}
	s := newScratch(t)
	ran := filepath.Join(s.beside, "ran")
	esc := []string{"--policy", s.noPolicy, "--sandbox-permissions", "danger-full-access", "--justification", "Needs the disk."}
	real := filepath.Join(s.beside, "real")
	sticky := filepath.Join(s.beside, "sticky")
	for _, d := range []string{real, sticky} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Chmod(sticky, 0o1777); err != nil {
		t.Fatal(err)
	}
	ask, log := approver(t, real, "allowed-once")
	name := filepath.Base(ask)
	theirs, mine := filepath.Join(sticky, "theirs"), filepath.Join(sticky, "mine")
	for _, l := range []string{theirs, mine} {
		if err := os.Symlink(real, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	e, r := tohJSON(t, s.ws, nil, append(append(esc, "--approval-command", filepath.Join(theirs, name)), "--", "touch", ran)...)
	if r.code != exitEscalation || e.Error == nil || e.Error.Code != "ESCALATION_UNAVAILABLE" || !strings.Contains(e.Error.Message, "could be replaced by another user") {
		t.Fatalf("through another user's link: code %d %+v", r.code, e.Error)
	}
	absent(t, log)
	absent(t, ran)
	if _, r := tohJSON(t, s.ws, nil, append(append(esc, "--approval-command", filepath.Join(mine, name)), "--", "touch", ran)...); r.code != 0 {
		t.Fatalf("through the caller's own link: %d %s", r.code, r.stderr)
	}
	present(t, ran, "")
}

// An approver given through links runs by its resolved path: a link on the way
// lies in a directory neither spelling's check covers (a/approve -> ../b/link ->
// ../c/real: b), whose owner could point it elsewhere between the check and the
// run (found by review: 7 wins in 300 tries). The approver logs its $0. Control: it
// is asked, and answers.
func TestApproverRunsByItsResolvedPath(t *testing.T) {
	s := newScratch(t)
	for _, d := range []string{"a", "b", "c"} {
		if err := os.Mkdir(filepath.Join(s.beside, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(s.beside, "approvals.log")
	real := filepath.Join(s.beside, "c", "real")
	os.WriteFile(real, fmt.Appendf(nil, "#!/bin/sh\necho \"$0\" >> %s\ncat > /dev/null\necho rejected\n", log), 0o755)
	os.Symlink("../c/real", filepath.Join(s.beside, "b", "link"))
	ask := filepath.Join(s.beside, "a", "approve")
	os.Symlink("../b/link", ask)
	e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--approval-command", ask, "--sandbox-permissions", "danger-full-access",
		"--justification", "Needs the disk.", "--", "true")
	if r.code != exitEscalation || e.Error == nil || e.Error.Code != "ESCALATION_REJECTED" {
		t.Fatalf("code %d %+v stderr %s", r.code, e.Error, r.stderr)
	}
	if got, _ := os.ReadFile(log); string(got) != real+"\n" {
		t.Fatalf("the approver ran as %q, want its resolved path %q", got, real)
	}
}

// The approval command runs outside every sandbox, in "/", with a $PATH that holds no
// directory a call could write in: an approver starting "#!/usr/bin/env sh" ran the
// sh a workspace-write call had planted in a virtualenv's bin listed in $PATH (found
// by review). The request names the program that will run (found in $PATH: the
// planted one, which the approver can then refuse) and the grant's roots.
func TestApproverRunsNothingFromTheRoots(t *testing.T) {
	s := newScratch(t)
	venv := filepath.Join(s.ws, ".venv", "bin")
	planted := filepath.Join(s.beside, "planted-ran")
	os.MkdirAll(venv, 0o755)
	for _, name := range []string{"sh", "true"} {
		os.WriteFile(filepath.Join(venv, name), fmt.Appendf(nil, "#!/bin/sh\necho %s >> %s\n", name, planted), 0o755)
	}
	log := filepath.Join(s.beside, "approvals.log")
	ask := filepath.Join(s.beside, "approve")
	os.WriteFile(ask, fmt.Appendf(nil, "#!/usr/bin/env sh\npwd >> %s\ncat >> %s\necho rejected\n", log, log), 0o755)
	env := []string{"PATH=" + venv + ":" + os.Getenv("PATH")}
	e, r := tohJSON(t, s.ws, env, "--policy", s.noPolicy, "--approval-command", ask, "--sandbox-permissions", "workspace-write",
		"--justification", "Write the build.", "--", "true")
	if r.code != exitEscalation || e.Error == nil || e.Error.Code != "ESCALATION_REJECTED" {
		t.Fatalf("code %d %+v stderr %s", r.code, e.Error, r.stderr)
	}
	absent(t, planted)
	got, _ := os.ReadFile(log)
	for _, want := range []string{"/\n", fmt.Sprintf(`"program":%q`, filepath.Join(venv, "true")),
		fmt.Sprintf(`"writableRoots":[%q`, s.ws), `"network":"allow"`} {
		if !bytes.Contains(got, []byte(want)) {
			t.Fatalf("approver's log lacks %s:\n%s", want, got)
		}
	}
}

// An approval command is not asked about text JSON cannot carry exactly: invalid
// UTF-8 became U+FFFD, so "a\xffb" reached it as "a\ufffdb", a different argument
// than the one that would run (found by review). The request is cancelled unasked;
// the same request in valid UTF-8 is asked (the control).
func TestApproverIsNotShownReplacedBytes(t *testing.T) {
	s := newScratch(t)
	ask, log := approver(t, s.beside, "allowed-once")
	esc := []string{"--policy", s.noPolicy, "--approval-command", ask, "--sandbox-permissions", "danger-full-access", "--justification", "Print it."}
	e, r := tohJSON(t, s.ws, nil, append(esc, "--", "printf", "%s", "a\xffb")...)
	if r.code != exitEscalation || e.Error == nil || e.Error.Code != "ESCALATION_CANCELLED" || !strings.Contains(*e.Stderr, "argv[2] is not valid UTF-8") {
		t.Fatalf("code %d %+v stderr %q", r.code, e.Error, *e.Stderr)
	}
	absent(t, log)
	if _, r := tohJSON(t, s.ws, nil, append(esc, "--", "printf", "%s", "a\ufffdb")...); r.code != 0 {
		t.Fatalf("control: %d %s", r.code, r.stderr)
	}
	if req, err := os.ReadFile(log); err != nil || !bytes.Contains(req, []byte(`"a�b"`)) {
		t.Fatalf("control: the approver was not asked: %q %v", req, err)
	}
}
