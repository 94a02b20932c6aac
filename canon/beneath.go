package canon

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PathError is the error of [OpenRoot], [OpenBeneath] and [OpenParentBeneath]. It
// names the operation, the path as the caller gave it and, where the component walk
// knows it, the component that stopped it. Err is an errno, so errors.Is(err,
// unix.ELOOP) (a symlink), unix.EXDEV (an escape) or fs.ErrNotExist work through it.
type PathError struct {
	Op        string // "openroot", "openbeneath" or "openparentbeneath"
	Path      string // the unsafePath argument, verbatim
	Component string // the component the walk stopped at, "" if unknown
	Err       error
}

func (e *PathError) Error() string {
	s := "canon: " + e.Op + " " + strconv.Quote(e.Path)
	if e.Component != "" {
		s += " at " + strconv.Quote(e.Component)
	}
	return s + ": " + e.Err.Error()
}

func (e *PathError) Unwrap() error { return e.Err }

// OpenBeneath opens unsafePath beneath the directory rootFd without ever leaving it
// and without following any symlink or magic link, the last component included.
//
// unsafePath is relative to rootFd; leading slashes are ignored, and "" or "." is the
// root itself. It is cleaned lexically first and must not climb above the root:
// "a/../b" is "b", "../b" fails with EXDEV. Since no symlink may be followed, the
// lexical ".." is the physical one for every path that exists. A trailing slash
// requires a directory, as in open(2).
//
// A symlink anywhere fails with ELOOP, except that O_PATH|O_NOFOLLOW in flags opens
// a trailing symlink itself, as open(2) does. O_CLOEXEC is always added.
//
// On Linux this is one openat2(2) with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS; where openat2 is missing (ENOSYS) or refused (EPERM, a
// seccomp filter) and on other systems it is a walk opening one component at a time
// with O_NOFOLLOW. Both give the same results and errnos.
func OpenBeneath(rootFd int, unsafePath string, flags int, mode uint32) (int, error) {
	fd, err := openBeneath(rootFd, unsafePath, flags, mode)
	if err != nil {
		return -1, withOp(err, "openbeneath", unsafePath)
	}
	return fd, nil
}

// OpenParentBeneath resolves the parent directory of unsafePath beneath rootFd
// exactly as [OpenBeneath] does and returns a directory fd (O_PATH on Linux, so only
// good as the dirfd of *at calls) and the final component, for mutations relative to
// it: mkdirat, unlinkat, renameat2, symlinkat, openat. The caller closes the fd.
//
// The final component must be a plain name: not "", "." or "..", so a trailing slash
// is refused (EINVAL). It is not resolved here; the caller's *at call decides whether
// it is followed, so openat needs O_NOFOLLOW and fstatat AT_SYMLINK_NOFOLLOW.
func OpenParentBeneath(rootFd int, unsafePath string) (dirFd int, base string, err error) {
	return openParentWith(openBeneath, rootFd, unsafePath)
}

type openFunc func(rootFd int, unsafePath string, flags int, mode uint32) (int, error)

func openParentWith(open openFunc, rootFd int, unsafePath string) (int, string, error) {
	dir, base := "", unsafePath
	if i := strings.LastIndexByte(unsafePath, '/'); i >= 0 {
		dir, base = unsafePath[:i], unsafePath[i+1:]
	}
	if base == "" || base == "." || base == ".." {
		return -1, "", &PathError{Op: "openparentbeneath", Path: unsafePath, Component: base, Err: unix.EINVAL}
	}
	fd, err := open(rootFd, dir, dirFlags|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", withOp(err, "openparentbeneath", unsafePath)
	}
	return fd, base, nil
}

// cleanBeneath turns unsafePath into a clean path relative to the root ("." for the
// root itself) and reports whether it ended in a slash.
func cleanBeneath(unsafePath string) (string, bool, error) {
	p := strings.TrimLeft(unsafePath, "/")
	trailingSlash := strings.HasSuffix(p, "/")
	p = filepath.Clean(p)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", false, &PathError{Component: "..", Err: unix.EXDEV}
	}
	return p, trailingSlash && p != ".", nil
}

// openWalk is the portable OpenBeneath: every intermediate component is opened with
// O_NOFOLLOW and checked to be a directory before the next one is looked up in it, so
// a symlink swapped in anywhere at any moment is refused rather than followed.
func openWalk(rootFd int, unsafePath string, flags int, mode uint32) (int, error) {
	p, trailingSlash, err := cleanBeneath(unsafePath)
	if err != nil {
		return -1, err
	}
	if trailingSlash {
		if flags&unix.O_CREAT != 0 {
			return -1, &PathError{Component: filepath.Base(p), Err: unix.EISDIR}
		}
		flags |= unix.O_DIRECTORY
	}
	comps := []string{"."}
	if p != "." {
		comps = strings.Split(p, "/")
	}
	cur := rootFd
	defer func() {
		if cur != rootFd {
			unix.Close(cur)
		}
	}()
	for _, c := range comps[:len(comps)-1] {
		next, err := openDirNoFollow(cur, c)
		if err != nil {
			return -1, &PathError{Component: c, Err: err}
		}
		if cur != rootFd {
			unix.Close(cur)
		}
		cur = next
	}
	last := comps[len(comps)-1]
	fd, err := openLast(cur, last, flags, mode)
	if err != nil {
		return -1, &PathError{Component: last, Err: err}
	}
	return fd, nil
}

// openLast opens name in dirFd without following it. O_DIRECTORY|O_NOFOLLOW on a
// symlink fails with ENOTDIR, not ELOOP; telling the two apart needs a second look,
// and if the name was swapped for a directory in between, the open is retried.
func openLast(dirFd int, name string, flags int, mode uint32) (int, error) {
	if fd, handled, err := openLastPath(dirFd, name, flags); handled {
		return fd, err
	}
	for range 16 {
		fd, err := ignoringEINTR(func() (int, error) {
			return unix.Openat(dirFd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		})
		if err != unix.ENOTDIR {
			return fd, err
		}
		var st unix.Stat_t
		if unix.Fstatat(dirFd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return -1, err
		}
		switch uint32(st.Mode) & unix.S_IFMT {
		case unix.S_IFLNK:
			return -1, unix.ELOOP
		case unix.S_IFDIR:
			continue
		}
		return -1, err
	}
	return -1, unix.ENOTDIR
}

func ignoringEINTR(f func() (int, error)) (int, error) {
	for {
		fd, err := f()
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// withOp fills in the operation and path of a *PathError from the resolvers, or
// wraps a bare errno.
func withOp(err error, op, unsafePath string) error {
	var pe *PathError
	if errors.As(err, &pe) {
		pe.Op, pe.Path = op, unsafePath
		return pe
	}
	return &PathError{Op: op, Path: unsafePath, Err: err}
}
