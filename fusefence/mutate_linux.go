package fusefence

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Namespace mutations: each judges the name in its parent (formEntry) and acts on
// it with an *at call relative to the verified parent descriptor.

var _ = (fs.NodeMkdirer)((*node)(nil))

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	s := n.f.acquire()
	defer s.release()
	// reachInode: an empty directory at an ancestor of a protected path (mkdir .git)
	// is harmless, since the protected path beneath it stays denied.
	g, errno := n.f.judgeEntry(ctx, s, "mkdir", n, childRel(n.rel(), name), reachInode)
	if errno != 0 {
		return nil, errno
	}
	defer g.release()
	dirFd, base, errno := g.parent()
	if errno != 0 {
		return nil, errno
	}
	defer unix.Close(dirFd)
	if err := g.createAsCaller(func() error { return unix.Mkdirat(dirFd, base, mode&0o7777) }); err != nil {
		return nil, toErrno(err)
	}
	g.touched()
	return n.newEntry(ctx, dirFd, base, out)
}

var _ = (fs.NodeMknoder)((*node)(nil))

// Mknod denies device nodes in every mode, danger-full-access included: a device
// node is a door to whatever it names, not a file effect the modes describe. FIFOs,
// sockets and regular files follow the policy.
func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	s := n.f.acquire()
	defer s.release()
	rel := childRel(n.rel(), name)
	switch mode & unix.S_IFMT {
	case unix.S_IFCHR, unix.S_IFBLK:
		return nil, n.f.deny(ctx, s, "mknod", rel, n.f.canonical(rel, formEntry), RuleDeviceNode)
	case unix.S_IFREG, unix.S_IFIFO, unix.S_IFSOCK, 0:
	default:
		return nil, syscall.EINVAL
	}
	g, errno := n.f.judgeEntry(ctx, s, "mknod", n, rel, reachCarrier)
	if errno != 0 {
		return nil, errno
	}
	defer g.release()
	dirFd, base, errno := g.parent()
	if errno != 0 {
		return nil, errno
	}
	defer unix.Close(dirFd)
	if err := g.createAsCaller(func() error { return unix.Mknodat(dirFd, base, mode, int(dev)) }); err != nil {
		return nil, toErrno(err)
	}
	g.touched()
	return n.newEntry(ctx, dirFd, base, out)
}

var _ = (fs.NodeSymlinker)((*node)(nil))

// Symlink creates any link text: a link is judged where it leads only when
// something is done through it. A link the mirror will not expose (its text could
// leave the mount) must still be answered as a symlink; its dentry is invalidated
// right after, so the next lookup shows it as what it leads to.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	s := n.f.acquire()
	defer s.release()
	rel := childRel(n.rel(), name)
	g, errno := n.f.judgeEntry(ctx, s, "symlink", n, rel, reachCarrier)
	if errno != 0 {
		return nil, errno
	}
	defer g.release()
	dirFd, base, errno := g.parent()
	if errno != 0 {
		return nil, errno
	}
	defer unix.Close(dirFd)
	if err := g.createAsCaller(func() error { return unix.Symlinkat(target, dirFd, base) }); err != nil {
		return nil, toErrno(err)
	}
	g.touched()
	child, errno := n.newEntry(ctx, dirFd, base, out)
	if errno == 0 && !SafeLinkText(target, depthOf(n.rel())) {
		n.notifyEntryLater(name)
	}
	return child, errno
}

var _ = (fs.NodeLinker)((*node)(nil))

// Link judges both ends. The source is what the source node leads to (a symlink
// node is linked itself, as link(2) does): it must lie in a writable root, or a
// hard link would carry an outside file in where it could be written, must not be
// protected (its link count and ctime change), and must have no other name yet
// (rule multiply-linked, below). The new name is a carrier.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	src, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	s := n.f.acquire()
	defer s.release()
	rel := childRel(n.rel(), name)
	fm := formInode
	if src.isSymlink() {
		fm = formEntry
	}
	gs, errno := n.f.judge(ctx, s, "link", src.rel(), fm, reachInode)
	if errno != 0 {
		return nil, errno
	}
	defer gs.release()
	gd, errno := n.f.judgeEntry(ctx, s, "link", n, rel, reachCarrier)
	if errno != 0 {
		return nil, errno
	}
	defer gd.release()
	if gs.p.Rel == "." {
		return nil, syscall.EPERM // a writable root is a directory
	}
	sDir, sBase, errno := gs.parent()
	if errno != 0 {
		return nil, errno
	}
	defer unix.Close(sDir)
	// The kernel checked the caller (protected_hardlinks) against src's inode: link
	// that inode. As root (the case where the daemon acts for other users) the
	// checked descriptor itself is linked; otherwise the name, checked just before.
	sFd, err := unix.Openat(sDir, sBase, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, toErrno(err)
	}
	defer unix.Close(sFd)
	var sst unix.Stat_t
	if err := unix.Fstat(sFd, &sst); err != nil {
		return nil, toErrno(err)
	}
	if !src.isNode(&sst, 0) {
		return nil, syscall.ESTALE
	}
	// A source that already has other names is judged at one of them: the node's
	// name is whichever was looked up last, and another may lie outside every
	// root (a host link "ws/hl" to "out/canary" let "ln out/canary ws/c2" through,
	// judged at ws/hl; found by review). Its content is safe (multiply-linked
	// files are never written), but its link count and ctime are not the
	// command's to change, so such a source is refused like a write to it.
	if errno := gs.singleLink(&sst); errno != 0 {
		return nil, errno
	}
	dDir, dBase, errno := gd.parent()
	if errno != 0 {
		return nil, errno
	}
	defer unix.Close(dDir)
	if n.f.asRoot() {
		err = unix.Linkat(sFd, "", dDir, dBase, unix.AT_EMPTY_PATH)
	} else {
		err = unix.Linkat(sDir, sBase, dDir, dBase, 0)
	}
	if err != nil {
		return nil, toErrno(err)
	}
	gd.touched()
	if src.isSymlink() {
		// A symlink with two names is shown as what it leads to (see linkText): have
		// the kernel look both names up again rather than keep a link whose text
		// Readlink now refuses.
		go n.f.invalidate(src.rel())
		n.notifyEntryLater(name)
	}
	return n.newEntry(ctx, dDir, dBase, out)
}

var _ = (fs.NodeUnlinker)((*node)(nil))

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(ctx, "unlink", name, 0)
}

var _ = (fs.NodeRmdirer)((*node)(nil))

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(ctx, "rmdir", name, unix.AT_REMOVEDIR)
}

// remove unlinks one name. Removing a strict ancestor of a protected path is
// allowed: rmdir needs it empty, and a non-directory holds nothing.
//
// The name is judged as itself (formEntry), never what it leads to. A host symlink
// the mirror shows as the directory it leads to (see linkText) gets RMDIR from the
// kernel: the link itself is removed, as rm(1) removes a link on the host, and
// whatever it leads to stays untouched.
func (n *node) remove(ctx context.Context, op, name string, flags int) syscall.Errno {
	s := n.f.acquire()
	defer s.release()
	g, errno := n.f.judgeEntry(ctx, s, op, n, childRel(n.rel(), name), reachInode)
	if errno != 0 {
		return errno
	}
	defer g.release()
	dirFd, base, errno := g.parent()
	if errno != 0 {
		return errno
	}
	defer unix.Close(dirFd)
	var st unix.Stat_t
	if errno := n.holdsEntry(ctx, name, dirFd, base, &st); errno != 0 {
		return errno
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		flags &^= unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(dirFd, base, flags); err != nil {
		return toErrno(err)
	}
	g.touched()
	return 0
}

var _ = (fs.NodeRenamer)((*node)(nil))

// Rename judges both ends as carriers (RENAME_EXCHANGE moves both ways, and a
// plain rename removes the source's name and replaces the destination), then
// renames between the two verified parents. A plain rename onto the HEAD of a
// submodule git directory in use is checked and performed as a copy (renameHead). RENAME_WHITEOUT, which leaves a
// character device (0:0) in the source's place, is denied like any device node, in
// every mode and with its record; other flags besides RENAME_NOREPLACE and
// RENAME_EXCHANGE are invalid.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags&^(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE|unix.RENAME_WHITEOUT) != 0 {
		return syscall.EINVAL
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	s := n.f.acquire()
	defer s.release()
	if flags&unix.RENAME_WHITEOUT != 0 {
		rel := childRel(n.rel(), name)
		return n.f.deny(ctx, s, "rename", rel, n.f.canonical(rel, formEntry), RuleDeviceNode)
	}
	g1, errno := n.f.judgeEntry(ctx, s, "rename", n, childRel(n.rel(), name), reachCarrier)
	if errno != 0 {
		return errno
	}
	defer g1.release()
	to := reachRenameTo
	if flags&unix.RENAME_EXCHANGE != 0 {
		to = reachCarrier // the destination moves too
	}
	g2, errno := n.f.judgeEntry(ctx, s, "rename", np, childRel(np.rel(), newName), to)
	if errno != 0 {
		return errno
	}
	defer g2.release()
	d1, b1, errno := g1.parent()
	if errno != 0 {
		return errno
	}
	defer unix.Close(d1)
	d2, b2, errno := g2.parent()
	if errno != 0 {
		return errno
	}
	defer unix.Close(d2)
	var st unix.Stat_t
	if errno := n.holdsEntry(ctx, name, d1, b1, &st); errno != 0 {
		return errno
	}
	if errno := np.holdsEntry(ctx, newName, d2, b2, &st); errno != 0 {
		return errno
	}
	if g2.p.head {
		errno := n.renameHead(ctx, s, g1, g2, d1, b1, d2, b2, flags)
		if errno == 0 {
			// The kernel now takes the source's inode for HEAD: have it look the
			// name up again and find the copy.
			np.notifyEntryLater(newName)
		}
		return errno
	}
	if err := unix.Renameat2(d1, b1, d2, b2, uint(flags)); err != nil {
		return toErrno(err)
	}
	g1.touched()
	g2.touched()
	// A symlink's exposure depends on its depth: have the kernel look the moved
	// names up again instead of trusting the old verdict.
	if ch := n.GetChild(name); ch != nil && ch.StableAttr().Mode == unix.S_IFLNK {
		np.notifyEntryLater(newName)
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		if ch := np.GetChild(newName); ch != nil && ch.StableAttr().Mode == unix.S_IFLNK {
			n.notifyEntryLater(name)
		}
	}
	return 0
}

// newEntry answers a creation with the new entry as it is on the host (lstat
// relative to the verified parent).
func (n *node) newEntry(ctx context.Context, dirFd int, base string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var st unix.Stat_t
	gen, err := statxAt(dirFd, base, unix.AT_SYMLINK_NOFOLLOW, &st)
	if err != nil {
		return nil, toErrno(err)
	}
	out.Attr.FromStat(sysStat(&st))
	return n.NewInode(ctx, &node{f: n.f}, n.f.stable(&st, gen)), 0
}

// notifyEntryLater invalidates the kernel's dentry for name in n once the current
// request is answered. It must not happen inside the request: the kernel holds the
// directory's lock until the answer, and the notification waits for that lock.
func (n *node) notifyEntryLater(name string) {
	go n.NotifyEntry(name)
}

func depthOf(rel string) int {
	if rel == "" {
		return 0
	}
	d := 1
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' {
			d++
		}
	}
	return d
}
