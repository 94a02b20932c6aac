package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strconv"
	"syscall"
	"unicode/utf8"
)

// FieldError is every error about the content of a policy document. Field is the path
// of the offending value in the document's own notation (`sessions["s-42"].events[1].mode`,
// `writableRoots[0]`), or "" when the document as a whole is at fault.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return "policy: " + e.Err.Error()
	}
	return "policy: " + e.Field + ": " + e.Err.Error()
}

func (e *FieldError) Unwrap() error { return e.Err }

// Default returns the embedded default that a missing file stands for: version 1,
// read-only, and no workspaceRoot, so the workspace root is the caller's cwd.
func Default() *File {
	return &File{Version: 1, Mode: ReadOnly}
}

// Load reads and parses the policy file at path. A missing file (ENOENT) yields
// [Default] with found == false and no error. Every other failure is an error with
// found == true: a malformed file, an unreadable one, a directory, a FIFO, a file over
// 64 MiB, or a path through a non-directory (ENOTDIR is not "missing"). A broken file
// fails loud; it never silently reverts to the default.
func Load(path string) (f *File, found bool, err error) {
	data, err := readPolicy(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Default(), false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("reading policy file %q: %w", path, err)
	}
	f, err = Parse(data)
	if err != nil {
		return nil, true, fmt.Errorf("policy file %q: %w", path, err)
	}
	return f, true, nil
}

// maxFileSize bounds what a reader loads. The event logs only grow, but a million
// events fit; anything bigger is an error, not an out-of-memory kill of every reader.
const maxFileSize = 64 << 20

// readPolicy reads a regular file of at most maxFileSize bytes and returns its content
// and permission bits. The type check is on the open file: a FIFO or a device in place
// of the policy file is refused (the Stat before the open keeps a FIFO from blocking
// the open itself; swapping one in between needs write access to the directory, which
// is already the power to write any policy).
func readPolicy(path string) ([]byte, error) {
	data, _, err := readPolicyMode(path)
	return data, err
}

func readPolicyMode(path string) ([]byte, fs.FileMode, error) {
	if fi, err := os.Stat(path); err != nil {
		return nil, 0, err
	} else if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	}
	// Not waiting at the open: a FIFO swapped in since the stat would block the
	// reader (the fence's watcher, or toh-exec) until someone wrote to it.
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxFileSize+1))
	if err != nil {
		return nil, 0, err
	}
	if len(data) > maxFileSize {
		return nil, 0, fmt.Errorf("larger than %d MiB", maxFileSize>>20)
	}
	return data, fi.Mode().Perm(), nil
}

// Parse decodes one version-1 policy document strictly: the whole input is one JSON
// object and nothing follows it; it is valid UTF-8; no object repeats a key; every key
// is spelled exactly as in the data model; no value is null; version is present and 1;
// and the result passes [File.Validate]. Every error is a [*FieldError] naming the field.
//
// Empty arrays and objects decode to nil, so the result compares equal to what its own
// [File.Marshal] output parses to.
func Parse(data []byte) (*File, error) {
	if !utf8.Valid(data) {
		// encoding/json would silently replace invalid bytes with U+FFFD, changing paths.
		return nil, &FieldError{Err: errors.New("document is not valid UTF-8")}
	}
	if off, ok := loneSurrogate(data); ok {
		// The same replacement, reached through an escape (found by review).
		return nil, &FieldError{Err: fmt.Errorf("unpaired UTF-16 surrogate escape at offset %d", off)}
	}
	if v, ok := peekVersion(data); ok && v != 1 {
		// A newer file will have keys and values this parser does not know; the one
		// useful thing to say about it is its version.
		return nil, &FieldError{Field: "version", Err: unsupportedVersion(v)}
	}
	if err := walk(data); err != nil {
		return nil, err
	}
	f, err := decode(data)
	if err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// peekVersion reads the top-level "version" leniently (any other content may be
// anything a future version allows), reporting ok only for a JSON object whose version
// is an integer.
func peekVersion(data []byte) (int, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return 0, false
	}
	raw, present := top["version"]
	var v int
	if !present || json.Unmarshal(raw, &v) != nil {
		return 0, false
	}
	return v, true
}

// The wire types split the document into levels, so that each level is decoded by
// encoding/json on its own and any error it reports can be given the level's path.
type fileWire struct {
	Version       *int                       `json:"version"`
	Mode          Mode                       `json:"mode"`
	WorkspaceRoot string                     `json:"workspaceRoot"`
	WritableRoots []string                   `json:"writableRoots"`
	Protect       *[]string                  `json:"protect"`
	Network       Network                    `json:"network"`
	Approval      Approval                   `json:"approval"`
	Fence         *bool                      `json:"fence"`
	Sessions      map[string]json.RawMessage `json:"sessions"`
}

type sessionWire struct {
	Cwd      string            `json:"cwd"`
	Events   []json.RawMessage `json:"events"`
	Approval Approval          `json:"approval"`
}

func decode(data []byte) (*File, error) {
	var w fileWire
	if err := decodeLevel(data, &w, ""); err != nil {
		return nil, err
	}
	if w.Version == nil {
		return nil, &FieldError{Field: "version", Err: errors.New("missing (want 1)")}
	}
	if *w.Version != 1 {
		return nil, &FieldError{Field: "version", Err: unsupportedVersion(*w.Version)}
	}
	f := &File{
		Version:       *w.Version,
		Mode:          w.Mode,
		WorkspaceRoot: w.WorkspaceRoot,
		WritableRoots: nilIfEmpty(w.WritableRoots),
		Network:       w.Network,
		Approval:      w.Approval,
		Fence:         w.Fence,
	}
	if w.Protect != nil {
		// An explicit empty list means "protect nothing" and must survive, so it stays
		// a non-nil pointer to an empty (but non-nil) slice.
		p := append([]string{}, *w.Protect...)
		f.Protect = &p
	}
	ids := make([]string, 0, len(w.Sessions))
	for id := range w.Sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		path := joinMapKey("sessions", id)
		var sw sessionWire
		if err := decodeLevel(w.Sessions[id], &sw, path); err != nil {
			return nil, err
		}
		s := Session{Cwd: sw.Cwd, Approval: sw.Approval}
		for i, raw := range sw.Events {
			var ev Event
			if err := decodeLevel(raw, &ev, joinIndex(path+".events", i)); err != nil {
				return nil, err
			}
			s.Events = append(s.Events, ev)
		}
		if f.Sessions == nil {
			f.Sessions = make(map[string]Session, len(ids))
		}
		f.Sessions[id] = s
	}
	return f, nil
}

func unsupportedVersion(v int) error {
	return fmt.Errorf("unsupported version %d (this toh reads version 1 only)", v)
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// decodeLevel decodes one level with DisallowUnknownFields (a second line behind the
// walk's exact key check) and names the field of any error.
func decodeLevel(data []byte, v any, path string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	var ee *EnumError
	if errors.As(err, &ee) {
		// Each level holds at most one field of each enum kind, named like the kind.
		return &FieldError{Field: joinField(path, ee.Kind), Err: ee}
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := path
		if te.Field != "" {
			field = joinField(path, te.Field)
		}
		return &FieldError{Field: field, Err: fmt.Errorf("expected %s, found %s", describeType(te.Type), te.Value)}
	}
	return &FieldError{Field: path, Err: err}
}

func describeType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Bool:
		return "a boolean"
	}
	return t.String()
}

// loneSurrogate finds a \uD800-\uDFFF escape that is not a high surrogate followed by
// a low one: encoding/json decodes it to U+FFFD, which would change a path as invalid
// bytes would. Escapes occur only inside strings (anywhere else the walk rejects the
// document), and an escaped backslash is skipped whole.
func loneSurrogate(data []byte) (int, bool) {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		switch {
		case !ok:
			i++ // another escape: skip the escaped character
		case r >= 0xD800 && r <= 0xDBFF:
			if lo, ok := hex4(i + 6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 11
				continue
			}
			return i, true
		case r >= 0xDC00 && r <= 0xDFFF:
			return i, true
		default:
			i += 5
		}
	}
	return 0, false
}
