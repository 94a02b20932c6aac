package fusefence

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/internal/posixacl"
)

// searcher is a caller of the mount whose right to search host directories the
// fence judges in place of the kernel (see reachableAt): the caller's fsuid and
// fsgid, as FUSE passes them, and its supplementary groups, read once from
// /proc/PID/status when a decision needs them.
//
// The groups are those of the calling thread (FUSE passes its thread ID), and
// they cannot change under the decision: a thread whose request the daemon has
// read waits in the kernel, uninterruptibly, until it is answered, so it neither
// exits (its ID cannot be reused) nor changes its own credentials, and no other
// thread can change them for it. Where they cannot be read (a caller in a PID
// namespace the daemon does not see has PID 0), only the primary group is known,
// and the decision errs towards no: a group's bits or ACL entries then count only
// when they agree with the others' (see canSearch).
type searcher struct {
	uid, gid uint32
	pid      uint32
	groups   []uint32 // supplementary groups, once loaded
	loaded   bool     // groups was read (or could not be: known is false)
	known    bool     // groups holds every group of the caller
}

// inGroup reports whether the caller is a member of gid: yes, no, or unknown
// (known is false: it might be, through a supplementary group not read).
func (w *searcher) inGroup(gid uint32) (member, known bool) {
	if gid == w.gid {
		return true, true
	}
	if !w.loaded {
		w.loaded = true
		w.groups, w.known = callerGroups(w.pid, w.uid, w.gid)
	}
	return slices.Contains(w.groups, gid), w.known
}

// callerGroups reads the supplementary groups of the thread pid, whose file-system
// uid and gid must be uid and gid: a request made under credentials other than
// the thread's own (the kernel overriding them, as overlayfs does for its
// mounter) would otherwise pair one user's uid with another's groups.
func callerGroups(pid, uid, gid uint32) ([]uint32, bool) {
	if pid == 0 {
		return nil, false
	}
	f, err := os.Open("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil, false
	}
	defer f.Close()
	var groups []uint32
	var uidOK, gidOK, found bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, rest, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(rest)
		switch key {
		case "Uid", "Gid":
			// real, effective, saved, file system
			want := uid
			if key == "Gid" {
				want = gid
			}
			ok := len(fields) == 4 && fields[3] == strconv.FormatUint(uint64(want), 10)
			if key == "Uid" {
				uidOK = ok
			} else {
				gidOK = ok
			}
		case "Groups":
			found = true
			for _, g := range fields {
				n, err := strconv.ParseUint(g, 10, 32)
				if err != nil {
					return nil, false
				}
				groups = append(groups, uint32(n))
			}
		}
	}
	if sc.Err() != nil || !found || !uidOK || !gidOK {
		return nil, false
	}
	return groups, true
}

// canSearch reports whether the caller may search the directory dir on the host,
// decided as the kernel's generic_permission decides MAY_EXEC without
// capabilities: the owner's bits for its owner; else, under an access ACL, a
// named-user entry for that user; else the owning group's and the named groups'
// entries that name a group of the caller (one granting is enough, one matching
// and none granting denies); else the others' bits. ACL entries other than the
// owner's and the others' are limited by the mask. Anything unreadable or
// malformed is a no. With the supplementary groups unknown, a group entry the
// caller might match decides only where it agrees with what follows it: granting
// needs the others' grant too, and denying stands.
//
// dir is opened following no symlink on the way, and judged by that descriptor: a
// directory on it swapped for a link since it was canonicalized (one into this very
// mount, where a lookup could wait for the thread making it) is a no.
func (w *searcher) canSearch(dir string) bool {
	fd, err := openDirNoLinks(dir)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	if st.Uid == w.uid {
		return st.Mode&0o100 != 0
	}
	acl, ok := readACL(procFd(fd))
	if !ok {
		return false
	}
	if acl == nil {
		// The mode alone: owning group, then others. Where both say the same, as on
		// most directories, the caller's groups cannot change the answer, and are
		// not read.
		if g, o := st.Mode&0o010 != 0, st.Mode&0o001 != 0; g == o {
			return o
		}
		acl = []posixacl.Entry{{Tag: posixacl.GroupObj, Perm: uint16(st.Mode>>3) & 7}, {Tag: posixacl.Other, Perm: uint16(st.Mode) & 7}}
	}
	mask := uint16(7) // no mask entry: nothing limited
	var other uint16
	for _, e := range acl {
		switch e.Tag {
		case posixacl.Mask:
			mask = e.Perm
		case posixacl.Other:
			other = e.Perm
		}
	}
	for _, e := range acl {
		if e.Tag == posixacl.User && e.ID == w.uid {
			return e.Perm&mask&posixacl.Exec != 0 // a named user is decided by its entry alone
		}
	}
	otherGrants := other&posixacl.Exec != 0
	matched, uncertain := false, false
	for _, e := range acl {
		var gid uint32
		switch e.Tag {
		case posixacl.GroupObj:
			gid = st.Gid
		case posixacl.Group:
			gid = e.ID
		default:
			continue
		}
		member, known := w.inGroup(gid)
		grants := e.Perm&mask&posixacl.Exec != 0
		switch {
		case member && grants:
			return true
		case member:
			matched = true
		case !known:
			// Maybe a member: granting counts only with the others' grant, and a
			// denial would hold.
			uncertain = uncertain || !grants
		}
	}
	if matched || uncertain {
		return false
	}
	return otherGrants
}

// readACL reads the access ACL of path: nil and true when it has none, false when
// it cannot be read or parsed.
// openDirNoLinks opens the canonical directory dir as O_PATH, following no symlink
// (see statxNoLinks), or by path where openat2 is missing.
func openDirNoLinks(dir string) (int, error) {
	fd, err := canon.OpenNoSymlinks(dir, false)
	if err == unix.ENOSYS {
		return unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	return fd, err
}

// readACL reads the access ACL of path, followed (a /proc/self/fd link).
func readACL(path string) ([]posixacl.Entry, bool) {
	buf := make([]byte, posixacl.Size(16))
	for {
		n, err := unix.Getxattr(path, "system.posix_acl_access", buf)
		switch err {
		case nil:
			return posixacl.Parse(buf[:n])
		case unix.ENODATA, unix.EOPNOTSUPP:
			return nil, true
		case unix.ERANGE:
			size, err := unix.Getxattr(path, "system.posix_acl_access", nil)
			if err != nil || size <= len(buf) || size > 1<<16 {
				return nil, false
			}
			buf = make([]byte, size)
			continue
		}
		return nil, false
	}
}
