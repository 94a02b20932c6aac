package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// MakeTree builds a file tree under root from lines in the fence-case notation:
//
//	dir a            a directory (and its parents)
//	file a/f         an empty file
//	file a/f hello   a file holding everything after the second space
//	link a/out -> /etc   a symlink; the target is verbatim and may be relative
//	hardlink a/g -> b/f  a hard link to the existing b/f, which is relative to root
//
// Paths are relative to root and may not leave it. Parents are created as needed and
// nothing is overwritten, so a typo that names an entry twice fails the test.
func MakeTree(t testing.TB, root string, spec ...string) {
	t.Helper()
	for _, line := range spec {
		kind, rest, _ := strings.Cut(line, " ")
		var name, arg string
		if kind == "link" || kind == "hardlink" {
			var ok bool
			name, arg, ok = strings.Cut(rest, " -> ")
			if !ok {
				t.Fatalf("MakeTree %q: want \"%s path -> target\"", line, kind)
			}
		} else {
			name, arg, _ = strings.Cut(rest, " ")
		}
		if name == "" || !filepath.IsLocal(name) {
			t.Fatalf("MakeTree %q: path must be relative and stay under the root", line)
		}
		p := filepath.Join(root, name)
		if kind != "dir" {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatalf("MakeTree %q: %v", line, err)
			}
		}
		var err error
		switch kind {
		case "dir":
			err = os.MkdirAll(p, 0o755)
		case "file":
			err = writeNew(p, arg)
		case "link":
			err = os.Symlink(arg, p)
		case "hardlink":
			if !filepath.IsLocal(arg) {
				t.Fatalf("MakeTree %q: a hard link's target must be relative and stay under the root", line)
			}
			err = os.Link(filepath.Join(root, arg), p)
		default:
			t.Fatalf("MakeTree %q: unknown kind %q (want dir, file, link or hardlink)", line, kind)
		}
		if err != nil {
			t.Fatalf("MakeTree %q: %v", line, err)
		}
	}
}

func writeNew(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
