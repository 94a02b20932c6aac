package fusefence

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// TestConfusedDeputy: as root the daemon opens and changes files for callers the
// kernel checked against the node's cached attributes (default_permissions). A
// name whose host object changed within the cache timeout, here a symlink retargeted
// on the host from a file the caller may use to one it may not, must not be read,
// written, chmodded, hard-linked or have its xattrs read in the caller's name: the daemon answers ESTALE, the kernel
// looks the name up again and denies. Each step has its positive control (the same
// call before the retarget succeeds) and its negative one (the root-only file is
// unchanged and unread).
func TestConfusedDeputy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the daemon is a deputy only as root (allow_other, default_permissions)")
	}
	const nobody = 65534
	e := newEnv(t, policy.WorkspaceWrite,
		"file outside/public public", "file outside/secret secret",
		"file extra/open open", "file extra/rootfile rootfile", "file extra/mine mine", "file extra/mine2 mine2", "dir src/nb",
		"file outside/xpub xpub", "file outside/xsec xsec")
	for path, mode := range map[string]os.FileMode{
		e.base: 0o755, e.outside + "/public": 0o644, e.outside + "/secret": 0o600,
		e.extra + "/open": 0o666, e.extra + "/rootfile": 0o644,
		e.outside + "/xpub": 0o644, e.outside + "/xsec": 0o600,
	} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{e.extra + "/mine", e.extra + "/mine2", e.s("nb")} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	as := func(args ...string) (string, error) {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	retarget := func(name, to string) {
		t.Helper()
		tmp := e.s(name + ".new")
		if err := os.Symlink(to, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, e.s(name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, to := range map[string]string{"r": e.outside + "/public", "w": e.extra + "/open", "c": e.extra + "/mine", "l0": e.extra + "/mine2", "l": e.extra + "/mine2", "x": e.outside + "/xpub"} {
		if err := os.Symlink(to, e.s(name)); err != nil {
			t.Fatal(err)
		}
	}

	// Read.
	if out, err := as("cat", e.m("r")); err != nil || out != "public" {
		t.Fatalf("control: nobody reads r -> public: %q, %v", out, err)
	}
	retarget("r", e.outside+"/secret")
	if out, err := as("cat", e.m("r")); err == nil || strings.Contains(out, "secret") {
		t.Errorf("nobody read r after it was retargeted to a root-only file: %q, %v", out, err)
	}
	if b, err := os.ReadFile(e.m("r")); err != nil || string(b) != "secret" {
		t.Errorf("control: root reads r -> secret: %q, %v", b, err)
	}

	// Write.
	if out, err := as("sh", "-c", "printf x >> "+e.m("w")); err != nil {
		t.Fatalf("control: nobody appends to w -> open: %q, %v", out, err)
	}
	retarget("w", e.extra+"/rootfile")
	if out, err := as("sh", "-c", "printf x >> "+e.m("w")); err == nil {
		t.Errorf("nobody appended to w after it was retargeted to root's file: %q", out)
	}
	if b, _ := os.ReadFile(e.extra + "/rootfile"); string(b) != "rootfile" {
		t.Errorf("root's file changed: %q", b)
	}

	// Chmod.
	if out, err := as("chmod", "600", e.m("c")); err != nil {
		t.Fatalf("control: nobody chmods c -> its own file: %q, %v", out, err)
	}
	retarget("c", e.extra+"/rootfile")
	if out, err := as("chmod", "666", e.m("c")); err == nil {
		t.Errorf("nobody chmodded c after it was retargeted to root's file: %q", out)
	}
	if fi, _ := os.Stat(e.extra + "/rootfile"); fi.Mode().Perm() != 0o644 {
		t.Errorf("root's file's mode changed: %v", fi.Mode())
	}

	// Hard link (protected_hardlinks: nobody may link only what it owns, or may
	// read and write). l0 and l lead to the same file, so they are one node; the
	// control links through l0, and the node's name stays l for the attempt.
	if out, err := as("ln", e.m("l0"), e.m("nb/hard1")); err != nil {
		t.Fatalf("control: nobody links l0 -> its own file: %q, %v", out, err)
	}
	if os.Remove(e.s("nb/hard1")) != nil || os.Remove(e.s("l0")) != nil {
		t.Fatal("removing the control's names")
	}
	if out, err := as("stat", e.m("l")); err != nil {
		t.Fatalf("stat l: %q, %v", out, err)
	}
	retarget("l", e.extra+"/rootfile")
	if out, err := as("ln", e.m("l"), e.m("nb/hard2")); err == nil {
		t.Errorf("nobody hard-linked l after it was retargeted to root's file: %q", out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(e.extra+"/rootfile", &st); err != nil || st.Nlink != 1 {
		t.Errorf("root's file has %d links (%v), want 1", st.Nlink, err)
	}

	// Xattr read (user.* needs read permission on the file).
	for name, v := range map[string]string{"xpub": "pub-value", "xsec": "sec-value"} {
		if err := unix.Setxattr(e.outside+"/"+name, "user.k", []byte(v), 0); err != nil {
			t.Skipf("no user xattrs on %s: %v", e.outside, err)
		}
	}
	if out, err := as("getfattr", "--absolute-names", "--only-values", "-n", "user.k", e.m("x")); err != nil || out != "pub-value" {
		t.Fatalf("control: nobody reads user.k of x -> xpub: %q, %v", out, err)
	}
	retarget("x", e.outside+"/xsec")
	if out, err := as("getfattr", "--absolute-names", "--only-values", "-n", "user.k", e.m("x")); err == nil || strings.Contains(out, "sec-value") {
		t.Errorf("nobody read user.k of x after it was retargeted to a root-only file: %q, %v", out, err)
	}
}
