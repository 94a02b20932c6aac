package fusefence

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// baseTree is the SOURCE tree of the per-operation tests, relative to env.base.
var baseTree = []string{
	"file src/f hello",
	"dir src/d",
	"file src/d/g world",
	"dir src/empty",
	"link src/rl -> f",
}

// mutation is one mutating system call through the mount, and the audit record a
// denial of it must leave (op, and the mount-relative path the fence names).
type mutation struct {
	name string
	op   string
	path string
	run  func(e *env) error
	// landed checks the host after the mutation was allowed: the positive control.
	landed func(e *env) error
}

func openClose(path string, flags int) error {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o644)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// everyMutation lists every kind of mutation, on baseTree (with user.pre set on f).
func everyMutation() []mutation {
	ts := []unix.Timespec{{Sec: 1}, {Sec: 2}}
	return []mutation{
		{"create", "create", "new",
			func(e *env) error { return openClose(e.m("new"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY) },
			func(e *env) error { return want(e.s("new"), unix.S_IFREG|0o644, "") }},
		{"create in a subdirectory", "create", "d/new",
			func(e *env) error { return openClose(e.m("d/new"), unix.O_CREAT|unix.O_WRONLY) },
			func(e *env) error { return want(e.s("d/new"), unix.S_IFREG|0o644, "") }},
		{"mkdir", "mkdir", "newdir",
			func(e *env) error { return unix.Mkdir(e.m("newdir"), 0o750) },
			func(e *env) error { return want(e.s("newdir"), unix.S_IFDIR|0o750, "") }},
		{"mknod fifo", "mknod", "fifo",
			func(e *env) error { return unix.Mknod(e.m("fifo"), unix.S_IFIFO|0o640, 0) },
			func(e *env) error { return want(e.s("fifo"), unix.S_IFIFO|0o640, "") }},
		{"mknod socket", "mknod", "sock",
			func(e *env) error { return unix.Mknod(e.m("sock"), unix.S_IFSOCK|0o644, 0) },
			func(e *env) error { return want(e.s("sock"), unix.S_IFSOCK|0o644, "") }},
		{"symlink", "symlink", "sl",
			func(e *env) error { return unix.Symlink("f", e.m("sl")) },
			func(e *env) error { return want(e.s("sl"), unix.S_IFLNK|0o777, "f") }},
		{"link", "link", "f",
			func(e *env) error { return unix.Link(e.m("f"), e.m("hl")) },
			func(e *env) error { return sameFile(e.s("f"), e.s("hl")) }},
		{"unlink", "unlink", "f",
			func(e *env) error { return unix.Unlink(e.m("f")) },
			func(e *env) error { return absent(e.s("f")) }},
		{"unlink symlink", "unlink", "rl",
			func(e *env) error { return unix.Unlink(e.m("rl")) },
			func(e *env) error { return errors.Join(absent(e.s("rl")), want(e.s("f"), unix.S_IFREG|0o644, "hello")) }},
		{"rmdir", "rmdir", "empty",
			func(e *env) error { return unix.Rmdir(e.m("empty")) },
			func(e *env) error { return absent(e.s("empty")) }},
		{"rename", "rename", "f",
			func(e *env) error { return unix.Rename(e.m("f"), e.m("f2")) },
			func(e *env) error { return errors.Join(absent(e.s("f")), want(e.s("f2"), unix.S_IFREG|0o644, "hello")) }},
		{"rename over", "rename", "f",
			func(e *env) error { return unix.Rename(e.m("f"), e.m("d/g")) },
			func(e *env) error {
				return errors.Join(absent(e.s("f")), want(e.s("d/g"), unix.S_IFREG|0o644, "hello"))
			}},
		{"rename noreplace", "rename", "f",
			func(e *env) error {
				return unix.Renameat2(unix.AT_FDCWD, e.m("f"), unix.AT_FDCWD, e.m("f3"), unix.RENAME_NOREPLACE)
			},
			func(e *env) error { return errors.Join(absent(e.s("f")), want(e.s("f3"), unix.S_IFREG|0o644, "hello")) }},
		{"rename exchange", "rename", "f",
			func(e *env) error {
				return unix.Renameat2(unix.AT_FDCWD, e.m("f"), unix.AT_FDCWD, e.m("d/g"), unix.RENAME_EXCHANGE)
			},
			func(e *env) error {
				return errors.Join(want(e.s("f"), unix.S_IFREG|0o644, "world"), want(e.s("d/g"), unix.S_IFREG|0o644, "hello"))
			}},
		{"open O_WRONLY", "open", "f",
			func(e *env) error { return writeAt(e.m("f"), unix.O_WRONLY, "J") },
			func(e *env) error { return want(e.s("f"), unix.S_IFREG|0o644, "Jello") }},
		{"open O_RDWR", "open", "f",
			func(e *env) error { return writeAt(e.m("f"), unix.O_RDWR, "Y") },
			func(e *env) error { return want(e.s("f"), unix.S_IFREG|0o644, "Yello") }},
		{"open O_WRONLY|O_APPEND", "open", "f",
			func(e *env) error { return writeAt(e.m("f"), unix.O_WRONLY|unix.O_APPEND, "!") },
			func(e *env) error { return want(e.s("f"), unix.S_IFREG|0o644, "hello!") }},
		{"open O_RDONLY|O_TRUNC", "open", "f",
			func(e *env) error { return openClose(e.m("f"), unix.O_RDONLY|unix.O_TRUNC) },
			func(e *env) error { return want(e.s("f"), unix.S_IFREG|0o644, "") }},
		{"open O_WRONLY|O_TRUNC through a symlink", "open", "f",
			func(e *env) error { return writeAt(e.m("rl"), unix.O_WRONLY|unix.O_TRUNC, "new") },
			func(e *env) error { return want(e.s("f"), unix.S_IFREG|0o644, "new") }},
		{"open O_CREAT of an existing file", "open", "f",
			func(e *env) error { return openClose(e.m("f"), unix.O_CREAT|unix.O_WRONLY) },
			func(e *env) error { return want(e.s("f"), unix.S_IFREG|0o644, "hello") }},
		{"truncate", "truncate", "f",
			func(e *env) error { return unix.Truncate(e.m("f"), 1) },
			func(e *env) error { return want(e.s("f"), unix.S_IFREG|0o644, "h") }},
		{"chmod", "chmod", "f",
			func(e *env) error { return unix.Chmod(e.m("f"), 0o600) },
			func(e *env) error { return want(e.s("f"), unix.S_IFREG|0o600, "hello") }},
		{"chmod directory", "chmod", "d",
			func(e *env) error { return unix.Chmod(e.m("d"), 0o700) },
			func(e *env) error { return want(e.s("d"), unix.S_IFDIR|0o700, "") }},
		{"chmod root", "chmod", ".",
			func(e *env) error { return unix.Chmod(e.mnt, 0o700) },
			func(e *env) error { return want(e.src, unix.S_IFDIR|0o700, "") }},
		{"chown", "chown", "f",
			func(e *env) error { return unix.Chown(e.m("f"), 1001, 1002) },
			func(e *env) error { return owner(e.s("f"), 1001, 1002) }},
		{"lchown symlink", "chown", "rl",
			func(e *env) error { return unix.Lchown(e.m("rl"), 1001, 1002) },
			func(e *env) error { return errors.Join(owner(e.s("rl"), 1001, 1002), owner(e.s("f"), 0, 0)) }},
		{"utimes", "utimes", "f",
			func(e *env) error { return unix.UtimesNano(e.m("f"), ts) },
			func(e *env) error { return mtime(e.s("f"), 2) }},
		{"utimes now", "utimes", "f",
			func(e *env) error { return unix.UtimesNanoAt(unix.AT_FDCWD, e.m("f"), nil, 0) },
			func(e *env) error { return nil }},
		{"setxattr", "setxattr", "f",
			func(e *env) error { return unix.Setxattr(e.m("f"), "user.new", []byte("1"), 0) },
			func(e *env) error { return xattr(e.s("f"), "user.new", "1") }},
		{"removexattr", "removexattr", "f",
			func(e *env) error { return unix.Removexattr(e.m("f"), "user.pre") },
			func(e *env) error { return noXattr(e.s("f"), "user.pre") }},
	}
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

func sameFile(a, b string) error {
	var sa, sb unix.Stat_t
	if err := errors.Join(unix.Lstat(a, &sa), unix.Lstat(b, &sb)); err != nil {
		return err
	}
	if sa.Ino != sb.Ino || sa.Nlink != 2 {
		return fmt.Errorf("%s and %s: inodes %d, %d (nlink %d), want one inode with 2 links", a, b, sa.Ino, sb.Ino, sa.Nlink)
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

func TestReadOnlyDeniesEveryMutation(t *testing.T) {
	e := newEnv(t, policy.ReadOnly, baseTree...)
	if err := unix.Setxattr(e.s("f"), "user.pre", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	for _, m := range everyMutation() {
		err := e.unchanged(m.name, func() error { return m.run(e) })
		e.expectDenial(m.name, err, m.op, RuleReadOnly, m.path)
	}

	// Device nodes have a rule of their own, in every mode.
	err := e.unchanged("mknod char", func() error { return unix.Mknod(e.m("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) })
	e.expectDenial("mknod char", err, "mknod", RuleDeviceNode, "null")

	// An ioctl outside the allowlist, on a descriptor opened for reading.
	fd, err := unix.Open(e.m("f"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	flags := 0
	err = e.unchanged("ioctl FS_IOC_SETFLAGS", func() error {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.FS_IOC_SETFLAGS, uintptr(unsafe.Pointer(&flags)))
		if errno != 0 {
			return errno
		}
		return nil
	})
	e.expectDenial("ioctl FS_IOC_SETFLAGS", err, "ioctl", RuleIoctl, "f")

	// Positive control: reads pass through, allowlisted ioctls and isatty too.
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

// TestWorkspaceWriteAllowsEveryMutationInsideTheRoot is the positive control of
// every denial test: each mutation, on a fresh mount, lands on the host, logs
// nothing, and leaves the canaries alone.
func TestWorkspaceWriteAllowsEveryMutationInsideTheRoot(t *testing.T) {
	for _, m := range everyMutation() {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, policy.WorkspaceWrite, baseTree...)
			if err := unix.Setxattr(e.s("f"), "user.pre", []byte("x"), 0); err != nil {
				t.Fatal(err)
			}
			out := treeState(t, e.outside)
			if err := m.run(e); err != nil {
				t.Fatalf("%s: %v", m.name, err)
			}
			if err := m.landed(e); err != nil {
				t.Errorf("%s did not land: %v", m.name, err)
			}
			if d := diff(out, treeState(t, e.outside)); d != "" {
				t.Errorf("%s changed the canaries:\n%s", m.name, d)
			}
			if recs := e.records(); len(recs) != 0 {
				t.Errorf("%s logged denials: %+v", m.name, recs)
			}
		})
	}
}
