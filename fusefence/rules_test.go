package fusefence

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
)

func TestPlace(t *testing.T) {
	ws := policy.Execution{
		Mode:          policy.WorkspaceWrite,
		WorkspaceRoot: "/w",
		WritableRoots: []string{"/w", "/tmp", "/w/nested"},
		Protect:       []string{".git/hooks", ".git/config"},
		PolicyFile:    "/w/.toh/policy.json",
	}
	ro := ws
	ro.Mode, ro.WritableRoots = policy.ReadOnly, nil
	danger := ws
	danger.Mode = policy.DangerFullAccess
	// What protectedOf(ws) gives when /w, /w/nested and /tmp are repositories.
	prot := guarded{
		protect: []string{
			"/w/.git/hooks", "/w/.git/config", "/w/.git/commondir", "/w/.git/config.worktree",
			"/tmp/.git/hooks", "/tmp/.git/config",
			"/w/nested/.git/hooks", "/w/nested/.git/config",
		},
		policy: []string{"/w/.toh/policy.json", "/w/.toh/policy.json.lock"},
	}

	for _, c := range []struct {
		x      policy.Execution
		target string
		r      reach
		root   string
		rel    string
		rule   string
	}{
		{ws, "/w/a", reachInode, "/w", "a", ""},
		{ws, "/w", reachInode, "/w", ".", ""},
		{ws, "/w/nested/x", reachInode, "/w/nested", "x", ""}, // the tightest root
		{ws, "/tmp/x", reachCarrier, "/tmp", "x", ""},
		{ws, "/wx", reachInode, "", "", RuleOutside}, // a prefix is not a parent
		{ws, "/etc/passwd", reachInode, "", "", RuleOutside},
		{ws, "relative", reachInode, "", "", RuleOutside},
		{ws, "/w/../etc", reachInode, "", "", RuleOutside}, // not canonical: contained in nothing
		{ws, "/w/.git/hooks", reachInode, "", "", RuleProtected},
		{ws, "/w/.git/hooks/pre-commit", reachInode, "", "", RuleProtected},
		{ws, "/w/.git/config", reachInode, "", "", RuleProtected},
		{ws, "/w/.git/configx", reachInode, "/w", ".git/configx", ""},
		{ws, "/w/.git/commondir", reachCarrier, "", "", RuleProtected}, // an absent-kind name
		{ws, "/w/.git/config.worktree", reachInode, "", "", RuleProtected},
		{ws, "/w/.git", reachInode, "/w", ".git", ""},                   // mkdir .git, chmod .git
		{ws, "/w/.git", reachCarrier, "", "", RuleProtected},            // mv .git away, or a .git file
		{ws, "/w/nested/.git/hooks", reachInode, "", "", RuleProtected}, // protect holds per root
		{ws, "/tmp/.git/config", reachInode, "", "", RuleProtected},
		{ws, "/w/.toh/policy.json", reachInode, "", "", RulePolicyFile},
		{ws, "/w/.toh/policy.json.lock", reachInode, "", "", RulePolicyFile},
		{ws, "/w/.toh", reachCarrier, "", "", RulePolicyFile},
		{ws, "/w/.toh", reachInode, "/w", ".toh", ""},
		{ws, "/w/audit.jsonl", reachInode, "", "", RuleAuditLog},
		{ro, "/w/a", reachInode, "", "", RuleReadOnly},
		{danger, "/etc/passwd", reachCarrier, "/", "etc/passwd", ""},
		{danger, "/w/.toh/policy.json", reachInode, "/", "w/.toh/policy.json", ""},
	} {
		p, rule := place(c.x, prot, c.target, c.r, "/w/audit.jsonl")
		if p.Root != c.root || p.Rel != c.rel || rule != c.rule {
			t.Errorf("place(%s, %q, %d) = %+v %q, want {%s %s} %q", c.x.Mode, c.target, c.r, p, rule, c.root, c.rel, c.rule)
		}
	}
}

// protectedOf takes the fence's protected set from the shared resolution: entries
// under .git/ apply to git directories that exist (not to a workspace without a
// repository, where git init must work), and the policy file keeps its own rule.
func TestProtectedOf(t *testing.T) {
	w := t.TempDir()
	plain := filepath.Join(w, "plain")
	repo := filepath.Join(w, "repo")
	for _, d := range []string{plain, filepath.Join(repo, ".git", "hooks")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	x := policy.Execution{
		Mode:          policy.WorkspaceWrite,
		WritableRoots: []string{plain, repo},
		Protect:       []string{".git/hooks", ".git/config", ".env"},
		PolicyFile:    filepath.Join(w, "toh.json"),
	}
	g := protectedOf(x)
	if want := []string{x.PolicyFile, x.PolicyFile + ".lock"}; !slices.Equal(g.policy, want) {
		t.Errorf("policy = %q, want %q", g.policy, want)
	}
	for _, p := range []string{
		plain + "/.env", repo + "/.env", repo + "/.git/hooks", repo + "/.git/config",
		repo + "/.git/commondir", repo + "/.git/config.worktree",
	} {
		if !slices.Contains(g.protect, p) {
			t.Errorf("protect %q lacks %q", g.protect, p)
		}
	}
	for _, p := range g.protect {
		if strings.HasPrefix(p, plain+"/.git") {
			t.Errorf("protect has %q: no repository there when resolved", p)
		}
	}
	x.Mode = policy.DangerFullAccess
	if g := protectedOf(x); len(g.protect)+len(g.policy) != 0 {
		t.Errorf("danger-full-access guards %+v", g)
	}
}

// TestPrefixWithin: guards' shortcut agrees with canon.LexicallyWithin on clean
// absolute paths, and on anything else matches at least where it does.
func TestPrefixWithin(t *testing.T) {
	clean := []string{"/", "/a", "/ab", "/a/b", "/a/bc", "/a/b/c", "/b", "/a/b/c/d"}
	unclean := []string{"", "a", "/a/", "/a//b", "/a/./b", "/a/../b", "/a/b/.."}
	for _, p := range append(clean, unclean...) {
		for _, r := range append(clean, unclean...) {
			got, want := prefixWithin(p, r), canon.LexicallyWithin(p, r)
			if slices.Contains(clean, p) && slices.Contains(clean, r) && got != want {
				t.Errorf("prefixWithin(%q, %q) = %v, canon.LexicallyWithin says %v", p, r, got, want)
			}
			if want && !got {
				t.Errorf("prefixWithin(%q, %q) = false where canon.LexicallyWithin matches", p, r)
			}
		}
	}
}
