package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
)

// Validate checks everything about f that is not JSON syntax, so a File built in code is
// held to exactly the rules a parsed one is. Errors are [*FieldError]s; sessions are
// checked in sorted ID order so the error for a given File is deterministic.
func (f *File) Validate() error {
	if f == nil {
		return &FieldError{Err: errors.New("nil policy")}
	}
	switch {
	case f.Version == 0:
		return &FieldError{Field: "version", Err: errors.New("missing (want 1)")}
	case f.Version != 1:
		return &FieldError{Field: "version", Err: unsupportedVersion(f.Version)}
	}
	if f.Mode != "" {
		if _, err := ParseMode(string(f.Mode)); err != nil {
			return &FieldError{Field: "mode", Err: err}
		}
	}
	if f.WorkspaceRoot != "" {
		if err := checkAbs(f.WorkspaceRoot); err != nil {
			return &FieldError{Field: "workspaceRoot", Err: err}
		}
	}
	for i, r := range f.WritableRoots {
		if err := checkAbs(r); err != nil {
			return &FieldError{Field: joinIndex("writableRoots", i), Err: err}
		}
	}
	if f.Protect != nil {
		for i, p := range *f.Protect {
			if err := checkProtect(p); err != nil {
				return &FieldError{Field: joinIndex("protect", i), Err: err}
			}
		}
	}
	if f.Network != "" {
		if _, err := ParseNetwork(string(f.Network)); err != nil {
			return &FieldError{Field: "network", Err: err}
		}
	}
	if f.Approval != "" {
		if _, err := ParseApproval(string(f.Approval)); err != nil {
			return &FieldError{Field: "approval", Err: err}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(f.Sessions)) {
		if err := f.Sessions[id].validate(id); err != nil {
			return err
		}
	}
	return nil
}

func (s Session) validate(id string) error {
	at := joinMapKey("sessions", id)
	if id == "" {
		// Request.SessionID "" means "no session", so a session stored under "" could
		// never be selected: it can only be a mistake.
		return &FieldError{Field: at, Err: errors.New(`session ID must not be empty ("" means "no session")`)}
	}
	if s.Cwd == "" {
		return &FieldError{Field: at + ".cwd", Err: errors.New("missing (want the session's absolute working directory)")}
	}
	if err := checkAbs(s.Cwd); err != nil {
		return &FieldError{Field: at + ".cwd", Err: err}
	}
	for i, ev := range s.Events {
		if err := ev.validate(joinIndex(at+".events", i)); err != nil {
			return err
		}
	}
	if s.Approval != "" {
		if _, err := ParseApproval(string(s.Approval)); err != nil {
			return &FieldError{Field: at + ".approval", Err: err}
		}
	}
	return nil
}

func (ev Event) validate(at string) error {
	if ev.Mode == "" {
		return &FieldError{Field: at + ".mode", Err: errors.New("missing (every event names a mode)")}
	}
	if _, err := ParseMode(string(ev.Mode)); err != nil {
		return &FieldError{Field: at + ".mode", Err: err}
	}
	return nil
}

func checkAbs(p string) error {
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%q contains a NUL byte", p)
	}
	if !path.IsAbs(p) {
		return fmt.Errorf("%q is not an absolute path", p)
	}
	return nil
}

// checkProtect accepts only clean relative paths strictly below a root: an absolute
// entry, "..", or an unclean spelling could name something other than what a reviewer
// reads, and "." would silently turn a whole writable root read-only.
func checkProtect(p string) error {
	switch {
	case p == "":
		return errors.New("empty path (want a path relative to each writable root, like \".git/hooks\")")
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%q contains a NUL byte", p)
	case path.IsAbs(p):
		return fmt.Errorf("%q is absolute (want a path relative to each writable root)", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Errorf("%q must not contain \"..\"", p)
	case path.Clean(p) != p:
		return fmt.Errorf("%q is not clean (want %q)", p, path.Clean(p))
	case p == ".":
		return errors.New(`"." would protect the whole root (want a path below it)`)
	}
	return nil
}

// EffectiveMode is the mode of the session's last event, or "" when the log is empty
// ("no override").
func (s Session) EffectiveMode() Mode {
	if len(s.Events) == 0 {
		return ""
	}
	return s.Events[len(s.Events)-1].Mode
}

// Clone returns a deep copy of f; nothing in it aliases f.
func (f *File) Clone() *File {
	if f == nil {
		return nil
	}
	c := *f
	c.WritableRoots = slices.Clone(f.WritableRoots)
	if f.Protect != nil {
		p := append([]string{}, *f.Protect...)
		c.Protect = &p
	}
	if f.Sessions != nil {
		c.Sessions = make(map[string]Session, len(f.Sessions))
		for id, s := range f.Sessions {
			s.Events = slices.Clone(s.Events)
			c.Sessions[id] = s
		}
	}
	return &c
}

// Marshal validates f and renders it as the indented JSON document that [Update]
// writes, ending in a newline. HTML characters are not escaped (the file is read by
// people). A Protect pointer to a nil slice is written as [] ("protect nothing"), never
// as null, which [Parse] rejects.
func (f *File) Marshal() ([]byte, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	c := f.Clone()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("policy: encoding: %w", err)
	}
	return buf.Bytes(), nil
}
