package canon

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	// maxSymlinks is the kernel's MAXSYMLINKS, applied per component of the caller's
	// path (see the package doc for why not per lookup).
	maxSymlinks = 40
	// maxLookups bounds the lstat calls of one Canonical call, so a path built to be
	// expensive (thousands of components, each a 40-link chain of long targets)
	// costs a bounded amount; nothing real comes near it.
	maxLookups = 1 << 16
)

// Canonical returns the canonical spelling of unsafePath: absolute, clean and free of
// symlinks, resolved component by component the way the kernel walks a path (like
// realpath(3), not a lexical clean first: "link/.." is the parent of link's target).
// A relative unsafePath is made absolute against the working directory.
//
// If the path does not exist, the deepest existing ancestor is canonicalized and the
// missing suffix appended; ".." inside the missing suffix cancels missing components
// lexically and, once those are used up, continues the physical walk, so the result is
// the same before and after the missing directories are created. A component that
// cannot be resolved (a symlink loop, EACCES, a name too long) ends the walk: the
// result is the canonical prefix, that component, and the rest of the path cleaned
// with ".." unable to climb back over it.
//
// Canonical("") is "", and if the working directory is needed but unknown the cleaned
// relative spelling is returned; neither is absolute, so both are contained in
// nothing.
func Canonical(unsafePath string) string {
	return canonicalize(unsafePath).path
}

// CanonicalAvoiding is Canonical for a process that serves the file system on
// device dev (a FUSE daemon): it never looks a name up in a directory on dev, and
// ok is false when the walk would have had to (a symlink, or a mount, leading into
// that file system). Such a lookup would be a request to the caller itself, made
// while the kernel may hold, for the request being served, the very directory lock
// the lookup needs; the two would wait on each other forever. Stepping onto dev's
// mount root itself needs no lookup inside dev and is allowed. With ok false the
// path is the canonical prefix walked so far, the refused component and the rest,
// as for an unresolvable component. dev 0 avoids nothing.
func CanonicalAvoiding(unsafePath string, dev uint64) (path string, ok bool) {
	r := canonicalizeAvoiding(unsafePath, dev)
	return r.path, !r.avoided
}

// EachLink resolves unsafePath as [Canonical] does and calls visit for every symbolic
// link the walk follows, in the order the kernel meets them, right before reading it:
// link is the link's own path, spelled where this process looks it up (its parent
// canonical, its last component the link's name; see [HostSpelling]), and st its
// lstat. It is for callers that judge the links on the way rather than only where
// they lead: who could retarget one, which names lead into a tree.
//
// path is Canonical's result. exists reports that every component of it exists (as
// of its lookup) and nothing followed a non-directory. err is visit's error, which
// ends the walk, or the walk's own failure (a symlink loop, EACCES, a name too long,
// a lookup that would enter a mount this process serves); a missing component is
// not a failure.
func EachLink(unsafePath string, visit func(link string, st *unix.Stat_t) error) (path string, exists bool, err error) {
	r := walk(unsafePath, 0, currentMirrors(), visit)
	if r.err == nil && !filepath.IsAbs(r.path) {
		r.err = errNotAbsolute
	}
	return r.path, r.err == nil && r.path == r.existing && !r.throughNonDir, r.err
}

// errNotAbsolute is EachLink's error for a path it could not make absolute.
var errNotAbsolute = errors.New("canon: the path cannot be made absolute")

// resolved is what Canonical learned about a path; Within needs more than the string.
type resolved struct {
	path string
	// existing is the deepest existing, canonical ancestor of path (path itself if
	// it exists); "" when path is not absolute.
	existing string
	// throughNonDir is set when a component followed an existing non-directory
	// ("file/x", "file/.."): such a path names nothing the kernel can reach.
	throughNonDir bool
	// avoided is set when the walk stopped before a lookup on the avoided device.
	avoided bool
	// err is why the walk stopped early, if it did.
	err error
}

// canonicalize is Canonical's walk: it never looks a name up inside a mount this
// process serves (see [Mirror]).
func canonicalize(unsafePath string) resolved {
	return walk(unsafePath, 0, currentMirrors(), nil)
}

func canonicalizeAvoiding(unsafePath string, avoidDev uint64) resolved {
	return walk(unsafePath, avoidDev, nil, nil)
}

// walk resolves unsafePath, avoiding lookups on avoidDev, looking up names below a
// mirror's mountpoint on its source (see [Mirror]), and calling visit, when not nil,
// for every symlink it follows (see [EachLink]).
func walk(unsafePath string, avoidDev uint64, ms mirrorSet, visit func(string, *unix.Stat_t) error) resolved {
	if unsafePath == "" {
		return resolved{}
	}
	p := unsafePath
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return resolved{path: filepath.Clean(p)}
		}
		p = wd + "/" + p
	}
	w := walker{resolved: "/", isDir: true, avoidDev: avoidDev, ms: ms, visit: visit}
	w.tracking = avoidDev != 0 || len(ms) > 0
	if w.tracking {
		var st unix.Stat_t
		if err := unix.Lstat("/", &st); err != nil {
			if avoidDev == 0 {
				return resolved{avoided: true}
			}
			return resolved{path: filepath.Clean(p), avoided: true}
		}
		w.rootDev = uint64(st.Dev)
		w.dev = w.rootDev
	}
	comps := strings.Split(p, "/")
	for i, c := range comps {
		// A failure needs an lstat, which only happens with no missing suffix and a
		// directory in hand, so before is exactly where the failing component starts.
		before := w.resolved
		w.links = 0
		if err := w.step(c); err != nil {
			if err == errAvoided && avoidDev == 0 {
				// A served mount reached other than through its mountpoint: a name
				// that leads there must never be looked up by this process.
				return resolved{avoided: true, err: err}
			}
			rest := filepath.Clean("/" + strings.Join(comps[i+1:], "/"))
			before = ms.host(before)
			return resolved{path: filepath.Join(before, c, rest), existing: before, avoided: err == errAvoided, err: err}
		}
	}
	out := ms.host(w.resolved)
	existing := out
	if len(w.missing) > 0 {
		out = filepath.Join(out, strings.Join(w.missing, "/"))
	}
	return resolved{path: out, existing: existing, throughNonDir: w.dead}
}

// walker is the state of one resolution. resolved is always canonical and exists (as
// of its lstat); missing holds plain names below it that did not exist.
type walker struct {
	resolved string
	isDir    bool
	missing  []string
	dead     bool // resolved is a non-directory and something followed it
	links    int  // symlinks expanded for the current component of the caller's path
	lookups  int

	// With tracking set (avoidDev set, see CanonicalAvoiding, or mirrors
	// registered, see Mirror), dev is resolved's device and rootDev that of "/".
	avoidDev, dev, rootDev uint64
	tracking               bool
	// ms are the mirrors this process serves: resolved is spelled as the kernel
	// would walk it, through their mountpoints, and looked up on their sources.
	ms mirrorSet
	// visit, when not nil, is called for every symlink before it is read ([EachLink]).
	visit func(link string, st *unix.Stat_t) error
}

// errAvoided stops a walk before a lookup inside the avoided device.
var errAvoided = errors.New("canon: lookup inside the avoided file system")

func (w *walker) step(comp string) error {
	switch {
	case comp == "" || comp == ".":
		return nil
	case w.dead:
		// Past a non-directory nothing exists or ever will; keep the rest lexically
		// without letting ".." climb back over the non-directory.
		if comp != ".." {
			w.missing = append(w.missing, comp)
		} else if len(w.missing) > 0 {
			w.missing = w.missing[:len(w.missing)-1]
		}
		return nil
	case comp == "..":
		switch {
		case len(w.missing) > 0:
			w.missing = w.missing[:len(w.missing)-1]
		case !w.isDir:
			w.dead = true
		default:
			// resolved is canonical, so its lexical parent is its physical one.
			w.resolved = filepath.Dir(w.resolved)
			if w.tracking {
				// Every component of the parent was looked up outside avoidDev, and
				// this lookup follows no symlink on the way (see lstat), so it looks
				// up nothing inside it.
				var st unix.Stat_t
				if err := w.lstat(w.ms.host(w.resolved), &st); err != nil {
					return err
				}
				w.dev = uint64(st.Dev)
			}
		}
		return nil
	case len(w.missing) > 0:
		w.missing = append(w.missing, comp)
		return nil
	case !w.isDir:
		w.dead = true
		w.missing = append(w.missing, comp)
		return nil
	}

	w.lookups++
	if w.lookups > maxLookups {
		return unix.ELOOP
	}
	if w.tracking && (w.avoidDev != 0 && w.dev == w.avoidDev || w.ms.served(w.dev)) {
		return errAvoided
	}
	next := filepath.Join(w.resolved, comp)
	var st unix.Stat_t
	err := w.lstat(w.ms.host(next), &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		w.missing = append(w.missing, comp)
		return nil
	case errors.Is(err, unix.ENOTDIR): // resolved was replaced since its lstat
		w.dead = true
		w.missing = append(w.missing, comp)
		return nil
	case err != nil:
		return err
	case st.Mode&unix.S_IFMT != unix.S_IFLNK:
		w.resolved, w.isDir = next, st.Mode&unix.S_IFMT == unix.S_IFDIR
		w.dev = uint64(st.Dev)
		return nil
	}

	w.links++
	if w.links > maxSymlinks {
		return unix.ELOOP
	}
	if w.visit != nil {
		if err := w.visit(w.ms.host(next), &st); err != nil {
			return err
		}
	}
	target, err := w.readlink(w.ms.host(next))
	if err != nil {
		return err
	}
	if target == "" {
		return unix.ENOENT // what the kernel says when following one
	}
	if target[0] == '/' {
		w.resolved, w.isDir, w.dev = "/", true, w.rootDev
	}
	for _, c := range strings.Split(target, "/") {
		if err := w.step(c); err != nil {
			return err
		}
	}
	return nil
}

// lstat is lstat(2) of p, the host spelling of a canonical path plus one name. While
// tracking (a daemon that must never look a name up in its own mount) it follows no
// symlink at all on the way: every component before the last was a directory when
// the walk reached it, and one replaced since by a symlink (a racer swapping a
// directory for a link into the mount, renameat2 RENAME_EXCHANGE) fails the lookup
// with ELOOP instead of taking it into the mount. There, the kernel may hold the
// directory lock the request being served is waiting under, and the lookup would
// wait for the very thread that makes it: the mount would hang for good (found by
// review; TestWalkRefusesSwappedComponent). Without openat2 (Linux before 5.6) the
// plain lstat remains.
func (w *walker) lstat(p string, st *unix.Stat_t) error {
	if testHookLookup != nil {
		testHookLookup(p)
	}
	if !w.tracking {
		return unix.Lstat(p, st)
	}
	fd, err := OpenNoSymlinks(p, true)
	if err == unix.ENOSYS {
		return unix.Lstat(p, st)
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstat(fd, st)
}

// testHookLookup, when set (by tests only), runs before each lstat of a walk.
var testHookLookup func(p string)

// readlink is readlink(2) of p, following nothing on the way while tracking (see
// lstat).
func (w *walker) readlink(p string) (string, error) {
	if !w.tracking {
		return os.Readlink(p)
	}
	fd, err := OpenNoSymlinks(p, true)
	if err == unix.ENOSYS {
		return os.Readlink(p)
	}
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	target, err := readlinkFd(fd)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: p, Err: err}
	}
	return target, nil
}
