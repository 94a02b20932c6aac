package sandbox

// Access widened above protected paths, put back after a bwrap run.
//
// bwrap keeps a protected path read-only (a read-only bind), and pins the directories
// between its writable root and it (each bound onto itself, writable), so none of
// them can be renamed or removed. It cannot keep their mode: a command may run
// "chmod 0777 .git" or "chmod o+w ." on the workspace root, or give another user
// write by a POSIX ACL, and once the run has ended any local user could then rename
// .git/hooks away and put hooks of their own in its place, which git runs for the
// user. The fence denies such a change itself (fusefence's reachAccess); bwrap
// cannot, so [Run] looks at those directories before the run and, once the command
// and everything it left are gone (bwrap's PID namespace), puts back the mode of each
// directory, still the same one, whose write access the run gave the group or others
// (or whose sticky bit it took from a directory others may write), and every ACL that
// now lets someone write whom it did not, and says so on stderr. A directory it
// cannot look at afterwards is named on stderr too.
//
// What it does not do: narrowing alone is kept (chmod 0700 .git is the user's
// business);
// a directory the run replaced is not touched (it is pinned under bwrap, so that
// needs a rename bwrap refuses); during the run the wider access is there, for
// another local user who is ready for it. Under Landlock workspace-write protected
// paths are not kept at all (partial), so there is nothing to keep others from.

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/posixacl"
)

// aclNames are the POSIX ACL attributes that can widen who may change a directory or,
// by default, what is made in it.
var aclNames = []string{"system.posix_acl_access", "system.posix_acl_default"}

// accessState is one directory's access as found before a run.
type accessState struct {
	path     string
	dev, ino uint64
	mode     uint32
	acls     [][]byte // per aclNames; nil when absent
}

// ancestorsOfProtected lists the directories from each guarded path's bound root
// down to its parent that exist now, with their access: the guards are the bwrap
// argv's own (bwrapGuards), so fenced roots, the fence's to guard, are not among
// them.
func ancestorsOfProtected(guards []bwrapGuard) []accessState {
	seen := map[string]bool{}
	var out []accessState
	for _, g := range guards {
		if g.path == g.root {
			continue
		}
		for d := filepath.Dir(g.path); ; d = filepath.Dir(d) {
			if !seen[d] {
				seen[d] = true
				if st, ok := readAccess(d); ok {
					out = append(out, st)
				}
			}
			if d == g.root || d == "/" {
				break
			}
		}
	}
	return out
}

// readAccess reads the access of the directory at p (not followed). The descriptor is
// O_PATH: it needs no permission on the directory itself, which the command may
// have taken from its owner to keep it from being put back.
func readAccess(p string) (accessState, bool) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return accessState{}, false
	}
	defer unix.Close(fd)
	return fdAccess(fd, p)
}

// fdAccess reads the access of the directory fd (O_PATH) names; its ACLs through the
// descriptor's /proc/self/fd link, which O_PATH allows where fgetxattr does not.
func fdAccess(fd int, p string) (accessState, bool) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return accessState{}, false
	}
	a := accessState{path: p, dev: st.Dev, ino: st.Ino, mode: st.Mode & 0o7777}
	for _, name := range aclNames {
		a.acls = append(a.acls, getACL(procFD(fd), name))
	}
	return a, true
}

func procFD(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

func getACL(p, name string) []byte {
	buf := make([]byte, 512)
	for {
		n, err := unix.Getxattr(p, name, buf)
		if err == unix.ERANGE {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return nil
		}
		return append([]byte{}, buf[:n]...)
	}
}

// widened reports whether the mode now gives anyone but the owner write access it
// did not have before, or takes away the sticky bit from a directory others may
// write (which let them rename what they do not own).
func widened(before, now uint32) bool {
	if now&0o022&^(before&0o022) != 0 {
		return true
	}
	return before&0o1000 != 0 && now&0o1000 == 0 && now&0o022 != 0
}

// aclWriters lists who, besides the owner, a POSIX ACL (its xattr value) lets write:
// named users and groups and the owning group through the mask, and others. ok is
// false for a value that is no ACL.
func aclWriters(b []byte) (writers map[posixacl.Entry]bool, ok bool) {
	acl, ok := posixacl.Parse(b)
	if !ok {
		return nil, false
	}
	maskW := true
	for _, e := range acl {
		if e.Tag == posixacl.Mask {
			maskW = e.Perm&posixacl.Write != 0
		}
	}
	writers = map[posixacl.Entry]bool{}
	for _, e := range acl {
		switch {
		case e.Perm&posixacl.Write == 0:
		case e.Tag == posixacl.Other:
			writers[posixacl.Entry{Tag: e.Tag}] = true
		case e.Tag == posixacl.User || e.Tag == posixacl.Group || e.Tag == posixacl.GroupObj:
			if maskW {
				writers[posixacl.Entry{Tag: e.Tag, ID: e.ID}] = true
			}
		}
	}
	return writers, true
}

// aclWidened reports whether the ACL now lets someone write whom it did not before;
// a value that is no ACL counts as widened when it changed.
func aclWidened(before, now []byte) bool {
	if now == nil || bytes.Equal(before, now) {
		return false
	}
	was, _ := aclWriters(before)
	is, ok := aclWriters(now)
	if !ok {
		return true
	}
	for w := range is {
		if !was[w] {
			return true
		}
	}
	return false
}

// restoreAccess puts back, on each directory in before that is still the same one,
// the mode it had when the run widened it (write for the group or others, the
// sticky bit taken away; the whole mode, so that an owner's bits the command took
// away to keep it from being put back come back too) and every ACL that now lets
// someone write whom it did not. A narrowing alone is kept. Parents are put back
// before what lies in them. It returns one line per directory it changed, and per
// one it could not.
func restoreAccess(before []accessState) []string {
	sort.SliceStable(before, func(i, j int) bool { return strings.Count(before[i].path, "/") < strings.Count(before[j].path, "/") })
	var notes []string
	for _, b := range before {
		fd, err := unix.Open(b.path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			continue // gone: nothing left there to open to others
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("could not check %s, above a protected path, after the run (%v): look at its mode and ACL", b.path, err))
			continue
		}
		now, ok := fdAccess(fd, b.path)
		if !ok || now.dev != b.dev || now.ino != b.ino {
			unix.Close(fd)
			continue
		}
		link := procFD(fd)
		var changed []string
		var failed error
		for i, name := range aclNames {
			if !aclWidened(b.acls[i], now.acls[i]) {
				continue
			}
			if b.acls[i] == nil {
				err = unix.Removexattr(link, name)
			} else {
				err = unix.Setxattr(link, name, b.acls[i], 0)
			}
			if err != nil {
				failed = fmt.Errorf("%s: %w", name, err)
			} else {
				changed = append(changed, "its ACL")
			}
		}
		// An ACL's mask is the group bits: read the mode again after it.
		if st, ok := fdAccess(fd, b.path); ok {
			now = st
		}
		if widened(b.mode, now.mode) {
			if err := unix.Chmod(link, b.mode); err != nil {
				failed = err
			} else {
				changed = append(changed, fmt.Sprintf("mode %04o back to %04o", now.mode, b.mode))
			}
		}
		unix.Close(fd)
		if failed != nil {
			notes = append(notes, fmt.Sprintf("the command widened access to %s, above a protected path, and it could not be put back (%v): others may replace what it holds", b.path, failed))
		} else if len(changed) > 0 {
			notes = append(notes, fmt.Sprintf("the command widened access to %s, above a protected path: put back (%s)", b.path, strings.Join(changed, ", ")))
		}
	}
	return notes
}
