// Package strictmodes says whether another local user could replace a file toh
// trusts: a program it runs outside every sandbox on the caller's behalf (the
// approval command), a file it writes as the record of what it refused (the audit
// log), or a directory root mounts on (toh-mount's mountpoint). Such a user could
// make the program approve the caller's escalations, rewrite and forge the records,
// or have root's mirror land where they choose (all found by review).
//
// The rule is OpenSSH's StrictModes, applied to the path as the kernel walks it:
// every symlink met on the way must lie in a directory owned by root or the caller
// and writable by neither group nor others, or, in a sticky directory (/tmp,
// /var/tmp), be owned by root or the caller itself (only an entry's owner can
// replace it there); and the resolved path, each directory of it and what it names,
// must be owned by root or the caller and writable by neither group nor others,
// sticky directories excepted (the next component's owner is checked in turn).
// Group write is refused even for a user's private group: toh cannot tell who else
// is in a group. What does not exist passes: it is not run, or it is created by
// the caller. The caller must then use the resolved path Check returns, never the
// path it was given: a link checked and then followed again by name could be
// another one by then (found by review: an approver reached through another user's
// link in /var/tmp was swapped between the check and the run).
package strictmodes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
)

// Check resolves p (relative to the working directory if it is not absolute) and
// returns the resolved path when neither it nor any link or directory on the way to
// it could be replaced by someone other than root and the caller. Otherwise the
// error says which, with what (a noun phrase: "the approval command") and p.
func Check(what, p string) (string, error) {
	euid := uint32(os.Geteuid())
	resolved, _, err := canon.EachLink(p, func(link string, st *unix.Stat_t) error {
		return Link(link, st, euid)
	})
	var le *LinkError
	switch {
	case errors.As(err, &le):
		return "", fmt.Errorf("%s %q could be replaced by another user: %w; give its path without that link (its target, if you trust it)", what, p, err)
	case err != nil:
		return "", fmt.Errorf("%s %q: %w", what, p, err)
	}
	for q := resolved; ; q = filepath.Dir(q) {
		var st unix.Stat_t
		if unix.Lstat(q, &st) == nil && Replaceable(&st, euid) {
			return "", fmt.Errorf("%s %q could be replaced by another user: %s is owned by uid %d with mode %04o; it and every directory above it must be owned by root or you and writable by neither group nor others (chmod go-w)", what, p, q, st.Uid, st.Mode&0o7777)
		}
		if q == "/" {
			return resolved, nil
		}
	}
}

// LinkError is a symlink someone other than root and the caller could change.
type LinkError struct {
	Link     string
	DirUID   uint32
	DirMode  uint32
	LinkUID  uint32
	inSticky bool
}

func (e *LinkError) Error() string {
	if e.inSticky {
		return fmt.Sprintf("the symlink %s is uid %d's, in a directory others may write in (mode %04o)", e.Link, e.LinkUID, e.DirMode)
	}
	return fmt.Sprintf("the symlink %s lies in a directory another user can change (owner uid %d, mode %04o)", e.Link, e.DirUID, e.DirMode)
}

// Link returns a *LinkError when someone other than root and euid could change the
// symlink link, whose lstat is st (a canon.EachLink visitor): its directory is
// replaceable (see Replaceable), or it is a sticky directory others may write in
// and the link is not root's or euid's.
func Link(link string, st *unix.Stat_t, euid uint32) error {
	var dir unix.Stat_t
	if err := unix.Lstat(filepath.Dir(link), &dir); err != nil {
		return err
	}
	replaceable := Replaceable(&dir, euid)
	othersLink := dir.Mode&0o022 != 0 && st.Uid != 0 && st.Uid != euid
	if replaceable || othersLink {
		return &LinkError{Link: link, DirUID: dir.Uid, DirMode: uint32(dir.Mode) & 0o7777, LinkUID: st.Uid,
			inSticky: !replaceable}
	}
	return nil
}

// Replaceable reports whether someone other than root and euid could change the
// object st describes, or replace an entry in it: it is owned by another user, or
// it is writable by group or others and is not a sticky directory.
func Replaceable(st *unix.Stat_t, euid uint32) bool {
	writable := st.Mode&0o022 != 0 && !(st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&unix.S_ISVTX != 0)
	return st.Uid != 0 && st.Uid != euid || writable
}
