package fusefence

import (
	"context"
	"errors"
	"fmt"
	"log"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
)

// form says which object a mutation acts on.
type form int

const (
	// formEntry is the name itself, in its parent directory: the parent is
	// canonicalized and the last component is not followed (create, mkdir, mknod,
	// symlink, link, unlink, rmdir, rename; attributes of a symlink node).
	formEntry form = iota
	// formInode is what the path leads to: the whole path is canonicalized, a
	// symlink in the last component included (open for writing, truncate, chmod,
	// chown, utimes, xattrs).
	formInode
	// formLeaf is formInode for a mutation made through the target's own
	// descriptor, never by name in its parent (chmod, chown, utimes, truncate,
	// xattrs): when the whole canonical path opens in one walk that follows no
	// symlink, that walk's descriptor of the target itself is what the mutation
	// acts on (see grant.leaf), and no parent is opened.
	formLeaf
)

// grant is a decision to allow one mutation, and where to perform it.
type grant struct {
	f      *fence
	s      *snapshot
	ctx    context.Context
	op     string
	rel    string    // mount-relative, for the audit log
	target string    // canonical host target
	p      placement // the writable root and the target relative to it
	rootFd int
	// protVer numbers the protected set the decision was made with (protSet.ver).
	protVer uint64

	// The canonical parent's identity when the decision was made; the descriptor
	// the mutation goes through must still be that directory.
	parentDev, parentIno uint64
	parentGen            uint64 // its birth time, 0 when unknown (see isNode)
	parentMode           uint32 // set by parent(); 0 when unknown

	// dirFd is the decision's own descriptor of the canonical parent (see
	// resolve), which parent hands to the mutation; -1 when there is none or it
	// was handed over. release closes one nobody took.
	dirFd int
	// leafFd is, for formLeaf, the decision's own O_PATH descriptor of the target
	// (see openCanonicalLeaf), with leafSt its fstat, which leaf hands to the
	// mutation; -1 as dirFd.
	leafFd int
	leafSt unix.Stat_t
}

// judge re-resolves the mount-relative path rel now and decides the mutation op
// under snapshot s. On a denial the event is logged and EACCES returned.
func (f *fence) judge(ctx context.Context, s *snapshot, op, rel string, fm form, r reach) (*grant, syscall.Errno) {
	if !f.admitted(ctx) {
		return nil, syscall.EACCES // not the served party's: no record (Config.Admit)
	}
	if s.err != nil {
		return nil, f.deny(ctx, s, op, rel, f.host(rel), RulePolicyInvalid)
	}
	var leafSt unix.Stat_t
	leafFd := -1
	if fm == formLeaf {
		leafFd = f.openCanonicalLeaf(rel, &leafSt)
		fm = formInode // when the one walk did not get there: as any inode target
	}
	target, dirFd, parentSt, parentGen, ok := f.host(rel), -1, (*unix.Stat_t)(nil), uint64(0), true
	if leafFd < 0 {
		target, dirFd, parentSt, parentGen, ok = f.resolve(rel, fm)
	}
	granted := false
	defer func() {
		if !granted && dirFd >= 0 {
			unix.Close(dirFd)
		}
		if !granted && leafFd >= 0 {
			unix.Close(leafFd)
		}
	}()
	if !ok || f.mountpoint != "" && canon.LexicallyWithin(target, f.mountpoint) {
		return nil, f.deny(ctx, s, op, rel, target, RuleOwnMount)
	}
	if target != f.host(rel) {
		// Away from its own place in SOURCE, through a link the mirror shows as what
		// it leads to: the kernel checked the caller against none of the directories
		// on the way there (see reachable).
		if errno := f.reachableAt(ctx, s, op, rel, target); errno != 0 {
			return nil, errno
		}
	}
	ps := f.protected(s)
	prot := ps.g
	p, rule := place(s.x, prot, target, r, f.auditPath)
	if rule == "" && fm == formEntry && p.Rel == "." {
		// A root's own name lives in its parent: it can only be changed through a
		// root that strictly contains it (a writable root nested in another one),
		// and the guarded paths have been checked against every root already.
		x := s.x
		x.WritableRoots = slices.DeleteFunc(slices.Clone(x.WritableRoots), func(root string) bool { return root == target })
		if p, rule = place(x, prot, target, r, f.auditPath); rule == "" && p.Rel == "." {
			rule = RuleOutside
		}
	}
	if rule != "" {
		return nil, f.deny(ctx, s, op, rel, target, rule)
	}
	rootFd, ok := s.roots[p.Root]
	if !ok {
		return nil, syscall.ENOENT // the root does not exist, so neither does anything beneath it
	}
	g := &grant{f: f, s: s, ctx: ctx, op: op, rel: rel, target: target, p: p, rootFd: rootFd, protVer: ps.ver, dirFd: -1, leafFd: -1}
	if leafFd >= 0 {
		// The decision's walk followed no symlink from "/" to the target itself,
		// found at the canonical path within the root: the mutation acts on it.
		g.leafFd, g.leafSt, granted = leafFd, leafSt, true
		return g, 0
	}
	if p.Rel != "." && dirFd >= 0 {
		// The decision's walk to the parent followed no symlink from "/" and found
		// it at the canonical path, within the root: it is the mutation's parent.
		g.dirFd, granted = dirFd, true
		if parentSt != nil {
			g.parentDev, g.parentIno, g.parentGen, g.parentMode = uint64(parentSt.Dev), parentSt.Ino, parentGen, parentSt.Mode
		}
		return g, 0
	}
	if p.Rel != "." {
		if parentSt == nil {
			parentSt = new(unix.Stat_t)
			var err error
			if parentGen, err = statxNoLinks(path.Dir(target), false, parentSt); err != nil {
				return nil, toErrno(err)
			}
		}
		g.parentDev, g.parentIno, g.parentGen = uint64(parentSt.Dev), parentSt.Ino, parentGen
	}
	return g, 0
}

// judgeEntry is judge of the name rel (formEntry) in the directory node dir, which
// must also be where the decision placed it (see inDir).
func (f *fence) judgeEntry(ctx context.Context, s *snapshot, op string, dir *node, rel string, r reach) (*grant, syscall.Errno) {
	g, errno := f.judge(ctx, s, op, rel, formEntry, r)
	if errno != 0 {
		return nil, errno
	}
	if errno := g.inDir(dir); errno != 0 {
		g.release()
		return nil, errno
	}
	return g, 0
}

// release closes the parent descriptor the decision kept if the mutation did not
// take it (see parent). Every grant is released: callers defer it.
func (g *grant) release() {
	if g.dirFd >= 0 {
		unix.Close(g.dirFd)
		g.dirFd = -1
	}
	if g.leafFd >= 0 {
		unix.Close(g.leafFd)
		g.leafFd = -1
	}
}

// canonical is the canonical host target of rel in form fm.
func (f *fence) canonical(rel string, fm form) string {
	target, dirFd, _, _, _ := f.resolve(rel, fm)
	if dirFd >= 0 {
		unix.Close(dirFd)
	}
	return target
}

// resolve re-resolves rel now: its canonical host target in form fm and, when
// the walk below found it, an O_PATH descriptor of the target's parent directory
// (dirFd, which the caller closes; -1 otherwise), with what statx says of it for a
// formEntry target (parentSt; nil otherwise) and its generation (see statxAt).
//
// The host spelling of a path in the mirror is SOURCE (canonical) and the node
// names, so it is almost always canonical already. One openat2 from "/" that
// refuses every symlink confirms that for the parent directory, where
// canon.Canonical lstats each prefix in turn (one walk of the whole path per
// component); the descriptor it yields is the parent itself, at its canonical path
// as of now. Anything else (a symlink on the way or in the last component of an
// inode target, a missing directory, no openat2) is canon.Canonical's, as before,
// except that it never looks a name up inside this mount: ok is false when rel
// leads back into it.
func (f *fence) resolve(rel string, fm form) (target string, dirFd int, parentSt *unix.Stat_t, parentGen uint64, ok bool) {
	if rel == "" {
		target, ok = f.canon(f.host(rel))
		return target, -1, nil, 0, ok
	}
	dir, base := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, base = rel[:i], rel[i+1:]
	}
	hostDir := f.host(dir)
	joined := hostDir + "/" + base
	if hostDir == "/" {
		joined = "/" + base
	}
	if fd, ok := f.openCanonicalDir(hostDir); ok {
		var st unix.Stat_t
		if fm == formInode {
			// The target is what the last component leads to: only a name that is no
			// symlink (or does not exist) keeps the joined spelling. Its parent's
			// identity is not needed: the node's own is checked on the leaf.
			err := unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
			if err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK || err != nil && err != unix.ENOENT {
				unix.Close(fd)
				target, ok = f.canon(f.host(rel))
				return target, -1, nil, 0, ok
			}
			return joined, fd, nil, 0, true
		}
		gen, err := statxFd(fd, &st)
		if err != nil {
			unix.Close(fd)
			return joined, -1, nil, 0, true
		}
		return joined, fd, &st, gen, true
	}
	if fm == formInode {
		target, ok = f.canon(f.host(rel))
		return target, -1, nil, 0, ok
	}
	parent, ok := f.canon(hostDir)
	if parent == "/" {
		return "/" + base, -1, nil, 0, ok
	}
	return parent + "/" + base, -1, nil, 0, ok
}

// noOpenat2 is set once openat2 answered ENOSYS.
var noOpenat2 atomic.Bool

// openCanonicalDir opens the clean absolute host path hostDir as an O_PATH
// directory in a walk from "/" that follows no symlink, magic links included. It
// succeeds exactly when canon.Canonical(hostDir) would return hostDir unchanged
// (every component exists, is no symlink, and leads to a directory).
func (f *fence) openCanonicalDir(hostDir string) (int, bool) {
	return f.openNoLinks(hostDir, unix.O_PATH|unix.O_DIRECTORY)
}

// openNoLinks opens the clean absolute host path p with flags (and O_CLOEXEC) in
// a walk from "/" that follows no symlink, magic links included (with O_NOFOLLOW
// a symlink in the last component is opened itself). ok is false when that walk
// fails, or openat2 is missing.
func (f *fence) openNoLinks(p string, flags uint64) (fd int, ok bool) {
	if noOpenat2.Load() {
		return -1, false
	}
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}
	for {
		fd, err := unix.Openat2(f.slashFd, rel, &unix.OpenHow{
			Flags:   flags | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
		})
		switch err {
		case nil:
			return fd, true
		case unix.EINTR, unix.EAGAIN:
			continue
		case unix.ENOSYS:
			noOpenat2.Store(true)
		}
		return -1, false
	}
}

// openCanonicalLeaf opens the host path of rel as O_PATH, not following it, in a
// walk from "/" that follows no symlink (magic links included), and fstats it into
// st. It succeeds exactly when the host path is canonical as a formInode target
// (every directory on the way exists and is no symlink, and neither is the target
// itself), returning the descriptor; otherwise it returns -1 and the caller
// resolves rel as before (canon.Canonical, or a parent and a name to create).
func (f *fence) openCanonicalLeaf(rel string, st *unix.Stat_t) int {
	if rel == "" {
		return -1
	}
	fd, ok := f.openNoLinks(f.host(rel), unix.O_PATH|unix.O_NOFOLLOW)
	if !ok {
		return -1
	}
	// A symlink in the last component was opened itself; a formInode target is
	// what it leads to.
	if unix.Fstat(fd, st) != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		unix.Close(fd)
		return -1
	}
	return fd
}

// parent opens the target's parent directory beneath the writable root, without
// following any symlink, and checks it is the directory the decision was made on;
// or hands over the descriptor the decision's own walk opened (see judge). The
// caller closes dirFd and performs the mutation on base relative to it.
func (g *grant) parent() (dirFd int, base string, errno syscall.Errno) {
	if g.dirFd >= 0 {
		dirFd, g.dirFd = g.dirFd, -1
		base = path.Base(g.p.Rel)
		if g.parentMode == 0 && g.f.asRoot() {
			// chownNew's question (a set-group-ID parent), asked only where it is.
			var st unix.Stat_t
			if err := unix.Fstat(dirFd, &st); err != nil {
				unix.Close(dirFd)
				return -1, "", toErrno(err)
			}
			g.parentMode = st.Mode
		}
		return dirFd, base, 0
	}
	dirFd, base, err := canon.OpenParentBeneath(g.rootFd, g.p.Rel)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			// The path was canonical a moment ago: a symlink appeared on it since.
			return -1, "", g.race()
		}
		return -1, "", toErrno(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(dirFd, &st); err != nil {
		unix.Close(dirFd)
		return -1, "", toErrno(err)
	}
	if uint64(st.Dev) != g.parentDev || st.Ino != g.parentIno {
		unix.Close(dirFd)
		return -1, "", g.race()
	}
	g.parentMode = st.Mode
	return dirFd, base, 0
}

// inDir checks that the directory the decision placed the name in is dir's inode
// (see isNode): the one whose cached attributes the kernel checked the caller's
// write and search permission against before sending a request that adds or
// removes a name in dir. A directory replaced on the host within the cache timeout
// (renamed away and another moved in, or a symlink put at its name) gets ESTALE,
// on which the kernel looks it up again and checks the caller against what is
// there now; as root the daemon would otherwise add or remove names in a directory
// the caller may not write.
func (g *grant) inDir(dir *node) syscall.Errno {
	if g.p.Rel == "." {
		return syscall.ESTALE // a root's own name: judge denies it as an entry
	}
	st := unix.Stat_t{Mode: unix.S_IFDIR, Ino: g.parentIno}
	setNum(&st.Dev, int64(g.parentDev))
	if !dir.isNode(&st, g.parentGen) {
		return dir.stale()
	}
	return 0
}

// leaf opens the target itself as O_PATH without following it, for inode
// mutations, or hands over the descriptor the decision's own walk opened (see
// judge). dirFd, which the caller closes, is -1 when no parent was opened (that
// walk's descriptor, or the writable root itself).
func (g *grant) leaf() (leafFd, dirFd int, st unix.Stat_t, errno syscall.Errno) {
	if g.leafFd >= 0 {
		leafFd, g.leafFd = g.leafFd, -1
		return leafFd, -1, g.leafSt, 0
	}
	if g.p.Rel == "." {
		fd, err := canon.OpenBeneath(g.rootFd, ".", unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return -1, -1, st, toErrno(err)
		}
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, -1, st, toErrno(err)
		}
		return fd, -1, st, 0
	}
	dirFd, base, errno := g.parent()
	if errno != 0 {
		return -1, -1, st, errno
	}
	fd, err := unix.Openat(dirFd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Fstat(fd, &st)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		unix.Close(dirFd)
		return -1, -1, st, toErrno(err)
	}
	return fd, dirFd, st, 0
}

// touched tells the kernel about a mutation it cannot have seen: one that landed,
// through a link shown as its target, on a path the mirror also shows under its
// own name (SOURCE/<alias>). The kernel updates its caches for the name it sent;
// the alias's dentry (a negative one, say) and pages are invalidated here. Same
// inodes are the same kernel inode already, so this matters for names only.
func (g *grant) touched() {
	f := g.f
	if !canon.LexicallyWithin(g.target, f.source) {
		return
	}
	alias := relTo(g.target, f.source)
	if alias == "." || alias == g.rel {
		return
	}
	go f.invalidate(alias)
}

// invalidate drops the kernel's dentry and cached pages for the mount-relative
// path rel, if the tree knows it. It runs outside any request: the kernel holds
// the directory's lock until the request is answered, and the notification waits
// for that lock.
func (f *fence) invalidate(rel string) {
	parent := f.root.EmbeddedInode()
	comps := strings.Split(rel, "/")
	for _, c := range comps[:len(comps)-1] {
		if parent = parent.GetChild(c); parent == nil {
			return
		}
	}
	base := comps[len(comps)-1]
	if ch := parent.GetChild(base); ch != nil {
		ch.NotifyContent(0, 0)
	}
	parent.NotifyEntry(base)
}

// race denies because the tree changed between the decision and the mutation.
func (g *grant) race() syscall.Errno {
	return g.f.deny(g.ctx, g.s, g.op, g.rel, g.target, RuleSymlinkRace)
}

// singleLink denies content and metadata changes of a non-directory with more than
// one link: the other names may lie outside every writable root, and no system
// call lists them.
func (g *grant) singleLink(st *unix.Stat_t) syscall.Errno {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
		return g.f.deny(g.ctx, g.s, g.op, g.rel, g.target, RuleMultiplyLinked)
	}
	return 0
}

// ownRights reports whether the caller of ctx has the daemon's rights on the host:
// it runs as the daemon's user, or as root. Where the daemon would act on
// something the kernel checked nothing against for the caller (a create that
// follows a link the mirror does not show), other callers are refused: the daemon,
// root when other users see the mount, would act with rights they lack. A caller
// with the daemon's uid but other groups is let through.
func (f *fence) ownRights(ctx context.Context) bool {
	c, ok := fuse.FromContext(ctx)
	return ok && (c.Uid == 0 || c.Uid == f.euid)
}

// newOwner is who an entry the fence creates must belong to when the daemon runs as
// root: the caller, as on a local file system. ok is false when nothing changes
// (the daemon is not root, the caller is root:root, or unknown).
func (g *grant) newOwner() (uid, gid int, ok bool) {
	if !g.f.asRoot() {
		return 0, 0, false
	}
	c, found := fuse.FromContext(g.ctx)
	if !found || (c.Uid == 0 && c.Gid == 0) {
		return 0, 0, false
	}
	return int(c.Uid), int(c.Gid), true
}

// chownNew gives a regular file the fence created as root, open at fd, to the
// caller; in a set-group-ID directory the group stays the directory's. Through the
// descriptor of the create: a chown by name once gave the caller whatever had been
// swapped in at that name since (see createAsCaller).
func (g *grant) chownNew(fd int, st *unix.Stat_t) {
	uid, gid, ok := g.newOwner()
	if !ok {
		return
	}
	if g.parentMode&unix.S_ISGID != 0 {
		gid = -1
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		g.f.logf("chown of new entry %q to the caller: %v", g.rel, err)
		return
	}
	if st != nil {
		st.Uid = uint32(uid)
		if gid >= 0 {
			st.Gid = uint32(gid)
		}
	}
}

// createAsCaller runs create, which creates a directory, node or symlink by name,
// so that the entry belongs to the caller from its first instant: as root, on a
// thread of its own whose file-system uid and gid are the caller's (a set-group-ID
// directory still gives its group, as the kernel does for anyone). The fence made
// such entries as root and gave them to the caller with a chown by name: a caller
// who could also rename in the host directory swapped a root-owned file from
// outside every root in at that name between the two calls (RENAME_EXCHANGE), and
// the chown gave it to the caller (found by review; a file create chowns its own
// descriptor instead, chownNew). A nonzero file-system uid drops the file-system
// capabilities from the thread's effective set; the thread's effective set is put
// back for the create, since the fence, not the host's modes, decides what may be
// made, as before. The thread's ids and capabilities are put back
// afterwards; if that cannot be confirmed, the thread is not handed back to the
// runtime and ends with its goroutine.
func (g *grant) createAsCaller(create func() error) error {
	uid, gid, ok := g.newOwner()
	if !ok {
		return create()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err, clean := withFSIDs(uid, gid, create)
		if clean {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// withFSIDs runs fn on the locked calling thread with file-system ids uid and gid
// and the thread's effective capabilities as they were before the change of ids,
// then puts back what the thread had. clean reports that it did.
func withFSIDs(uid, gid int, fn func() error) (err error, clean bool) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var saved [2]unix.CapUserData
	if err := unix.Capget(&hdr, &saved[0]); err != nil {
		return fmt.Errorf("reading the thread's capabilities: %w", err), true
	}
	prevGID, _ := unix.SetfsgidRetGid(gid)
	prevUID, _ := unix.SetfsuidRetUid(uid)
	// The change of fsuid from 0 dropped the file-system capabilities from the
	// effective set: put back exactly what the thread had, nothing more.
	if cerr := unix.Capset(&hdr, &saved[0]); cerr != nil {
		err = fmt.Errorf("raising the thread's capabilities again: %w", cerr)
	} else if cur, _ := unix.SetfsuidRetUid(-1); cur != uid {
		err = syscall.EPERM // the ids did not change: nothing is made as root
	} else if cur, _ := unix.SetfsgidRetGid(-1); cur != gid {
		err = syscall.EPERM // nor with root's group
	} else {
		err = fn()
	}
	unix.SetfsuidRetUid(prevUID)
	unix.SetfsgidRetGid(prevGID)
	cerr := unix.Capset(&hdr, &saved[0])
	curUID, _ := unix.SetfsuidRetUid(-1)
	curGID, _ := unix.SetfsgidRetGid(-1)
	return err, cerr == nil && curUID == prevUID && curGID == prevGID
}

// toErrno maps an error to the errno FUSE returns: the errno it wraps, else EIO.
// ENOSYS becomes EOPNOTSUPP: the kernel would take ENOSYS as "this file system never
// implements the request" and stop sending it for the life of the mount.
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	e, ok := err.(syscall.Errno) // most are bare: no errors.As, which allocates
	if ok || errors.As(err, &e) {
		if e == syscall.ENOSYS {
			return syscall.EOPNOTSUPP
		}
		return e
	}
	return syscall.EIO
}

func newLogger(logf func(string, ...any)) *log.Logger {
	return log.New(logWriter(logf), "", 0)
}

type logWriter func(string, ...any)

func (w logWriter) Write(p []byte) (int, error) {
	w("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
