package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/fusefence"
	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// whyScratch is a scratch workspace with a repository, a protected "secrets" entry
// and a policy file in workspace-write beside it.
func whyScratch(t *testing.T) (*scratch, string) {
	t.Helper()
	s := newScratch(t)
	testutil.MakeTree(t, s.ws, "file .git/HEAD ref: refs/heads/main", "dir .git/objects", "dir .git/refs",
		"file .git/config [core]", "dir .git/hooks", "dir src", "link out -> "+s.beside, "file .toh/policy.json {}",
		"file .git/modules/sub/HEAD ref: refs/heads/main", "dir .git/modules/sub/objects", "dir .git/modules/sub/refs",
		"file .git/modules/sub/config [core]", "file sub/.git gitdir: ../.git/modules/sub")
	pf := filepath.Join(s.beside, "policy.json")
	doc := fmt.Sprintf(`{"version": 1, "mode": "workspace-write", "workspaceRoot": %q, "protect": [".git/hooks", ".git/config", "secrets"],
		"sessions": {"s1": {"cwd": %q, "events": [{"mode": "read-only"}]}}}`, s.ws, s.ws)
	if err := os.WriteFile(pf, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return s, pf
}

func TestWhyAnswers(t *testing.T) {
	s, pf := whyScratch(t)
	ws := canon.Canonical(s.ws)
	cache := filepath.Join(s.ws, "src", "cache.json")
	if err := os.WriteFile(cache, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args    []string
		code    int
		verdict string
		target  string
		because string
	}{
		{[]string{"--path", "src/new.go", "--op", "create"}, 0, "allow", ws + "/src/new.go", "within the writable root " + ws},
		{[]string{"--path", ".git/hooks/pre-commit", "--op", "create"}, 1, "deny (protected)", ws + "/.git/hooks/pre-commit",
			`beneath ` + ws + `/.git/hooks, protect entry ".git/hooks" of the git directory ` + ws + "/.git"},
		{[]string{"--path", ".git", "--op", "rename"}, 1, "deny (protected)", ws + "/.git", "would carry " + ws + "/.git/hooks"},
		{[]string{"--path", "secrets", "--op", "create"}, 1, "deny (protected)", ws + "/secrets", `protect entry "secrets", missing: it may not be created`},
		{[]string{"--path", ".git/objects/ab", "--op", "create"}, 0, "allow", ws + "/.git/objects/ab", ""},
		{[]string{"--path", ".git/modules/lib", "--op", "create"}, 1, "deny (protected)", ws + "/.git/modules/lib",
			`beneath ` + ws + `/.git/modules, the modules/ of the git directory ` + ws + "/.git, which may gain no entry"},
		{[]string{"--path", ".git/modules/sub/HEAD", "--op", "rename"}, 1, "deny (protected)", ws + "/.git/modules/sub/HEAD",
			"the HEAD of the submodule git directory " + ws + "/.git/modules/sub, kept valid so that git refuses a git directory planted inside it; the fence allows a rename that brings a valid HEAD"},
		{[]string{"--path", ".git/modules/sub/objects", "--op", "delete"}, 1, "deny (protected)", ws + "/.git/modules/sub/objects", "the objects/ of the submodule git directory"},
		{[]string{"--path", ".git/modules/sub/objects/ab", "--op", "create"}, 0, "allow", ws + "/.git/modules/sub/objects/ab", ""},
		{[]string{"--path", "out/x", "--op", "write"}, 1, "deny (outside-writable-roots)", canon.Canonical(s.beside) + "/x", "in no writable root"},
		{[]string{"--path", "out", "--op", "delete"}, 0, "allow", ws + "/out", ""},
		{[]string{"--path", s.ws, "--op", "delete"}, 1, "deny (outside-writable-roots)", ws, "its own name lives in its parent"},
		{[]string{"--path", "/dev/null", "--op", "write"}, 0, "allow", "/dev/null", "stays writable in every mode"},
		{[]string{"--path", "src/x", "--op", "write", "--mode", "read-only"}, 1, "deny (read-only)", ws + "/src/x", "the mode is read-only"},
		{[]string{"--path", "src/x", "--op", "write", "--session", "s1"}, 1, "deny (read-only)", ws + "/src/x", ""},
		{[]string{"--path", "src/x", "--op", "write", "--mode", "danger-full-access"}, 0, "allow", ws + "/src/x", "nothing is confined"},
		{[]string{"--path", pf, "--op", "write"}, 1, "deny (outside-writable-roots)", canon.Canonical(pf), ""},
		{[]string{"--path", "src/cache.json", "--op", "write", "--probe-cache", cache}, 1, "deny (probe-cache)", ws + "/src/cache.json", "toh-exec's probe cache"},
		{[]string{"--path", "src", "--op", "rename", "--probe-cache", cache}, 1, "deny (probe-cache)", ws + "/src", "would carry"},
	} {
		args := append([]string{"why", "--policy", pf}, c.args...)
		r := toh(t, s.ws, nil, args...)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != c.code || r.stderr != "" || len(lines) != 3 || lines[0] != c.verdict || lines[1] != "target: "+c.target ||
			!strings.HasPrefix(lines[2], "because: ") || !strings.Contains(lines[2], c.because) {
			t.Errorf("%q: exit %d stdout %q stderr %q; want exit %d, %q, target %s, because ...%s...", args, r.code, r.stdout, r.stderr,
				c.code, c.verdict, c.target, c.because)
		}
	}

	// The policy file inside the workspace.
	inside := filepath.Join(s.ws, ".toh", "policy.json")
	if err := os.WriteFile(inside, []byte(fmt.Sprintf(`{"version": 1, "mode": "workspace-write", "workspaceRoot": %q}`, s.ws)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := toh(t, s.ws, nil, "why", "--policy", inside, "--path", ".toh", "--op", "rename")
	if r.code != 1 || !strings.HasPrefix(r.stdout, "deny (policy-file)\n") || !strings.Contains(r.stdout, "the policy file") {
		t.Errorf("renaming the policy file's directory: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = toh(t, s.ws, nil, "why", "--policy", inside, "--path", ".toh/policy.json.lock", "--op", "create")
	if r.code != 1 || !strings.HasPrefix(r.stdout, "deny (policy-file)\n") || !strings.Contains(r.stdout, "the policy file's lock, missing") {
		t.Errorf("creating the policy file's lock: %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestWhyJSON(t *testing.T) {
	s, pf := whyScratch(t)
	ws := canon.Canonical(s.ws)
	r := toh(t, s.ws, nil, "why", "--json", "--policy", pf, "--path", ".git/config", "--op", "write")
	var d policy.Decision
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || r.code != 1 || r.stderr != "" {
		t.Fatalf("exit %d stdout %q stderr %q: %v", r.code, r.stdout, r.stderr, err)
	}
	want := policy.Decision{Allow: false, Rule: policy.RuleProtected, Op: policy.OpWrite, Mode: policy.WorkspaceWrite,
		Path: ".git/config", Target: ws + "/.git/config",
		Guard: &policy.ProtectedPath{Path: ws + "/.git/config", Exists: true, Kind: policy.PathFile, Reason: policy.ProtectEntry,
			Entry: ".git/config", GitDir: ws + "/.git"}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("got %+v %+v\nwant %+v %+v", d, d.Guard, want, *want.Guard)
	}
	// One line, exactly these keys for an allowed decision.
	r = toh(t, s.ws, nil, "why", "--json", "--policy", pf, "--path", "src", "--op", "delete")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("exit %d stdout %q: %v", r.code, r.stdout, err)
	}
	if m["allow"] != true || m["rule"] != "allowed" || m["root"] != ws || m["target"] != ws+"/src" || len(m) != 7 {
		t.Errorf("allowed decision: %v", m)
	}
}

func TestWhyUsageAndPolicyErrors(t *testing.T) {
	s, pf := whyScratch(t)
	for _, args := range [][]string{
		{"why"},
		{"why", "--path", "x"},
		{"why", "--op", "write"},
		{"why", "--path", "", "--op", "write"},
		{"why", "--path", "x", "--op", "chmod"},
		{"why", "--path", "x", "--op", ""},
		{"why", "--path", "x", "--op", "write", "extra"},
		{"why", "--path", "x", "--op", "write", "--mode", "rw"},
		{"why", "--path", "x", "--op", "write", "--probe-cache", "relative.json"},
		{"why", "--path", "x", "--op", "write", "--no-such-flag"},
	} {
		r := toh(t, s.ws, nil, append(args, "--policy", pf)...)
		if r.code != exitUsage || r.stdout != "" || !strings.HasPrefix(r.stderr, "toh-exec: ") {
			t.Errorf("%q: exit %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	r := toh(t, s.ws, nil, "why", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "toh-exec why --path P --op write|create|delete|rename") || r.stderr != "" {
		t.Errorf("--help: %d %q", r.code, r.stderr)
	}
	// Every rule a decision can name is in the help text.
	for _, rule := range []string{policy.RuleAllowed, policy.RuleDangerFullAccess, policy.RuleSink, policy.RuleReadOnly,
		policy.RuleOutside, policy.RuleProtected, policy.RulePolicyFile, string(probeCacheReason)} {
		if !strings.Contains(r.stdout, rule) {
			t.Errorf("--help does not name the rule %q", rule)
		}
	}

	bad := filepath.Join(s.beside, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version": 1, "mode": "rw"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"why", "--policy", bad, "--path", "x", "--op", "write"},
		{"why", "--policy", pf, "--session", "nobody", "--path", "x", "--op", "write"},
	} {
		r := toh(t, s.ws, nil, args...)
		if r.code != exitPolicy || r.stdout != "" || !strings.HasPrefix(r.stderr, "toh-exec: ") {
			t.Errorf("%q: exit %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
		}
		r = toh(t, s.ws, nil, append(args, "--json")...)
		var e envelope
		if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || r.code != exitPolicy || e.Error == nil || e.Error.Code != "POLICY_INVALID" {
			t.Errorf("%q --json: exit %d stdout %q: %v", args, r.code, r.stdout, err)
		}
	}
}

// The decision's rule names are the fence's where both name the same reason, so an
// audit record and a why answer can be compared.
func TestWhyRulesAreTheFences(t *testing.T) {
	for _, p := range [][2]string{
		{policy.RuleReadOnly, fusefence.RuleReadOnly},
		{policy.RuleOutside, fusefence.RuleOutside},
		{policy.RuleProtected, fusefence.RuleProtected},
		{policy.RulePolicyFile, fusefence.RulePolicyFile},
	} {
		if p[0] != p[1] {
			t.Errorf("policy rule %q, fence rule %q", p[0], p[1])
		}
	}
}
