package fusefence

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
)

// node is one file, directory or symlink of the mirror. It holds no host path:
// every request recomputes the host path from the node's position in the tree,
// and every mutation re-resolves it (see judge). A directory node may hold, for
// reads of its entries only and for at most the cache timeout, the host directory
// a read opened (see dirCache).
type node struct {
	fs.Inode
	f  *fence
	io nodeIO
	// listing is a listing of this directory in progress: READDIRPLUS looks each
	// entry up right after listing it, and those lookups stat the name relative to
	// the listing's own descriptor instead of opening the directory again.
	listing atomic.Pointer[hostDir]
	// dirc is the host directory of a directory node, kept for reads of its
	// entries for at most the cache timeout (see dirCache).
	dirc dirCache
}

var _ = (fs.NodeOnForgetter)((*node)(nil))

// OnForget closes the node's cached directory; a node revived afterwards opens
// it again when needed.
func (n *node) OnForget() { n.f.dropDir(&n.dirc) }

// isNode reports whether st (with gen, 0 when unknown) is the host object n stands
// for: the inode whose attributes the kernel checked the caller's permissions
// against before sending the request. Anything else found at n's place (a symlink
// retargeted or a name replaced outside the mount, within the cache timeout) must
// not be opened or changed in n's name: the daemon, root when other users see the
// mount, would read or change it for a caller the kernel never checked against it.
// The caller answers ESTALE, on which the kernel looks the name up again (for a
// path-based call) and checks the fresh attributes.
func (n *node) isNode(st *unix.Stat_t, gen uint64) bool {
	want := n.StableAttr()
	got := n.f.stable(st, gen)
	if got.Ino != want.Ino || got.Mode != want.Mode {
		return false
	}
	return gen == 0 || n == n.f.root || got.Gen == want.Gen
}

// stale is the answer for a host object that is not n's inode (see isNode):
// ESTALE. For the root it means SOURCE itself was replaced or moved on the host,
// which no lookup can repair: said once, loudly.
func (n *node) stale() syscall.Errno {
	if n == n.f.root && n.f.sourceGone.CompareAndSwap(false, true) {
		n.f.logf("SOURCE %s is no longer the directory that was mounted (replaced or moved on the host): requests answer ESTALE until it is again, or until toh-mount is started anew", n.f.source)
	}
	return syscall.ESTALE
}

// holdsNode checks that fd is n's inode (see isNode), filling st; otherwise it
// closes fd and answers ESTALE.
func (n *node) holdsNode(fd int, st *unix.Stat_t) syscall.Errno {
	gen, err := statxFd(fd, st)
	if err == nil && !n.isNode(st, gen) {
		err = n.stale()
	}
	if err != nil {
		unix.Close(fd)
		return toErrno(err)
	}
	return 0
}

// holdsEntry checks, before a name is removed or replaced in directory node n,
// that the host entry base of the verified parent dirFd (n's name) is what the
// kernel knows under that name: the inode it checked the caller against (the
// sticky bit's owner test, the write permission a directory moved to another parent
// needs), or no entry when it knows none (a rename onto a name it saw as free).
// Anything else appeared on the host within the cache timeout; as root the daemon
// would remove another user's file from a sticky directory for the caller. It
// answers ESTALE, on which the kernel looks the name up again and checks what is
// there now. st is the host entry itself (lstat), zero when there is none.
func (n *node) holdsEntry(ctx context.Context, name string, dirFd int, base string, st *unix.Stat_t) syscall.Errno {
	gen, err := statxAt(dirFd, base, unix.AT_SYMLINK_NOFOLLOW, st)
	if err == unix.ENOENT {
		*st = unix.Stat_t{}
		return 0 // nothing there to act on: the call itself answers
	}
	if err != nil {
		return toErrno(err)
	}
	isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK
	ch := n.GetChild(name)
	if ch == nil {
		if isLink {
			// A link that leads nowhere is not shown (see present): the kernel saw
			// the name free, as the mirror shows it.
			if _, _, errno := n.f.presentIn(n, childRel(n.rel(), name)); errno == syscall.ENOENT {
				return n.f.mayReplaceHidden(ctx, dirFd, st)
			}
		}
		return syscall.ESTALE
	}
	c, ok := ch.Operations().(*node)
	if !ok {
		return syscall.ESTALE
	}
	if isLink && !c.isSymlink() {
		// A link the mirror shows as what it leads to (see present).
		shown, gen, errno := n.f.presentIn(n, childRel(n.rel(), name))
		if errno != 0 || !c.isNode(&shown, gen) {
			return syscall.ESTALE
		}
		return 0
	}
	if !c.isNode(st, gen) {
		return syscall.ESTALE
	}
	return 0
}

// mayReplaceHidden applies the sticky bit's rule, which the kernel could not (it
// saw no entry), to a link the mirror does not show (st) that a rename is about to
// replace in the directory dirFd: in a sticky directory only the link's owner, the
// directory's, or a caller with the daemon's rights may.
func (f *fence) mayReplaceHidden(ctx context.Context, dirFd int, st *unix.Stat_t) syscall.Errno {
	if f.ownRights(ctx) {
		return 0
	}
	c, ok := fuse.FromContext(ctx)
	var dst unix.Stat_t
	if !ok || unix.Fstat(dirFd, &dst) != nil {
		return syscall.EACCES
	}
	if dst.Mode&unix.S_ISVTX != 0 && st.Uid != c.Uid && dst.Uid != c.Uid {
		return syscall.EPERM
	}
	return 0
}

// openNode opens n's host object for reading, and only that object (see isNode),
// filling st. O_NONBLOCK keeps a FIFO found there from holding the request; the
// caller's own O_NONBLOCK is restored on a file (a directory's listing ignores it).
func (n *node) openNode(ctx context.Context, op string, flags int, st *unix.Stat_t) (int, syscall.Errno) {
	rel := n.rel()
	fd, errno := n.f.openRead(n.parentNode(), rel, flags|unix.O_NONBLOCK)
	if errno != 0 {
		return -1, errno
	}
	if errno := n.holdsNode(fd, st); errno != 0 {
		return -1, errno
	}
	if errno := n.f.reachable(ctx, nil, op, fd, rel); errno != 0 {
		unix.Close(fd)
		return -1, errno
	}
	if flags&(unix.O_NONBLOCK|unix.O_DIRECTORY) == 0 {
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err == nil {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
		if err != nil {
			unix.Close(fd)
			return -1, toErrno(err)
		}
	}
	return fd, 0
}

// parentNode is n's parent directory node; nil for the root, or a node no longer
// in the tree.
func (n *node) parentNode() *node {
	_, p := n.EmbeddedInode().Parent()
	if p == nil {
		return nil
	}
	pn, _ := p.Operations().(*node)
	return pn
}

// rel is the node's mount-relative path ("" for the root), found by walking its
// parents (a directory has one in go-fuse: the name it was last looked up by).
// Lookup keeps directories from becoming their own ancestors (see [node.Lookup]);
// should a chain still fail to reach the root (a node removed from the tree, or a
// cycle that two racing lookups closed), the walk stops after maxTreeDepth steps
// and the path names a directory that does not exist, so requests on the node fail
// with ENOENT instead of looping (go-fuse's Inode.Path would allocate forever).
func (n *node) rel() string {
	root := n.f.root.EmbeddedInode()
	var buf [24]string // most paths are shallower: no allocation but the result
	segs := buf[:0]
	p := n.EmbeddedInode()
	for p != root {
		name, parent := p.Parent()
		if parent == nil || len(segs) >= maxTreeDepth {
			segs = append(segs, unreachable, fmt.Sprintf(".toh-unreachable-%d", rand.Uint64()))
			break
		}
		segs = append(segs, name)
		p = parent
	}
	slices.Reverse(segs)
	return strings.Join(segs, "/")
}

// maxTreeDepth bounds a walk up the node tree. A node deeper than that has a host
// path longer than PATH_MAX (4096 bytes, two per level at least), which no host
// call the fence makes would take anyway.
const maxTreeDepth = 4096

// unreachable is the last component of the path of a node whose chain of parents
// does not reach the root; with the random name before it, no host path matches.
const unreachable = "deleted"

func childRel(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "/" + name
}

func (n *node) isSymlink() bool { return n.StableAttr().Mode == unix.S_IFLNK }

var _ = (fs.NodeLookuper)((*node)(nil))

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n == n.f.root {
		if p := n.f.probe.Load(); p != nil && name == *p {
			n.f.probed.Store(true) // openOwnRoot's question: this mount is ours
			return nil, syscall.ENOENT
		}
	}
	return n.lookup(ctx, name, out, false)
}

// lookup looks name up for the caller of ctx. Something found away from its own
// place in SOURCE (through a link the mirror shows as what it leads to, at this
// name or above it) is looked up only for a caller who could reach it on the host
// (see reachableAt). A name that is itself such a link is the entry point into
// directories whose ancestors the kernel never checked, and its dentry would let
// the next caller walk through without a LOOKUP; so on a mount other users see it
// is never cached: every walk through it is a LOOKUP here, and a READDIRPLUS
// (listing) answers it as a plain entry, which makes no dentry. Below it the
// kernel checks each caller against the modes the mirror shows, as anywhere.
func (n *node) lookup(ctx context.Context, name string, out *fuse.EntryOut, listing bool) (*fs.Inode, syscall.Errno) {
	sh, errno := n.showChild(ctx, name)
	if errno != 0 {
		return nil, errno
	}
	op := "lookup"
	if listing {
		op = "" // refused entries are listed as plain ones (see refuse)
	}
	if sh.ownerOnly && !callerIs(ctx, sh.linkUID) {
		return nil, n.f.refuse(ctx, nil, op, childRel(n.rel(), name), sh.link, RuleProtectedSymlink)
	}
	if sh.away && !n.f.ownRights(ctx) { // (the name's rel is built only for a check that may refuse)
		if errno := n.f.reachableAt(ctx, nil, op, childRel(n.rel(), name), sh.at); errno != 0 {
			return nil, errno
		}
	}
	if sh.followed && n.f.shared {
		if listing {
			return nil, syscall.EEXIST
		}
		uncachedEntry(out)
	}
	st, gen := sh.st, sh.gen
	id := n.f.stable(&st, gen)
	if id.Mode == unix.S_IFDIR && n.hasAncestor(id.Ino) {
		// A directory shown under a name below itself (an escaping link to an
		// ancestor, a bind mount of one): go-fuse gives a directory one parent, so
		// linking it here would make its chain of parents a cycle. The kernel
		// refuses such an alias with ELOOP too.
		return nil, syscall.ELOOP
	}
	out.Attr.FromStat(sysStat(&st))
	return n.NewInode(ctx, &node{f: n.f}, id), 0
}

// hasAncestor reports whether the node with inode number ino is n or one of its
// ancestors; a chain longer than maxTreeDepth counts as one (it is a cycle).
func (n *node) hasAncestor(ino uint64) bool {
	p := n.EmbeddedInode()
	for range maxTreeDepth {
		if p == nil {
			return false
		}
		if p.StableAttr().Ino == ino {
			return true
		}
		_, p = p.Parent()
	}
	return true
}

// present returns what the mirror shows at rel: the host entry itself; for a
// symlink, the link with the text linkText gives it (its size that text's
// length), or, when it has none, what the link leads to. A link shown as its
// target that leads nowhere is not shown at all (ENOENT); creating at its name
// goes through the fence and lands where it points, if allowed.
//
// The name's directory is reached by a walk from "/" that follows no symlink; when
// there is one on the way (the directory is a link shown as what it leads to), the
// directory is canonicalized without looking anything up inside this mount, since
// the kernel may hold the very directory a walk through such a link would need
// (see throughLink).
func (f *fence) present(rel string) (st unix.Stat_t, gen uint64, errno syscall.Errno) {
	return f.presentIn(nil, rel)
}

// presentIn is present for an entry of the directory node dir (nil: unknown),
// through dir's cached directory.
func (f *fence) presentIn(dir *node, rel string) (st unix.Stat_t, gen uint64, errno syscall.Errno) {
	sh, errno := f.showIn(dir, rel)
	return sh.st, sh.gen, errno
}

// shown is what the mirror shows at a name (see present).
type shown struct {
	st  unix.Stat_t
	gen uint64
	// at is the canonical host path of what is shown; away reports that it is not
	// the name's own place in SOURCE (a link shown as what it leads to, at the
	// name or on the way to it), followed that the name itself is such a link.
	at             string
	away, followed bool
	// ownerOnly: the link followed, at the host path link, may be followed only by
	// linkUID (see ownerOnly).
	ownerOnly bool
	linkUID   uint32
	link      string
}

// showIn is presentIn, saying where what it shows is.
func (f *fence) showIn(dir *node, rel string) (sh shown, errno syscall.Errno) {
	if rel == "" {
		sh.at = f.host(rel) // SOURCE, canonical
		gen, err := statx(sh.at, unix.AT_SYMLINK_NOFOLLOW, &sh.st)
		sh.gen = gen
		return sh, toErrno(err)
	}
	p, errno := f.hostParentIn(dir, rel)
	if errno != 0 {
		return sh, errno
	}
	defer p.close()
	var err error
	if sh.gen, err = p.statx(&sh.st); err != nil {
		return sh, toErrno(err)
	}
	sh.at = p.join()
	sh.away = p.path != f.host(parentRel(rel))
	if sh.st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if text, ok := f.linkText(p, rel, &sh.st); ok {
			sh.st.Size = int64(len(text))
		} else if target, errno := f.throughLink(sh.at); errno != 0 {
			return sh, errno
		} else {
			sh.ownerOnly, sh.linkUID, sh.link = f.ownerOnly(p, &sh.st), sh.st.Uid, sh.at
			if sh.gen, err = f.statCanonical(target, &sh.st); err != nil {
				if err == unix.ELOOP {
					// A directory on the way was swapped for a link since the
					// target was resolved (see statxNoLinks): a race, answered as
					// one, and not cached by the kernel as an absent name.
					return sh, syscall.ELOOP
				}
				return sh, syscall.ENOENT
			}
			sh.at, sh.away, sh.followed = target, true, true
		}
	}
	return sh, 0
}

// showChild is showIn for the child name of n, through n's listing in progress
// when there is one, the name is no symlink, and the caller of ctx has the
// daemon's rights (such a caller is never refused what lies away from its place,
// see reachableAt, so where it lies does not matter).
func (n *node) showChild(ctx context.Context, name string) (sh shown, errno syscall.Errno) {
	if h := n.listing.Load(); h != nil && n.f.ownRights(ctx) {
		if gen, ok := h.lstat(name, &sh.st); ok && sh.st.Mode&unix.S_IFMT != unix.S_IFLNK {
			sh.gen = gen
			return sh, 0
		}
	}
	return n.f.showIn(n, childRel(n.rel(), name))
}

// hostParentDir is the host directory of a name the mirror shows, opened so that
// operations on the name never walk through this mount (see hostParent).
type hostParentDir struct {
	fd   int       // O_PATH directory, or -1 without openat2 (then path is used)
	path string    // its canonical host path
	base string    // the name
	held *dirCache // fd is this cache's, held for reading until close
}

// hostParent opens the host directory holding rel's last name (rel != ""). A
// read by host path would follow every symlink on the way, and one that leads
// into this mount makes the daemon a client of itself: a lookup under a directory
// the kernel holds locked waits forever, an open or stat recurses, one blocked
// thread per round. So the directory is opened by an openat2 from "/" that
// follows no symlink; when one is on the way (a directory shown as what a link
// leads to), the directory is canonicalized without lookups inside the mount
// (ELOOP when it leads there) and that spelling is opened the same way.
func (f *fence) hostParent(rel string) (hostParentDir, syscall.Errno) {
	hostDir := f.host(parentRel(rel))
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	if fd, ok := f.openCanonicalDir(hostDir); ok {
		return hostParentDir{fd: fd, path: hostDir, base: base}, 0
	}
	c, errno := f.throughLink(hostDir)
	if errno != 0 {
		return hostParentDir{}, errno
	}
	if fd, ok := f.openCanonicalDir(c); ok {
		return hostParentDir{fd: fd, path: c, base: base}, 0
	}
	// No openat2, the directory is missing, or it changed again since it was
	// canonicalized: calls by the canonical path fail, or follow a new link one
	// level deep, where the next request is checked again.
	return hostParentDir{fd: -1, path: c, base: base}, 0
}

func (p hostParentDir) close() {
	if p.held != nil {
		p.held.mu.RUnlock()
		return
	}
	if p.fd >= 0 {
		unix.Close(p.fd)
	}
}

// join is the name's host path through the canonical directory.
func (p hostParentDir) join() string { return path.Join(p.path, p.base) }

// statx is lstat of the name.
func (p hostParentDir) statx(st *unix.Stat_t) (uint64, error) {
	if p.fd >= 0 {
		return statxAt(p.fd, p.base, unix.AT_SYMLINK_NOFOLLOW, st)
	}
	return statxNoLinks(p.join(), true, st)
}

// readlink reads the name, a symlink.
func (p hostParentDir) readlink() (string, error) {
	if p.fd >= 0 {
		return readlinkAt(p.fd, p.base)
	}
	return readlinkAt(unix.AT_FDCWD, p.join())
}

// open opens the name itself, never following it.
func (p hostParentDir) open(flags int) (int, error) {
	if p.fd >= 0 {
		return unix.Openat(p.fd, p.base, flags|unix.O_NOFOLLOW, 0)
	}
	return unix.Open(p.join(), flags|unix.O_NOFOLLOW, 0)
}

// openRead opens the host entry at rel for a read (flags without O_CREAT): the
// entry itself, or, when it is a symlink the mirror shows as what it leads to,
// that target, never one inside this mount (see hostParent).
func (f *fence) openRead(dir *node, rel string, flags int) (int, syscall.Errno) {
	if rel == "" {
		fd, err := unix.Open(f.host(rel), flags, 0)
		return fd, toErrno(err)
	}
	p, errno := f.hostParentIn(dir, rel)
	if errno != 0 {
		return -1, errno
	}
	defer p.close()
	fd, err := p.open(flags)
	var st unix.Stat_t
	// A symlink under O_NOFOLLOW is ELOOP, or ENOTDIR with O_DIRECTORY.
	if (err == unix.ELOOP || err == unix.ENOTDIR) && isLink(p, &st) {
		target, errno := f.throughLink(p.join())
		if errno != 0 {
			return -1, errno
		}
		fd, err = unix.Open(target, flags|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		return -1, toErrno(err)
	}
	return fd, 0
}

func isLink(p hostParentDir, st *unix.Stat_t) bool {
	_, err := p.statx(st)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// openPath opens what a path-based read of rel acts on (see readTarget) as
// O_PATH, never following it, and stats it into st: the entry through its
// directory's descriptor (usually the directory cache's), or, when the entry is a
// symlink the mirror shows as what it leads to, that target. The kernel asks for
// security.capability before every write(2) to a file (is there a capability to
// drop?), so this is on the way of each file written.
func (f *fence) openPath(dir *node, rel string, st *unix.Stat_t) (fd int, gen uint64, errno syscall.Errno) {
	if rel != "" {
		p, errno := f.hostParentIn(dir, rel)
		if errno != 0 {
			return -1, 0, errno
		}
		fd, err := p.open(unix.O_PATH | unix.O_CLOEXEC)
		p.close()
		if err != nil {
			return -1, 0, toErrno(err)
		}
		gen, err := statxFd(fd, st)
		if err != nil {
			unix.Close(fd)
			return -1, 0, toErrno(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			return fd, gen, 0
		}
		unix.Close(fd)
	}
	target, errno := f.readTarget(dir, rel)
	if errno != 0 {
		return -1, 0, errno
	}
	fd, err := unix.Open(target, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, 0, toErrno(err)
	}
	if gen, err = statxFd(fd, st); err != nil {
		unix.Close(fd)
		return -1, 0, toErrno(err)
	}
	return fd, gen, 0
}

// statFollow is stat(2) of rel's host entry as a read sees it: a symlink there is
// followed to its canonical target, never into this mount (see hostParent).
func (f *fence) statFollow(dir *node, rel string, st *unix.Stat_t) syscall.Errno {
	target, errno := f.readTarget(dir, rel)
	if errno != 0 {
		return errno
	}
	_, err := f.statCanonical(target, st)
	return toErrno(err)
}

// statCanonical is stat(2) of target, a canonical path, following no symlink at all
// (see statxNoLinks).
func (f *fence) statCanonical(target string, st *unix.Stat_t) (uint64, error) {
	return statxNoLinks(target, false, st)
}

// statxNoLinks is statx(2) of the canonical path p, opened by canon.OpenNoSymlinks,
// or the plain statx by path where openat2 is missing. A directory on p swapped for
// a link since p was canonicalized, by a racer on the host, fails with ELOOP instead
// of being followed: followed into this very mount, the lookup could wait for a
// directory lock the kernel holds for the request being served, which waits for the
// thread making the lookup, and the mount would hang for good (found by review; see
// canon.CanonicalAvoiding).
func statxNoLinks(p string, nofollow bool, st *unix.Stat_t) (uint64, error) {
	fd, err := canon.OpenNoSymlinks(p, nofollow)
	if err == unix.ENOSYS {
		flags := 0
		if nofollow {
			flags = unix.AT_SYMLINK_NOFOLLOW
		}
		return statx(p, flags, st)
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return statxFd(fd, st)
}

// readTarget is the host path a path-based read of rel (stat, xattrs, statfs)
// acts on: the name through its canonical directory, or the canonical target of
// the symlink there. Both are canonical, so the call's own walk follows no link
// unless the tree changes under it, and then one level deep only.
func (f *fence) readTarget(dir *node, rel string) (string, syscall.Errno) {
	if rel == "" {
		return f.host(rel), 0
	}
	p, errno := f.hostParentIn(dir, rel)
	if errno != 0 {
		return "", errno
	}
	defer p.close()
	var st unix.Stat_t
	if isLink(p, &st) {
		return f.throughLink(p.join())
	}
	return p.join(), 0
}

// throughLink is what the host symlink at host leads to, canonical, found without
// looking anything up inside this mount: ELOOP when it leads back into the mount,
// whose daemon would otherwise be asking itself, possibly for a directory the kernel
// holds locked for the very request being answered (see RuleOwnMount).
func (f *fence) throughLink(host string) (string, syscall.Errno) {
	target, ok := f.canon(host)
	if !ok || f.mountpoint != "" && canon.LexicallyWithin(target, f.mountpoint) {
		return "", syscall.ELOOP
	}
	return target, 0
}

// linkText returns the text the mirror shows for the host symlink at rel (st is
// its lstat), or false when the link must be shown as what it leads to. The
// kernel resolves a FUSE symlink itself, so a text that leaves the mount would let
// writes land outside without ever reaching the fence. A link is shown only when
// its directory is reached without symlinks on the host (so the mount and the host
// agree on what ".." means there) and it has a single link (a hard-linked symlink
// sits at several depths at once); then:
//
//   - a text that climbs ("..") only at its start and no higher than the mount
//     root (SafeLinkText) is shown as it is;
//   - any other text (absolute, or climbing out and back) that leads to an
//     existing entry inside SOURCE is shown as the relative text from the link's
//     directory to that entry's canonical path, which SafeLinkText accepts too: the
//     link stays a link (unlink removes it, rm -r does not descend into it) and no
//     directory appears under a second name.
//
// Every shown link only ever climbs to a real ancestor and then descends, so no
// chain of them can leave the mount.
func (f *fence) linkText(p hostParentDir, rel string, st *unix.Stat_t) (string, bool) {
	dir := parentRel(rel)
	// p is rel's directory (hostParent); it was reached without symlinks exactly
	// when its canonical spelling is still the mirror's.
	if st.Nlink != 1 || p.path != f.host(dir) {
		return "", false
	}
	text, err := p.readlink()
	if err != nil {
		return "", false
	}
	if SafeLinkText(text, depthOf(dir)) {
		return text, true
	}
	// Resolve the text just read, not the name again: by now the name may hold
	// something else (a directory exchanged with the link), and resolving that
	// would show a link that leads to itself.
	dest := text
	if !strings.HasPrefix(dest, "/") {
		dest = f.host(dir) + "/" + text
	}
	// Canonical first, never looking inside this mount, then the stat, which walks
	// only the canonical components.
	target, ok := f.canon(dest)
	if !ok || !canon.LexicallyWithin(target, f.source) {
		return "", false
	}
	var tst unix.Stat_t
	if _, err := f.statCanonical(target, &tst); err != nil {
		return "", false
	}
	to := relTo(target, f.source)
	if to == "." {
		to = ""
	}
	text = relativeLink(dir, to)
	return text, SafeLinkText(text, depthOf(dir))
}

// parentRel is the mount-relative directory of rel ("" for the root).
func parentRel(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}

// relativeLink is the symlink text that, in the mount-relative directory dir,
// leads to the mount-relative path to ("" is the root): up to their common
// ancestor, then down.
func relativeLink(dir, to string) string {
	var d, t []string
	if dir != "" {
		d = strings.Split(dir, "/")
	}
	if to != "" {
		t = strings.Split(to, "/")
	}
	i := 0
	for i < len(d) && i < len(t) && d[i] == t[i] {
		i++
	}
	var parts []string
	for range d[i:] {
		parts = append(parts, "..")
	}
	parts = append(parts, t[i:]...)
	if len(parts) == 0 {
		return "."
	}
	return strings.Join(parts, "/")
}

func readlinkAt(dirFd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirFd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

var _ = (fs.NodeGetattrer)((*node)(nil))

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return h.getattr(out)
	}
	var st unix.Stat_t
	rel := n.rel()
	if rel == "" {
		gen, err := statx(n.f.host(rel), unix.AT_SYMLINK_NOFOLLOW, &st) // SOURCE, canonical
		if err != nil {
			return toErrno(err)
		}
		return n.attrOut(&st, gen, out)
	}
	p, errno := n.f.hostParentIn(n.parentNode(), rel)
	if errno != 0 {
		return errno
	}
	defer p.close()
	gen, err := p.statx(&st)
	if err != nil {
		return toErrno(err)
	}
	at, away := p.join(), p.path != n.f.host(parentRel(rel))
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if !n.isSymlink() {
			// An escaping symlink shown as its target: an entry point (see lookup).
			if n.f.ownerOnly(p, &st) && !callerIs(ctx, st.Uid) {
				return n.f.refuse(ctx, nil, "getattr", rel, at, RuleProtectedSymlink)
			}
			target, errno := n.f.throughLink(at)
			if errno != 0 {
				return errno
			}
			if gen, err = n.f.statCanonical(target, &st); err != nil {
				return toErrno(err)
			}
			at, away = target, true
			if n.f.shared {
				uncachedAttr(out)
			}
		} else if text, ok := n.f.linkText(p, rel, &st); ok {
			st.Size = int64(len(text))
		}
	}
	if away {
		if errno := n.f.reachableAt(ctx, nil, "getattr", rel, at); errno != 0 {
			return errno
		}
	}
	return n.attrOut(&st, gen, out)
}

// attrOut answers GETATTR with st if it is n's inode (see isNode). Another object
// at n's name (replaced on the host within the cache timeout) gets ESTALE, on
// which the kernel looks the path up again, rather than its attributes under n's
// node: they would be checked against callers in n's name, and a different type
// makes the kernel mark the inode bad.
func (n *node) attrOut(st *unix.Stat_t, gen uint64, out *fuse.AttrOut) syscall.Errno {
	if !n.isNode(st, gen) {
		return n.stale()
	}
	out.FromStat(sysStat(st))
	return 0
}

var _ = (fs.NodeReadlinker)((*node)(nil))

// Readlink computes the shown text again (linkText): the link may have been renamed
// to a depth where its text would leave the mount, or its target may have moved, or
// it was just made through the mount with a text that leaves it (the kernel holds
// the entry of the SYMLINK answer until the invalidation that follows it lands). A
// link that may no longer be shown, or a name that now holds something else,
// answers ESTALE: the kernel then walks the path again once, looking every name up
// (LOOKUP_REVAL), and gets such a link shown as its target. It answered EIO, and a
// command that made a link out and used it at once failed about one time in five
// (found by review).
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	rel := n.rel()
	if rel == "" {
		return nil, syscall.EIO // the root is SOURCE, a directory
	}
	p, errno := n.f.hostParentIn(n.parentNode(), rel)
	if errno != 0 {
		return nil, errno
	}
	defer p.close()
	var st unix.Stat_t
	if _, err := p.statx(&st); err != nil {
		return nil, toErrno(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return nil, syscall.ESTALE
	}
	text, ok := n.f.linkText(p, rel, &st)
	if !ok {
		return nil, syscall.ESTALE
	}
	return []byte(text), 0
}

var _ = (fs.NodeOpendirHandler)((*node)(nil))

// OpendirHandle lets the kernel keep a directory's listing in its page cache
// (FOPEN_CACHE_DIR): a listing read from the cache costs no request and no host
// listing. The kernel drops the cached listing when it changes the directory
// itself, and when the directory's mtime, refreshed once the attribute timeout
// has passed, differs from the one it was read at; outside changes therefore show
// within the timeout, as for attributes. Where the kernel offers
// FUSE_NO_OPENDIR_SUPPORT the fence answers no OPENDIR at all (see noopendir):
// the kernel then caches listings the same way on its own, and each READDIR opens
// a handle here for itself alone.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{n: n}, fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
}

// dirHandle opens its host directory on first use.
type dirHandle struct {
	n  *node
	mu sync.Mutex
	ds fs.DirStream
}

func (d *dirHandle) stream(ctx context.Context) (fs.DirStream, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ds == nil {
		ds, errno := d.n.Readdir(ctx)
		if errno != 0 {
			return nil, errno
		}
		d.ds = ds
	}
	return d.ds, 0
}

var _ = (fs.FileReaddirenter)((*dirHandle)(nil))

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	ds, errno := d.stream(ctx)
	if errno != 0 || !ds.HasNext() {
		return nil, errno
	}
	e, errno := ds.Next()
	return &e, errno
}

var _ = (fs.FileLookuper)((*dirHandle)(nil))

// Lookup answers an entry of a READDIRPLUS. An entry the kernel holds already (a
// child in the node tree, which go-fuse keeps while the kernel has a reference)
// is answered without attributes: go-fuse leaves its node ID 0 when Lookup fails,
// which the kernel takes as a plain directory entry and leaves its own entry, with
// its own timeout, as it was. A listing of names just looked up (git status stats
// every tracked file, then lists every directory) then costs no host stat and no
// node per entry. Every other entry is looked up as a LOOKUP would be.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if d.n.GetChild(name) != nil {
		return nil, syscall.EEXIST
	}
	return d.n.lookup(ctx, name, out, true)
}

var _ = (fs.FileSeekdirer)((*dirHandle)(nil))

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	ds, errno := d.stream(ctx)
	if errno != 0 {
		return errno
	}
	return ds.(*hostDir).Seekdir(ctx, off)
}

var _ = (fs.FileReleasedirer)((*dirHandle)(nil))

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ds != nil {
		d.ds.Close()
	}
}

var _ = (fs.NodeReaddirer)((*node)(nil))

// Readdir streams the host directory, showing each symlink as Lookup will. Its
// offsets are the host's (d_off) and Seekdir is lseek(2) on the host directory,
// so a listing can go on from any offset it handed out on a fresh handle, which
// is how READDIR arrives without OPENDIR (see noopendir).
func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	rel := n.rel()
	var st unix.Stat_t
	fd, errno := n.openNode(ctx, "readdir", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, &st)
	if errno != 0 {
		return nil, errno
	}
	ds, errno := fs.NewLoopbackDirStreamFd(fd)
	if errno != 0 {
		unix.Close(fd)
		return nil, errno
	}
	h := &hostDir{f: n.f, n: n, rel: rel, dev: uint64(st.Dev), ds: ds, fd: fd}
	n.listing.Store(h)
	return h, 0
}

// hostDir is the listing of the host directory rel as the mirror shows it: an
// escaping symlink shown as its target has that target's type and inode number,
// one that leads nowhere is left out, and inode numbers are mixed with the
// device as Lookup's are (see fence.stable).
type hostDir struct {
	f    *fence
	n    *node
	rel  string
	dev  uint64
	ds   fs.DirStream // go-fuse's loopback stream of the host directory
	next *fuse.DirEntry
	err  syscall.Errno // the host listing's error, reported by Next

	// fd is ds's descriptor, opened as openRead opens (no symlink on the way);
	// closed, under mu, once ds is.
	mu     sync.RWMutex
	fd     int
	closed bool
}

// lstat stats name in the listed directory; false once the listing is closed.
func (h *hostDir) lstat(name string, st *unix.Stat_t) (uint64, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return 0, false
	}
	gen, err := statxAt(h.fd, name, unix.AT_SYMLINK_NOFOLLOW, st)
	return gen, err == nil
}

var _ = (fs.DirStream)((*hostDir)(nil))

func (h *hostDir) HasNext() bool {
	for h.next == nil && h.ds.HasNext() {
		e, errno := h.ds.Next()
		if errno != 0 {
			h.next, h.err = &fuse.DirEntry{}, errno
			return true
		}
		if e.Mode&unix.S_IFMT == unix.S_IFLNK {
			st, gen, errno := h.f.present(childRel(h.rel, e.Name))
			if errno != 0 {
				continue // an escaping symlink that leads nowhere is not shown
			}
			e.Mode = uint32(st.Mode) & unix.S_IFMT
			e.Ino = h.f.stable(&st, gen).Ino
		} else {
			e.Ino = h.f.stable(&unix.Stat_t{Dev: h.dev, Ino: e.Ino}, 0).Ino
		}
		h.next = &e
	}
	return h.next != nil
}

func (h *hostDir) Next() (fuse.DirEntry, syscall.Errno) {
	if !h.HasNext() {
		return fuse.DirEntry{}, syscall.EIO
	}
	e, errno := *h.next, h.err
	h.next, h.err = nil, 0
	return e, errno
}

func (h *hostDir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	h.next, h.err = nil, 0
	return h.ds.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (h *hostDir) Close() {
	h.n.listing.CompareAndSwap(h, nil)
	h.mu.Lock()
	h.closed = true
	h.ds.Close()
	h.mu.Unlock()
}

var _ = (fs.NodeGetxattrer)((*node)(nil))

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	var sz int
	var err error
	if n.isSymlink() {
		fd, errno := n.pathLink(ctx, "getxattr")
		if errno != 0 {
			return 0, errno
		}
		sz, err = getxattrFd(fd, attr, dest)
		unix.Close(fd)
	} else if n.openFd(ctx, func(fd int) { sz, err = unix.Fgetxattr(fd, attr, dest) }) {
		// An open file of the inode answers without a walk. The kernel asks for
		// security.capability before a file's first write and before each chown,
		// while the writer (tar, an editor) still has it open.
	} else if fd, errno := n.pathNode(ctx, "getxattr"); errno != 0 {
		return 0, errno
	} else {
		sz, err = getxattrFd(fd, attr, dest)
		unix.Close(fd)
	}
	return uint32(max(sz, 0)), toErrno(err)
}

// pathNode opens what n leads to as O_PATH, and only the inode n stands for (see
// isNode): xattrs are read through /proc/self/fd, on exactly that inode.
func (n *node) pathNode(ctx context.Context, op string) (int, syscall.Errno) {
	rel := n.rel()
	var st unix.Stat_t
	fd, gen, errno := n.f.openPath(n.parentNode(), rel, &st)
	if errno != 0 {
		return -1, errno
	}
	return n.checked(ctx, op, rel, fd, &st, gen)
}

// checked returns fd, opened at the mount-relative rel and stat'ed into st and gen,
// only when it is the inode n stands for and the caller of ctx may reach it (see
// reachable); otherwise it closes fd.
func (n *node) checked(ctx context.Context, op, rel string, fd int, st *unix.Stat_t, gen uint64) (int, syscall.Errno) {
	if !n.isNode(st, gen) {
		unix.Close(fd)
		return -1, n.stale()
	}
	if errno := n.f.reachable(ctx, nil, op, fd, rel); errno != 0 {
		unix.Close(fd)
		return -1, errno
	}
	return fd, 0
}

// pathLink opens the symlink n stands for (one the mirror shows as a link) as an
// O_PATH descriptor of the link itself, reached by the verified walk to its parent
// like every other entry, and only the inode n stands for: read through
// /proc/self/fd, its xattrs are the link's. (lgetxattr(2) of the host path would
// follow a symlink swapped into the path's directories, and read, with the daemon's
// rights, a link the caller could not reach.)
func (n *node) pathLink(ctx context.Context, op string) (int, syscall.Errno) {
	rel := n.rel()
	p, errno := n.f.hostParentIn(n.parentNode(), rel)
	if errno != 0 {
		return -1, errno
	}
	fd, err := p.open(unix.O_PATH | unix.O_CLOEXEC)
	p.close()
	if err != nil {
		return -1, toErrno(err)
	}
	var st unix.Stat_t
	gen, err := statxFd(fd, &st)
	if err != nil {
		unix.Close(fd)
		return -1, toErrno(err)
	}
	return n.checked(ctx, op, rel, fd, &st, gen)
}

// reachable checks that fd, opened at the mount-relative rel for the caller of
// ctx, is something that caller could reach on the host by its own path. The
// kernel checked the caller's search permission on each directory of rel in the
// mount; a link the mirror shows as what it leads to (one that leaves SOURCE) was
// followed by the daemon, with its rights, through directories the kernel checked
// nothing against: as root it would read a world-readable file inside another
// user's private directory for anyone. So for a caller without the daemon's rights
// (see ownRights), an object found anywhere but at rel's own host spelling must lie
// below directories the caller may search (canSearch), from SOURCE down when it
// lies in SOURCE, from "/" otherwise; if not, op is refused (see refuse) under s
// (nil: the current policy).
func (f *fence) reachable(ctx context.Context, s *snapshot, op string, fd int, rel string) syscall.Errno {
	if f.ownRights(ctx) {
		return 0
	}
	at, err := os.Readlink(procFd(fd))
	if err != nil || !strings.HasPrefix(at, "/") {
		return f.refuse(ctx, s, op, rel, f.host(rel), RuleUnreachable)
	}
	if at == f.host(rel) {
		return 0
	}
	return f.reachableAt(ctx, s, op, rel, at)
}

// refuse denies op on the mount-relative rel (the host path at) by rule under s,
// or under the current policy when s is nil: an EACCES with its audit record. An
// op of "" logs nothing: a READDIRPLUS entry refused is answered as a plain entry,
// and the caller is refused nothing.
func (f *fence) refuse(ctx context.Context, s *snapshot, op, rel, at, rule string) syscall.Errno {
	if op == "" {
		return syscall.EACCES
	}
	if s == nil {
		s = f.acquire()
		defer s.release()
	}
	return f.deny(ctx, s, op, rel, at, rule)
}

// ownerOnly reports whether the host's fs.protected_symlinks lets only its owner
// follow the symlink link in the directory p: the directory is sticky and
// world-writable and owned by someone else than the link. The kernel checks that
// at every follow, root's included; a link the mirror shows as what it leads to
// is followed by the daemon instead, so the fence checks the caller (callerIs).
// Otherwise a link planted in a shared directory would lead a victim's writes
// through the mount wherever its owner chose. An unreadable directory counts as
// such a one.
func (f *fence) ownerOnly(p hostParentDir, link *unix.Stat_t) bool {
	if !f.protectedSymlinks.Load() {
		return false
	}
	var dir unix.Stat_t
	var err error
	if p.fd >= 0 {
		err = unix.Fstat(p.fd, &dir)
	} else {
		err = unix.Lstat(p.path, &dir)
	}
	if err != nil {
		return true
	}
	const stickyWW = unix.S_ISVTX | 0o002
	return dir.Mode&stickyWW == stickyWW && dir.Uid != link.Uid
}

// callerIs reports whether the caller of ctx runs as uid.
func callerIs(ctx context.Context, uid uint32) bool {
	c, ok := fuse.FromContext(ctx)
	return ok && c.Uid == uid
}

// sysctlOff reports whether the sysctl file at path reads "0".
func sysctlOff(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.TrimSpace(string(b)) == "0"
}

// reachableAt checks that the caller of ctx could reach the host path at (what
// the mount-relative rel shows, away from its own place) by its own rights, as
// reachable does, and refuses op otherwise.
func (f *fence) reachableAt(ctx context.Context, s *snapshot, op, rel, at string) syscall.Errno {
	if f.ownRights(ctx) {
		return 0
	}
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return f.refuse(ctx, s, op, rel, at, RuleUnreachable)
	}
	who := searcher{uid: c.Uid, gid: c.Gid, pid: c.Pid}
	top := "/"
	if canon.LexicallyWithin(at, f.source) {
		top = f.source
	}
	for d := path.Dir(at); ; d = path.Dir(d) {
		if !who.canSearch(d) {
			return f.refuse(ctx, s, op, rel, at, RuleUnreachable)
		}
		if d == top || d == "/" {
			return 0
		}
	}
}

var _ = (fs.NodeListxattrer)((*node)(nil))

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	var sz uint32
	var errno syscall.Errno
	if !n.isSymlink() && n.openFd(ctx, func(fd int) {
		sz, errno = listxattrFor(ctx, func(b []byte) (int, error) { return unix.Flistxattr(fd, b) }, dest)
	}) {
		return sz, errno // an open file of the inode answers, as in Getxattr
	}
	open := n.pathNode
	if n.isSymlink() {
		open = n.pathLink
	}
	fd, errno := open(ctx, "listxattr")
	if errno != 0 {
		return 0, errno
	}
	defer unix.Close(fd)
	p := procFd(fd)
	return listxattrFor(ctx, func(b []byte) (int, error) { return unix.Listxattr(p, b) }, dest)
}

// listxattrFor answers a listxattr into dest from list, which lists the names of
// the object into its argument as listxattr(2) does: all of them for root, and
// without the trusted ones for any other caller (see withoutTrusted).
func listxattrFor(ctx context.Context, list func([]byte) (int, error), dest []byte) (uint32, syscall.Errno) {
	if c, ok := fuse.FromContext(ctx); ok && c.Uid == 0 {
		sz, err := list(dest)
		return uint32(max(sz, 0)), toErrno(err)
	}
	names, err := listxattrAll(list)
	if err != nil {
		return 0, toErrno(err)
	}
	names = withoutTrusted(names)
	if len(dest) == 0 {
		return uint32(len(names)), 0
	}
	if len(names) > len(dest) {
		return 0, syscall.ERANGE
	}
	return uint32(copy(dest, names)), 0
}

// listxattrAll returns the whole list list gives (see listxattrFor).
func listxattrAll(list func([]byte) (int, error)) ([]byte, error) {
	for {
		sz, err := list(nil)
		if err != nil || sz == 0 {
			return nil, err
		}
		buf := make([]byte, sz)
		n, err := list(buf)
		if err == unix.ERANGE {
			continue // the list grew in between
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// withoutTrusted drops the "trusted." names from a list of NUL-terminated xattr
// names. The daemon lists them as root, and a local file system shows them only to
// callers with CAP_SYS_ADMIN; the kernel refuses reading their values to others,
// but not seeing their names, which the mount would otherwise show every caller.
// A caller other than root is taken to lack the capability (a no where the host
// might say yes).
func withoutTrusted(list []byte) []byte {
	out := list[:0]
	for len(list) > 0 {
		i := bytes.IndexByte(list, 0)
		if i < 0 {
			i = len(list) - 1
		}
		name := list[:i+1]
		list = list[i+1:]
		if !bytes.HasPrefix(name, []byte("trusted.")) {
			out = append(out, name...)
		}
	}
	return out
}

var _ = (fs.NodeStatfser)((*node)(nil))

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	target, errno := n.f.readTarget(n.parentNode(), n.rel())
	if errno != 0 {
		return errno
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(target, &st); err != nil {
		return toErrno(err)
	}
	out.FromStatfsT(&st)
	return 0
}

var _ = (fs.NodeFsyncer)((*node)(nil))

// Fsync persists what was already written; it changes nothing and is not fenced.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return h.fsync(flags)
	}
	fd, errno := n.f.openRead(n.parentNode(), n.rel(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if errno != 0 {
		return errno
	}
	defer unix.Close(fd)
	return toErrno(unix.Fsync(fd))
}

// sysStat views a unix.Stat_t as the syscall.Stat_t go-fuse takes; on Linux both
// are the kernel's struct stat.
func sysStat(st *unix.Stat_t) *syscall.Stat_t { return (*syscall.Stat_t)(unsafe.Pointer(st)) }

// statx stats path and returns the birth time as a generation number (1 where the
// file system has none), so a reused inode number is not taken for the old file.
func statx(path string, flags int, st *unix.Stat_t) (gen uint64, err error) {
	return statxAt(unix.AT_FDCWD, path, flags, st)
}

func statxAt(dirFd int, path string, flags int, st *unix.Stat_t) (gen uint64, err error) {
	var x unix.Statx_t
	if err := unix.Statx(dirFd, path, flags, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x); err != nil {
		if err != unix.ENOSYS {
			return 0, err
		}
		return 1, unix.Fstatat(dirFd, path, st, flags)
	}
	// Field widths differ between architectures; setNum converts to whatever they are.
	*st = unix.Stat_t{}
	setNum(&st.Dev, int64(unix.Mkdev(x.Dev_major, x.Dev_minor)))
	setNum(&st.Ino, int64(x.Ino))
	setNum(&st.Nlink, int64(x.Nlink))
	setNum(&st.Mode, int64(x.Mode))
	setNum(&st.Uid, int64(x.Uid))
	setNum(&st.Gid, int64(x.Gid))
	setNum(&st.Rdev, int64(unix.Mkdev(x.Rdev_major, x.Rdev_minor)))
	setNum(&st.Size, int64(x.Size))
	setNum(&st.Blksize, int64(x.Blksize))
	setNum(&st.Blocks, int64(x.Blocks))
	st.Atim = unix.NsecToTimespec(x.Atime.Sec*1e9 + int64(x.Atime.Nsec))
	st.Mtim = unix.NsecToTimespec(x.Mtime.Sec*1e9 + int64(x.Mtime.Nsec))
	st.Ctim = unix.NsecToTimespec(x.Ctime.Sec*1e9 + int64(x.Ctime.Nsec))
	gen = 1
	if x.Mask&unix.STATX_BTIME != 0 {
		gen = uint64(x.Btime.Sec)*1e9 + uint64(x.Btime.Nsec)
	}
	return gen, nil
}

func setNum[T ~int16 | ~int32 | ~int64 | ~uint16 | ~uint32 | ~uint64](dst *T, v int64) { *dst = T(v) }
