package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The token walk runs before encoding/json sees the document. It exists because
// encoding/json (v1) is lenient in ways that matter for a security file:
//
//   - duplicate keys: the last one silently wins, so {"mode":"read-only",
//     "mode":"danger-full-access"} reads as whatever the last writer smuggled in;
//   - key matching is case-insensitive, so "Mode" or "MODE" also sets mode, even with
//     DisallowUnknownFields;
//   - null is silently accepted for any field and leaves it absent.
//
// The walk rejects all three, knows the path of every value it visits, and so can name
// the field in every error. The accepted key sets come from the struct tags of File,
// Session and Event, so the walk cannot drift from the data model.

// maxDepth bounds nesting. The schema itself is 5 levels deep (file, sessions, session,
// events, event); anything much deeper is garbage, and bounding it keeps the recursive
// walk from exhausting the stack on hostile input.
const maxDepth = 16

type shape int

const (
	shapeOther shape = iota
	shapeFile
	shapeSessions
	shapeSession
	shapeEvents
	shapeEvent
)

// The JSON keys of each shape, computed on first use: every toh-exec start links
// this package, and most never parse a policy file.
var (
	fileKeys    = sync.OnceValue(func() []string { return jsonKeys(reflect.TypeFor[File]()) })
	sessionKeys = sync.OnceValue(func() []string { return jsonKeys(reflect.TypeFor[Session]()) })
	eventKeys   = sync.OnceValue(func() []string { return jsonKeys(reflect.TypeFor[Event]()) })
)

func jsonKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}

func (s shape) keys() []string {
	switch s {
	case shapeFile:
		return fileKeys()
	case shapeSession:
		return sessionKeys()
	case shapeEvent:
		return eventKeys()
	}
	return nil
}

// child returns the path and shape of the value under key (objects) or index (arrays).
func (s shape) child(path, key string, index int) (string, shape) {
	switch s {
	case shapeFile:
		if key == "sessions" {
			return joinField(path, key), shapeSessions
		}
		return joinField(path, key), shapeOther
	case shapeSessions:
		return joinMapKey(path, key), shapeSession
	case shapeSession:
		if key == "events" {
			return joinField(path, key), shapeEvents
		}
		return joinField(path, key), shapeOther
	case shapeEvents:
		return joinIndex(path, index), shapeEvent
	}
	if index >= 0 {
		return joinIndex(path, index), shapeOther
	}
	return joinField(path, key), shapeOther
}

func joinField(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func joinMapKey(path, key string) string { return path + "[" + strconv.Quote(key) + "]" }

func joinIndex(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

type walker struct {
	dec *json.Decoder
}

// walk checks the syntax and the key structure of a whole document, including that
// nothing but white space follows it.
func walk(data []byte) error {
	w := walker{dec: json.NewDecoder(bytes.NewReader(data))}
	w.dec.UseNumber()
	tok, err := w.dec.Token()
	if err == io.EOF {
		return &FieldError{Err: errors.New(`empty document (want a JSON object with "version": 1)`)}
	}
	if err != nil {
		return w.syntax("", err)
	}
	if tok != json.Delim('{') {
		return &FieldError{Err: fmt.Errorf("document must be a JSON object, found %s", describeToken(tok))}
	}
	if err := w.object("", shapeFile, 1); err != nil {
		return err
	}
	off := w.dec.InputOffset()
	if _, err := w.dec.Token(); err != io.EOF {
		return &FieldError{Err: fmt.Errorf("trailing data after the document at offset %d", off)}
	}
	return nil
}

func (w *walker) syntax(path string, err error) error {
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return &FieldError{Field: path, Err: errors.New("malformed JSON: unexpected end of input")}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// se.Offset is relative to whatever the decoder had buffered when Token
		// decoded a literal, not to the document; InputOffset is the document's.
		return &FieldError{Field: path, Err: fmt.Errorf("malformed JSON at offset %d: %w", w.dec.InputOffset(), err)}
	}
	return &FieldError{Field: path, Err: fmt.Errorf("malformed JSON: %w", err)}
}

// value consumes one value whose first token has not been read yet.
func (w *walker) value(path string, sh shape, depth int) error {
	tok, err := w.dec.Token()
	if err != nil {
		return w.syntax(path, err)
	}
	switch tok {
	case json.Delim('{'):
		return w.object(path, sh, depth+1)
	case json.Delim('['):
		return w.array(path, sh, depth+1)
	case nil:
		return &FieldError{Field: path, Err: errors.New("null is not allowed (omit the key instead)")}
	}
	if _, ok := tok.(json.Delim); ok {
		// Token reports misplaced delimiters itself; this is belt and braces.
		return &FieldError{Field: path, Err: fmt.Errorf("malformed JSON: unexpected %v", tok)}
	}
	return nil
}

// object consumes the members and the closing brace of an object whose '{' was read.
func (w *walker) object(path string, sh shape, depth int) error {
	if depth > maxDepth {
		return &FieldError{Field: path, Err: fmt.Errorf("nested more than %d levels deep", maxDepth)}
	}
	allowed := sh.keys()
	seen := make(map[string]bool)
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return w.syntax(path, err)
		}
		key, ok := tok.(string)
		if !ok {
			return &FieldError{Field: path, Err: fmt.Errorf("malformed JSON: object key is %s", describeToken(tok))}
		}
		if seen[key] {
			return &FieldError{Field: path, Err: fmt.Errorf("duplicate key %q", key)}
		}
		seen[key] = true
		if allowed != nil && !slices.Contains(allowed, key) {
			return &FieldError{Field: path, Err: fmt.Errorf("unknown field %q (want %s)", key, joinOr(allowed))}
		}
		childPath, childShape := sh.child(path, key, -1)
		if err := w.value(childPath, childShape, depth); err != nil {
			return err
		}
	}
	return w.closing(path, '}')
}

func (w *walker) array(path string, sh shape, depth int) error {
	if depth > maxDepth {
		return &FieldError{Field: path, Err: fmt.Errorf("nested more than %d levels deep", maxDepth)}
	}
	for i := 0; w.dec.More(); i++ {
		childPath, childShape := sh.child(path, "", i)
		if err := w.value(childPath, childShape, depth); err != nil {
			return err
		}
	}
	return w.closing(path, ']')
}

func (w *walker) closing(path string, want json.Delim) error {
	tok, err := w.dec.Token()
	if err != nil {
		return w.syntax(path, err)
	}
	if tok != want {
		return &FieldError{Field: path, Err: fmt.Errorf("malformed JSON: expected %v, found %s", want, describeToken(tok))}
	}
	return nil
}

func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return strconv.Quote(t.String())
	case string:
		return "a string"
	case json.Number, float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}
