package fusefence

import (
	"context"
	"math/rand/v2"
	"path"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// maxHead is the largest file renameHead takes for a HEAD; git's are a line.
const maxHead = 4096

// renameHead performs a plain rename of the source (b1 in d1, judged by g1) onto
// the HEAD of a submodule git directory in use (b2 in d2, judged by g2 with
// placement.head): git writes HEAD.lock and renames it over HEAD. The directory
// must stay a valid git directory (policy.ProtectValid), so the source must be a
// regular file whose content git takes for a HEAD (policy.ValidHead, with the
// repository's object name length); anything else is denied, rule protected.
//
// It is a copy, not the rename itself: the content checked is written to a new
// file of the daemon's, which replaces HEAD, and the source's name is removed
// (when it still names the file read). A rename would put the caller's inode at
// HEAD, which a descriptor the caller kept open on it, a passthrough writer
// included, could rewrite after the check. Nobody holds the copy open, and HEAD
// cannot be opened for writing, truncated, removed or renamed away (its record
// denies that), nor, linked elsewhere, written (rule multiply-linked): its content
// stays what was checked. The copy has the replaced HEAD's owner and permission
// bits (owner-readable), never the source's; its inode number and times are new,
// which git does not look at. A daemon killed
// between the replacement and the removal leaves the source behind (git then finds
// HEAD.lock taken, and says so).
func (n *node) renameHead(ctx context.Context, s *snapshot, g1, g2 *grant, d1 int, b1 string, d2 int, b2 string, flags uint32) syscall.Errno {
	deny := func() syscall.Errno { return n.f.deny(ctx, s, "rename", g2.rel, g2.target, RuleProtected) }
	var lst unix.Stat_t
	if err := unix.Fstatat(d1, b1, &lst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return toErrno(err)
	}
	if lst.Mode&unix.S_IFMT != unix.S_IFREG {
		return deny() // never opened: a FIFO or a device would block or act
	}
	src, err := unix.Openat(d1, b1, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return toErrno(err)
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return toErrno(err)
	}
	if st.Dev != lst.Dev || st.Ino != lst.Ino {
		return g1.race()
	}
	buf := make([]byte, maxHead+1)
	size := 0
	for size < len(buf) {
		k, err := unix.Read(src, buf[size:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return toErrno(err)
		}
		if k == 0 {
			break
		}
		size += k
	}
	head := buf[:size]
	if size > maxHead || !policy.ValidHead(head[:min(size, 255)], policy.GitObjectNameHex(path.Dir(g2.target))) {
		return deny()
	}

	var tmp string
	fd := -1
	for i := 0; i < 8 && fd < 0; i++ {
		tmp = b2 + ".toh-" + strconv.FormatUint(rand.Uint64(), 36)
		fd, err = unix.Openat(d2, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil && err != unix.EEXIST {
			return toErrno(err)
		}
	}
	if fd < 0 {
		return syscall.EEXIST
	}
	// The copy keeps the owner and mode of the HEAD it replaces, which its record
	// keeps from changing, owner-readable: never the source's. A HEAD.lock of mode
	// 000 (or, to a root daemon, one of another user's, 0600) renamed in made a HEAD
	// the user's git could not read, so a directory git took for broken, and F5 went
	// through again (found by review: PWNED). No HEAD there: the source's owner, 0644.
	uid, gid, mode := int(st.Uid), int(st.Gid), uint32(0o644)
	var prev unix.Stat_t
	if unix.Fstatat(d2, b2, &prev, unix.AT_SYMLINK_NOFOLLOW) == nil && prev.Mode&unix.S_IFMT == unix.S_IFREG {
		uid, gid, mode = int(prev.Uid), int(prev.Gid), prev.Mode&0o777|0o400
	}
	err = writeAll(fd, head)
	if err == nil && n.f.asRoot() {
		err = unix.Fchown(fd, uid, gid)
	}
	if err == nil {
		err = unix.Fchmod(fd, mode)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat2(d2, tmp, d2, b2, uint(flags&unix.RENAME_NOREPLACE))
	}
	if err != nil {
		unix.Unlinkat(d2, tmp, 0)
		return toErrno(err)
	}
	var now unix.Stat_t
	if unix.Fstatat(d1, b1, &now, unix.AT_SYMLINK_NOFOLLOW) == nil && now.Dev == st.Dev && now.Ino == st.Ino {
		unix.Unlinkat(d1, b1, 0)
	}
	g1.touched()
	g2.touched()
	return 0
}

// writeAll writes b to fd whole.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		k, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[k:]
	}
	return nil
}
