package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	subprocessEnv = "TOH_TEST_SUBPROCESS"
	subPolicyEnv  = "TOH_TEST_POLICY"
	subWorkerEnv  = "TOH_TEST_WORKER"
	perWriter     = 25
)

// TestMain turns a re-exec'd copy of the test binary into a policy writer.
func TestMain(m *testing.M) {
	if os.Getenv(subprocessEnv) == "append" {
		worker := os.Getenv(subWorkerEnv)
		for i := range perWriter {
			ev := Event{Mode: Modes[i%len(Modes)], Source: "p" + worker + "-" + strconv.Itoa(i)}
			if err := AppendEvent(os.Getenv(subPolicyEnv), "s", ev); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// newPolicy writes a file holding session "s" and returns its path.
func newPolicy(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "toh.json")
	if err := AddSession(p, "s", dir); err != nil {
		t.Fatal(err)
	}
	return p
}

// dirNames lists the directory of path, to show that no temp file was left behind.
func dirNames(t *testing.T, path string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWriters(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "proj"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("proj", filepath.Join(dir, "plink")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "toh.json")

	// The first write creates the file (0644 whatever the umask) and the lock (0600).
	if err := SetMode(p, "", WorkspaceWrite); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{p: 0o644, p + ".lock": 0o600} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
	// Later writes keep the bits the operator chose.
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	// The session cwd is stored canonical: the spelling through plink is resolved now.
	if err := AddSession(p, "s-1", filepath.Join(dir, "plink")); err != nil {
		t.Fatal(err)
	}
	if err := AppendEvent(p, "s-1", Event{Mode: DangerFullAccess, Source: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := SetMode(p, "s-1", ReadOnly); err != nil {
		t.Fatal(err)
	}
	f, found, err := Load(p)
	if err != nil || !found {
		t.Fatalf("Load = found %v, %v", found, err)
	}
	want := &File{Version: 1, Mode: WorkspaceWrite, Sessions: map[string]Session{
		"s-1": {Cwd: filepath.Join(dir, "proj"), Events: []Event{{Mode: DangerFullAccess, Source: "test"}, {Mode: ReadOnly, Source: "set-mode"}}},
	}}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("file after writes (-want +got):\n%s", diff)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after rewrite: %v, %v; want 0640 kept", fi.Mode().Perm(), err)
	}
	if diff := cmp.Diff([]string{"plink", "proj", "toh.json", "toh.json.lock"}, dirNames(t, p)); diff != "" {
		t.Errorf("directory contents (-want +got):\n%s", diff)
	}
	// What was written is exactly what Marshal renders.
	if out, _ := f.Marshal(); !bytes.Equal(out, mustRead(t, p)) {
		t.Errorf("file is not Marshal's rendering:\n%s", mustRead(t, p))
	}

	// Errors that must leave the file untouched.
	orig := mustRead(t, p)
	errs := []struct {
		name string
		err  error
		is   error
		text string
	}{
		{"add existing", AddSession(p, "s-1", "/"), ErrSessionExists, ""},
		{"add relative cwd", AddSession(p, "s-2", "rel"), nil, `policy: sessions["s-2"].cwd: "rel" is not an absolute path`},
		{"add empty id", AddSession(p, "", "/"), nil, `policy: sessions[""]: session ID must not be empty ("" means "no session")`},
		{"append unknown session", AppendEvent(p, "nope", Event{Mode: ReadOnly}), ErrUnknownSession, ""},
		{"append bad mode", AppendEvent(p, "s-1", Event{Mode: "rw"}), nil, `policy: event.mode: unknown mode "rw" (want read-only, workspace-write or danger-full-access)`},
		{"append no mode", AppendEvent(p, "s-1", Event{}), nil, `policy: event.mode: missing (every event names a mode)`},
		{"set bad mode", SetMode(p, "", "rw"), nil, `policy: mode: unknown mode "rw" (want read-only, workspace-write or danger-full-access)`},
		{"set unknown session", SetMode(p, "nope", ReadOnly), ErrUnknownSession, ""},
	}
	for _, e := range errs {
		switch {
		case e.err == nil:
			t.Errorf("%s: succeeded", e.name)
		case e.is != nil && !errors.Is(e.err, e.is):
			t.Errorf("%s: %v does not match %v", e.name, e.err, e.is)
		case e.text != "" && e.err.Error() != e.text:
			t.Errorf("%s:\n got: %v\nwant: %s", e.name, e.err, e.text)
		}
	}
	if !bytes.Equal(orig, mustRead(t, p)) {
		t.Errorf("failed writes changed the file")
	}
}

// A failing or invalid update leaves the file byte-identical and no temp file behind.
func TestUpdateAtomicAndAppendOnly(t *testing.T) {
	p := newPolicy(t)
	if err := AppendEvent(p, "s", Event{Mode: WorkspaceWrite}); err != nil {
		t.Fatal(err)
	}
	if err := AppendEvent(p, "s", Event{Mode: ReadOnly, Source: "delegation"}); err != nil {
		t.Fatal(err)
	}
	orig := mustRead(t, p)
	names := dirNames(t, p)
	boom := errors.New("boom")

	tests := []struct {
		name string
		fn   func(*File) error
		is   error
		text string
	}{
		{"fn fails after editing", func(f *File) error { f.Mode = DangerFullAccess; return boom }, boom, ""},
		{"result is invalid", func(f *File) error { f.Mode = "rw"; return nil }, nil,
			`updating policy file "` + p + `": policy: mode: unknown mode "rw" (want read-only, workspace-write or danger-full-access)`},
		{"cwd changed", func(f *File) error { s := f.Sessions["s"]; s.Cwd = "/"; f.Sessions["s"] = s; return nil }, ErrAppendOnly, ""},
		{"event removed", func(f *File) error { s := f.Sessions["s"]; s.Events = s.Events[:1]; f.Sessions["s"] = s; return nil }, ErrAppendOnly,
			`updating policy file "` + p + `": policy: sessions["s"].events: sessions are append-only: 2 events would become 1`},
		{"log replaced", func(f *File) error {
			s := f.Sessions["s"]
			s.Events = []Event{{Mode: DangerFullAccess}, {Mode: DangerFullAccess}, {Mode: DangerFullAccess}}
			f.Sessions["s"] = s
			return nil
		}, ErrAppendOnly, ""},
		{"event rewritten", func(f *File) error { f.Sessions["s"].Events[1].Mode = DangerFullAccess; return nil }, ErrAppendOnly,
			`updating policy file "` + p + `": policy: sessions["s"].events[1]: sessions are append-only: an event cannot be rewritten`},
		{"source rewritten", func(f *File) error { f.Sessions["s"].Events[0].Source = "forged"; return nil }, ErrAppendOnly, ""},
		{"session removed", func(f *File) error { delete(f.Sessions, "s"); return nil }, ErrAppendOnly, ""},
		{"sessions dropped", func(f *File) error { f.Sessions = nil; return nil }, ErrAppendOnly, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Update(p, tt.fn)
			switch {
			case err == nil:
				t.Fatalf("Update succeeded")
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Errorf("Update error %v does not match %v", err, tt.is)
			case tt.text != "" && err.Error() != tt.text:
				t.Errorf("Update error\n got: %v\nwant: %s", err, tt.text)
			}
			if !bytes.Equal(orig, mustRead(t, p)) {
				t.Errorf("the file changed:\n%s", mustRead(t, p))
			}
			if diff := cmp.Diff(names, dirNames(t, p)); diff != "" {
				t.Errorf("directory changed (-before +after):\n%s", diff)
			}
		})
	}

	// Positive control: appending and editing non-log keys is allowed.
	err := Update(p, func(f *File) error {
		f.Network = NetworkDeny
		s := f.Sessions["s"]
		s.Approval = ApprovalNever
		s.Events = append(s.Events, Event{Mode: DangerFullAccess})
		f.Sessions["s"] = s
		f.Sessions["t"] = Session{Cwd: "/"}
		return nil
	})
	if err != nil {
		t.Fatalf("allowed update: %v", err)
	}
	if f, _, err := Load(p); err != nil || len(f.Sessions["s"].Events) != 3 || f.Network != NetworkDeny {
		t.Errorf("allowed update did not land: %+v, %v", f, err)
	}
}

func TestUpdateRefuses(t *testing.T) {
	dir := t.TempDir()

	// A malformed file is left for a human: Update neither "repairs" nor replaces it.
	bad := filepath.Join(dir, "bad.json")
	content := []byte(`{"version":1,"mode":"rw"}`)
	if err := os.WriteFile(bad, content, 0o644); err != nil {
		t.Fatal(err)
	}
	err := SetMode(bad, "", ReadOnly)
	if err == nil || err.Error() != `updating policy file "`+bad+`": current content: policy: mode: unknown mode "rw" (want read-only, workspace-write or danger-full-access)` {
		t.Errorf("Update(malformed) = %v", err)
	}
	if !bytes.Equal(content, mustRead(t, bad)) {
		t.Errorf("Update changed a malformed file")
	}

	// A symlink is not replaced by a file.
	target := filepath.Join(dir, "target.json")
	if err := os.WriteFile(target, []byte(`{"version":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink("target.json", link); err != nil {
		t.Fatal(err)
	}
	if err := SetMode(link, "", DangerFullAccess); err == nil {
		t.Errorf("Update through a symlink succeeded")
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v, %v", fi.Mode(), err)
	}
	if got := mustRead(t, target); string(got) != `{"version":1}` {
		t.Errorf("the symlink's target changed: %s", got)
	}

	// A directory where the file should be.
	if err := SetMode(dir, "", ReadOnly); err == nil {
		t.Errorf("Update(directory) succeeded")
	}
}

// checkAllEvents asserts that session "s" holds exactly the events whose sources are
// want, each once, and that every writer's events are in its own order.
func checkAllEvents(t *testing.T, p string, want []string) {
	t.Helper()
	f, _, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range f.Sessions["s"].Events {
		got = append(got, ev.Source)
	}
	if len(got) != len(want) {
		t.Errorf("%d events, want %d", len(got), len(want))
	}
	sortedGot, sortedWant := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if diff := cmp.Diff(sortedWant, sortedGot); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// Per writer, events are in the order it appended them.
	last := map[string]int{}
	for _, src := range got {
		var w string
		var i int
		if _, err := fmt.Sscanf(src, "%2s-%d", &w, &i); err != nil {
			t.Fatalf("bad source %q", src)
		}
		if prev, ok := last[w]; ok && i <= prev {
			t.Errorf("writer %s: event %d after %d", w, i, prev)
		}
		last[w] = i
	}
}

// readWhile loads p in a loop until stop is closed and reports any failed read: a
// reader must never see a torn or missing file.
func readWhile(t *testing.T, p string, stop <-chan struct{}) (wait func() int64) {
	var reads atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, found, err := Load(p)
			if err != nil || !found {
				t.Errorf("concurrent Load: found %v, %v", found, err)
				return
			}
			reads.Add(1)
		}
	}()
	return func() int64 { <-done; return reads.Load() }
}

func TestConcurrentGoroutineWriters(t *testing.T) {
	p := newPolicy(t)
	const writers = 8
	stop := make(chan struct{})
	wait := readWhile(t, p, stop)
	var wg sync.WaitGroup
	var want []string
	for w := range writers {
		for i := range perWriter {
			want = append(want, fmt.Sprintf("g%d-%d", w, i))
		}
		wg.Go(func() {
			for i := range perWriter {
				if err := AppendEvent(p, "s", Event{Mode: WorkspaceWrite, Source: fmt.Sprintf("g%d-%d", w, i)}); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if n := wait(); n == 0 {
		t.Errorf("the concurrent reader never read")
	}
	checkAllEvents(t, p, want)
	if diff := cmp.Diff([]string{"toh.json", "toh.json.lock"}, dirNames(t, p)); diff != "" {
		t.Errorf("directory contents (-want +got):\n%s", diff)
	}
}

// Separate processes share nothing but the lock file, so this is the test that the
// flock, not an in-process mutex, serializes writers.
func TestConcurrentProcessWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes; skipped in -short mode")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := newPolicy(t)
	const procs = 4
	stop := make(chan struct{})
	wait := readWhile(t, p, stop)
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	var want []string
	for w := range procs {
		for i := range perWriter {
			want = append(want, fmt.Sprintf("p%d-%d", w, i))
		}
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), subprocessEnv+"=append", subPolicyEnv+"="+p, subWorkerEnv+"="+strconv.Itoa(w))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("writer process %d: %v\n%s", i, err, outs[i])
		}
	}
	close(stop)
	wait()
	checkAllEvents(t, p, want)
}

// A failure after the temp file exists (here: the rename, onto a directory) removes it.
func TestReplaceFileCleansUp(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "toh.json")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := replaceFile(target, []byte("{}\n"), 0o644); err == nil {
		t.Fatal("replaceFile over a non-empty directory succeeded")
	}
	if diff := cmp.Diff([]string{"toh.json"}, dirNames(t, target)); diff != "" {
		t.Errorf("temp file left behind (-want +got):\n%s", diff)
	}
	// Positive control: the same call onto a free name lands, with exactly that mode.
	free := filepath.Join(dir, "free.json")
	if err := replaceFile(free, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(free); err != nil || fi.Mode().Perm() != 0o600 || string(mustRead(t, free)) != "{}\n" {
		t.Errorf("replaceFile(free) = %v, %v", fi, err)
	}
}

// The lock file may lie where a confined command could create it; a link planted
// there must not make the user's next policy write create a file where the link
// points. A regular lock (the control) is used as before.
func TestUpdateRefusesLinkedLock(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	target := filepath.Join(dir, "elsewhere", "planted")
	os.Mkdir(filepath.Dir(target), 0o755)
	if err := os.Symlink(target, path+".lock"); err != nil {
		t.Fatal(err)
	}
	setMode := func(f *File) error { f.Mode = ReadOnly; return nil }
	if err := Update(path, setMode); err == nil {
		t.Fatal("Update followed a lock file that is a symlink")
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the link's target was created: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the policy file was written without its lock: %v", err)
	}

	os.Remove(path + ".lock")
	if err := syscall.Mkfifo(path+".lock", 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Update(path, setMode); err == nil {
		t.Fatal("Update locked a lock file that is a FIFO")
	}

	os.Remove(path + ".lock")
	if err := Update(path, setMode); err != nil {
		t.Fatalf("control: %v", err)
	}
	if fi, err := os.Lstat(path + ".lock"); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("control: lock file %v, %v", fi, err)
	}
}

// Update makes a missing directory of the policy file (0700): on a fresh account
// ~/.config/toh does not exist yet (found by review: set-mode failed there).
func TestUpdateMakesTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config", "toh")
	path := filepath.Join(dir, "policy.json")
	if err := SetMode(path, "", WorkspaceWrite); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory: %v %v, want 0700", fi, err)
	}
	f, _, err := Load(path)
	if err != nil || f.Mode != WorkspaceWrite {
		t.Fatalf("written policy: %+v %v", f, err)
	}
}

// AddSession refuses a working directory that does not exist or that JSON cannot
// carry exactly (found by review: a name with a byte that is not UTF-8 was stored
// with U+FFFD, a different name). Control: an existing directory is stored.
func TestAddSessionRefusesBadDirectories(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "policy.json")
	odd := filepath.Join(base, "ws\xff")
	if err := os.Mkdir(odd, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, cwd := range []string{filepath.Join(base, "missing"), odd} {
		if err := AddSession(path, "s", cwd); err == nil {
			t.Errorf("AddSession(%q) = nil, want an error", cwd)
		}
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("a refused session wrote the policy file")
	}
	if err := AddSession(path, "s", base); err != nil {
		t.Fatal(err)
	}
}
