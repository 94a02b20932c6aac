package fusefence

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// handle is an open file. It deliberately implements no FilePassthroughFder: the
// fence chooses backing files itself (see ioMode), so that go-fuse never makes a
// writable file passthrough.
type handle struct {
	mu       sync.RWMutex // held for reading while fd is used; Release takes it to close
	fd       int          // -1 once released
	writable bool
	n        *node  // the node opened, for its I/O counts
	mode     ioMode // how the kernel does I/O on the file
	attached bool   // tied to the node's backing file
	// target is the canonical host path the handle was judged for at open. When the
	// policy changes, writes through the handle are judged again against it: the
	// descriptor stays bound to the inode it opened, so it cannot be redirected.
	target string
	gen    atomic.Uint64 // protSet.ver of the last judgement: changes with the policy generation and the protected set
	// opener is who opened the handle: a write the kernel sends back from the page
	// cache (a shared writable mapping's msync, writeback) carries PID 0 and UID 0,
	// and a denial of it is recorded under the opener instead of as root's (found
	// by review).
	opener *fuse.Caller
}

// openerOf is the caller of ctx, kept for a handle's later denials.
func openerOf(ctx context.Context) *fuse.Caller {
	if c, ok := fuse.FromContext(ctx); ok {
		cc := *c
		return &cc
	}
	return nil
}

// writeFlags are the open(2) flags that mean "may change the file".
func writeIntent(flags uint32) bool {
	return flags&unix.O_ACCMODE != unix.O_RDONLY || flags&unix.O_TRUNC != 0
}

// hostFlags keeps the flags of a FUSE open that mean the same on the host descriptor.
// O_APPEND goes (writes carry explicit offsets), as do O_DIRECT (reads are spliced
// from the host descriptor at arbitrary alignment), O_TRUNC (applied after the
// checks, see openForWrite), the creation flags, and FUSE's own FMODE_EXEC.
func hostFlags(flags uint32) int {
	const keep = unix.O_ACCMODE | unix.O_NONBLOCK | unix.O_NOATIME | unix.O_SYNC | unix.O_DSYNC | unix.O_LARGEFILE
	return int(flags)&keep | unix.O_CLOEXEC
}

var _ = (fs.NodeOpener)((*node)(nil))

// Open for reading passes through: the kernel reads the host file directly where
// it can (passthrough), else through the page cache kept across opens (the kernel
// still drops it when it sees size or mtime change). Open for writing, or with
// O_TRUNC, is a mutation. See ioMode for how each kind of open does its I/O.
//
// Every open is FOPEN_NOFLUSH: close(2) sends no FLUSH, which on a local host file
// system only closed a duplicate descriptor (locks are the kernel's, CAP_POSIX_LOCKS
// is off); the host descriptor is closed at RELEASE, after the last close.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if writeIntent(flags) {
		s := n.f.acquire()
		defer s.release()
		h, _, _, errno := n.f.openForWrite(ctx, s, "open", n.rel(), flags, false, 0, reachInode, n)
		if errno != 0 {
			return nil, 0, errno
		}
		return n.writeHandle(ctx, h, flags, false)
	}
	var st unix.Stat_t
	fd, errno := n.openNode(ctx, "open", hostFlags(flags), &st)
	if errno != 0 {
		return nil, 0, errno
	}
	h, fl := n.readHandle(ctx, fd)
	return h, fl, 0
}

// openForWrite opens for writing what rel leads to (a symlink in the last
// component is judged and opened at its canonical target), relative to a verified
// parent beneath the writable root and without following anything. With creat the
// file is created if missing. A file with more than one link is refused. O_TRUNC is
// applied only after every check passed, so a denied open leaves the file as it was.
//
// The kernel checked the caller's permissions against node (nil for a create): what
// is opened must be that inode (see isNode), and a create must create. A file that
// exists although the kernel sent CREATE (it appeared on the host since the kernel
// last looked) was checked against nothing; both answer ESTALE, on which the
// kernel looks the name up again and checks what it finds.
func (f *fence) openForWrite(ctx context.Context, s *snapshot, op, rel string, flags uint32, creat bool, mode uint32, r reach, node *node) (h *handle, st unix.Stat_t, gen uint64, errno syscall.Errno) {
	g, errno := f.judge(ctx, s, op, rel, formInode, r)
	if errno != 0 {
		return nil, st, 0, errno
	}
	defer g.release()
	if g.p.Rel == "." {
		return nil, st, 0, syscall.EISDIR
	}
	dirFd, base, errno := g.parent()
	if errno != 0 {
		return nil, st, 0, errno
	}
	defer unix.Close(dirFd)
	hf := hostFlags(flags) | unix.O_NOFOLLOW | unix.O_NONBLOCK // a FIFO swapped in must not hang the request
	if flags&unix.O_ACCMODE == unix.O_RDONLY {
		hf = hf&^unix.O_ACCMODE | unix.O_RDWR // O_RDONLY|O_TRUNC: truncating needs a writable descriptor
	}
	fd, created := -1, false
	var err error
	if creat {
		fd, err = unix.Openat(dirFd, base, hf|unix.O_CREAT|unix.O_EXCL, mode&0o7777)
		created = err == nil
	}
	if !created {
		fd, err = unix.Openat(dirFd, base, hf, 0)
	}
	if err == unix.ELOOP {
		return nil, st, 0, g.race()
	}
	if err != nil {
		return nil, st, 0, toErrno(err)
	}
	if gen, err = statxFd(fd, &st); err != nil {
		unix.Close(fd)
		return nil, st, 0, toErrno(err)
	}
	if creat && !created || node != nil && !node.isNode(&st, gen) {
		unix.Close(fd)
		return nil, st, 0, syscall.ESTALE
	}
	// (A create gets here only for a caller with the daemon's rights: see Create.)
	if errno := f.reachable(ctx, s, op, fd, rel); errno != 0 {
		unix.Close(fd)
		return nil, st, 0, errno
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, st, 0, syscall.EINVAL
	}
	if errno := g.singleLink(&st); errno != 0 {
		unix.Close(fd)
		return nil, st, 0, errno
	}
	if created {
		g.chownNew(fd, &st)
	}
	if flags&unix.O_TRUNC != 0 && f.openKills(ctx) {
		var now unix.Stat_t
		err := killSetID(fd)
		if err == nil {
			err = unix.Fstat(fd, &now)
		}
		if err != nil {
			unix.Close(fd)
			return nil, st, 0, toErrno(err)
		}
		st.Mode = now.Mode
	}
	if flags&unix.O_TRUNC != 0 && st.Size != 0 {
		if err := unix.Ftruncate(fd, 0); err != nil {
			unix.Close(fd)
			return nil, st, 0, toErrno(err)
		}
		st.Size = 0
	}
	if flags&unix.O_NONBLOCK == 0 {
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
			unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
	}
	if created || flags&unix.O_TRUNC != 0 {
		g.touched()
	}
	h = &handle{fd: fd, writable: flags&unix.O_ACCMODE != unix.O_RDONLY, target: g.target, opener: openerOf(ctx)}
	h.gen.Store(g.protVer)
	return h, st, gen, 0
}

// openKills tells whether an open with O_TRUNC must clear the file's set-ID bits
// (see killSetID): when the kernel asked for it, or cannot ask.
func (f *fence) openKills(ctx context.Context) bool {
	if !f.killpriv.Load() {
		return true
	}
	_, kill := f.openKill.Load(cancelOf(ctx))
	return kill
}

var _ = (fs.NodeCreater)((*node)(nil))

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	s := n.f.acquire()
	defer s.release()
	rel := childRel(n.rel(), name)
	g, errno := n.f.judgeEntry(ctx, s, "create", n, rel, reachCarrier)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	defer g.release()
	dirFd, base, errno := g.parent()
	if errno != 0 {
		return nil, nil, 0, errno
	}
	hf := hostFlags(flags)
	// A write-only file this open creates may be written by the kernel directly
	// (see ioWriter): the backing file must be readable too, for the passthrough
	// readers that may join it.
	writer := flags&unix.O_ACCMODE == unix.O_WRONLY && n.f.passthrough.Load()
	if writer {
		hf = hf&^unix.O_ACCMODE | unix.O_RDWR
	}
	fd, err := unix.Openat(dirFd, base, hf|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, mode&0o7777)
	if err == unix.EEXIST && flags&unix.O_EXCL == 0 {
		// The name exists on the host although the kernel saw nothing there: created
		// from outside since, or an escaping symlink that leads nowhere (not shown).
		// Open what it leads to, judged there. The kernel checked the caller's right
		// to create in n only; the file would be made wherever the link leads, with
		// the daemon's rights. Only a caller with those rights may (see ownRights).
		var lst unix.Stat_t
		isLink := unix.Fstatat(dirFd, base, &lst, unix.AT_SYMLINK_NOFOLLOW) == nil && lst.Mode&unix.S_IFMT == unix.S_IFLNK
		ownerOnly := isLink && n.f.ownerOnly(hostParentDir{fd: dirFd}, &lst)
		unix.Close(dirFd)
		switch {
		case !isLink:
			// Anything else at the name was made on the host since the kernel
			// looked: ESTALE, and the kernel looks it up again and opens what it
			// finds, checked against the caller. Never the open below, which
			// follows whatever link the name holds by then: a caller who swapped
			// the name between a file and a link to a directory it cannot write
			// had the file made there, as root, and given to it (found by review).
			return nil, nil, 0, syscall.ESTALE
		case !n.f.ownRights(ctx):
			return nil, nil, 0, n.f.deny(ctx, s, "create", rel, g.target, RuleUnreachable)
		case ownerOnly && !callerIs(ctx, lst.Uid):
			return nil, nil, 0, n.f.deny(ctx, s, "create", rel, g.target, RuleProtectedSymlink)
		}
		h, st, gen, errno := n.f.openForWrite(ctx, s, "create", rel, flags, true, mode, reachCarrier, nil)
		if errno != 0 {
			return nil, nil, 0, errno
		}
		out.Attr.FromStat(sysStat(&st))
		child := n.NewInode(ctx, &node{f: n.f}, n.f.stable(&st, gen))
		fh, fl, errno := child.Operations().(*node).writeHandle(ctx, h, flags, false)
		if errno != 0 {
			return nil, nil, 0, errno
		}
		return child, fh, fl, 0
	}
	defer unix.Close(dirFd)
	if err != nil {
		return nil, nil, 0, toErrno(err)
	}
	g.chownNew(fd, nil)
	g.touched()
	var st unix.Stat_t
	gen, err := statxFd(fd, &st)
	if err != nil {
		unix.Close(fd)
		return nil, nil, 0, toErrno(err)
	}
	h := &handle{fd: fd, writable: flags&unix.O_ACCMODE != unix.O_RDONLY, target: g.target, opener: openerOf(ctx)}
	h.gen.Store(g.protVer)
	out.Attr.FromStat(sysStat(&st))
	child := n.NewInode(ctx, &node{f: n.f}, n.f.stable(&st, gen))
	fh, fl, errno := child.Operations().(*node).writeHandle(ctx, h, flags, writer)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return child, fh, fl, 0
}

// recheck judges a write through an open handle again if the policy changed since
// the handle was last judged: tightening applies to descriptors already open too.
func (f *fence) recheck(ctx context.Context, h *handle, op, rel string) syscall.Errno {
	if !h.writable {
		return syscall.EBADF
	}
	if c, ok := fuse.FromContext(ctx); h.opener != nil && (!ok || c.Pid == 0) {
		ctx = fuse.NewContext(ctx, h.opener)
	}
	s := f.acquire()
	defer s.release()
	ps := f.protected(s)
	if ps.ver == h.gen.Load() {
		return 0
	}
	if s.err != nil {
		return f.deny(ctx, s, op, rel, h.target, RulePolicyInvalid)
	}
	if _, rule := place(s.x, ps.g, h.target, reachInode, f.auditPath); rule != "" {
		return f.deny(ctx, s, op, rel, h.target, rule)
	}
	h.gen.Store(ps.ver)
	return 0
}

var _ = (fs.NodeWriter)((*node)(nil))

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return 0, syscall.EBADF
	}
	if errno := n.f.recheck(ctx, h, "write", n.rel()); errno != 0 {
		return 0, errno
	}
	var written int
	errno := h.use(func(fd int) error {
		if h.mode == ioDirect {
			if err := killSetID(fd); err != nil {
				return err
			}
		}
		var err error
		written, err = unix.Pwrite(fd, data, off)
		return err
	})
	return uint32(max(written, 0)), errno
}

var _ = (fs.NodeAllocater)((*node)(nil))

func (n *node) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	h, ok := fh.(*handle)
	if !ok {
		return syscall.EBADF
	}
	if errno := n.f.recheck(ctx, h, "fallocate", n.rel()); errno != 0 {
		return errno
	}
	return h.use(func(fd int) error { return unix.Fallocate(fd, mode, int64(off), int64(size)) })
}

var _ = (fs.NodeCopyFileRanger)((*node)(nil))

// CopyFileRange is a write to the destination, fenced like one.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	hIn, ok1 := fhIn.(*handle)
	hOut, ok2 := fhOut.(*handle)
	dst, ok3 := out.Operations().(*node)
	if !ok1 || !ok2 || !ok3 {
		return 0, syscall.EBADF
	}
	if errno := n.f.recheck(ctx, hOut, "copy_file_range", dst.rel()); errno != 0 {
		return 0, errno
	}
	var copied int
	errno := hIn.use(func(fdIn int) error {
		return toErrnoErr(hOut.use(func(fdOut int) error {
			oi, oo := int64(offIn), int64(offOut)
			var err error
			copied, err = unix.CopyFileRange(fdIn, &oi, fdOut, &oo, int(length), int(flags))
			return err
		}))
	})
	return uint32(max(copied, 0)), errno
}

// ioctlAllowed lists the ioctls passed through to the host file: read-only queries
// of inode flags (lsattr, xfs_io). Everything else is denied: FS_IOC_SETFLAGS,
// FICLONE, FS_IOC_SETFSLABEL and driver ioctls change things the fence cannot judge.
const fsIocFsgetxattr = 0x801c581f // _IOR('X', 31, struct fsxattr)

var ioctlAllowed = map[uint32]bool{
	uint32(unix.FS_IOC_GETFLAGS): true,
	fsIocFsgetxattr:              true,
}

var _ = (fs.NodeIoctler)((*node)(nil))

// Ioctl passes the allowlist through, answers terminal ioctls (type 'T': isatty and
// friends) with ENOTTY as any regular file would, and denies the rest.
func (n *node) Ioctl(ctx context.Context, fh fs.FileHandle, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	if ioctlAllowed[cmd] {
		h, ok := fh.(*handle)
		if !ok {
			return 0, syscall.ENOTTY
		}
		var buf [64]byte
		var res uintptr
		errno := h.use(func(fd int) error {
			var e syscall.Errno
			res, _, e = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(cmd), uintptr(unsafe.Pointer(&buf[0])))
			if e != 0 {
				return e
			}
			return nil
		})
		copy(output, buf[:])
		return int32(res), errno
	}
	if (cmd>>8)&0xff == 'T' {
		return 0, syscall.ENOTTY
	}
	s := n.f.acquire()
	defer s.release()
	return 0, n.f.deny(ctx, s, "ioctl", n.rel(), n.f.host(n.rel()), RuleIoctl)
}

// use runs fn on the descriptor unless the handle was released.
func (h *handle) use(fn func(fd int) error) syscall.Errno {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.fd < 0 {
		return syscall.EBADF
	}
	return toErrno(fn(h.fd))
}

func toErrnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

var _ = (fs.FileReader)((*handle)(nil))

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	var res fuse.ReadResult
	errno := h.use(func(fd int) error {
		// The kernel sends no RELEASE while a READ of the handle is in flight, so
		// the descriptor outlives the splice that happens after this returns.
		res = fuse.ReadResultFd(uintptr(fd), off, len(dest))
		return nil
	})
	return res, errno
}

var _ = (fs.FileFlusher)((*handle)(nil))

// Flush is close(2) of one of possibly several duplicated descriptors: close a dup
// so the host file system sees the close, keep the handle.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	return h.use(func(fd int) error {
		d, err := unix.Dup(fd)
		if err != nil {
			return err
		}
		return unix.Close(d)
	})
}

var _ = (fs.FileReleaser)((*handle)(nil))

func (h *handle) Release(ctx context.Context) syscall.Errno {
	errno := h.close()
	if errno != syscall.EBADF {
		h.released()
	}
	return errno
}

// close closes the host descriptor once.
func (h *handle) close() syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fd < 0 {
		return syscall.EBADF
	}
	err := unix.Close(h.fd)
	h.fd = -1
	return toErrno(err)
}

var _ = (fs.FileLseeker)((*handle)(nil))

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	var pos int64
	errno := h.use(func(fd int) error {
		var err error
		pos, err = unix.Seek(fd, int64(off), int(whence))
		return err
	})
	return uint64(pos), errno
}

func (h *handle) getattr(out *fuse.AttrOut) syscall.Errno {
	return h.use(func(fd int) error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		out.FromStat(sysStat(&st))
		return nil
	})
}

func (h *handle) fsync(flags uint32) syscall.Errno {
	return h.use(func(fd int) error {
		if flags&1 != 0 { // FUSE_FSYNC_FDATASYNC
			return unix.Fdatasync(fd)
		}
		return unix.Fsync(fd)
	})
}

// statxFd is statx for an open descriptor.
func statxFd(fd int, st *unix.Stat_t) (uint64, error) {
	return statxAt(fd, "", unix.AT_EMPTY_PATH, st)
}
