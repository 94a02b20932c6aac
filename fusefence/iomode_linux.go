package fusefence

import (
	"context"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// How the kernel does I/O on an open file, chosen at open.
//
// Reads may bypass the daemon: a file opened for reading only is a passthrough
// file (FOPEN_PASSTHROUGH), which the kernel reads from the host file directly. It
// can never be written through: its FUSE file is not open for writing, so write(2)
// fails with EBADF, and a shared writable mmap with EACCES, before FUSE is asked.
//
// Writes bypass the daemon in one case only: a write-only open that created its
// file (CREATE, O_EXCL on the host) is a passthrough writer (ioWriter) when the
// kernel allows it and no other file of the inode is open. Its writes were judged
// with the creation, and the kernel writes the host file without asking again: a
// tightening after the create does not reach that descriptor (see the package
// doc, "Passthrough writers"). Its host descriptor is read-write, so that readers
// opened meanwhile share it as their backing file (one per inode). Every other
// write is a WRITE request the fence judges. The kernel, though, allows an inode
// either passthrough files or files using its page cache, never both at once (an
// open of the other kind fails with EIO). So:
//
//   - A write-only open (or O_RDONLY|O_TRUNC) is FOPEN_DIRECT_IO: every write is a
//     WRITE request, fenced as always, and nothing can be mapped (mmap needs a
//     readable file). Such a file uses no page cache and mixes with both kinds;
//     while passthrough files of its inode are open the kernel wants it marked
//     passthrough too (FOPEN_PASSTHROUGH|FOPEN_DIRECT_IO), which still sends its
//     reads and writes to the daemon and only maps memory from the host file.
//   - A read-write open uses the page cache, as before: a shared mapping of it is
//     written back through WRITE requests the fence sees. While passthrough files
//     of the same inode are open it fails with ETXTBSY (text file busy): marking it
//     passthrough would let a shared mapping write the host file unfenced. Opens
//     for reading made while a read-write file is open use the page cache, so this
//     happens only to a read-write open that comes after open readers, or while
//     the passthrough writer that created the file is open.
//
// The kernel also leaves clearing set-ID bits on direct writes to the file system
// (see killSetID). Passthrough needs CAP_SYS_ADMIN (toh-mount as root) and Linux
// 6.9; without it reads use the page cache (FOPEN_KEEP_CACHE).
type ioMode int

const (
	ioCached      ioMode = iota // the inode's page cache: reads, and read-write files
	ioPassthrough               // read-only, read by the kernel from the host file
	ioDirect                    // write-only, every read and write sent to the daemon
	ioWriter                    // write-only and created by its open, written by the kernel to the host file
)

// nodeIO is the I/O state of a node, one kernel inode. The daemon counts an open
// before answering it and uncounts it at RELEASE, after the kernel closed it, so
// its counts never fall short of the kernel's: a file is made passthrough only
// while no page-cache file can be open, and the reverse.
type nodeIO struct {
	mu        sync.Mutex
	cached    int   // open files using the page cache
	attached  int   // open files tied to backingID (passthrough, or direct while readers were)
	backingID int32 // the host file the kernel reads from, registered while attached > 0
	// open holds n's handles from their open until their RELEASE: each holds a
	// descriptor of exactly n's inode (see openFd).
	open []*handle
}

// openFd runs fn on the descriptor of one of n's open handles, for a caller of ctx
// with the daemon's rights, and reports false when it did not: another caller,
// none open, or the one found released meanwhile. Reads of the inode's own
// metadata use it: the descriptor was checked to be n's inode when it was opened
// (isNode; a create's node is made from it), so no walk is needed to find that
// inode again. Any other caller needs the walk, which checks where the inode lies
// now (reachable). fn must not block: the handle cannot be released while it runs.
func (n *node) openFd(ctx context.Context, fn func(fd int)) bool {
	if !n.f.ownRights(ctx) {
		return false
	}
	io := &n.io
	io.mu.Lock()
	var h *handle
	if k := len(io.open); k > 0 {
		h = io.open[k-1]
	}
	io.mu.Unlock()
	if h == nil {
		return false
	}
	ran := false
	h.use(func(fd int) error {
		fn(fd)
		ran = true
		return nil
	})
	return ran
}

// rawFS hands the kernel the backing file the fence chose in Open or Create.
// go-fuse's own mechanism (FilePassthroughFder) would make every later open of an
// inode with a backing file passthrough, read-write ones included, so the fence
// keeps the backing files itself and go-fuse never sees one.
type rawFS struct {
	fuse.RawFileSystem
	f *fence
}

func (r *rawFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if in.Mode&fuse.OPEN_KILL_SUIDGID != 0 { // OpenIn.Mode holds the FUSE open flags
		r.f.openKill.Store(cancel, true)
		defer r.f.openKill.Delete(cancel)
	}
	st := r.RawFileSystem.Open(cancel, in, out)
	r.f.attach(cancel, st, out)
	return st
}

func (r *rawFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if in.OpenFlags&fuse.OPEN_KILL_SUIDGID != 0 {
		r.f.openKill.Store(cancel, true)
		defer r.f.openKill.Delete(cancel)
	}
	st := r.RawFileSystem.Create(cancel, in, name, out)
	r.f.attach(cancel, st, &out.OpenOut)
	return st
}

// Lookup and GetAttr hand the kernel the zero timeouts node.lookup and
// node.Getattr asked for (see uncachedEntry): go-fuse's bridge replaces a zero
// timeout with the mount's.
func (r *rawFS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	st := r.RawFileSystem.Lookup(cancel, header, name, out)
	if out.EntryValid == 0 && out.EntryValidNsec == uncachedNsec {
		out.EntryValidNsec = 0
	}
	if out.AttrValid == 0 && out.AttrValidNsec == uncachedNsec {
		out.AttrValidNsec = 0
	}
	return st
}

func (r *rawFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	st := r.RawFileSystem.GetAttr(cancel, in, out)
	if out.AttrValid == 0 && out.AttrValidNsec == uncachedNsec {
		out.AttrValidNsec = 0
	}
	return st
}

// uncachedNsec marks a timeout the kernel must get as zero: the entry or its
// attributes are not to be cached at all. One nanosecond is what the bridge keeps
// (it replaces only a zero) and rawFS turns back into zero; should a reply reach
// the kernel unturned, it caches for one jiffy.
const uncachedNsec = 1

// uncachedEntry asks that the kernel cache neither the entry nor its attributes.
func uncachedEntry(out *fuse.EntryOut) {
	out.EntryValid, out.EntryValidNsec = 0, uncachedNsec
	out.AttrValid, out.AttrValidNsec = 0, uncachedNsec
}

// uncachedAttr asks that the kernel not cache the attributes.
func uncachedAttr(out *fuse.AttrOut) {
	out.AttrValid, out.AttrValidNsec = 0, uncachedNsec
}

// attach puts the backing file an Open or Create answered on the same request
// (keyed by its cancel channel, unique among requests in flight) into the answer.
func (f *fence) attach(cancel <-chan struct{}, st fuse.Status, out *fuse.OpenOut) {
	v, ok := f.pending.LoadAndDelete(cancel)
	if !ok || !st.Ok() {
		return
	}
	out.BackingID = v.(int32)
	out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
	out.OpenFlags &^= fuse.FOPEN_KEEP_CACHE
}

func cancelOf(ctx context.Context) <-chan struct{} {
	if c, ok := ctx.(*fuse.Context); ok {
		return c.Cancel
	}
	return nil
}

// readHandle makes the handle of a read-only open of n's host file fd.
func (n *node) readHandle(ctx context.Context, fd int) (*handle, uint32) {
	h := &handle{fd: fd, n: n, mode: ioCached}
	io := &n.io
	io.mu.Lock()
	defer io.mu.Unlock()
	io.open = append(io.open, h)
	if key := cancelOf(ctx); key != nil && io.cached == 0 && n.f.backing(io, fd) {
		h.mode, h.attached = ioPassthrough, true
		io.attached++
		n.f.pending.Store(key, io.backingID)
		return h, fuse.FOPEN_NOFLUSH
	}
	io.cached++
	return h, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH
}

// backing makes sure io has a registered backing file, registering fd if needed.
// It reports false when passthrough is unavailable. The caller holds io.mu.
func (f *fence) backing(io *nodeIO, fd int) bool {
	if io.backingID != 0 {
		return true
	}
	if !f.passthrough.Load() {
		return false
	}
	id, errno := f.server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
	if errno != 0 {
		if errno == syscall.EPERM || errno == syscall.ENOTTY || errno == syscall.EOPNOTSUPP {
			// The kernel refuses every backing file of this daemon: stop asking.
			f.passthrough.Store(false)
		}
		f.logf("passthrough unavailable, reads go through the daemon: %v", errno)
		return false
	}
	io.backingID = id
	return true
}

// writeHandle gives h, just opened for writing with the open flags, its mode and
// the open's FUSE flags. On ETXTBSY it closes h. created says the open made the
// file and h's descriptor is read-write (see Create): such a write-only open is
// made a passthrough writer when the kernel allows it.
func (n *node) writeHandle(ctx context.Context, h *handle, flags uint32, created bool) (*handle, uint32, syscall.Errno) {
	h.n = n
	io := &n.io
	io.mu.Lock()
	defer io.mu.Unlock()
	if flags&unix.O_ACCMODE == unix.O_RDWR {
		// The kernel drops a passthrough file at close(2) and tells the daemon
		// afterwards, in a RELEASE queued before any later OPEN but served by
		// another reader, maybe still in flight: a read-write open right after
		// the passthrough writer that created the file was closed (write a file,
		// then open it again) would see it as still open. Give such a RELEASE a
		// moment to land before answering ETXTBSY.
		for i := 0; io.attached > 0 && i < releaseWaits; i++ {
			io.mu.Unlock()
			time.Sleep(releaseWait)
			io.mu.Lock()
		}
		if io.attached > 0 {
			h.close()
			return nil, 0, syscall.ETXTBSY
		}
		h.mode = ioCached
		io.cached++
		io.open = append(io.open, h)
		return h, fuse.FOPEN_NOFLUSH, 0
	}
	io.open = append(io.open, h)
	key := cancelOf(ctx)
	if created && key != nil && io.cached == 0 && io.attached == 0 && n.f.backing(io, h.fd) {
		h.mode, h.attached = ioWriter, true
		io.attached++
		n.f.pending.Store(key, io.backingID)
		return h, fuse.FOPEN_NOFLUSH, 0
	}
	h.mode = ioDirect
	if key != nil && io.attached > 0 {
		h.attached = true
		io.attached++
		n.f.pending.Store(key, io.backingID)
	}
	return h, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NOFLUSH, 0
}

// releaseWait and releaseWaits bound how long a read-write open waits for the
// RELEASE of a passthrough file the kernel has already closed: 20 ms in all.
const (
	releaseWait  = 200 * time.Microsecond
	releaseWaits = 100
)

// released uncounts h at RELEASE, and unregisters the backing file after the last
// file tied to it.
func (h *handle) released() {
	if h.n == nil {
		return
	}
	io := &h.n.io
	io.mu.Lock()
	defer io.mu.Unlock()
	if i := slices.Index(io.open, h); i >= 0 {
		io.open = slices.Delete(io.open, i, i+1)
	}
	switch {
	case h.attached:
		io.attached--
		if io.attached == 0 && io.backingID != 0 {
			if errno := h.n.f.server.UnregisterBackingFd(io.backingID); errno != 0 {
				h.n.f.logf("unregistering backing file %d: %v", io.backingID, errno)
			}
			io.backingID = 0
		}
	case h.mode == ioCached:
		io.cached--
	}
}

// killSetID clears the set-user-ID bit, and the set-group-ID bit of a
// group-executable file (the bits the kernel itself clears for a FUSE file
// system, fs/fuse/dir.c fuse_setattr), of the file fd holds: the daemon runs
// with CAP_FSETID, so the host keeps them on its writes, truncations and opens.
//
// The mount negotiates FUSE_HANDLE_KILLPRIV_V2, which leaves that to the daemon
// wherever a caller without CAP_FSETID changes a file (Linux 5.11; checked in
// 6.18), and lets the kernel skip the security.capability lookup it otherwise
// sends before every write (SB_NOSEC): a truncation carries FATTR_KILL_SUIDGID,
// an O_TRUNC open FUSE_OPEN_KILL_SUIDGID, and a write through the page cache or
// a passthrough writer, like chown(f, -1, -1), an otherwise empty SETATTR
// (what is left of the kernel's ATTR_KILL_SUID|ATTR_KILL_SGID). A chown of the
// host file as root clears them on its own. Direct writes (write-only
// descriptors) reach no kill decision of the kernel's: the fence clears the bits
// before every one, for every writer, root included (a local file system keeps
// them for root). Where the kernel does not take FUSE_HANDLE_KILLPRIV_V2, an
// O_TRUNC open clears them for every caller too (the kernel's own clearing is
// lost with atomic O_TRUNC).
//
// fd may be an O_PATH descriptor (chmodFd).
func killSetID(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	kill := killBits(st.Mode)
	if kill == 0 {
		return nil
	}
	return chmodFd(fd, procFd(fd), st.Mode&0o7777&^kill)
}

// killBits are the bits of mode killSetID clears.
func killBits(mode uint32) uint32 {
	kill := mode & unix.S_ISUID
	if mode&unix.S_IXGRP != 0 {
		kill |= mode & unix.S_ISGID
	}
	return kill
}
