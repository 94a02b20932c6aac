package fusefence

import (
	"os"
	"testing"

	"github.com/toh-sandbox/toh/policy"
)

// fenceTree is SOURCE with symlinks that lead out, in and nowhere, protected paths
// and multiply-linked files, for checking what the mirror shows. What the fence
// allows and denies is the business of the fence cases (cases_linux_test.go).
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
	// Hard links made on the host: one inside the root, one to the canary outside.
	return newEnv(t, policy.WorkspaceWrite, append(append([]string{}, fenceTree...), "hardlink src/ml2 -> src/ml", "hardlink src/hlout -> outside/canary")...)
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
