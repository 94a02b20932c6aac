package policy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWatcherFollowsTheFile(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "toh.json")
	var changes []string
	w, err := NewWatcher(path, Request{Cwd: dir}, func(x Execution, err error) {
		if err != nil {
			changes = append(changes, "error")
			return
		}
		changes = append(changes, string(x.Mode))
	})
	if err != nil {
		t.Fatal(err)
	}

	// Missing file: the embedded default, and the path is still named as the policy
	// file so a fence can keep anyone from creating it.
	x, gen0, err := w.Current()
	if err != nil || x.Mode != ReadOnly || x.WorkspaceRoot != dir || x.PolicyFile != path {
		t.Fatalf("missing file: got %+v, %v; want read-only at %s with policyFile %s", x, err, dir, path)
	}
	if _, gen, _ := w.Current(); gen != gen0 {
		t.Errorf("an unchanged file was reloaded: gen %d -> %d", gen0, gen)
	}

	if err := SetMode(path, "", WorkspaceWrite); err != nil {
		t.Fatal(err)
	}
	x, gen1, err := w.Current()
	if err != nil || x.Mode != WorkspaceWrite || gen1 == gen0 {
		t.Fatalf("after SetMode: got %s gen %d (before %d), %v; want workspace-write", x.Mode, gen1, gen0, err)
	}
	if len(x.WritableRoots) == 0 || x.WritableRoots[0] != dir {
		t.Errorf("writable roots %q, want %s first", x.WritableRoots, dir)
	}

	// Malformed: every call fails until a valid file returns; never the last good one.
	if err := os.WriteFile(path, []byte(`{"version": 1, "mode": "rw"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if x, _, err := w.Current(); err == nil || x.Mode != "" {
			t.Fatalf("malformed file: got %+v, %v; want an error and a zero Execution", x, err)
		}
	}
	if err := os.WriteFile(path, []byte(`{"version": 1, "mode": "read-only"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if x, _, err := w.Current(); err != nil || x.Mode != ReadOnly {
		t.Fatalf("fixed file: got %s, %v; want read-only", x.Mode, err)
	}

	// Removed again: back to the default.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if x, _, err := w.Current(); err != nil || x.Mode != ReadOnly {
		t.Fatalf("removed file: got %s, %v; want read-only", x.Mode, err)
	}
	want := "read-only workspace-write error read-only read-only"
	if got := strings.Join(changes, " "); got != want {
		t.Errorf("onChange saw %q, want %q", got, want)
	}
}

func TestWatcherRefusesAMalformedStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toh.json")
	if err := os.WriteFile(path, []byte(`{"version": 1, "mood": "read-only"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if w, err := NewWatcher(path, Request{Cwd: "/"}, nil); err == nil {
		t.Fatalf("NewWatcher on a malformed file: got %v, want an error", w)
	}
}

func TestWatcherSessionEvents(t *testing.T) {
	path := newPolicy(t)
	w, err := NewWatcher(path, Request{SessionID: "s", Cwd: "/"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if x, _, _ := w.Current(); x.Mode != ReadOnly || x.SessionID != "s" {
		t.Fatalf("new session: got %s for %q, want read-only for s", x.Mode, x.SessionID)
	}
	if err := AppendEvent(path, "s", Event{Mode: WorkspaceWrite}); err != nil {
		t.Fatal(err)
	}
	if x, _, _ := w.Current(); x.Mode != WorkspaceWrite || x.WorkspaceRoot != filepath.Dir(path) {
		t.Fatalf("after an event: got %s at %s, want workspace-write at %s", x.Mode, x.WorkspaceRoot, filepath.Dir(path))
	}
}

// The watcher adds a verified linked worktree's common directory as a writable root,
// as toh-exec does: its reader, the fence, protects that directory's hooks and config
// through ProtectedPaths.
func TestWatcherAddsWorktreeRoots(t *testing.T) {
	_, git := gitTree(t)
	// Not below /tmp, a writable root already: the common directory would not be added.
	base, err := os.MkdirTemp("/var/tmp", "toh-watch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if base, err = filepath.EvalSymlinks(base); err != nil {
		t.Fatal(err)
	}
	main, wt := filepath.Join(base, "main"), filepath.Join(base, "wt")
	mustMkdir(t, main)
	git(main, "init", "-q")
	git(main, "commit", "-q", "--allow-empty", "-m", "main")
	git(main, "worktree", "add", "-q", wt)
	common := filepath.Join(main, ".git")
	path := filepath.Join(base, "toh.json")
	if err := SetMode(path, "", WorkspaceWrite); err != nil {
		t.Fatal(err)
	}
	w, err := NewWatcher(path, Request{Cwd: wt, PolicyFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	x, _, err := w.Current()
	if err != nil || !slices.Contains(x.WritableRoots, common) || !slices.Equal(x.WorktreeRoots, []string{common}) {
		t.Fatalf("got roots %q, worktree roots %q, %v; want %s added", x.WritableRoots, x.WorktreeRoots, err, common)
	}
	got := pathsOf(x.ProtectedPaths(), base)
	for _, want := range []string{"main/.git/hooks dir exists protect", "main/.git/config file exists protect"} {
		if !slices.Contains(got, want) {
			t.Errorf("%q missing from %q", want, got)
		}
	}
}
