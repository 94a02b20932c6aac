package fusefence

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/posixacl"
)

// aclBytes encodes entries {tag, perm, id} as the system.posix_acl_access xattr.
func aclBytes(ents ...[3]uint32) []byte {
	var acl []posixacl.Entry
	for _, e := range ents {
		acl = append(acl, posixacl.Entry{Tag: uint16(e[0]), Perm: uint16(e[1]), ID: e[2]})
	}
	return posixacl.Encode(acl...)
}

// setACL sets the access ACL b (see aclBytes) on path; the test skips where the
// file system has no POSIX ACLs.
func setACL(t *testing.T, path string, b []byte) {
	t.Helper()
	err := unix.Setxattr(path, "system.posix_acl_access", b, 0)
	if errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("no POSIX ACLs on %s", path)
	}
	if err != nil {
		t.Fatalf("setting the ACL of %s: %v", path, err)
	}
}

// TestCanSearchGroupsUnknown: a caller whose supplementary groups cannot be read
// (PID 0: a PID namespace the daemon does not see) may search a directory only
// where every group it might be in would let it, and the others' bits would too.
// TestLinkOutGroupsAndACLs covers callers whose groups are known, through the
// mount.
func TestCanSearchGroupsUnknown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs to give directories to another owner and group")
	}
	const group, none = 4242, ^uint32(0)
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} { // t.TempDir's two levels, for the host's own check as nobody
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		mode os.FileMode
		acl  []byte
		want bool
	}{
		{"open", 0o755, nil, true},
		{"both", 0o711, nil, true},
		{"groupOnly", 0o750, nil, false},   // might be in the group: allowed; might not: denied
		{"groupDenies", 0o705, nil, false}, // might be in the group: denied
		{"named", 0o700, aclBytes([3]uint32{posixacl.UserObj, 7, none}, [3]uint32{posixacl.User, 5, nobody}, [3]uint32{posixacl.GroupObj, 0, none}, [3]uint32{posixacl.Mask, 5, none}, [3]uint32{posixacl.Other, 0, none}), true},
		{"namedMasked", 0o700, aclBytes([3]uint32{posixacl.UserObj, 7, none}, [3]uint32{posixacl.User, 7, nobody}, [3]uint32{posixacl.GroupObj, 0, none}, [3]uint32{posixacl.Mask, 4, none}, [3]uint32{posixacl.Other, 0, none}), false},
		{"namedDenied", 0o755, aclBytes([3]uint32{posixacl.UserObj, 7, none}, [3]uint32{posixacl.User, 0, nobody}, [3]uint32{posixacl.GroupObj, 5, none}, [3]uint32{posixacl.Mask, 5, none}, [3]uint32{posixacl.Other, 5, none}), false},
		{"namedGroup", 0o700, aclBytes([3]uint32{posixacl.UserObj, 7, none}, [3]uint32{posixacl.GroupObj, 0, none}, [3]uint32{posixacl.Group, 5, group}, [3]uint32{posixacl.Mask, 5, none}, [3]uint32{posixacl.Other, 0, none}), false},
		{"namedGroupAndOther", 0o755, aclBytes([3]uint32{posixacl.UserObj, 7, none}, [3]uint32{posixacl.GroupObj, 5, none}, [3]uint32{posixacl.Group, 5, group}, [3]uint32{posixacl.Mask, 5, none}, [3]uint32{posixacl.Other, 5, none}), true},
	} {
		dir := filepath.Join(base, c.name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 0, group); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		if c.acl != nil {
			setACL(t, dir, c.acl)
		}
		w := &searcher{uid: nobody, gid: nobody, pid: 0}
		if got := w.canSearch(dir); got != c.want {
			t.Errorf("%s (%v): canSearch with the groups unknown = %v, want %v", c.name, c.mode, got, c.want)
		}
		if w.known {
			t.Errorf("%s: the groups of PID 0 were read", c.name)
		}
		// Without an ACL, where the group's and the others' bits agree, the groups
		// are not read at all; where they differ, they are.
		w = &searcher{uid: nobody, gid: nobody, pid: uint32(os.Getpid())}
		w.canSearch(dir)
		if agree := c.mode&0o010<<3 == c.mode&0o001<<6; c.acl == nil && w.loaded == agree {
			t.Errorf("%s (%v): groups read: %v", c.name, c.mode, w.loaded)
		}
		// The same caller, known to be in no other group, is decided as the host would.
		if _, err := asNobodyIn(nil, "sh", "-c", `test -x "$1"`, "sh", dir); (err == nil) != (&searcher{uid: nobody, gid: nobody, loaded: true, known: true}).canSearch(dir) {
			t.Errorf("%s: canSearch for a caller in no other group disagrees with the host (test -x: %v)", c.name, err)
		}
	}
}

// TestCallerGroups reads this process's groups, and refuses to when the uid or
// gid FUSE would pass differ from the thread's file-system ones.
func TestCallerGroups(t *testing.T) {
	// This thread's own credentials: other tests of the package change single
	// threads' (onNobodyThread), the main thread's among them, at times.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, uid, gid := uint32(unix.Gettid()), uint32(unix.Geteuid()), uint32(unix.Getegid())
	want, err := unix.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := callerGroups(pid, uid, gid)
	if !ok || len(got) != len(want) {
		t.Fatalf("callerGroups(self) = %v, %v; want %v", got, ok, want)
	}
	for i := range want {
		if got[i] != uint32(want[i]) {
			t.Fatalf("callerGroups(self) = %v, want %v", got, want)
		}
	}
	for _, c := range [][3]uint32{{pid, uid + 1, gid}, {pid, uid, gid + 1}, {0, uid, gid}} {
		if g, ok := callerGroups(c[0], c[1], c[2]); ok {
			t.Errorf("callerGroups(pid %d, uid %d, gid %d) = %v, want unknown", c[0], c[1], c[2], g)
		}
	}
}
