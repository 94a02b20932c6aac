// Package strictmodes says whether another local user could replace a file toh
// trusts: a program it runs outside every sandbox on the caller's behalf (the
// approval command), or a file it writes as the record of what it refused (the
// audit log). Such a user could make the program approve the caller's escalations,
// or rewrite and forge the records (both found by review).
//
// The rule is OpenSSH's StrictModes: the file and each directory above it, on the
// path as given and on the path it resolves to, must be owned by root or the
// caller and writable by neither group nor others. A sticky directory (/tmp,
// /var/tmp) may be, since only an entry's owner can replace it there, and the
// next component's owner is checked in turn. Group write is refused even for a
// user's private group: toh cannot tell who else is in a group. What does not
// exist passes: it is not run, or it is created by the caller.
package strictmodes

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
)

// Check returns an error naming the component another user could replace when
// what (a noun phrase: "the approval command") at p could be replaced by someone
// other than root and the caller, and nil otherwise. A link met on the way to a
// link lies in neither spelling's directories: callers must use the file by its
// resolved path (canon.Canonical) or by a descriptor, never by p again.
func Check(what, p string) error {
	euid := uint32(os.Geteuid())
	seen := map[string]bool{}
	for _, spelling := range []string{filepath.Clean(p), canon.Canonical(p)} {
		for q := spelling; !seen[q]; q = filepath.Dir(q) {
			seen[q] = true
			var st unix.Stat_t
			if err := unix.Stat(q, &st); err != nil {
				continue
			}
			if Replaceable(&st, euid) {
				return fmt.Errorf("%s %q could be replaced by another user: %s is owned by uid %d with mode %04o; it and every directory above it must be owned by root or you and writable by neither group nor others (chmod go-w)", what, p, q, st.Uid, st.Mode&0o7777)
			}
		}
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
