package canon

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

type withinCase struct {
	path, root string
	want       bool
}

func runWithin(t *testing.T, base string, tests []withinCase) {
	t.Helper()
	for _, tt := range tests {
		p, r := tt.path, tt.root
		if p != "" {
			p = under(base, p)
		}
		if r != "" {
			r = under(base, r)
		}
		if got := Within(p, r); got != tt.want {
			t.Errorf("Within(%q, %q) = %v, want %v (canonical %q in %q)",
				tt.path, tt.root, got, tt.want, Canonical(p), Canonical(r))
		}
	}
}

func TestWithin(t *testing.T) {
	base := canonTree(t)
	runWithin(t, base, []withinCase{
		{"ws", "ws", true},
		{"ws/sub", "ws", true},
		{"real/ws/sub", "ws", true},
		{"ws/sub", "real/ws", true},
		{"alias/sub", "ws", true}, // a second symlink to the root
		{"ws/sub", "alias", true},
		{"ws/..", "ws", false},
		{"ws/up/x", "ws", false},
		{"ws/out/canary", "ws", false},
		{"ws/out/canary", "outside", true},
		{"ws/abs/x", "outside", true},
		{"outside/x", "ws/out", true}, // the root itself is a symlink
		{"ws/missing/a/b", "ws", true},
		{"ws/missing/../../x", "ws", false},
		{"ws/dangling/x", "ws", true},
		{"ws/f", "ws", true},
		{"ws/f/x", "ws", false}, // a regular file as an ancestor
		{"ws/tofile/x", "ws", false},
		{"ws/f/x/..", "ws", false},
		{"ws/f/..", "ws", false},
		{"ws/sub", "ws/f", false},
		// An unresolvable path inside the root names nothing outside it.
		{"ws/loop/x", "ws", true},
		{"loop1/x", "ws", false},
		{"/", "ws", false},
		{"/", "/", true},
		{"/etc", "/", true},
		{"ws/sub", "/", true},
		{"loop1/x", "/", true},
		{"", "ws", false},
		{"", "/", false},
		{"ws", "", false},
		// A root that does not exist: only the spelling counts.
		{"gone/a", "gone", true},
		{"gone", "gone", true},
		{"ws/sub", "gone", false},
		{"gone/../ws", "gone", false},
	})
}

func TestWithinRelative(t *testing.T) {
	base := canonTree(t)
	t.Chdir(base + "/ws")
	for _, tt := range []withinCase{
		{"sub", base + "/real/ws", true},
		{"sub", ".", true},
		{".", base + "/ws", true},
		{"..", ".", false},
		{"out/x", ".", false},
	} {
		if got := Within(tt.path, tt.root); got != tt.want {
			t.Errorf("Within(%q, %q) in ws = %v, want %v", tt.path, tt.root, got, tt.want)
		}
	}
}

func TestWritableRoots(t *testing.T) {
	base := canonTree(t)
	got := WritableRoots([]string{
		base + "/ws",
		"",
		base + "/real/ws", // same root, second spelling
		"relative/dir",
		base + "/alias/",
		base + "/ws/out",
		base + "/ws/new", // missing roots keep their key
		base + "/outside",
		"/",
	})
	want := []string{base + "/real/ws", base + "/outside", base + "/real/ws/new", "/"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("WritableRoots (-want +got):\n%s", diff)
	}
	if got := WritableRoots([]string{"", "tmp"}); got != nil {
		t.Errorf("WritableRoots of nothing usable = %q, want nil", got)
	}
}

func TestLexicallyWithin(t *testing.T) {
	tests := []struct {
		path, root string
		want       bool
	}{
		{"/a", "/a", true},
		{"/a/b", "/a", true},
		{"/a/b/c", "/a", true},
		{"/ab", "/a", false},
		{"/a", "/a/b", false},
		{"/", "/a", false},
		{"/", "/", true},
		{"/anything/at/all", "/", true},
		// Not clean or not absolute: contained in nothing, containing nothing.
		{"/a/../b", "/a", false},
		{"/a/b/..", "/a", false},
		{"/a/b", "/a/", false},
		{"/a//b", "/a", false},
		{"a/b", "a", false},
		{"a", "/", false},
		{"", "/", false},
		{"/a", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got := LexicallyWithin(tt.path, tt.root); got != tt.want {
			t.Errorf("LexicallyWithin(%q, %q) = %v, want %v", tt.path, tt.root, got, tt.want)
		}
	}
}
