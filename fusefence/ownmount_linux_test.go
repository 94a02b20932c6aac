package fusefence

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
)

// within runs op with a deadline: a request the daemon sends to its own mount can
// wait forever on a directory lock the kernel holds for the request being served.
// On a timeout the connection is aborted (as root), so the test ends and unmounts.
func (e *env) within(what string, op func() error) error {
	e.t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		e.t.Errorf("%s: no answer in 10 s: the daemon waits on its own mount", what)
		e.abort()
		return <-done
	}
}

// abort aborts the mount's FUSE connection through fusectl, which fails every
// request waiting on it.
func (e *env) abort() {
	var st unix.Stat_t
	if err := unix.Stat(e.base, &st); err != nil || os.Geteuid() != 0 {
		return
	}
	var mst unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, e.mnt, unix.AT_STATX_DONT_SYNC, 0, &mst); err != nil {
		return
	}
	dir := "/sys/fs/fuse/connections"
	if _, err := os.Stat(dir + "/" + fmt.Sprint(mst.Dev_minor)); err != nil {
		_ = unix.Mount("fusectl", dir, "fusectl", 0, "")
	}
	_ = os.WriteFile(fmt.Sprintf("%s/%d/abort", dir, mst.Dev_minor), []byte("1"), 0)
}

// A symlink in SOURCE that leads back into the mount: following it, the daemon would
// look names up in its own file system, from inside a request, and could wait for
// a lock the kernel holds for that request (an open with O_CREAT holds its
// directory). Such links are ELOOP through the mount, and a mutation whose target
// comes to lead there is denied (own-mount); an escaping link elsewhere still shows
// its target.
func TestLinkIntoOwnMount(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "dir src/d/target", "file extra/flip-target old", "file src/d/target/g old")
	links := map[string]string{
		"d/loop":     e.m("d/target/f"), // a file through the mount
		"d/dirloop":  e.m("d"),          // a directory through the mount
		"d/rootlink": e.mnt,             // the mount's root
		"d/chain":    e.s("d/loop"),     // a link to a link into the mount
		"d/out":      e.outside + "/canary",
	}
	for name, target := range links {
		if err := os.Symlink(target, e.s(name)); err != nil {
			t.Fatal(err)
		}
	}
	// First, with nothing cached: the create holds d's lock in the mount while the
	// daemon answers its LOOKUP of "loop", and following the link needs d again.
	err := e.within("create through d/loop", func() error { return os.WriteFile(e.m("d/loop"), []byte("x"), 0o644) })
	if !errors.Is(err, unix.ELOOP) {
		t.Errorf("create through d/loop: %v, want ELOOP", err)
	}
	err = e.within("mkdir beneath d/dirloop", func() error { return os.Mkdir(e.m("d/dirloop/new"), 0o755) })
	if !errors.Is(err, unix.ELOOP) {
		t.Errorf("mkdir beneath d/dirloop: %v, want ELOOP", err)
	}
	for _, name := range []string{"d/loop", "d/dirloop", "d/rootlink", "d/chain"} {
		err := e.within("stat "+name, func() error { _, err := os.Stat(e.m(name)); return err })
		if !errors.Is(err, unix.ELOOP) {
			t.Errorf("stat %s: %v, want ELOOP", name, err)
		}
	}
	if _, err := os.Lstat(e.s("d/target/f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("d/target/f exists on the host (%v): a write went through", err)
	}
	// The control: an escaping link elsewhere shows what it leads to.
	if b, err := os.ReadFile(e.m("d/out")); err != nil || string(b) != "precious" {
		t.Errorf("read d/out: %q, %v; want the canary's content", b, err)
	}

	// A link the mirror already shows as its target, turned to lead into the mount:
	// the write's target is resolved again, and refused without a lookup inside.
	flip := e.s("d/flip")
	if err := os.Symlink(e.extra+"/flip-target", flip); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(e.m("d/flip"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("open d/flip while it leads to another writable root: %v", err)
	}
	f.Close()
	if err := os.Remove(flip); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.m("d/target/g"), flip); err != nil {
		t.Fatal(err)
	}
	e.records()
	err = e.within("write through the turned d/flip", func() error {
		f, err := os.OpenFile(e.m("d/flip"), os.O_WRONLY|os.O_TRUNC, 0)
		if err == nil {
			f.Close()
		}
		return err
	})
	switch {
	case errors.Is(err, unix.EACCES):
		recs := e.records()
		if len(recs) != 1 || recs[0].Rule != RuleOwnMount || recs[0].Op != "open" || recs[0].Path != "d/flip" || recs[0].HostPath != flip {
			t.Errorf("write through the turned d/flip: records %+v, want one own-mount denial", recs)
		}
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOENT):
		// The kernel looked the name up again (its entry had expired): refused there.
	default:
		t.Errorf("write through the turned d/flip: %v, want EACCES (own-mount) or ELOOP", err)
	}
	if b, _ := os.ReadFile(e.s("d/target/g")); string(b) != "old" {
		t.Errorf("d/target/g is %q on the host: a write went through", b)
	}
	if b, _ := os.ReadFile(e.extra + "/flip-target"); string(b) != "old" {
		t.Errorf("flip-target is %q: the write went to the old target", b)
	}

	// A link the mirror shows as a directory, turned to lead through the mount to
	// itself: a create beneath it holds that very directory while the daemon looks
	// the new name up, through the link.
	esc := e.s("esc")
	if err := os.Symlink(e.outside, esc); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(e.m("esc")); err != nil || !fi.IsDir() {
		t.Fatalf("esc, leading to a directory outside: %v, %v; want a directory", fi, err)
	}
	if err := os.Remove(esc); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.m("esc"), esc); err != nil {
		t.Fatal(err)
	}
	err = e.within("create beneath the turned esc", func() error { return os.WriteFile(e.m("esc/new"), []byte("x"), 0o644) })
	if err == nil {
		t.Errorf("create beneath the turned esc succeeded")
	}
	if _, err := os.Lstat(e.outside + "/new"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("outside/new exists (%v): a write went through", err)
	}

	// Reads through links turned the same way, on nodes the kernel already has: the
	// daemon's open of the host path would open its own node, whose open follows
	// the link again, a blocked thread per round.
	rd, rdir := e.s("rd"), e.s("rdir")
	if err := os.Symlink(e.outside+"/canary", rd); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.outside, rdir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(e.m("rd")); err != nil {
		t.Fatalf("read rd while it leads outside: %v", err)
	}
	if _, err := os.ReadDir(e.m("rdir")); err != nil {
		t.Fatalf("list rdir while it leads outside: %v", err)
	}
	for _, l := range []struct{ host, mnt string }{{rd, e.m("rd")}, {rdir, e.m("rdir")}} {
		if err := os.Remove(l.host); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l.mnt, l.host); err != nil {
			t.Fatal(err)
		}
	}
	threads := func() int { ents, _ := os.ReadDir("/proc/self/task"); return len(ents) }
	before := threads()
	err = e.within("read the turned rd", func() error { _, err := os.ReadFile(e.m("rd")); return err })
	if err == nil {
		t.Errorf("read the turned rd: no error")
	}
	// The kernel may list rdir from its cache of the listing; what matters is
	// that the daemon does not follow the link into itself.
	_ = e.within("list the turned rdir", func() error { _, err := os.ReadDir(e.m("rdir")); return err })
	for _, op := range []struct {
		what string
		f    func() error
	}{
		{"statfs rd", func() error { var st unix.Statfs_t; return unix.Statfs(e.m("rd"), &st) }},
		{"getxattr rd", func() error { _, err := unix.Getxattr(e.m("rd"), "user.x", make([]byte, 64)); return err }},
		{"listxattr rd", func() error { _, err := unix.Listxattr(e.m("rd"), make([]byte, 64)); return err }},
	} {
		_ = e.within(op.what, op.f)
	}
	if after := threads(); after > before+50 {
		t.Errorf("the reads through turned links took the process from %d to %d threads: the daemon followed them into itself", before, after)
	}
}

// A mountpoint inside SOURCE, SOURCE inside the mountpoint, and a policy file or
// audit log inside the mountpoint would all make the daemon a client of itself.
func TestMountRefusesItself(t *testing.T) {
	base := auditDir(t)
	for _, d := range []string{"src/inner", "mnt/src", "mnt/cfg", "cfg", "plain"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writePolicy := func(p string) *policy.Watcher {
		t.Helper()
		if err := policy.Update(p, func(f *policy.File) error {
			f.Mode, f.WorkspaceRoot = policy.ReadOnly, base+"/src"
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		w, err := policy.NewWatcher(p, policy.Request{Cwd: base}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	good := writePolicy(base + "/cfg/policy.json")
	inMount := writePolicy(base + "/mnt/cfg/policy.json")
	audit, err := OpenAudit(base + "/mnt/cfg/audit.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Close()
	for _, tc := range []struct {
		name       string
		cfg        Config
		wantInText string
	}{
		{"mountpoint inside source", Config{Source: base + "/src", Mountpoint: base + "/src/inner", Policy: good}, "inside source"},
		{"source inside mountpoint", Config{Source: base + "/mnt/src", Mountpoint: base + "/mnt", Policy: good}, "inside mountpoint"},
		{"policy inside mountpoint", Config{Source: base + "/src", Mountpoint: base + "/mnt", Policy: inMount}, "policy file"},
		{"audit inside mountpoint", Config{Source: base + "/src", Mountpoint: base + "/mnt", Policy: good, Audit: audit}, "audit log"},
	} {
		m, err := Mount(tc.cfg)
		if err == nil {
			m.Unmount()
			t.Errorf("%s: mounted", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.wantInText) {
			t.Errorf("%s: %v, want a message naming %q", tc.name, err, tc.wantInText)
		}
	}
}

// The policy's own paths spelled through the mount: a workspace root and a writable
// root named by their place in the mount (what a harness that sends its agent to the
// mount would write), and a git directory that SOURCE's .git leads to through the
// mount. The policy is resolved inside requests, and resolving those spellings by
// looking names up in the mount could wait forever on a lock the kernel holds for
// the request; they mean the SOURCE directories the mount shows (canon.Mirror).
func TestPolicyPathsThroughOwnMount(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "dir src/d", "dir src/realgit/hooks", "dir src/realgit/objects", "dir src/realgit/refs",
		"file src/realgit/HEAD ref: refs/heads/main", "file src/realgit/description old")
	if err := os.Symlink(e.m("realgit"), e.s(".git")); err != nil {
		t.Fatal(err)
	}
	// The reload happens in the first mutation below, inside its request.
	if err := policy.Update(e.policy, func(f *policy.File) error {
		f.WorkspaceRoot = e.mnt
		f.WritableRoots = []string{e.m("d")}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	err := e.within("create in the root", func() error { return os.WriteFile(e.m("new"), []byte("x"), 0o644) })
	if err != nil {
		t.Errorf("create in the workspace root spelled through the mount: %v", err)
	}
	if err := e.within("mkdir in d", func() error { return os.Mkdir(e.m("d/x"), 0o755) }); err != nil {
		t.Errorf("mkdir in the writable root spelled through the mount: %v", err)
	}
	if _, err := os.Stat(e.s("d/x")); err != nil {
		t.Errorf("mkdir did not land in SOURCE: %v", err)
	}
	// .git leads through the mount to realgit, which is SOURCE's realgit: its hooks
	// are protected, the rest of it is writable like the workspace.
	err = e.within("write a hook", func() error { return os.WriteFile(e.m("realgit/hooks/pre-commit"), []byte("evil"), 0o755) })
	e.expectDenial("write a hook", err, "create", RuleProtected, "realgit/hooks/pre-commit")
	if _, err := os.Lstat(e.s("realgit/hooks/pre-commit")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("denied hook exists in SOURCE: %v", err)
	}
	if err := e.within("write description", func() error { return os.WriteFile(e.m("realgit/description"), []byte("new"), 0o644) }); err != nil {
		t.Errorf("write beside the hooks: %v", err)
	}
	// A link out of SOURCE still leads outside every root.
	if err := os.Symlink(e.outside, e.s("out")); err != nil {
		t.Fatal(err)
	}
	err = e.within("write through out", func() error { return os.WriteFile(e.m("out/canary"), []byte("x"), 0o644) })
	e.expectDenial("write through out", err, "open", RuleOutside, "out/canary")
	if b, _ := os.ReadFile(e.outside + "/canary"); string(b) != "precious" {
		t.Errorf("canary changed: %q", b)
	}
}

// TestIdentifyProvesTheMount: the daemon takes a mount for its own only when a
// lookup through it reached its own root (identify, openOwnRoot), never because a
// path stat showed some FUSE device there: a user who swapped a symlink into the
// mountpoint's path made a root daemon take another mount's device, and abort that
// connection on stop (found by review). Negative: another fence's mount at the
// path is refused, by the probe and by mount ID. Positive: its own is accepted,
// with the mount ID and device statx gives.
func TestIdentifyProvesTheMount(t *testing.T) {
	a := newEnv(t, policy.ReadOnly, "file src/f a")
	b := newEnv(t, policy.ReadOnly, "file src/f b")
	fa := a.fence.f
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, a.mnt, 0, unix.STATX_MNT_ID, &stx); err != nil {
		t.Fatal(err)
	}
	if fa.ownMnt.Load() != stx.Mnt_id || fa.ownDev.Load() != unix.Mkdev(stx.Dev_major, stx.Dev_minor) {
		t.Fatalf("identify recorded mount %d device %d; statx of %s says %d, %d", fa.ownMnt.Load(), fa.ownDev.Load(), a.mnt, stx.Mnt_id, unix.Mkdev(stx.Dev_major, stx.Dev_minor))
	}
	// By mount ID, as every later check goes.
	if fd, err := fa.openRootAt(b.mnt); err == nil {
		unix.Close(fd)
		t.Error("another fence's mount was taken for this one's by mount ID")
	}
	// By the probe, as identify goes before the ID is known.
	id := fa.ownMnt.Swap(0)
	defer fa.ownMnt.Store(id)
	if fd, err := fa.openRootAt(b.mnt); err == nil {
		unix.Close(fd)
		t.Error("another fence's mount passed this one's probe")
	} else if !strings.Contains(err.Error(), "not this daemon's mount") {
		t.Errorf("probe of another mount: %v", err)
	}
	fd, err := fa.openRootAt(a.mnt)
	if err != nil {
		t.Fatalf("its own mount failed the probe: %v", err)
	}
	unix.Close(fd)
}

// TestTrustedPath: as root the mountpoint's symlinks are followed only where no
// other user can change them (trustedPath). Refused: a link in another user's
// directory, and another user's link in a sticky one. Followed, to the same place
// canon.Canonical finds: links in the caller's own directories and the caller's
// link in a sticky one.
func TestTrustedPath(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root: chown to another user")
	}
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "real", "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"mine", "theirs", "sticky"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chown(filepath.Join(base, "theirs"), 65534, 65534)
	unix.Chmod(filepath.Join(base, "sticky"), 0o1777)
	for _, l := range []string{"mine/l", "theirs/l", "sticky/root", "sticky/nobody"} {
		if err := os.Symlink("../real", filepath.Join(base, l)); err != nil {
			t.Fatal(err)
		}
	}
	os.Lchown(filepath.Join(base, "sticky", "nobody"), 65534, 65534)
	want := filepath.Join(canon.Canonical(base), "real", "mnt")
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"mine/l/mnt", true}, {"sticky/root/mnt", true}, {"real/mnt", true}, {"mine/../real/mnt", true},
		// ".." after a link is the parent of its target, as mount(2) would walk it.
		{"mine/l/../real/mnt", true},
		{"theirs/l/mnt", false}, {"sticky/nobody/mnt", false}, {"theirs/l/../real/mnt", false},
		{"mine/missing", false},
	} {
		got, err := trustedPath(base + "/" + c.path) // not filepath.Join: it would clean ".." lexically
		switch {
		case c.ok && (err != nil || got != want):
			t.Errorf("trustedPath(%s) = %q, %v; want %q", c.path, got, err, want)
		case !c.ok && err == nil:
			t.Errorf("trustedPath(%s) = %q; want it refused", c.path, got)
		}
	}
}
