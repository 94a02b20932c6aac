package sandbox

// Stand-ins: how the bwrap rung keeps a protected path that does not exist from being
// created, without leaving anything behind in the user's tree.
//
// # Mechanism
//
// A mount needs an existing name to mount on, and nothing else stops a name from
// being created in a writable directory: bwrap offers no "deny this name", Landlock
// cannot deny inside an allowed tree, and a seccomp filter cannot tell paths apart.
// So right before the spawn, [Run] creates an empty directory or empty regular file
// (the path's policy.PathKind; a commondir's holds ".", see createWithBody) at each
// missing protected path, beneath its bound root
// with fd-relative calls that follow no symlink (canon.OpenBeneath), marks it with the
// extended attribute user.toh.stand-in, and bwrap rebinds it read-only like an
// existing protected path. Inside the sandbox the name is a read-only mountpoint: it
// cannot be written, removed, renamed or replaced (EROFS, EBUSY), and its parents are
// pinned (see [BwrapArgv]). After the child exits, whether it succeeded, failed or was
// killed by a signal, Run removes every stand-in that is still as it was made, and every
// directory created on the way to one (".github" for ".github/workflows") that is
// still empty, so the tree is as it was. A directory created on the way that the run
// filled with files is the run's own content: it stays, and loses its mark.
//
// A missing protected path below an existing non-directory gets no stand-in (none
// can be made below a file): bwrap pins that non-directory instead, and prepare only
// checks that it is still there and still no directory (see [BwrapArgv]). A
// protected symlink's own name within a bound root cannot be held by any mount, so
// prepare refuses the whole run before creating anything (a *protectedLinkError
// naming the link and the remedies).
//
// Alternatives considered and rejected: letting bwrap create the mountpoints (it
// follows symlinks, and toh could not tell its creations from the user's, so nothing
// could be cleaned up exactly); a mountpoint that exists only inside the sandbox (a
// mount's target must be a name in the underlying file system); unlinking the
// mountpoint on the host right after bwrap mounted it (since Linux 3.18 that detaches
// the mount in every other namespace, the sandbox's included); the fence (a FUSE
// server per run; a separate option, see fusefence).
//
// # Concurrent runs
//
// A stand-in is a real, empty entry on the host while the run lasts, and a second run
// over the same tree sees it as an existing protected path and mounts over it too.
// Removing it while that second run lasts would be a hole: since Linux 3.18 an unlink
// or rmdir of a name that is a mountpoint in another mount namespace succeeds and
// detaches the mounts there, so the second run's command could then create the name.
// Therefore every run holds a shared flock(2) on the directory containing each
// protected path it mounts over (existing or not, held from before it looks until the
// child has exited), and removes a stand-in only after converting that lock to an
// exclusive one without waiting. If another run holds its shared lock, the stand-in
// stays, and the last run to finish removes it: a run removes every entry at its
// protected paths that carries the mark and is empty, whoever created it. A run that
// finds a directory exclusively locked waits for it at most 10 s (a cleanup takes
// milliseconds) and then refuses to run.
//
// # When toh-exec is killed
//
// SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the child; toh-exec survives
// them, so cleanup runs. One that arrives while the stand-ins are being prepared ends
// the run before the command starts, after the same cleanup. If toh-exec is SIGKILLed (or the machine stops), bwrap and
// the command die with it (--die-with-parent), and the stand-ins stay: empty
// directories or files marked user.toh.stand-in. The next bwrap run whose protected
// paths include them removes them when it ends. On a file system without user
// extended attributes a run can only recognize the stand-ins it created itself, so
// such leftovers, and stand-ins whose removal a concurrent run prevented, stay until
// removed by hand.
//
// # Limitations
//
// The mark is trusted, and a command that can set extended attributes at a protected
// path could have a later run remove what it marked. Under bwrap it cannot (the paths
// are read-only mounts); a concurrent run under a rung that does not enforce protected
// paths (Landlock, danger-full-access) could, as it could write the protected paths
// themselves. Other toh-exec runs, the user, and unconfined tools see the stand-ins
// while a run lasts. The locks are advisory: any process can hold them, and so delay
// or (after 10 s) refuse runs, and keep stand-ins from being removed. A commondir's
// stand-in needs a data block: on a full file system it cannot be made, and the run
// is refused rather than started without it (an empty stand-in needs none). A
// stand-in in the working tree (a file the config includes beside the repository, a
// protect entry's) is an ordinary new file to git inside the run: "git add -A"
// stages it, a commit holds it empty, and after the run it shows as deleted.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
	"golang.org/x/sys/unix"
)

const standInXattr = "user.toh.stand-in"

// standInLockTimeout bounds the wait for another run's exclusive lock (a variable for
// the tests).
var standInLockTimeout = 10 * time.Second

// standIns is one run's prepared stand-ins: the directories it holds locked and what
// it created.
type standIns struct {
	roots   map[string]int       // bound root -> O_PATH fd
	dirs    map[string]*heldDir  // directory (absolute) -> fd, holding a flock
	created map[string]fileIdent // absolute path -> what this run created there
	// candidates are the paths whose entries may be stand-ins: every component at or
	// below a guard's base, the guarded path included.
	candidates  map[string]bool
	interrupted func() bool
	heads       []savedHead // see heads_linux.go
}

type heldDir struct {
	fd     int
	locked bool // a flock is held (shared, or exclusive during cleanup)
}

type fileIdent struct{ dev, ino uint64 }

// prepare locks the directory of every guarded path and creates the missing ones.
// On error nothing it created stays.
// interrupted, polled while waiting for a lock, ends the wait with an error.
func (p *standInPlan) prepare(interrupted func() bool) (*standIns, error) {
	if p.missingPolicy != nil {
		return nil, p.missingPolicy
	}
	for _, g := range p.guards {
		if g.kind == policy.PathLink && g.exists {
			return nil, &protectedLinkError{link: g.path, root: g.root}
		}
	}
	s := &standIns{roots: map[string]int{}, dirs: map[string]*heldDir{}, created: map[string]fileIdent{},
		candidates: map[string]bool{}, interrupted: interrupted}
	for _, g := range p.guards {
		if err := s.ensure(g); err != nil {
			s.release()
			return nil, err
		}
	}
	s.saveHeads(p.guards)
	return s, nil
}

// protectedLinkError refuses a bwrap run in which a protected symlink's own name lies
// within a bound root (see [BwrapArgv]).
type protectedLinkError struct{ link, root string }

func (e *protectedLinkError) Error() string {
	return fmt.Sprintf("protected path %q is a symbolic link in the writable root %q: bwrap cannot keep a link's own name "+
		"from being replaced, so a command could point it elsewhere; replace the link by what it names (for .git a "+
		"\"gitdir: <path>\" file), remove the entry from protect (for a link on the way to a file .git/config includes, "+
		"the include), or serve the root through the fence (\"fence\": true)",
		e.link, e.root)
}

// ensure makes g.path exist, creating what is missing between g.base and it.
func (s *standIns) ensure(g bwrapGuard) error {
	if g.path == g.root {
		return nil // a root exists (bwrap binds it), and is nobody's stand-in
	}
	rootFd, err := s.root(g.root)
	if err != nil {
		return err
	}
	rel, baseRel := relBelow(g.path, g.root), relBelow(g.base, g.root)
	baseDepth := 0
	if baseRel != "." {
		baseDepth = strings.Count(baseRel, "/") + 1
	}
	comps := strings.Split(rel, "/")
	if g.blocker != "" {
		// Nothing is created: the blocker is checked to be as bwrapGuards found it,
		// and its directory held, like the directory of an existing path.
		comps = strings.Split(relBelow(g.blocker, g.root), "/")
		baseDepth = len(comps)
	}
	dir := g.root
	for i, name := range comps {
		last := i == len(comps)-1
		p := path.Join(dir, name)
		hd, err := s.lockDir(rootFd, g.root, dir)
		if err != nil {
			return err
		}
		creatable := i >= baseDepth
		var st unix.Stat_t
		err = unix.Fstatat(hd.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case err == nil:
			if err := checkExisting(p, &st, last); err != nil {
				return err
			}
			if last && g.blocker != "" && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return fmt.Errorf("protected path %q: %q, which kept it from existing, became a directory", g.path, p)
			}
		case errors.Is(err, unix.ENOENT) && creatable:
			dir := !last || g.kind == policy.PathDir
			body := ""
			if last && g.kind == policy.PathCommondir {
				body = policy.CommondirStandIn
			}
			if err := s.create(hd.fd, p, name, dir, last, body); err != nil {
				return err
			}
		case errors.Is(err, unix.ENOENT) && g.blocker != "":
			return fmt.Errorf("protected path %q: %q, which kept it from existing, no longer exists", g.path, p)
		case errors.Is(err, unix.ENOENT):
			return fmt.Errorf("protected path %q: %q no longer exists, and toh never creates a git directory", g.path, p)
		default:
			return fmt.Errorf("protected path %q: looking up %q: %w", g.path, p, err)
		}
		if creatable {
			s.candidates[p] = true
		}
		dir = p
	}
	return nil
}

// checkExisting refuses what changed since the policy was resolved: a symlink where a
// canonical path had none, or a non-directory where a directory is needed.
func checkExisting(p string, st *unix.Stat_t, last bool) error {
	switch typ := st.Mode & unix.S_IFMT; {
	case typ == unix.S_IFLNK:
		return fmt.Errorf("protected path component %q became a symlink", p)
	case !last && typ != unix.S_IFDIR:
		return fmt.Errorf("protected path component %q is no longer a directory", p)
	}
	return nil
}

func (s *standIns) root(r string) (int, error) {
	if fd, ok := s.roots[r]; ok {
		return fd, nil
	}
	fd, err := canon.OpenRoot(r)
	if err != nil {
		return -1, fmt.Errorf("opening writable root: %w", err)
	}
	s.roots[r] = fd
	return fd, nil
}

// lockDir opens dir (beneath root) and takes a shared flock on it, waiting at most
// standInLockTimeout for an exclusive holder. A directory this process may not read
// is held unlocked (O_PATH): nothing can be created in it by this user either.
func (s *standIns) lockDir(rootFd int, root, dir string) (*heldDir, error) {
	if hd, ok := s.dirs[dir]; ok {
		return hd, nil
	}
	rel := relBelow(dir, root)
	fd, err := canon.OpenBeneath(rootFd, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	hd := &heldDir{fd: fd}
	switch {
	case errors.Is(err, unix.EACCES):
		if fd, err = canon.OpenBeneath(rootFd, rel, unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
			return nil, fmt.Errorf("opening %q: %w", dir, err)
		}
		hd.fd = fd
	case err != nil:
		return nil, fmt.Errorf("opening %q: %w", dir, err)
	default:
		if err := flockWithin(fd, unix.LOCK_SH, standInLockTimeout, s.interrupted); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("locking %q against another run's cleanup of protected-path stand-ins: %w", dir, err)
		}
		hd.locked = true
	}
	s.dirs[dir] = hd
	return hd, nil
}

// create makes an empty directory or a regular file holding body (empty but for a
// commondir, see createWithBody) name in dirFd, marks it and records its identity. An entry that
// appeared meanwhile (another run's stand-in) is accepted like an existing one.
func (s *standIns) create(dirFd int, p, name string, dir, last bool, body string) error {
	var fd int
	var err error
	if dir {
		err = unix.Mkdirat(dirFd, name, 0o755)
		if err == nil {
			fd, err = unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
	} else if body != "" {
		fd, err = createWithBody(dirFd, name, body)
	} else {
		fd, err = unix.Openat(dirFd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	}
	if errors.Is(err, unix.EEXIST) {
		var st unix.Stat_t
		if err := unix.Fstatat(dirFd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("creating stand-in %q: %w", p, err)
		}
		return checkExisting(p, &st, last)
	}
	if err != nil {
		return fmt.Errorf("creating stand-in %q: %w", p, err)
	}
	defer unix.Close(fd)
	if body == "" { // createWithBody marked it already
		// Without user xattrs (some file systems) only this run can recognize it.
		_ = unix.Fsetxattr(fd, standInXattr, []byte("toh-exec"), 0)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("creating stand-in %q: %w", p, err)
	}
	s.created[p] = fileIdent{dev: st.Dev, ino: st.Ino}
	return nil
}

// release removes the stand-ins nobody else uses, deepest first, and drops every
// lock. It is safe on a partially prepared set.
func (s *standIns) release() {
	cands := make([]string, 0, len(s.candidates))
	for p := range s.candidates {
		cands = append(cands, p)
	}
	sort.Slice(cands, func(i, j int) bool { return pathLess(cands[j], cands[i]) })
	for _, p := range cands {
		s.remove(p)
	}
	for _, hd := range s.dirs {
		unix.Close(hd.fd)
	}
	for _, fd := range s.roots {
		unix.Close(fd)
	}
	s.dirs, s.roots = nil, nil
}

// remove deletes the entry at p if it is a stand-in (created by this run, or marked
// by any run), is empty, and no other run holds its directory.
func (s *standIns) remove(p string) {
	hd := s.dirs[path.Dir(p)]
	if hd == nil || !hd.locked {
		return
	}
	name := path.Base(p)
	var st unix.Stat_t
	if unix.Fstatat(hd.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if !isDir && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	if isDir {
		flags |= unix.O_DIRECTORY
	}
	fd, err := unix.Openat(hd.fd, name, flags, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var fst unix.Stat_t
	if unix.Fstat(fd, &fst) != nil || fst.Dev != st.Dev || fst.Ino != st.Ino {
		return
	}
	id, own := s.created[p]
	own = own && id == fileIdent{dev: fst.Dev, ino: fst.Ino}
	_, xerr := unix.Fgetxattr(fd, standInXattr, nil)
	marked := xerr == nil
	if !own && !marked {
		return
	}
	if !isUntouched(fd, isDir, name) {
		if own && marked && s.holdsOwnContent(fd, p) {
			// A directory created on the way that the run filled is the run's own now.
			_ = unix.Fremovexattr(fd, standInXattr)
		}
		return
	}
	if err := unix.Flock(hd.fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		// Another run holds it (and the failed conversion dropped our shared lock).
		return
	}
	if !isUntouched(fd, isDir, name) {
		return
	}
	flag := 0
	if isDir {
		flag = unix.AT_REMOVEDIR
	}
	_ = unix.Unlinkat(hd.fd, name, flag)
}

// holdsOwnContent reports whether the open directory p holds an entry other than the
// stand-ins below it (which another run may still be keeping there).
func (s *standIns) holdsOwnContent(fd int, p string) bool {
	dup, err := unix.Dup(fd)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(dup), p)
	defer f.Close()
	if _, err := unix.Seek(dup, 0, 0); err != nil {
		return false
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return false
	}
	for _, n := range names {
		if !s.candidates[p+"/"+n] {
			return true
		}
	}
	return false
}

// createWithBody makes name in dirFd a regular file holding body, marked, and
// returns it open for writing. The file appears whole: it is made unnamed
// (O_TMPFILE), written and marked, then linked in, so a toh-exec killed meanwhile
// leaves nothing, where an empty commondir would make git die. Where the file
// system has no O_TMPFILE, it is created, marked and then written: a kill between
// leaves a marked empty file, which the next run removes (isUntouched).
func createWithBody(dirFd int, name, body string) (int, error) {
	write := func(fd int) error {
		_ = unix.Fsetxattr(fd, standInXattr, []byte("toh-exec"), 0)
		n, err := unix.Write(fd, []byte(body))
		if err == nil && n != len(body) {
			err = io.ErrShortWrite
		}
		return err
	}
	fd, err := unix.Openat(dirFd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err == nil {
		if err := write(fd); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("writing: %w", err)
		}
		err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirFd, name, unix.AT_SYMLINK_FOLLOW)
		if err == nil {
			return fd, nil
		}
		unix.Close(fd)
		if errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		// No /proc: made the other way below.
	}
	fd, err = unix.Openat(dirFd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return -1, err
	}
	if err := write(fd); err != nil {
		unix.Close(fd)
		unix.Unlinkat(dirFd, name, 0)
		return -1, fmt.Errorf("writing: %w", err)
	}
	return fd, nil
}

// isUntouched reports whether the open stand-in name holds what a stand-in is
// made with: nothing, or, for a file named commondir, the "." of a
// policy.PathCommondir stand-in. The name decides, not the kind, so that the next
// run recognizes one a killed run left (to that run the path exists, of kind
// PathFile); an empty one is accepted too, for a run killed between creating and
// writing it (see create). A marked commondir holding anything else is not a
// stand-in any more and stays.
func isUntouched(fd int, dir bool, name string) bool {
	if isEmpty(fd, dir) {
		return true
	}
	if dir || name != "commondir" {
		return false
	}
	body := policy.CommondirStandIn
	buf := make([]byte, len(body)+1)
	n, err := unix.Pread(fd, buf, 0)
	return err == nil && string(buf[:n]) == body
}

// isEmpty reports whether the open directory has no entries, or the open file no
// bytes.
func isEmpty(fd int, dir bool) bool {
	if !dir {
		var st unix.Stat_t
		return unix.Fstat(fd, &st) == nil && st.Size == 0
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(dup), "stand-in")
	defer f.Close()
	if _, err := unix.Seek(dup, 0, 0); err != nil {
		return false
	}
	names, err := f.Readdirnames(1)
	return len(names) == 0 && errors.Is(err, io.EOF)
}

// flockWithin takes the flock how (LOCK_SH or LOCK_EX), retrying for at most d and
// until interrupted (when not nil) reports true.
func flockWithin(fd, how int, d time.Duration, interrupted func() bool) error {
	deadline := time.Now().Add(d)
	for {
		err := unix.Flock(fd, how|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case err != unix.EWOULDBLOCK && err != unix.EINTR:
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("still locked after %v", d)
		case interrupted != nil && interrupted():
			return errors.New("interrupted while waiting for the lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
