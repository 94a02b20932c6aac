package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unicode/utf8"

	"github.com/toh-sandbox/toh/canon"
)

var (
	// ErrUnknownSession: the file holds no session with the requested ID.
	ErrUnknownSession = errors.New("unknown session")
	// ErrSessionExists: AddSession was asked to create an ID that is already taken.
	ErrSessionExists = errors.New("session already exists")
	// ErrAppendOnly: an Update would remove a session, change a session's cwd, or
	// remove or rewrite an event already in a session's log.
	ErrAppendOnly = errors.New("sessions are append-only")
	// ErrLockUnsupported: this platform has no flock(2); writers refuse rather than
	// write without mutual exclusion.
	ErrLockUnsupported = errors.New("policy file locking is not supported on this platform")
)

// Update is the only writer of the policy file. Under an exclusive flock(2) on the
// sibling lock file path+".lock" (created 0600 when missing, never deleted, so every
// writer always locks the same inode), it reads the current file (missing means
// [Default]; malformed is an error and the file is left for a human to fix), calls fn
// on a private copy, checks that sessions stayed append-only (see [ErrAppendOnly]),
// validates, and atomically replaces the file: a temp file in the same directory,
// written, fsynced, renamed over path, then the directory fsynced. On any error the
// temp file is removed and the original is untouched. The permission bits of an
// existing file are kept (0644 otherwise). A missing directory of path is created
// (0700, parents included): on a fresh account ~/.config/toh does not exist yet, and
// "toh-exec policy set-mode" is the first thing a user runs (found by review: it
// failed, as a malformed policy would).
//
// path itself must not be a symlink: a rename would replace the link with a file, and
// writers spelling the path differently would lock different lock files. It is refused.
func Update(path string, fn func(*File) error) error {
	if err := update(path, fn); err != nil {
		return fmt.Errorf("updating policy file %q: %w", path, err)
	}
	return nil
}

func update(path string, fn func(*File) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	lock, err := openLock(path + ".lock")
	if err != nil {
		return err
	}
	defer lock.Close() // closing the last fd releases the flock
	if err := lockExclusive(lock); err != nil {
		return fmt.Errorf("locking %q: %w", lock.Name(), err)
	}

	before, perm, err := readForUpdate(path)
	if err != nil {
		return err
	}
	after := before.Clone()
	if err := fn(after); err != nil {
		return err
	}
	if err := checkAppendOnly(before, after); err != nil {
		return err
	}
	data, err := after.Marshal()
	if err != nil {
		return err
	}
	return replaceFile(path, data, perm)
}

// openLock opens (creating it 0600 if missing) the lock file, which must be a
// regular file of its own name. The lock may lie where a confined command could
// create it (bwrap cannot keep a missing file from being created): followed, a
// link planted there would have this writer, run by the user outside any sandbox,
// create a file wherever the link points.
func openLock(name string) (*os.File, error) {
	lock, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	fi, err := lock.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file (%v); remove it, and keep the policy file outside the writable roots", name, fi.Mode().Type())
	}
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	return lock, nil
}

// EnsureLock creates the lock file of the policy file at path (0600, empty) when the
// policy file exists and the lock does not; errors are ignored (a directory no one
// may write in needs no lock made in advance). toh-exec calls it before a confined
// run: a lock file that exists is kept read-only like the policy file where the
// policy file lies in a writable root (bwrap rebinds both), while a missing one is a
// name the command could take. A command that made a directory there made every later
// writer fail (EISDIR), so "toh-exec policy set-mode read-only" could no longer
// tighten the mode it ran under (found by review).
func EnsureLock(path string) {
	if path == "" {
		return
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		return
	}
	if f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600); err == nil {
		f.Close()
	}
}

func readForUpdate(path string) (*File, fs.FileMode, error) {
	// Lstat, not Stat: a rename would replace a symlink with a file, and writers that
	// spell the path differently would lock different lock files.
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Default(), 0o644, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("not a regular file (%v); refusing to replace it", fi.Mode().Type())
	}
	data, perm, err := readPolicyMode(path)
	if err != nil {
		return nil, 0, err
	}
	f, err := Parse(data)
	if err != nil {
		return nil, 0, fmt.Errorf("current content: %w", err)
	}
	return f, perm, nil
}

func checkAppendOnly(before, after *File) error {
	for id, b := range before.Sessions {
		at := joinMapKey("sessions", id)
		a, ok := after.Sessions[id]
		switch {
		case !ok:
			return &FieldError{Field: at, Err: fmt.Errorf("%w: a session cannot be removed", ErrAppendOnly)}
		case a.Cwd != b.Cwd:
			return &FieldError{Field: at + ".cwd", Err: fmt.Errorf("%w: cwd is immutable (%q, not %q)", ErrAppendOnly, b.Cwd, a.Cwd)}
		case len(a.Events) < len(b.Events):
			return &FieldError{Field: at + ".events", Err: fmt.Errorf("%w: %d events would become %d", ErrAppendOnly, len(b.Events), len(a.Events))}
		}
		for i := range b.Events {
			if a.Events[i] != b.Events[i] {
				return &FieldError{Field: joinIndex(at+".events", i), Err: fmt.Errorf("%w: an event cannot be rewritten", ErrAppendOnly)}
			}
		}
	}
	return nil
}

func replaceFile(path string, data []byte, perm fs.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating temp file: %w", err)
	}
	renamed := false
	defer func() {
		if !renamed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// Fchmod, not the umask-filtered create mode, so the bits are exactly the old ones.
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("setting mode of temp file: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("writing temp file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing temp file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing temp file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("renaming temp file into place: %w", err)
	}
	renamed = true
	// Without this the rename itself may not survive a crash.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening directory to sync the rename: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory: %w", err)
	}
	return nil
}

// AppendEvent appends ev to the mode log of an existing session; it takes effect on the
// session's next call. ev.Mode must be one of the three modes.
func AppendEvent(path, sessionID string, ev Event) error {
	if err := ev.validate("event"); err != nil {
		return err
	}
	return Update(path, func(f *File) error {
		s, ok := f.Sessions[sessionID]
		if !ok {
			return fmt.Errorf("policy: %w %q", ErrUnknownSession, sessionID)
		}
		s.Events = append(s.Events, ev)
		f.Sessions[sessionID] = s
		return nil
	})
}

// SetMode switches a session's mode by appending {mode: m, source: "set-mode"} to its
// log. With sessionID "" it sets the deployment "mode" key instead.
func SetMode(path, sessionID string, m Mode) error {
	if _, err := ParseMode(string(m)); err != nil {
		return &FieldError{Field: "mode", Err: err}
	}
	if sessionID != "" {
		return AppendEvent(path, sessionID, Event{Mode: m, Source: "set-mode"})
	}
	return Update(path, func(f *File) error {
		f.Mode = m
		return nil
	})
}

// AddSession creates session id with working directory cwd, which must be absolute.
// cwd is stored canonical (symlinks resolved now): a session's root is pinned when the
// session is created, so retargeting a symlink in the spelling later, possibly from
// inside the workspace, cannot move the root of every later call.
func AddSession(path, id, cwd string) error {
	if id == "" {
		return &FieldError{Field: joinMapKey("sessions", id), Err: errors.New(`session ID must not be empty ("" means "no session")`)}
	}
	at := joinMapKey("sessions", id) + ".cwd"
	if cwd == "" {
		return &FieldError{Field: at, Err: errors.New("missing (want the session's absolute working directory)")}
	}
	if err := checkAbs(cwd); err != nil {
		return &FieldError{Field: at, Err: err}
	}
	cwd = canon.Canonical(cwd)
	// The document is JSON, which carries only UTF-8: another name would be stored
	// with U+FFFD in place of its bytes, and the session would bind to a directory
	// of that other name if one existed (found by review).
	if !utf8.ValidString(cwd) || !utf8.ValidString(id) {
		return &FieldError{Field: at, Err: errors.New("not valid UTF-8: the policy file cannot carry it exactly")}
	}
	// A session's directory is its workspace root for good: one that does not exist
	// could only make every run of the session fail.
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return &FieldError{Field: at, Err: fmt.Errorf("%q is not an existing directory", cwd)}
	}
	return Update(path, func(f *File) error {
		if _, ok := f.Sessions[id]; ok {
			return fmt.Errorf("policy: %w: %q", ErrSessionExists, id)
		}
		if f.Sessions == nil {
			f.Sessions = make(map[string]Session)
		}
		f.Sessions[id] = Session{Cwd: cwd}
		return nil
	})
}
