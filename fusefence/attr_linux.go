package fusefence

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Inode mutations: each judges what the node leads to (formLeaf; a symlink node's
// own attributes in formEntry), takes it as O_PATH without following it (the
// decision's own walk's descriptor, or one opened relative to the verified
// parent), refuses a multiply-linked non-directory, and acts on that descriptor
// (with AT_EMPTY_PATH where the kernel takes it for that call, else through
// /proc/self/fd: both act on the object the descriptor holds).

var _ = (fs.NodeSetattrer)((*node)(nil))

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	mode, hasMode := in.GetMode()
	uid, hasUID := in.GetUID()
	gid, hasGID := in.GetGID()
	size, hasSize := in.GetSize()
	hasAtime := in.Valid&fuse.FATTR_ATIME != 0
	hasMtime := in.Valid&fuse.FATTR_MTIME != 0
	// Clearing set-ID bits is left to the daemon (see killSetID): asked for with
	// a truncation or chown, or by a SETATTR that is otherwise empty.
	kill := in.Valid&fuse.FATTR_KILL_SUIDGID != 0
	var op string
	switch {
	case hasSize:
		op = "truncate"
	case hasMode:
		op = "chmod"
	case hasUID || hasGID:
		op = "chown"
	case hasAtime || hasMtime:
		op = "utimes"
	case n.StableAttr().Mode == unix.S_IFREG && n.hasSetID():
		op, kill = "chmod", true
	default: // nothing the fence can change (ctime alone, lock owner, no set-ID bit to clear)
		return n.Getattr(ctx, fh, out)
	}
	rel := n.rel()

	// ftruncate(2) through a descriptor opened for writing acts on that inode, which
	// was judged at open.
	if h, ok := fh.(*handle); ok && h.writable && op == "truncate" && !hasMode && !hasUID && !hasGID && !hasAtime && !hasMtime {
		if errno := n.f.recheck(ctx, h, op, rel); errno != 0 {
			return errno
		}
		errno := h.use(func(fd int) error {
			if kill {
				if err := killSetID(fd); err != nil {
					return err
				}
			}
			return unix.Ftruncate(fd, int64(size))
		})
		if errno != 0 {
			return errno
		}
		return n.f.attrOut(h.getattr(out), out)
	}

	s := n.f.acquire()
	defer s.release()
	fm := formLeaf
	if n.isSymlink() {
		fm = formEntry
	}
	r := reachInode
	if hasUID || hasGID || (hasMode && mode&0o022 != 0) {
		r = reachAccess
	}
	g, errno := n.f.judge(ctx, s, op, rel, fm, r)
	if errno != 0 {
		return errno
	}
	defer g.release()
	leafFd, dirFd, st, errno := g.leaf()
	if errno != 0 {
		return errno
	}
	defer unix.Close(leafFd)
	if dirFd >= 0 {
		defer unix.Close(dirFd)
	}
	if !n.isNode(&st, 0) {
		return syscall.ESTALE // not the inode the kernel checked the caller against
	}
	if errno := g.singleLink(&st); errno != 0 {
		return errno
	}
	isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK
	proc := procFd(leafFd)
	if hasMode {
		if isLink {
			return syscall.EOPNOTSUPP
		}
		if err := chmodFd(leafFd, proc, mode); err != nil {
			return toErrno(err)
		}
	}
	if hasUID || hasGID {
		u, gr := -1, -1
		if hasUID {
			u = int(uid)
		}
		if hasGID {
			gr = int(gid)
		}
		if err := unix.Fchownat(leafFd, "", u, gr, unix.AT_EMPTY_PATH); err != nil {
			return toErrno(err)
		}
	}
	if kill && !hasUID && !hasGID && st.Mode&unix.S_IFMT == unix.S_IFREG {
		// A chown as root has cleared them on the host already (the kernel asks
		// with every chown of a file, tar's included). Before the truncation: no
		// content is cut while the bits stay.
		if err := killSetID(leafFd); err != nil {
			return toErrno(err)
		}
	}
	if hasSize {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
		case unix.S_IFDIR:
			return syscall.EISDIR
		default:
			return syscall.EINVAL
		}
		if err := unix.Truncate(proc, int64(size)); err != nil {
			return toErrno(err)
		}
	}
	if hasAtime || hasMtime {
		ts := []unix.Timespec{timeArg(in, hasAtime, fuse.FATTR_ATIME_NOW, in.Atime, in.Atimensec),
			timeArg(in, hasMtime, fuse.FATTR_MTIME_NOW, in.Mtime, in.Mtimensec)}
		var err error
		if isLink {
			// The link's own times, through its checked descriptor (O_PATH and
			// O_NOFOLLOW hold the link itself; an empty path follows nothing). Not
			// through /proc, where the kernel would act on what the link names, and
			// not by name in the parent: a rename on the host between the check and
			// the call set the times of a root-owned file outside every root (found
			// by review). Where utimensat takes no AT_EMPTY_PATH, a link's times
			// cannot be set safely: EOPNOTSUPP, as for a link's xattrs.
			err = unix.UtimesNanoAt(leafFd, "", ts, unix.AT_EMPTY_PATH)
			if err == unix.EINVAL || err == unix.ENOSYS || err == unix.ENOENT {
				err = unix.EOPNOTSUPP
			}
		} else {
			err = utimesFd(leafFd, proc, ts)
		}
		if err != nil {
			return toErrno(err)
		}
	}
	g.touched()
	if err := unix.Fstat(leafFd, &st); err != nil {
		return toErrno(err)
	}
	out.FromStat(sysStat(&st))
	return n.f.attrOut(0, out)
}

// attrOut gives a SETATTR answer the attribute timeout. go-fuse leaves it 0, which
// makes the kernel ask again (GETATTR) at its next permission check or stat; the
// attributes were read just after the change, as fresh as a GETATTR's.
func (f *fence) attrOut(errno syscall.Errno, out *fuse.AttrOut) syscall.Errno {
	if errno == 0 {
		out.SetTimeout(f.timeout)
	}
	return errno
}

func timeArg(in *fuse.SetAttrIn, set bool, nowFlag uint32, sec uint64, nsec uint32) unix.Timespec {
	switch {
	case !set:
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	case in.Valid&nowFlag != 0:
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	}
	return unix.Timespec{Sec: int64(sec), Nsec: int64(nsec)}
}

var _ = (fs.NodeSetxattrer)((*node)(nil))

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return n.xattr(ctx, "setxattr", xattrReach(attr), func(proc string) error { return unix.Setxattr(proc, attr, data, int(flags)) })
}

var _ = (fs.NodeRemovexattrer)((*node)(nil))

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return n.xattr(ctx, "removexattr", xattrReach(attr), func(proc string) error { return unix.Removexattr(proc, attr) })
}

// xattrReach is reachAccess for a POSIX ACL (which can grant others write), else
// reachInode.
func xattrReach(attr string) reach {
	if strings.HasPrefix(attr, "system.posix_acl_") {
		return reachAccess
	}
	return reachInode
}

// xattr changes an extended attribute of what the node leads to. Attributes of a
// symlink node itself are judged, then refused with EOPNOTSUPP: before Linux 6.13
// there is no call that reaches a symlink's xattrs through a descriptor without
// following it (and Linux allows only trusted.* and security.* there anyway).
func (n *node) xattr(ctx context.Context, op string, r reach, fn func(proc string) error) syscall.Errno {
	s := n.f.acquire()
	defer s.release()
	fm := formLeaf
	if n.isSymlink() {
		fm = formEntry
	}
	g, errno := n.f.judge(ctx, s, op, n.rel(), fm, r)
	if errno != 0 {
		return errno
	}
	defer g.release()
	if n.isSymlink() {
		return syscall.EOPNOTSUPP
	}
	leafFd, dirFd, st, errno := g.leaf()
	if errno != 0 {
		return errno
	}
	defer unix.Close(leafFd)
	if dirFd >= 0 {
		defer unix.Close(dirFd)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return g.race() // the canonical target was no symlink a moment ago
	}
	if !n.isNode(&st, 0) {
		return syscall.ESTALE // not the inode the kernel checked the caller against
	}
	if errno := g.singleLink(&st); errno != 0 {
		return errno
	}
	if err := fn(procFd(leafFd)); err != nil {
		return toErrno(err)
	}
	g.touched()
	return 0
}

// hasSetID tells whether the host file n stands for has a set-ID bit that
// killSetID would clear: a SETATTR that asks for nothing else is then the kernel's
// request to clear them. A read through the host path, as getattr's; the change
// itself is judged and made on the re-resolved leaf.
func (n *node) hasSetID() bool {
	var st unix.Stat_t
	if n.f.statFollow(n.parentNode(), n.rel(), &st) != 0 {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG && killBits(st.Mode) != 0
}

// emptyPathChmod and emptyPathUtimes stay true while the kernel takes
// AT_EMPTY_PATH on an O_PATH descriptor for fchmodat2 (Linux 6.6) and utimensat.
// Either call on the descriptor itself skips the walk through /proc/self/fd,
// which took 5 µs of a SETATTR's daemon time against 2 µs (chmod and utimes
// alike, measured on Linux 6.18).
var emptyPathChmod, emptyPathUtimes atomic.Bool

func init() {
	emptyPathChmod.Store(true)
	emptyPathUtimes.Store(true)
}

// chmodFd changes the mode of what the O_PATH descriptor fd holds, proc being its
// /proc/self/fd name.
func chmodFd(fd int, proc string, mode uint32) error {
	if emptyPathChmod.Load() {
		err := unix.Fchmodat(fd, "", mode, unix.AT_EMPTY_PATH)
		if !fallBack(err, &emptyPathChmod) {
			return err
		}
	}
	return unix.Chmod(proc, mode)
}

// utimesFd sets the times of what the O_PATH descriptor fd holds (no symlink: the
// /proc fallback would follow it; see Setattr for a link's own times), proc being
// its /proc/self/fd name.
func utimesFd(fd int, proc string, ts []unix.Timespec) error {
	if emptyPathUtimes.Load() {
		err := unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
		if !fallBack(err, &emptyPathUtimes) {
			return err
		}
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, proc, ts, 0)
}

// fallBack tells whether a call with AT_EMPTY_PATH failed for want of support, so
// the change is to be made through /proc instead: ENOSYS (x/sys answers
// EOPNOTSUPP for a missing fchmodat2), after which the fast path is off for good,
// or EINVAL (a kernel that rejects the flag for that call, or an argument it
// rejects anyway, which the fallback then answers as it did before).
func fallBack(err error, fast *atomic.Bool) bool {
	switch err {
	case unix.ENOSYS, unix.EOPNOTSUPP:
		fast.Store(false)
		return true
	case unix.EINVAL:
		return true
	}
	return false
}

// procFd names the object an O_PATH descriptor holds. Path-based calls on it act on
// that object itself: the magic link cannot be redirected.
func procFd(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// procFdDir is /proc/self/fd, opened once: getxattrFd names a descriptor relative
// to it, which spares the walk through /proc and self on each call.
var procFdDir = sync.OnceValue(func() int {
	fd, err := unix.Open("/proc/self/fd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
})

// noGetxattrat is set once getxattrat answered ENOSYS (before Linux 6.13).
var noGetxattrat atomic.Bool

// getxattrFd is getxattr(2) of the object the O_PATH descriptor fd holds, through
// its magic link as procFd, with getxattrat(2) relative to procFdDir where the
// kernel has it. (getxattrat with AT_EMPTY_PATH refuses an O_PATH descriptor.)
func getxattrFd(fd int, attr string, dest []byte) (int, error) {
	if dir := procFdDir(); dir >= 0 && !noGetxattrat.Load() {
		n, err := getxattrAt(dir, strconv.Itoa(fd), attr, dest)
		if err != unix.ENOSYS {
			return n, err
		}
		noGetxattrat.Store(true)
	}
	return unix.Getxattr(procFd(fd), attr, dest)
}

// xattrArgs is the kernel's struct xattr_args (XATTR_ARGS_SIZE_VER0).
type xattrArgs struct {
	value uint64
	size  uint32
	flags uint32
}

// getxattrAt is getxattrat(2), following a symlink in the last component of name
// (here the descriptor's magic link). x/sys has no wrapper for it. dest is passed
// inside a struct, as a number, so it must not live on a goroutine's stack, which
// may move: go-fuse's reply buffers are on the heap.
func getxattrAt(dirFd int, name, attr string, dest []byte) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	a, err := unix.BytePtrFromString(attr)
	if err != nil {
		return 0, err
	}
	var args xattrArgs
	if len(dest) > 0 {
		args.value = uint64(uintptr(unsafe.Pointer(&dest[0])))
		args.size = uint32(len(dest))
	}
	r, _, e := unix.Syscall6(unix.SYS_GETXATTRAT, uintptr(dirFd), uintptr(unsafe.Pointer(p)), 0,
		uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
	runtime.KeepAlive(dest)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
