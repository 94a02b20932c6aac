package fusefence

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// baseTree is a small SOURCE tree, relative to env.base.
var baseTree = []string{
	"file src/f hello",
	"dir src/d",
	"file src/d/g world",
	"dir src/empty",
	"link src/rl -> f",
}

func openClose(path string, flags int) error {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o644)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

func writeAt(path string, flags int, data string) error {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte(data))
	return err
}

func want(path string, mode uint32, content string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	if st.Mode != mode {
		return fmt.Errorf("%s: mode %o, want %o", path, st.Mode, mode)
	}
	var got string
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		got = string(b)
	case unix.S_IFLNK:
		got, _ = os.Readlink(path)
	}
	if got != content {
		return fmt.Errorf("%s: content %q, want %q", path, got, content)
	}
	return nil
}

func absent(path string) error {
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %v, want it absent", path, err)
	}
	return nil
}

func owner(path string, uid, gid uint32) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	if st.Uid != uid || st.Gid != gid {
		return fmt.Errorf("%s: owner %d:%d, want %d:%d", path, st.Uid, st.Gid, uid, gid)
	}
	return nil
}

func mtime(path string, sec int64) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	if st.Mtim.Sec != sec {
		return fmt.Errorf("%s: mtime %d, want %d", path, st.Mtim.Sec, sec)
	}
	return nil
}

func xattr(path, name, value string) error {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(path, name, buf)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", path, name, err)
	}
	if string(buf[:n]) != value {
		return fmt.Errorf("%s: %s = %q, want %q", path, name, buf[:n], value)
	}
	return nil
}

func noXattr(path, name string) error {
	if _, err := unix.Lgetxattr(path, name, nil); !errors.Is(err, unix.ENODATA) {
		return fmt.Errorf("%s: %s: %v, want ENODATA", path, name, err)
	}
	return nil
}

// TestReadsPassThroughReadOnly: in read-only mode (which denies every mutation, see
// the fence cases) reads, readlink, readdir, getxattr, the allowlisted ioctls and
// isatty still work, and log nothing.
func TestReadsPassThroughReadOnly(t *testing.T) {
	e := newEnv(t, policy.ReadOnly, baseTree...)
	if err := unix.Setxattr(e.s("f"), "user.pre", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(e.m("f"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	// Reads pass through, allowlisted ioctls and isatty too.
	if b, err := os.ReadFile(e.m("f")); err != nil || string(b) != "hello" {
		t.Errorf("read: %q, %v", b, err)
	}
	if l, err := os.Readlink(e.m("rl")); err != nil || l != "f" {
		t.Errorf("readlink: %q, %v", l, err)
	}
	if ents, err := os.ReadDir(e.m("d")); err != nil || len(ents) != 1 || ents[0].Name() != "g" {
		t.Errorf("readdir: %v, %v", ents, err)
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(e.m("f"), "user.pre", buf); err != nil || string(buf[:n]) != "x" {
		t.Errorf("getxattr: %q, %v", buf[:n], err)
	}
	var got uint32
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.FS_IOC_GETFLAGS, uintptr(unsafe.Pointer(&got))); errno != 0 {
		t.Errorf("FS_IOC_GETFLAGS: %v", errno)
	}
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); !errors.Is(err, unix.ENOTTY) {
		t.Errorf("TCGETS: %v, want ENOTTY", err)
	}
	if recs := e.records(); len(recs) != 0 {
		t.Errorf("reads logged denials: %+v", recs)
	}
}

// TestSetattrWithoutEmptyPath: chmod and utimes land on the file the name leads to
// both with AT_EMPTY_PATH on its O_PATH descriptor and through /proc/self/fd, the
// fallback for a kernel without the former.
func TestSetattrWithoutEmptyPath(t *testing.T) {
	defer func(c, u bool) { emptyPathChmod.Store(c); emptyPathUtimes.Store(u) }(emptyPathChmod.Load(), emptyPathUtimes.Load())
	e := newEnv(t, policy.WorkspaceWrite, "file src/fast x", "file src/proc x")
	for i, name := range []string{"fast", "proc"} {
		fast := name == "fast"
		emptyPathChmod.Store(fast)
		emptyPathUtimes.Store(fast)
		if err := unix.Chmod(e.m(name), 0o640); err != nil {
			t.Fatalf("chmod %s: %v", name, err)
		}
		mtime := int64(1000 + i)
		if err := unix.UtimesNano(e.m(name), []unix.Timespec{{Sec: 7}, {Sec: mtime}}); err != nil {
			t.Fatalf("utimes %s: %v", name, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(e.s(name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mtim.Sec != mtime || st.Atim.Sec != 7 {
			t.Errorf("%s: atime %d mtime %d, want 7 and %d", name, st.Atim.Sec, st.Mtim.Sec, mtime)
		}
		if err := want(e.s(name), unix.S_IFREG|0o640, "x"); err != nil { // reads: after the times
			t.Error(err)
		}
		if got := emptyPathChmod.Load() && emptyPathUtimes.Load(); got != fast {
			t.Errorf("%s: AT_EMPTY_PATH in use %v after the calls, want %v", name, got, fast)
		}
	}
}

// RENAME_WHITEOUT leaves a character device (0:0) where the source was: it is
// denied like mknod of a device, in every mode, with its record; the source stays.
// Control: the same rename without the flag is allowed and recorded nowhere.
func TestRenameWhiteoutDenied(t *testing.T) {
	testutil.RequireRoot(t) // a whiteout needs CAP_MKNOD; for others the kernel refuses first
	for _, mode := range []policy.Mode{policy.WorkspaceWrite, policy.DangerFullAccess} {
		e := newEnv(t, mode, "file src/a x")
		e.records()
		err := unix.Renameat2(unix.AT_FDCWD, e.m("a"), unix.AT_FDCWD, e.m("b"), unix.RENAME_WHITEOUT)
		e.expectDenial(string(mode)+": rename whiteout", err, "rename", RuleDeviceNode, "a")
		if err := want(e.s("a"), unix.S_IFREG|0o644, "x"); err != nil {
			t.Errorf("%s: %v", mode, err)
		}
		if _, err := os.Lstat(e.s("b")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: b exists after a denied rename: %v", mode, err)
		}
		if err := unix.Renameat2(unix.AT_FDCWD, e.m("a"), unix.AT_FDCWD, e.m("b"), 0); err != nil {
			t.Fatalf("%s: control rename: %v", mode, err)
		}
		e.noRecords(string(mode) + ": control rename")
	}
}

// TestAccessWideningAboveGuardedPathsDenied: a chmod that gives the group or others
// write, or a chown, of a directory above a protected path is denied: it would let
// another local user replace .git/hooks later, on the host, outside every fence.
// Controls: a narrowing chmod there lands, and so does a widening one elsewhere.
func TestAccessWideningAboveGuardedPathsDenied(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "file src/.git/config [core]", "file src/.git/hooks/pre-commit x", "dir src/other")
	e.records()
	mode := func(p string) uint32 {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Mode & 0o7777
	}
	before := mode(e.s(".git"))
	err := unix.Chmod(e.m(".git"), 0o777)
	e.expectDenial("chmod 0777 .git", err, "chmod", RuleProtected, ".git")
	err = unix.Chmod(e.m("."), 0o777)
	e.expectDenial("chmod 0777 of the root", err, "chmod", RuleProtected, ".")
	err = unix.Chown(e.m(".git"), 4242, 4242)
	e.expectDenial("chown .git", err, "chown", RuleProtected, ".git")
	if got := mode(e.s(".git")); got != before {
		t.Errorf(".git's mode changed: %o -> %o", before, got)
	}
	if err := unix.Chmod(e.m(".git"), 0o700); err != nil {
		t.Fatalf("control: chmod 0700 .git: %v", err)
	}
	if err := unix.Chmod(e.m("other"), 0o777); err != nil {
		t.Fatalf("control: chmod 0777 other: %v", err)
	}
	e.noRecords("controls")
	if got := mode(e.s(".git")); got != 0o700 {
		t.Errorf("control: .git's mode %o, want 700", got)
	}
}
