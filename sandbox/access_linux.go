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
// and everything it left are gone (bwrap's PID namespace), takes back write access
// the run gave the group or others, and ACLs it added or changed, on each directory
// that is still the same one, and says so on stderr.
//
// What it does not do: narrowing is kept (chmod 0700 .git is the user's business);
// a directory the run replaced is not touched (it is pinned under bwrap, so that
// needs a rename bwrap refuses); during the run the wider access is there, for
// another local user who is ready for it. Under Landlock workspace-write protected
// paths are not kept at all (partial), so there is nothing to keep others from.

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
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

// readAccess reads the access of the directory at p (not followed).
func readAccess(p string) (accessState, bool) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return accessState{}, false
	}
	defer unix.Close(fd)
	return fdAccess(fd, p)
}

func fdAccess(fd int, p string) (accessState, bool) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return accessState{}, false
	}
	a := accessState{path: p, dev: st.Dev, ino: st.Ino, mode: st.Mode & 0o7777}
	for _, name := range aclNames {
		a.acls = append(a.acls, getACL(fd, name))
	}
	return a, true
}

func getACL(fd int, name string) []byte {
	buf := make([]byte, 512)
	for {
		n, err := unix.Fgetxattr(fd, name, buf)
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

// restoreAccess takes back, on each directory in before that is still the same
// one, the write access the group or others gained and every ACL that was added or
// changed. It returns one line per directory it changed, and per one it could not.
func restoreAccess(before []accessState) []string {
	var notes []string
	for _, b := range before {
		fd, err := unix.Open(b.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		now, ok := fdAccess(fd, b.path)
		if !ok || now.dev != b.dev || now.ino != b.ino {
			unix.Close(fd)
			continue
		}
		var changed []string
		var failed error
		for i, name := range aclNames {
			if bytes.Equal(now.acls[i], b.acls[i]) {
				continue
			}
			if b.acls[i] == nil {
				err = unix.Fremovexattr(fd, name)
			} else {
				err = unix.Fsetxattr(fd, name, b.acls[i], 0)
			}
			if err != nil {
				failed = fmt.Errorf("%s: %w", name, err)
			} else {
				changed = append(changed, "its ACL")
			}
		}
		// The ACL's mask is the group bits: read the mode again after it.
		if st, ok := fdAccess(fd, b.path); ok {
			now = st
		}
		if added := now.mode & 0o022 &^ (b.mode & 0o022); added != 0 {
			if err := unix.Fchmod(fd, now.mode&^added); err != nil {
				failed = err
			} else {
				changed = append(changed, fmt.Sprintf("mode %04o back to %04o", now.mode, now.mode&^added))
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
