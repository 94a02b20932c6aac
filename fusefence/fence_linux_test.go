package fusefence

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// fenceTree is SOURCE with symlinks that lead out, in and nowhere, protected paths
// and multiply-linked files.
var fenceTree = []string{
	"file src/f hello",
	"dir src/d",
	"file outside/other reachable only through out/",
	"file src/.git/hooks/pre-commit #!/bin/sh",
	"file src/.git/config [core]",
	"file src/.git/HEAD ref",
	"file src/ml shared",
	"link src/out -> $BASE/outside", // absolute, out of every root
	"link src/up -> ../outside",     // relative, climbs out of the mount
	"link src/outcanary -> $BASE/outside/canary",
	"link src/dangle -> $BASE/outside/newfile", // leads out, to nothing yet
	"link src/inabs -> $BASE/src/d",            // absolute, but into the root
	"link src/dangle-in -> $BASE/src/d/made",   // leads nowhere yet, inside the root
	"link src/rl -> d",                         // relative, stays in the mount: exposed
}

func newFenceEnv(t *testing.T) *env {
	e := newEnv(t, policy.WorkspaceWrite, fenceTree...)
	// Hard links made on the host: one inside the root, one to the canary outside.
	for _, l := range [][2]string{{e.s("ml"), e.s("ml2")}, {e.outside + "/canary", e.s("hlout")}} {
		if err := os.Link(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func TestWorkspaceWriteFence(t *testing.T) {
	e := newFenceEnv(t)
	for _, c := range []struct {
		name, op, rule, path string
		run                  func() error
	}{
		// A symlink that leads out is judged where it leads.
		{"create through an absolute link", "create", RuleOutside, "out/new", func() error { return openClose(e.m("out/new"), unix.O_CREAT|unix.O_WRONLY) }},
		{"create through a relative link", "mkdir", RuleOutside, "up/x", func() error { return unix.Mkdir(e.m("up/x"), 0o755) }},
		{"write beneath a link", "open", RuleOutside, "out/canary", func() error { return writeAt(e.m("out/canary"), unix.O_WRONLY, "X") }},
		{"truncating open of a link", "open", RuleOutside, "outcanary", func() error { return openClose(e.m("outcanary"), unix.O_WRONLY|unix.O_TRUNC) }},
		{"truncate a link", "truncate", RuleOutside, "outcanary", func() error { return unix.Truncate(e.m("outcanary"), 0) }},
		{"chmod beneath a link", "chmod", RuleOutside, "out/other", func() error { return unix.Chmod(e.m("out/other"), 0o777) }},
		{"utimes of a link", "utimes", RuleOutside, "outcanary", func() error { return unix.UtimesNano(e.m("outcanary"), []unix.Timespec{{Sec: 1}, {Sec: 1}}) }},
		{"setxattr beneath a link", "setxattr", RuleOutside, "out/other", func() error { return unix.Setxattr(e.m("out/other"), "user.x", []byte("1"), 0) }},
		{"unlink beneath a link", "unlink", RuleOutside, "out/canary", func() error { return unix.Unlink(e.m("out/canary")) }},
		{"symlink beneath a link", "symlink", RuleOutside, "out/sl", func() error { return unix.Symlink("/etc/passwd", e.m("out/sl")) }},
		{"rename into a link", "rename", RuleOutside, "out/f", func() error { return unix.Rename(e.m("f"), e.m("out/f")) }},
		{"rename out of a link", "rename", RuleOutside, "out/canary", func() error { return unix.Rename(e.m("out/canary"), e.m("stolen")) }},
		{"exchange with a link's target", "rename", RuleOutside, "out/canary", func() error {
			return unix.Renameat2(unix.AT_FDCWD, e.m("f"), unix.AT_FDCWD, e.m("out/canary"), unix.RENAME_EXCHANGE)
		}},
		{"hard link an outside file in", "link", RuleOutside, "out/other", func() error { return unix.Link(e.m("out/other"), e.m("hl")) }},
		{"hard link a link to an outside file", "link", RuleOutside, "outcanary", func() error { return unix.Link(e.m("outcanary"), e.m("hl")) }},
		{"create through a dangling link", "create", RuleOutside, "dangle", func() error { return writeAt(e.m("dangle"), unix.O_CREAT|unix.O_WRONLY, "X") }},

		// Protected paths, and what could move or replace them.
		{"create in .git/hooks", "create", RuleProtected, ".git/hooks/post-commit", func() error { return openClose(e.m(".git/hooks/post-commit"), unix.O_CREAT|unix.O_WRONLY) }},
		{"write .git/config", "open", RuleProtected, ".git/config", func() error { return writeAt(e.m(".git/config"), unix.O_WRONLY|unix.O_APPEND, "[evil]") }},
		{"chmod .git/config", "chmod", RuleProtected, ".git/config", func() error { return unix.Chmod(e.m(".git/config"), 0o666) }},
		{"unlink a hook", "unlink", RuleProtected, ".git/hooks/pre-commit", func() error { return unix.Unlink(e.m(".git/hooks/pre-commit")) }},
		{"mkdir in .git/hooks", "mkdir", RuleProtected, ".git/hooks/x", func() error { return unix.Mkdir(e.m(".git/hooks/x"), 0o755) }},
		{"setxattr on a hook", "setxattr", RuleProtected, ".git/hooks/pre-commit", func() error { return unix.Setxattr(e.m(".git/hooks/pre-commit"), "user.x", []byte("1"), 0) }},
		{"rename .git away", "rename", RuleProtected, ".git", func() error { return unix.Rename(e.m(".git"), e.m("git-moved")) }},
		{"rename over .git/config", "rename", RuleProtected, ".git/config", func() error { return unix.Rename(e.m("f"), e.m(".git/config")) }},
		{"rename .git/hooks away", "rename", RuleProtected, ".git/hooks", func() error { return unix.Rename(e.m(".git/hooks"), e.m("hooks")) }},

		// The policy file, its lock and its directory.
		{"write the policy file", "open", RulePolicyFile, ".toh/policy.json", func() error { return writeAt(e.m(".toh/policy.json"), unix.O_WRONLY|unix.O_TRUNC, "{}") }},
		{"unlink the policy file", "unlink", RulePolicyFile, ".toh/policy.json", func() error { return unix.Unlink(e.m(".toh/policy.json")) }},
		{"write the lock file", "open", RulePolicyFile, ".toh/policy.json.lock", func() error { return writeAt(e.m(".toh/policy.json.lock"), unix.O_WRONLY, "x") }},
		{"rename the policy directory", "rename", RulePolicyFile, ".toh", func() error { return unix.Rename(e.m(".toh"), e.m("toh2")) }},
		{"rename over the policy file", "rename", RulePolicyFile, ".toh/policy.json", func() error { return unix.Rename(e.m("f"), e.m(".toh/policy.json")) }},

		// Hard links: the other names may be anywhere.
		{"write a multiply-linked file", "open", RuleMultiplyLinked, "ml", func() error { return writeAt(e.m("ml"), unix.O_WRONLY, "X") }},
		{"chmod a multiply-linked file", "chmod", RuleMultiplyLinked, "ml2", func() error { return unix.Chmod(e.m("ml2"), 0o600) }},
		{"write an outside file linked in", "open", RuleMultiplyLinked, "hlout", func() error { return writeAt(e.m("hlout"), unix.O_WRONLY|unix.O_TRUNC, "X") }},
		{"truncate an outside file linked in", "truncate", RuleMultiplyLinked, "hlout", func() error { return unix.Truncate(e.m("hlout"), 0) }},

		{"mknod a device", "mknod", RuleDeviceNode, "d/null", func() error { return unix.Mknod(e.m("d/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) }},
	} {
		err := e.unchanged(c.name, c.run)
		e.expectDenial(c.name, err, c.op, c.rule, c.path)
	}

	// Positive controls on the same mount: the same kinds of mutation land when the
	// real target is inside the root and not guarded.
	for _, c := range []struct {
		name  string
		run   func() error
		check func() error
	}{
		{"create through an absolute link into the root",
			func() error { return writeAt(e.m("inabs/x"), unix.O_CREAT|unix.O_WRONLY, "in") },
			func() error { return want(e.s("d/x"), unix.S_IFREG|0o644, "in") }},
		{"create through a dangling link into the root",
			func() error { return writeAt(e.m("dangle-in"), unix.O_CREAT|unix.O_WRONLY, "made") },
			func() error { return want(e.s("d/made"), unix.S_IFREG|0o644, "made") }},
		{"create through an exposed relative link",
			func() error { return writeAt(e.m("rl/y"), unix.O_CREAT|unix.O_WRONLY, "y") },
			func() error { return want(e.s("d/y"), unix.S_IFREG|0o644, "y") }},
		{"write .git/HEAD",
			func() error { return writeAt(e.m(".git/HEAD"), unix.O_WRONLY|unix.O_TRUNC, "main") },
			func() error { return want(e.s(".git/HEAD"), unix.S_IFREG|0o644, "main") }},
		{"mkdir .git/objects",
			func() error { return unix.Mkdir(e.m(".git/objects"), 0o755) },
			func() error { return want(e.s(".git/objects"), unix.S_IFDIR|0o755, "") }},
		{"unlink a link that leads out",
			func() error { return unix.Unlink(e.m("outcanary")) },
			func() error { return absent(e.s("outcanary")) }},
		{"rename a multiply-linked file",
			func() error { return unix.Rename(e.m("ml2"), e.m("ml3")) },
			func() error { return want(e.s("ml3"), unix.S_IFREG|0o644, "shared") }},
	} {
		out := treeState(t, e.outside)
		if err := c.run(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		} else if err := c.check(); err != nil {
			t.Errorf("%s did not land: %v", c.name, err)
		}
		if d := diff(out, treeState(t, e.outside)); d != "" {
			t.Errorf("%s changed the canaries:\n%s", c.name, d)
		}
	}
	if recs := e.records(); len(recs) != 0 {
		t.Errorf("allowed mutations logged denials: %+v", recs)
	}
}

// TestSymlinkPresentation checks what the mirror shows for each kind of link.
func TestSymlinkPresentation(t *testing.T) {
	e := newFenceEnv(t)
	got := map[string]string{}
	ents, err := os.ReadDir(e.mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		got[en.Name()] = en.Type().String()
	}
	for name, typ := range map[string]string{
		"out": "d---------", "up": "d---------", "inabs": "d---------", // shown as what they lead to
		"outcanary": "----------", "rl": "L---------", // rl stays in the mount
	} {
		if got[name] != typ {
			t.Errorf("readdir: %s is %q, want %q", name, got[name], typ)
		}
		fi, err := os.Lstat(e.m(name))
		if err != nil || fi.Mode().Type().String() != typ {
			t.Errorf("lstat %s: %v, %v; want type %q", name, fi, err, typ)
		}
	}
	for _, name := range []string{"dangle", "dangle-in"} {
		if _, ok := got[name]; ok {
			t.Errorf("readdir shows %s, a link that leads out of the mount to nothing", name)
		}
		if _, err := os.Lstat(e.m(name)); !os.IsNotExist(err) {
			t.Errorf("lstat %s: %v, want ENOENT", name, err)
		}
	}
	if b, err := os.ReadFile(e.m("out/canary")); err != nil || string(b) != "precious" {
		t.Errorf("read through a link that leads out: %q, %v", b, err)
	}
	if l, err := os.Readlink(e.m("rl")); err != nil || l != "d" {
		t.Errorf("readlink rl: %q, %v", l, err)
	}
}

// TestDangerFullAccess: confinement is bypassed, except device nodes.
func TestDangerFullAccess(t *testing.T) {
	e := newEnv(t, policy.DangerFullAccess, "link src/out -> $BASE/outside", "file src/.git/config [core]")
	if err := writeAt(e.m("out/new"), unix.O_CREAT|unix.O_WRONLY, "x"); err != nil {
		t.Errorf("create through a link that leads out: %v", err)
	} else if err := want(e.outside+"/new", unix.S_IFREG|0o644, "x"); err != nil {
		t.Errorf("create through a link that leads out did not land: %v", err)
	}
	if err := writeAt(e.m(".git/config"), unix.O_WRONLY|unix.O_TRUNC, "y"); err != nil {
		t.Errorf("write a protect entry: %v", err)
	}
	err := e.unchanged("mknod char", func() error { return unix.Mknod(e.m("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) })
	e.expectDenial("mknod char", err, "mknod", RuleDeviceNode, "null")
}
