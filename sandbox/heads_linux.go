package sandbox

// Keeping the submodule git directories in use valid across a bwrap run.
//
// A git directory's modules/ gains no entry in a run, but the submodule git
// directories in use in it stay writable (policy.ProtectedPath.Except), so that
// commits in submodules work. git refuses to take a directory nested in one of them
// (modules/lib/x) as another submodule's git directory only while the outer one is a
// valid git directory: HEAD a ref or an object name, objects/ and refs/ directories
// (git's is_git_directory). A command that broke lib's HEAD and made lib/x a git
// directory of its own could therefore have the user's next "git submodule update
// --init" use lib/x, hooks included, once a .gitmodules named a submodule "lib/x"
// (review, 2026-12-02; the name is the command's to choose). So Run reads each such
// directory's HEAD before the run and, after it, puts back what the command left
// invalid by git's rule: the HEAD it read; objects/ and refs/ that git cannot search
// (access X_OK: a directory without the permission gets u+rwx, anything else, a
// dangling link included, is set aside for an empty directory; nothing is removed);
// and says so on stderr. What it cannot put back it names in a WARNING line. A HEAD
// the command changed to another valid one (a commit on a detached HEAD) stays. A
// third review beat a first version four ways (a dangling link, chmod 0, blocked
// temporary names, a 40-digit HEAD in a SHA-256 repository).
//
// Only bwrap runs do this (their stand-ins carry it). Fenced runs (--fence) and the
// standing fence (toh-mount) do not, and under them the gap stays open (the policy
// doc says so); neither does Landlock, which keeps no protected path at all.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
	"golang.org/x/sys/unix"
)

// savedHead is one submodule git directory in use and its HEAD when the run began.
type savedHead struct {
	root, dir string // the bound root, and the git directory (absolute) within it
	head      []byte
}

// maxHeadBytes is as much of HEAD as git reads to validate it.
const maxHeadBytes = 255

// saveHeads records the HEAD of every except directory of the guards, where it is
// valid now (one that is not is left alone: nothing to put back). Valid here takes
// any object name of 40 digits or more; the repository's own length is read only
// after the run, where it decides.
func (s *standIns) saveHeads(guards []bwrapGuard) {
	for _, g := range guards {
		if !g.exists {
			continue
		}
		for _, e := range g.except {
			fd, err := s.openGitDir(g.root, e)
			if err != nil {
				continue
			}
			if head, ok := readHead(fd); ok && policy.ValidHead(head, 40) {
				s.heads = append(s.heads, savedHead{root: g.root, dir: e, head: head})
			}
			unix.Close(fd)
		}
	}
}

// restoreHeads makes each saved git directory valid again, as saveHeads describes,
// and returns one note per directory it mended.
func (s *standIns) restoreHeads() []string {
	var notes []string
	for _, h := range s.heads {
		fd, err := s.openGitDir(h.root, h.dir)
		if err != nil {
			// chmod 0 of the directory itself, say (bwrap lets the command change
			// its mode): git cannot enter it either, until someone restores it.
			notes = append(notes, fmt.Sprintf("WARNING: the submodule git directory %s could not be checked after the "+
				"run (%v): if the command broke it, git takes a git directory nested in it as a submodule's, hooks "+
				"included; look for one before you run git submodule update", h.dir, err))
			continue
		}
		// The config is a protected path, the user's: its object format holds.
		fixed, left := mendGitDir(fd, h.head, policy.GitObjectNameHex(h.dir))
		if len(fixed) > 0 {
			notes = append(notes, fmt.Sprintf("the command left the submodule git directory %s invalid; put back %s, "+
				"so that git goes on refusing a git directory nested in it as a submodule's", h.dir, strings.Join(fixed, ", ")))
		}
		if left != "" {
			notes = append(notes, fmt.Sprintf("WARNING: the command left the submodule git directory %s invalid (%s), and it "+
				"could not be put back: until it is mended, git takes a git directory nested in it as a submodule's, "+
				"hooks included; look for one before you run git submodule update", h.dir, left))
		}
		unix.Close(fd)
	}
	return notes
}

// openGitDir opens dir, within root, as a directory, following no symlink.
func (s *standIns) openGitDir(root, dir string) (int, error) {
	rootFd, err := s.root(root)
	if err != nil {
		return -1, err
	}
	return canon.OpenBeneath(rootFd, relBelow(dir, root), unix.O_RDONLY|unix.O_DIRECTORY, 0)
}

// mendGitDir makes fd a git directory again by git's rule (is_git_directory): where
// HEAD is not valid it puts head back; where objects/ or refs/ cannot be searched
// (access X_OK, as git asks), a real directory gets u+rwx and anything else is set
// aside for an empty directory. It returns what it put back, and what is still
// invalid afterwards ("" when nothing).
func mendGitDir(fd int, head []byte, hexsz int) (fixed []string, left string) {
	if !headValidAt(fd, hexsz) && putBackHead(fd, head) == nil {
		fixed = append(fixed, "HEAD ("+strconv.Quote(strings.TrimSpace(string(head)))+")")
	}
	for _, name := range []string{"objects", "refs"} {
		if unix.Faccessat(fd, name, unix.X_OK, 0) == nil {
			continue
		}
		var st unix.Stat_t
		switch err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
			if unix.Fchmodat(fd, name, st.Mode&0o7777|0o700, 0) == nil {
				fixed = append(fixed, "the permissions of "+name+"/")
			}
		case err == nil && setAside(fd, name) != nil:
		case err == nil || err == unix.ENOENT:
			if unix.Mkdirat(fd, name, 0o755) == nil {
				fixed = append(fixed, "an empty "+name+"/")
			}
		}
	}
	var bad []string
	if !headValidAt(fd, hexsz) {
		bad = append(bad, "HEAD")
	}
	for _, name := range []string{"objects", "refs"} {
		if unix.Faccessat(fd, name, unix.X_OK, 0) != nil {
			bad = append(bad, name+"/")
		}
	}
	return fixed, strings.Join(bad, ", ")
}

// headValidAt is git's validate_headref for fd's HEAD: a symlink into refs/, or a
// file holding "ref: refs/..." or an object name.
func headValidAt(fd int, hexsz int) bool {
	var st unix.Stat_t
	if unix.Fstatat(fd, "HEAD", &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(fd, "HEAD", buf)
		return err == nil && bytes.HasPrefix(buf[:n], []byte("refs/"))
	}
	head, ok := readHead(fd)
	return ok && policy.ValidHead(head, hexsz)
}

// readHead reads the start of fd's HEAD, not following a symlink.
func readHead(fd int) ([]byte, bool) {
	f, err := unix.Openat(fd, "HEAD", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if unix.Fstat(f, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, false
	}
	buf := make([]byte, maxHeadBytes)
	n := 0
	for n < len(buf) {
		k, err := unix.Read(f, buf[n:])
		if err != nil {
			return nil, false
		}
		if k == 0 {
			break
		}
		n += k
	}
	return buf[:n], true
}

// putBackHead replaces fd's HEAD by a file holding head: written under a name of
// its own (random, so that the command cannot have taken it), then renamed over it.
// A directory in HEAD's place is set aside first.
func putBackHead(fd int, head []byte) error {
	var tmp string
	f := -1
	for i := 0; i < 8 && f < 0; i++ {
		tmp = "HEAD.toh-restore-" + randomSuffix()
		var err error
		f, err = unix.Openat(fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil && err != unix.EEXIST {
			return err
		}
	}
	if f < 0 {
		return unix.EEXIST
	}
	_, werr := unix.Write(f, head)
	unix.Close(f)
	if werr != nil {
		unix.Unlinkat(fd, tmp, 0)
		return werr
	}
	var st unix.Stat_t
	if unix.Fstatat(fd, "HEAD", &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := setAside(fd, "HEAD"); err != nil {
			unix.Unlinkat(fd, tmp, 0)
			return err
		}
	}
	if err := unix.Renameat(fd, tmp, fd, "HEAD"); err != nil {
		unix.Unlinkat(fd, tmp, 0)
		return err
	}
	return nil
}

// setAside renames name in fd to "<name>.toh-aside-<random>" beside it: what the
// command put there is kept, never removed.
func setAside(fd int, name string) error {
	for i := 0; i < 8; i++ {
		err := unix.Renameat2(fd, name, fd, name+".toh-aside-"+randomSuffix(), unix.RENAME_NOREPLACE)
		if err != unix.EEXIST {
			return err
		}
	}
	return unix.EEXIST
}

// randomSuffix is 16 random hex digits.
func randomSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
