package policy

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/toh-sandbox/toh/internal/testutil"
)

// decideTree builds a canonical base holding a workspace "ws" with a repository
// (.git with HEAD, objects, refs, config and hooks), a second root "extra", a
// directory "outside" in no root, and links between them; "$B" in a line stands
// for base.
func decideTree(t *testing.T, lines ...string) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	std := []string{
		"file ws/f one", "dir ws/a/b", "dir ws/empty",
		"file ws/.git/HEAD ref: refs/heads/main", "dir ws/.git/objects", "dir ws/.git/refs",
		"file ws/.git/config [core]", "file ws/.git/hooks/pre-commit #!/bin/sh",
		"file extra/e e", "file outside/o o", "file cfg/policy.json {}",
		"link ws/out -> $B/outside", "link ws/outrel -> ../outside", "link ws/tohooks -> .git/hooks",
		"link ws/dangling -> $B/outside/missing", "link ws/toextra -> ../extra",
	}
	for _, l := range append(std, lines...) {
		testutil.MakeTree(t, base, strings.ReplaceAll(l, "$B", base))
	}
	return base
}

type decideCase struct {
	path string // relative to base unless absolute
	op   Op
	rule string
	// target relative to base ("" means: the path itself)
	target string
	// guard is the guarding path relative to base, for denials by a guard
	guard string
}

func checkDecisions(t *testing.T, x Execution, base string, cases []decideCase, extra ...ProtectedPath) {
	t.Helper()
	for _, c := range cases {
		p := c.path
		if !filepath.IsAbs(p) {
			p = base + "/" + p // unclean on purpose: Decide must not clean lexically
		}
		d := x.Decide(p, c.op, extra...)
		wantTarget := p
		if c.target != "" {
			wantTarget = c.target
			if !filepath.IsAbs(wantTarget) {
				wantTarget = filepath.Join(base, c.target)
			}
		}
		allow := c.rule == RuleAllowed || c.rule == RuleDangerFullAccess || c.rule == RuleSink
		if d.Allow != allow || d.Rule != c.rule || d.Target != wantTarget || d.Op != c.op || d.Path != p || d.Mode != x.Mode {
			t.Errorf("%s %s: got %+v, want rule %s target %s", c.op, c.path, d, c.rule, wantTarget)
			continue
		}
		switch {
		case c.guard != "" && (d.Guard == nil || d.Guard.Path != filepath.Join(base, c.guard)):
			t.Errorf("%s %s: guard %+v, want %s", c.op, c.path, d.Guard, c.guard)
		case c.guard == "" && d.Guard != nil:
			t.Errorf("%s %s: unexpected guard %+v", c.op, c.path, d.Guard)
		case d.Allow && d.Rule == RuleAllowed && d.Root == "":
			t.Errorf("%s %s: allowed without a root: %+v", c.op, c.path, d)
		}
	}
}

func TestDecideWorkspaceWrite(t *testing.T) {
	base := decideTree(t, "dir ws/secrets", "file ws/.toh/policy.json {}")
	ws := filepath.Join(base, "ws")
	x := wwExec(ws, filepath.Join(base, "extra"), filepath.Join(ws, "a"))
	x.Protect = append(x.Protect, "secrets/key.pem", ".env")
	x.PolicyFile = filepath.Join(ws, ".toh/policy.json")
	checkDecisions(t, x, base, []decideCase{
		// Plain targets.
		{path: "ws/f", op: OpWrite, rule: RuleAllowed},
		{path: "ws/new", op: OpCreate, rule: RuleAllowed},
		{path: "ws/f", op: OpDelete, rule: RuleAllowed},
		{path: "ws/f", op: OpRename, rule: RuleAllowed},
		{path: "extra/e", op: OpWrite, rule: RuleAllowed},
		{path: "outside/o", op: OpWrite, rule: RuleOutside},
		{path: "outside/new", op: OpCreate, rule: RuleOutside},
		{path: "/dev/null", op: OpWrite, rule: RuleSink},
		{path: "/dev/null", op: OpDelete, rule: RuleOutside},

		// Symlinks: write follows the last component, name ops do not.
		{path: "ws/out/o", op: OpWrite, rule: RuleOutside, target: "outside/o"},
		{path: "ws/outrel/new", op: OpCreate, rule: RuleOutside, target: "outside/new"},
		{path: "ws/out", op: OpWrite, rule: RuleOutside, target: "outside"},
		{path: "ws/out", op: OpDelete, rule: RuleAllowed},
		{path: "ws/out", op: OpRename, rule: RuleAllowed},
		{path: "ws/dangling", op: OpWrite, rule: RuleOutside, target: "outside/missing"},
		{path: "ws/dangling", op: OpDelete, rule: RuleAllowed},
		{path: "ws/toextra/e", op: OpWrite, rule: RuleAllowed, target: "extra/e"},
		{path: "ws/out/../ws/f", op: OpWrite, rule: RuleAllowed, target: "ws/f"}, // ".." after a link is physical
		{path: "ws/a/b/", op: OpDelete, rule: RuleAllowed, target: "ws/a/b"},
		{path: "ws/a/b/..", op: OpWrite, rule: RuleAllowed, target: "ws/a"},
		{path: "ws/a/b/..", op: OpRename, rule: RuleProtected, target: "ws/a", guard: "ws/a/secrets/key.pem"}, // ws/a is a root too

		// Protect entries of the repository, existing and missing.
		{path: "ws/.git/hooks/pre-commit", op: OpWrite, rule: RuleProtected, guard: "ws/.git/hooks"},
		{path: "ws/.git/hooks/new", op: OpCreate, rule: RuleProtected, guard: "ws/.git/hooks"},
		{path: "ws/.git/hooks", op: OpDelete, rule: RuleProtected, guard: "ws/.git/hooks"},
		{path: "ws/tohooks/pre-commit", op: OpWrite, rule: RuleProtected, target: "ws/.git/hooks/pre-commit", guard: "ws/.git/hooks"},
		{path: "ws/tohooks", op: OpDelete, rule: RuleAllowed}, // the link's own name is not protected
		{path: "ws/.git/config", op: OpRename, rule: RuleProtected, guard: "ws/.git/config"},
		{path: "ws/.git", op: OpRename, rule: RuleProtected, guard: "ws/.git/hooks"},               // a carrier of hooks
		{path: "ws/.git/objects/x", op: OpCreate, rule: RuleAllowed},                               // git must write here
		{path: "ws/.git/commondir", op: OpCreate, rule: RuleProtected, guard: "ws/.git/commondir"}, // absent, still protected
		{path: "ws/secrets/key.pem", op: OpCreate, rule: RuleProtected, guard: "ws/secrets/key.pem"},
		{path: "ws/secrets", op: OpRename, rule: RuleProtected, guard: "ws/secrets/key.pem"},
		{path: "ws/secrets", op: OpDelete, rule: RuleAllowed}, // rmdir needs it empty: nothing protected goes
		{path: "ws/.env", op: OpCreate, rule: RuleProtected, guard: "ws/.env"},
		{path: "extra/.env", op: OpCreate, rule: RuleProtected, guard: "extra/.env"}, // relative to every root

		// The policy file and its lock, and the directory on the way.
		{path: "ws/.toh/policy.json", op: OpWrite, rule: RulePolicyFile, guard: "ws/.toh/policy.json"},
		{path: "ws/.toh/policy.json.lock", op: OpCreate, rule: RulePolicyFile, guard: "ws/.toh/policy.json.lock"},
		{path: "ws/.toh", op: OpRename, rule: RulePolicyFile, guard: "ws/.toh/policy.json"},
		{path: "ws/.toh/other", op: OpCreate, rule: RuleAllowed},

		// Roots' own names live in the root around them.
		{path: "ws/a", op: OpDelete, rule: RuleAllowed},
		{path: "ws/a", op: OpWrite, rule: RuleAllowed},
		{path: "extra", op: OpRename, rule: RuleProtected, guard: "extra/secrets/key.pem"},
		{path: "extra", op: OpDelete, rule: RuleOutside},
		{path: "ws", op: OpDelete, rule: RuleOutside},
		{path: "ws", op: OpWrite, rule: RuleAllowed},
	})

	// A further guard of the caller (toh-exec's probe cache).
	cache := ProtectedPath{Path: filepath.Join(base, "ws/a/b/cache.json"), Kind: PathFile, Reason: "probe-cache"}
	checkDecisions(t, x, base, []decideCase{
		{path: "ws/a/b/cache.json", op: OpWrite, rule: "probe-cache", guard: "ws/a/b/cache.json"},
		{path: "ws/a/b", op: OpRename, rule: "probe-cache", guard: "ws/a/b/cache.json"},
		{path: "ws/a/b/other", op: OpWrite, rule: RuleAllowed},
	}, cache)
}

func TestDecideGitDirectories(t *testing.T) {
	// .git/ entries apply to git directories that exist: a workspace without one
	// may create them (git init), and one reached through a pointer or a symlink is
	// protected where it really is.
	base := decideTree(t,
		"dir plain/sub",
		"file pointed/.git gitdir: $B/extra/gd",
		"file extra/gd/HEAD ref: refs/heads/main", "dir extra/gd/objects", "dir extra/gd/refs", "file extra/gd/config [core]",
		"link linked/.git -> ../extra/real",
		"file extra/real/HEAD ref: refs/heads/main", "dir extra/real/objects", "dir extra/real/refs", "dir extra/real/hooks",
	)
	x := wwExec(filepath.Join(base, "plain"), filepath.Join(base, "extra"), filepath.Join(base, "pointed"), filepath.Join(base, "linked"))
	checkDecisions(t, x, base, []decideCase{
		{path: "plain/.git", op: OpCreate, rule: RuleAllowed},
		{path: "plain/.git/hooks/pre-commit", op: OpCreate, rule: RuleAllowed},
		{path: "pointed/.git", op: OpWrite, rule: RuleProtected, guard: "pointed/.git"},
		{path: "pointed/.git", op: OpDelete, rule: RuleProtected, guard: "pointed/.git"},
		{path: "extra/gd/config", op: OpWrite, rule: RuleProtected, guard: "extra/gd/config"},
		{path: "extra/gd/hooks/post-checkout", op: OpCreate, rule: RuleProtected, guard: "extra/gd/hooks"},
		{path: "extra/gd/objects/x", op: OpCreate, rule: RuleAllowed},
		{path: "linked/.git/hooks/x", op: OpCreate, rule: RuleProtected, target: "extra/real/hooks/x", guard: "extra/real/hooks"},
		{path: "linked/.git/config", op: OpCreate, rule: RuleProtected, target: "extra/real/config", guard: "extra/real/config"},
	})
}

func TestDecideModes(t *testing.T) {
	base := decideTree(t)
	ws := filepath.Join(base, "ws")
	for _, mode := range []Mode{ReadOnly, "bogus"} {
		x := Execution{Mode: mode, WorkspaceRoot: ws, Protect: DefaultProtect}
		checkDecisions(t, x, base, []decideCase{
			{path: "ws/f", op: OpWrite, rule: RuleReadOnly},
			{path: "ws/new", op: OpCreate, rule: RuleReadOnly},
			{path: "ws/out", op: OpDelete, rule: RuleReadOnly},
			{path: "/dev/null", op: OpWrite, rule: RuleSink},
			{path: "/dev/null", op: OpRename, rule: RuleReadOnly},
		})
	}
	x := Execution{Mode: DangerFullAccess, WorkspaceRoot: ws, Protect: DefaultProtect}
	checkDecisions(t, x, base, []decideCase{
		{path: "ws/.git/hooks/pre-commit", op: OpWrite, rule: RuleDangerFullAccess},
		{path: "outside/o", op: OpDelete, rule: RuleDangerFullAccess},
		{path: "ws/out/new", op: OpCreate, rule: RuleDangerFullAccess, target: "outside/new"},
	})
	// An op outside the vocabulary is denied in every mode.
	if d := x.Decide(filepath.Join(ws, "f"), "chmod"); d.Allow || d.Rule != RuleUnknownOp {
		t.Errorf("unknown op: %+v", d)
	}
}

func TestDecideRelativePaths(t *testing.T) {
	base := decideTree(t)
	ws := filepath.Join(base, "ws")
	t.Chdir(filepath.Join(ws, "a"))
	x := wwExec(ws)
	for _, c := range []struct {
		path   string
		op     Op
		target string
	}{
		{"new", OpCreate, "ws/a/new"},
		{"../f", OpWrite, "ws/f"},
		{"b", OpRename, "ws/a/b"},
		{".", OpDelete, "ws/a"},
		{"../../outside/o", OpWrite, "outside/o"},
	} {
		d := x.Decide(c.path, c.op)
		if want := filepath.Join(base, c.target); d.Target != want || d.Path != c.path {
			t.Errorf("%s %q: target %q, want %q", c.op, c.path, d.Target, want)
		}
	}
	if d := x.Decide("", OpCreate); d.Allow || d.Target != "" || d.Rule != RuleOutside {
		t.Errorf("empty path: %+v", d)
	}
	if d := x.Decide("/", OpDelete); d.Allow || d.Target != "/" {
		t.Errorf("/: %+v", d)
	}
}

func TestParseOp(t *testing.T) {
	for _, op := range Ops {
		if got, err := ParseOp(string(op)); err != nil || got != op {
			t.Errorf("ParseOp(%q) = %q, %v", op, got, err)
		}
	}
	for _, s := range []string{"", "Write", "chmod", "write "} {
		if _, err := ParseOp(s); err == nil || !strings.Contains(err.Error(), "want write, create, delete or rename") {
			t.Errorf("ParseOp(%q): %v", s, err)
		}
	}
}
