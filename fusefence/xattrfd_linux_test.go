package fusefence

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/policy"
	"golang.org/x/sys/unix"
)

// namesOf lists the xattr names of what the descriptor fd holds.
func namesOf(fd int) ([]string, error) {
	buf := make([]byte, 256)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00"), nil
}

// xattrOf reads the xattr name through the descriptor fd.
func xattrOf(fd int, name string) (string, error) {
	buf := make([]byte, 64)
	n, err := unix.Fgetxattr(fd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// TestXattrOfAnOpenFile: while a file of the mount is open, its xattrs and their
// names are read from the open file, so they are the inode's own even after the
// host renamed the file, put another in its place, or removed it (as fgetxattr(2)
// and flistxattr(2) on a host file answer). Before, each read looked the name up
// again, and an open file whose name had moved answered ESTALE. Where it lies is
// not checked for a caller with the daemon's rights, who may reach anything; see
// TestXattrOfAnOpenFileNotForADeputy.
func TestXattrOfAnOpenFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("user xattrs of the test's files are set by their owner; the mount is root's here")
	}
	e := newEnv(t, policy.WorkspaceWrite, "file src/f one", "file src/other two")
	if err := unix.Setxattr(e.s("f"), "user.k", []byte("v1"), 0); err != nil {
		t.Skipf("no user xattrs on %s: %v", e.src, err)
	}
	for _, flags := range []int{os.O_RDONLY, os.O_WRONLY, os.O_RDWR} {
		fd, err := unix.Open(e.m("f"), flags|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := xattrOf(fd, "user.k"); err != nil || v != "v1" {
			t.Errorf("flags %#x: xattr of the open file %q, %v; want v1", flags, v, err)
		}
		if names, err := namesOf(fd); err != nil || !slices.Contains(names, "user.k") {
			t.Errorf("flags %#x: xattr names of the open file %q, %v; want user.k among them", flags, names, err)
		}
		if _, err := xattrOf(fd, "user.none"); err != unix.ENODATA {
			t.Errorf("flags %#x: an xattr the file lacks: %v, want ENODATA", flags, err)
		}
		// The host moves the file away and puts another, with another value, in
		// its place.
		if err := os.Rename(e.s("f"), e.s("moved")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(e.s("other"), e.s("f")); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(e.s("f"), "user.k", []byte("v2"), 0); err != nil {
			t.Fatal(err)
		}
		if v, err := xattrOf(fd, "user.k"); err != nil || v != "v1" {
			t.Errorf("flags %#x: xattr of the open file after the host replaced its name: %q, %v; want v1", flags, v, err)
		}
		if names, err := namesOf(fd); err != nil || !slices.Contains(names, "user.k") {
			t.Errorf("flags %#x: xattr names of the open file after the host replaced its name: %q, %v; want user.k among them", flags, names, err)
		}
		if err := os.Remove(e.s("moved")); err != nil {
			t.Fatal(err)
		}
		if v, err := xattrOf(fd, "user.k"); err != nil || v != "v1" {
			t.Errorf("flags %#x: xattr of the open file after the host removed it: %q, %v; want v1", flags, v, err)
		}
		unix.Close(fd)
		// Control: by name, the file now at f, once the kernel looks the name up
		// again. Until then (the cache timeout, a second) the name may still lead
		// to the old node, whose open file answers until its RELEASE arrives,
		// which close(2) does not wait for.
		buf := make([]byte, 64)
		var v string
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			n, err := unix.Getxattr(e.m("f"), "user.k", buf)
			if v = string(buf[:max(n, 0)]); err == nil && v == "v2" || time.Now().After(deadline) {
				break
			}
		}
		if v != "v2" {
			t.Errorf("flags %#x: control: xattr of f by name %q after the cache timeout; want v2", flags, v)
		}
		// Back to the start for the next round: f with v1, other beside it.
		if err := os.Rename(e.s("f"), e.s("other")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(e.s("f"), []byte("one"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(e.s("f"), "user.k", []byte("v1"), 0); err != nil {
			t.Fatal(err)
		}
	}
	e.noRecords("reading xattrs")
}

// TestXattrOfAnOpenFileNotForADeputy: the open file answers only callers with the
// daemon's rights. A file root holds open through the mount, moved on the host into
// root's private directory, must not give nobody its xattrs through the name the
// kernel still caches: for nobody, where the file lies now is checked as for any
// read (reachable), and its old name finds nothing. With the open file answering
// everyone, nobody read the xattr (checked when this test was written).
func TestXattrOfAnOpenFileNotForADeputy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the daemon is a deputy only as root (allow_other, default_permissions)")
	}
	e := newEnv(t, policy.WorkspaceWrite, "file src/pub/f public", "dir src/priv")
	for p, mode := range map[string]os.FileMode{e.base: 0o755, e.src: 0o755, e.s("pub"): 0o755, e.s("pub/f"): 0o644, e.s("priv"): 0o700} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Setxattr(e.s("pub/f"), "user.k", []byte("value"), 0); err != nil {
		t.Skipf("no user xattrs on %s: %v", e.src, err)
	}
	fd, err := unix.Open(e.m("pub/f"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	getfattr := func() (string, error) {
		return asNobody("getfattr", "--absolute-names", "--only-values", "-n", "user.k", e.m("pub/f"))
	}
	if out, err := getfattr(); err != nil || out != "value" {
		t.Fatalf("control: nobody reads the xattr of pub/f, which root holds open: %q, %v", out, err)
	}
	if err := os.Rename(e.s("pub/f"), e.s("priv/f")); err != nil {
		t.Fatal(err)
	}
	// Within the kernel's cache timeout (a second), pub/f still leads to the node.
	if out, err := getfattr(); err == nil || strings.Contains(out, "value") {
		t.Errorf("nobody read the xattr of a file moved into root's private directory, which root holds open: %q, %v", out, err)
	}
	if v, err := xattrOf(fd, "user.k"); err != nil || v != "value" {
		t.Errorf("control: root reads the xattr of its open file: %q, %v", v, err)
	}
	e.noRecords("reads of a name that finds nothing")
}
