package fusefence

import (
	"testing"

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
		p, rule := place(c.x, c.target, c.r, "/w/audit.jsonl")
		if p.Root != c.root || p.Rel != c.rel || rule != c.rule {
			t.Errorf("place(%s, %q, %d) = %+v %q, want {%s %s} %q", c.x.Mode, c.target, c.r, p, rule, c.root, c.rel, c.rule)
		}
	}
}
