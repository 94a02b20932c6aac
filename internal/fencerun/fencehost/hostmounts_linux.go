package fencehost

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/fusefence"
	"github.com/toh-sandbox/toh/policy"
)

// For a caller other than root the fences are mounted on the host by fusermount3
// and bound into the run's namespace by the stage (see mountOnHost). Such a mount is
// copied into every mount namespace created while it exists, by anyone; two rules
// keep that harmless:
//
//   - One window at a time: a run holds an exclusive lock on its user's mount
//     directory from before its first host mount until its last one is detached,
//     and its stage's namespace is created inside that window. So no fenced run's
//     namespace holds another fenced run's fences (whose records would then get this
//     run's denials), and the mountpoints can be the same few directories each time.
//   - Mountpoints are never removed. Removing a directory detaches the mounts on it
//     in every namespace, and a bwrap that is copying its mount tree at that moment
//     (any run, fenced or not, that started during the window) fails on the vanished
//     mountpoint. A copy that stays behind in such a namespace ends with its host.
//   - Each fence acts only for the run's own processes (admit_linux.go): anything
//     else of the same user that reached a mount during the window (a confined run
//     whose roots cover the directory, which Landlock lets write through it; a
//     descriptor or working directory kept from then) is refused every mutation,
//     with no record. This once held only by hope: another run wrote through a
//     fence into the fenced run's workspace (found by review).
//
// The directory is the first of $XDG_RUNTIME_DIR/toh-fence, /run/user/UID/toh-fence,
// ~/.cache/toh/fence and /var/tmp/toh-fence-UID that lies outside the run's writable
// roots (the last one regardless); it holds "lock" and one directory per fenced root.

// mountDir returns the calling user's fence mount directory for pol, created 0700
// and checked to be a directory of this user's, reached without symlinks.
func mountDir(pol policy.Execution) (string, error) {
	uid := os.Geteuid()
	var candidates []string
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		candidates = append(candidates, filepath.Join(x, "toh-fence"))
	}
	candidates = append(candidates, fmt.Sprintf("/run/user/%d/toh-fence", uid))
	if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		candidates = append(candidates, filepath.Join(h, ".cache", "toh", "fence"))
	}
	last := fmt.Sprintf("/var/tmp/toh-fence-%d", uid)
	candidates = append(candidates, last)
	var errs []error
	for _, c := range candidates {
		if c != last && insideAny(c, pol.WritableRoots) {
			continue
		}
		if fi, err := os.Stat(filepath.Dir(c)); err != nil || !fi.IsDir() {
			continue
		}
		if err := os.MkdirAll(c, 0o700); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := ownDir(c, uid); err != nil {
			errs = append(errs, err)
			continue
		}
		return c, nil
	}
	// The last candidate has a name anyone can take first (a denial of service
	// only: a directory of another user's is never used).
	return "", fmt.Errorf("no usable directory for the fence's mountpoints: %w (make a private one for this user: $XDG_RUNTIME_DIR, /run/user/%d or ~/.cache/toh; or have root remove %s if another user made it)",
		errors.Join(errs...), uid, last)
}

func insideAny(p string, roots []string) bool {
	for _, r := range roots {
		if canon.Within(p, r) {
			return true
		}
	}
	return false
}

// ownDir checks that dir is a real directory (not a symlink) owned by uid and
// closed to everyone else.
func ownDir(dir string, uid int) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid {
		return fmt.Errorf("%s: not a directory of uid %d", dir, uid)
	}
	if st.Mode&0o077 != 0 {
		if err := unix.Chmod(dir, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// lockMountDir takes the directory's window lock (see above), waiting for another
// run's window to end.
func lockMountDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// prepareMountpoint makes dir/i an empty directory with nothing mounted on it: a
// host killed inside its window leaves a dead mount, detached here.
func prepareMountpoint(dir string, i int) (string, error) {
	mp := filepath.Join(dir, strconv.Itoa(i))
	if err := os.Mkdir(mp, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if _, err := fusefence.RecoverStale(mp); err != nil {
		return "", err
	}
	if err := ownDir(mp, os.Geteuid()); err != nil {
		return "", err
	}
	return mp, nil
}
