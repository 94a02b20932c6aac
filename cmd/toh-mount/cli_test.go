package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/fusefence"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestHelpAndUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"audit", "--help"}} {
		code, out, errOut := runCLI(args...)
		if code != 0 || !strings.Contains(out, "Exit status:") || errOut != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want the help on stdout and 0", args, code, out, errOut)
		}
	}
	for _, args := range [][]string{
		{}, {"--bogus", "a", "b"}, {"onlysource"}, {"a", "b", "c"}, {"-u"}, {"-u", "m", "extra"},
		{"audit"}, {"audit", "f", "--rule", "nope"}, {"audit", "f", "--since", "yesterday"}, {"audit", "a", "b"},
	} {
		code, out, errOut := runCLI(args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "toh-mount: ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and a message on stderr", args, code, out, errOut)
		}
	}
}

func TestHelpListsEveryRule(t *testing.T) {
	for _, r := range fusefence.Rules {
		if !strings.Contains(rulesList, r) {
			t.Errorf("the help text does not list rule %q", r)
		}
	}
	if n := strings.Count(rulesList, ",") + 1; n != len(fusefence.Rules) {
		t.Errorf("the help text lists %d rules, fusefence has %d", n, len(fusefence.Rules))
	}
}

func TestAuditQuery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := fusefence.OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for i, ev := range []fusefence.Event{
		{Op: "create", Path: "a", HostPath: "/w/a", Mode: "read-only", Rule: fusefence.RuleReadOnly},
		{Op: "open", Path: ".git/config", HostPath: "/w/.git/config", Mode: "workspace-write", Rule: fusefence.RuleProtected},
		{Op: "create", Path: "out/x", HostPath: "/etc/x", Mode: "workspace-write", Rule: fusefence.RuleOutside},
		// A name that, printed raw, would forge a second record and move the cursor.
		{Op: "create", Path: "out/y\n2025 pid 1 uid 0 unlink", HostPath: "/etc/y\n2025 pid 1 uid 0 unlink \"ws/README\": /w/README\x1b[2K", Mode: "workspace-write", Rule: fusefence.RuleOutside},
	} {
		ev.Time, ev.PID, ev.UID = t0.Add(time.Duration(i)*time.Hour), uint32(100+i), 1000
		a.Log(ev)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCLI("audit", path, "--op", "create")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, `create "out/x": "/etc/x" (outside-writable-roots, workspace-write)`) ||
		strings.Contains(out, "\x1b") || strings.Contains(out, "unlink \"ws") {
		t.Errorf("--op create: exit %d, stdout:\n%q\nstderr %q", code, out, errOut)
	}
	code, out, _ = runCLI("audit", "--rule", "protected", path)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, ".git/config") {
		t.Errorf("--rule protected: exit %d, stdout:\n%s", code, out)
	}
	code, out, _ = runCLI("audit", path, "--since", "2025-06-01T13:00:00Z", "--json")
	var got []fusefence.Event
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var ev fusefence.Event
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("--json output: %v\n%s", err, out)
		}
		got = append(got, ev)
	}
	if code != 0 || len(got) != 3 || got[0].Path != ".git/config" || got[1].PID != 102 {
		t.Errorf("--since --json: exit %d, records %+v", code, got)
	}
	if code, _, errOut := runCLI("audit", filepath.Join(t.TempDir(), "missing")); code != exitFailure || errOut == "" {
		t.Errorf("missing log: exit %d, stderr %q; want 1 and a message", code, errOut)
	}
	if err := os.WriteFile(path, []byte("not json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("audit", path); code != exitFailure || !strings.Contains(errOut, "line 1") {
		t.Errorf("corrupt log: exit %d, stderr %q; want 1 naming line 1", code, errOut)
	}
}
