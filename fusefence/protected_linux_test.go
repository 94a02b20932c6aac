package fusefence

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/policy"
)

// TestResolveProtected: a snapshot's first set protects every repository there is;
// a repository found by a later resolution stays the run's own until it is the
// bound old, and is protected from then on; a set that did not change keeps its
// number (handles opened under it are not judged again).
func TestResolveProtected(t *testing.T) {
	r := t.TempDir()
	r, _ = filepath.EvalSymlinks(r)
	x := policy.Execution{Mode: policy.WorkspaceWrite, WritableRoots: []string{r}, Protect: []string{".git/hooks", ".git/config"}}
	ver := uint64(0)
	next := func() uint64 { ver++; return ver }
	const bound = time.Second
	hooks := r + "/.git/hooks"

	t0 := time.Now()
	first := resolveProtected(x, nil, t0, bound, next)
	if slices.Contains(first.g.protect, hooks) || !first.refresh.Equal(t0.Add(bound)) {
		t.Fatalf("no repository: %+v", first)
	}
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	young := resolveProtected(x, first, now, bound, next)
	if slices.Contains(young.g.protect, hooks) {
		t.Errorf("a repository younger than the bound is protected: %q", young.g.protect)
	}
	if _, ok := young.pending[r+"/.git"]; !ok || young.refresh.After(now.Add(bound)) {
		t.Errorf("the young repository is not pending, or is looked at again only at %v: %+v", young.refresh, young)
	}
	if young.ver != first.ver {
		t.Errorf("an unchanged set got a new number: %d, was %d", young.ver, first.ver)
	}
	later := resolveProtected(x, young, now.Add(2*bound), bound, next)
	if !slices.Contains(later.g.protect, hooks) || !slices.Contains(later.g.protect, r+"/.git/config") {
		t.Errorf("the repository is not protected once older than the bound: %q", later.g.protect)
	}
	if later.ver == young.ver {
		t.Errorf("a changed set kept its number %d", later.ver)
	}
	again := resolveProtected(x, later, now.Add(4*bound), bound, next)
	if !slices.Contains(again.g.protect, hooks) || again.ver != later.ver {
		t.Errorf("a protected repository must stay protected, under the same number: %+v", again)
	}
	// A resolution that comes back short (here: the repository is gone; a caller
	// could make the reads fail or pass the walk's limits) drops nothing.
	if err := os.RemoveAll(r + "/.git"); err != nil {
		t.Fatal(err)
	}
	short := resolveProtected(x, again, now.Add(6*bound), bound, next)
	if !slices.Contains(short.g.protect, hooks) || !slices.Contains(short.g.protect, r+"/.git/config") || short.ver != again.ver {
		t.Errorf("a protected path was dropped when the tree no longer showed it: %+v", short)
	}
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	// A snapshot's first set protects what exists, however young.
	if fresh := resolveProtected(x, nil, now, bound, next); !slices.Contains(fresh.g.protect, hooks) {
		t.Errorf("a first set leaves an existing repository out: %q", fresh.g.protect)
	}
}
