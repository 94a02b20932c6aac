package canon

import (
	"path/filepath"
	"strings"
	"testing"
)

func FuzzCanonical(f *testing.F) {
	base := canonTree(f)
	for _, s := range []string{
		"", ".", "..", "../..", "/", "//x//", "ws", "ws/..", "ws/sub/../..", "ws/out/..",
		"ws/up/up/ws", "ws/abs/canary", "ws/tofile/x", "ws/f/x/../..", "ws/missing/../../x",
		"ws/dangling/x/..", "loop1/../ws", "self/..", "ws/loop/a/../../b", "c/l0",
		"c/m0/..", "c/l0/../c/l0", "ws/./sub/./", "a\x00b", "ws/" + strings.Repeat("x", 300),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		p := base + "/" + rel
		got := Canonical(p)
		if !filepath.IsAbs(got) || filepath.Clean(got) != got {
			t.Fatalf("Canonical(%q) = %q: not absolute and clean", p, got)
		}
		if again := Canonical(got); again != got {
			t.Fatalf("Canonical(%q) = %q, but Canonical(%q) = %q", p, got, got, again)
		}
		// Where the kernel can open the path, it must agree. Only inside the tree:
		// outside it (/proc/thread-self, /proc/self/fd) answers change from call to call.
		if LexicallyWithin(got, base) {
			if k, ok := kernelRealpath(p); ok && k != got {
				t.Fatalf("Canonical(%q) = %q, kernel resolves it to %q", p, got, k)
			}
		}
		// No bind mounts in the tree, so identity adds nothing to the spelling.
		want := LexicallyWithin(got, base) && !canonicalize(p).throughNonDir
		if w := Within(p, base); w != want {
			t.Fatalf("Within(%q, base) = %v, want %v (canonical %q)", p, w, want, got)
		}
	})
}

// within is the reference for LexicallyWithin, by a different route: filepath.Rel.
func within(path, root string) bool {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return false
	}
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func FuzzLexicallyWithin(f *testing.F) {
	for _, s := range [][2]string{
		{"/a/b", "/a"}, {"/ab", "/a"}, {"/a", "/a"}, {"/a", "/a/b"}, {"/", "/"}, {"/a", "/"},
		{"", "/"}, {"/a", ""}, {"a/b", "a"}, {"/a/../b", "/a"}, {"/a/b", "/a/"}, {"/a/..b", "/a"},
		{"/..", "/"}, {"/a/b/c", "/a/b"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, path, root string) {
		got := LexicallyWithin(path, root)
		if want := within(path, root); got != want {
			t.Fatalf("LexicallyWithin(%q, %q) = %v, reference says %v", path, root, got, want)
		}
		clean := isCleanAbs(path)
		if want := filepath.IsAbs(path) && filepath.Clean(path) == path; clean != want {
			t.Fatalf("isCleanAbs(%q) = %v, filepath.Clean says %v", path, clean, want)
		}
		if clean != LexicallyWithin(path, path) {
			t.Fatalf("LexicallyWithin(%q, itself) = %v, want %v (clean and absolute)", path, !clean, clean)
		}
		if clean != LexicallyWithin(path, "/") {
			t.Fatalf("LexicallyWithin(%q, /) = %v, want %v", path, !clean, clean)
		}
		if got && LexicallyWithin(root, path) && path != root {
			t.Fatalf("%q and %q contain each other", path, root)
		}
		if got && path != root && !LexicallyWithin(filepath.Dir(path), root) {
			t.Fatalf("%q is in %q but its parent is not", path, root)
		}
		if got && root != "/" && !LexicallyWithin(path, filepath.Dir(root)) {
			t.Fatalf("%q is in %q but not in its parent", path, root)
		}
	})
}
