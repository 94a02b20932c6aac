package fusefence

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/canon"
)

// TestResolveMatchesCanonical: the openat2 fast path of resolve gives exactly the
// target canon.Canonical gives (the definition the fence's decisions rest on), and
// the parent identity it returns is the target's parent directory's.
func TestResolveMatchesCanonical(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	for _, d := range []string{"src/d/e", "src/real", "out/x"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"src/f", "src/d/e/g", "src/real/h", "out/x/o"} {
		if err := os.WriteFile(filepath.Join(base, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"src/ld":       "d",
		"src/lout":     base + "/out/x",
		"src/lf":       "f",
		"src/d/up":     "../real",
		"src/dangle":   "nowhere/at/all",
		"src/d/e/loop": "loop",
		"src/lfo":      base + "/out/x/o",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(base, name)); err != nil {
			t.Fatal(err)
		}
	}
	src = canon.Canonical(src)
	slashFd, err := canon.OpenRoot("/")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(slashFd)
	f := &fence{source: src, slashFd: slashFd}

	// reference is fence.canonical as it was before the fast path.
	reference := func(rel string, fm form) string {
		if fm == formInode || rel == "" {
			return canon.Canonical(f.host(rel))
		}
		dir, name := "", rel
		if i := strings.LastIndexByte(rel, '/'); i >= 0 {
			dir, name = rel[:i], rel[i+1:]
		}
		parent := canon.Canonical(f.host(dir))
		if parent == "/" {
			return "/" + name
		}
		return parent + "/" + name
	}
	rels := []string{"", "f", "new", "d", "d/e", "d/e/g", "d/e/new", "d/new/deeper",
		"ld", "ld/e", "ld/e/g", "ld/new", "lout", "lout/o", "lout/new", "lf", "lfo",
		"d/up", "d/up/h", "d/up/new", "dangle", "dangle/x", "d/e/loop", "d/e/loop/x", "f/x"}
	fast := 0
	for _, rel := range rels {
		for _, fm := range []form{formEntry, formInode} {
			got, dirFd, st, _, ok := f.resolve(rel, fm)
			if !ok {
				t.Errorf("resolve(%q, %d): leads into the mount, with no mount", rel, fm)
			}
			if want := reference(rel, fm); got != want {
				t.Errorf("resolve(%q, %d) = %q, canon.Canonical says %q", rel, fm, got, want)
			}
			if dirFd < 0 {
				if st != nil {
					t.Errorf("resolve(%q, %d): the parent's statx without its descriptor", rel, fm)
				}
				continue
			}
			fast++
			var want, held unix.Stat_t
			if err := unix.Stat(path.Dir(got), &want); err != nil {
				t.Fatal(err)
			}
			err := unix.Fstat(dirFd, &held)
			unix.Close(dirFd)
			if err != nil {
				t.Fatal(err)
			}
			if held.Dev != want.Dev || held.Ino != want.Ino {
				t.Errorf("resolve(%q, %d): parent descriptor %d:%d, stat of %q says %d:%d", rel, fm, held.Dev, held.Ino, path.Dir(got), want.Dev, want.Ino)
			}
			if (st != nil) != (fm == formEntry) {
				t.Errorf("resolve(%q, %d): parent statx %v, want it for entries only", rel, fm, st != nil)
			} else if st != nil && (st.Dev != want.Dev || st.Ino != want.Ino) {
				t.Errorf("resolve(%q, %d): parent identity %d:%d, stat of %q says %d:%d", rel, fm, st.Dev, st.Ino, path.Dir(got), want.Dev, want.Ino)
			}
		}
	}
	// Positive control: the fast path is taken for the plain names.
	if fast < 8 {
		t.Errorf("fast path taken %d times; want it for every name under a symlink-free directory", fast)
	}
}
