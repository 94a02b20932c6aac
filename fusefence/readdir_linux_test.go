package fusefence

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/policy"
)

// bigDir is a directory tree line set of n files with long names, so that one
// listing takes many READDIRPLUS answers (4 KiB each, about 25 entries).
func bigDir(dir string, n int) []string {
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf("file %s/%s-%05d", dir, strings.Repeat("e", 40), i))
	}
	return lines
}

// names lists dir through the mount in chunks of 97 entries (several getdents
// calls, as ls and find make them) and returns the names in listing order.
func names(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	for {
		ents, err := f.ReadDir(97)
		for _, de := range ents {
			out = append(out, de.Name())
		}
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("listing %s: %v", dir, err)
		}
	}
}

// hostNames lists dir on the host, sorted.
func hostNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range ents {
		out = append(out, de.Name())
	}
	return out
}

// requestCounter counts FUSE requests by opcode in a fence's debug log.
type requestCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *requestCounter) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	// go-fuse logs a request as "rx UNIQUE: OPCODE nNODE ...".
	rest, ok := strings.CutPrefix(line, "rx ")
	if !ok {
		return
	}
	_, rest, _ = strings.Cut(rest, ": ")
	op, _, _ := strings.Cut(rest, " ")
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
}

func (c *requestCounter) get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

// remountCounting mounts e's SOURCE again with the debug log counted.
func (e *env) remountCounting() *requestCounter {
	t := e.t
	t.Helper()
	e.unmount()
	c := &requestCounter{n: map[string]int{}}
	w, err := policy.NewWatcher(e.policy, policy.Request{Cwd: e.src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.audit, err = OpenAudit(e.auditPath); err != nil {
		t.Fatal(err)
	}
	e.fence, err = Mount(Config{Source: e.src, Mountpoint: e.mnt, Policy: w, Audit: e.audit, AllowOther: os.Geteuid() == 0,
		Debug: true, Logf: c.logf})
	if err != nil {
		e.audit.Close()
		t.Fatal(err)
	}
	t.Cleanup(e.unmount)
	return c
}

// TestListingWithoutOpendir: directories are listed without OPENDIR and
// RELEASEDIR (FUSE_NO_OPENDIR_SUPPORT, see noopendir): the kernel sends one
// OPENDIR, answered ENOSYS, and never a RELEASEDIR, while the listings, a large
// one over many READDIRPLUS answers among them, come out complete and shown as
// Lookup shows them. A listing that goes on while entries it already returned
// are removed from outside returns every other entry exactly once: each READDIR
// opens the host directory afresh and seeks to the host's own offset, where
// offsets counted in a listing read earlier would skip as many entries as were
// removed.
func TestListingWithoutOpendir(t *testing.T) {
	const n = 3000
	tree := append(bigDir("src/big", n), bigDir("src/moving", n)...)
	tree = append(tree, "dir src/small/sub", "file src/small/f",
		"link src/big/zz-nowhere -> /nonexistent/x", // escaping, leads nowhere: not shown
		"link src/big/zz-out -> $BASE/outside")      // escaping: shown as the directory
	e := newEnv(t, policy.WorkspaceWrite, tree...)
	c := e.remountCounting()

	// A listing the kernel has not cached, with entries removed from outside
	// halfway through: the removed ones were returned before their removal.
	f, err := os.Open(e.m("moving"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := f.ReadDir(1000)
	if err != nil || len(first) != 1000 {
		f.Close()
		t.Fatalf("first 1000 entries of moving: %d, %v", len(first), err)
	}
	seen := map[string]int{}
	for i, de := range first {
		seen[de.Name()]++
		if i%2 == 0 {
			if err := os.Remove(e.s("moving/" + de.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	rest, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range rest {
		seen[de.Name()]++
	}
	for i := range n {
		name := fmt.Sprintf("%s-%05d", strings.Repeat("e", 40), i)
		if seen[name] != 1 {
			t.Errorf("moving/%s listed %d times", name, seen[name])
		}
	}
	if len(seen) != n {
		t.Errorf("moving listed %d names, want %d", len(seen), n)
	}

	// A large listing, complete, listed twice
	// (the second from the kernel's cache); symlinks shown as Lookup shows them.
	want := slices.DeleteFunc(hostNames(t, e.s("big")), func(s string) bool { return s == "zz-nowhere" })
	if len(want) != n+1 {
		t.Fatalf("host big holds %d names, want %d", len(want), n+1)
	}
	plusBefore := c.get("READDIRPLUS") + c.get("READDIR")
	for range 2 {
		got := names(t, e.m("big"))
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("listing of big: %d names, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
		}
	}
	if chunks := c.get("READDIRPLUS") + c.get("READDIR") - plusBefore; chunks < n/50 {
		t.Errorf("listing big took %d READDIR(PLUS) requests, want many (one per 4 KiB)", chunks)
	}
	ents, err := os.ReadDir(e.m("big"))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		if de.Name() == "zz-out" && !de.IsDir() {
			t.Errorf("zz-out, a link out of SOURCE to a directory, is listed as %v, want a directory", de.Type())
		}
	}
	for range 3 {
		if got := names(t, e.m("small")); !slices.Equal(sorted(got), []string{"f", "sub"}) {
			t.Fatalf("listing of small: %q", got)
		}
		if got := names(t, e.mnt); !slices.Contains(got, "big") || !slices.Contains(got, "small") {
			t.Fatalf("listing of the root: %q", got)
		}
	}

	// The lever itself: one OPENDIR (answered ENOSYS, after which the kernel
	// sends none), no RELEASEDIR, and the listings did reach the daemon.
	if got := c.get("OPENDIR"); got != 1 {
		t.Errorf("%d OPENDIR requests, want 1 (the first, answered ENOSYS)", got)
	}
	if got := c.get("RELEASEDIR"); got != 0 {
		t.Errorf("%d RELEASEDIR requests, want none", got)
	}
	if c.get("READDIRPLUS")+c.get("READDIR") == 0 {
		t.Errorf("no READDIR(PLUS) request counted: the debug log is not counting")
	}
}

// TestLargeListingStaleness: a large directory listed, changed from outside, and
// listed again shows the change within the staleness bound, complete, although
// its listing was in the kernel's cache (which no_opendir keeps, see noopendir).
func TestLargeListingStaleness(t *testing.T) {
	const n = 3000
	e := newEnv(t, policy.WorkspaceWrite, bigDir("src/big", n)...)
	gone := fmt.Sprintf("%s-%05d", strings.Repeat("e", 40), 1234)
	want := hostNames(t, e.s("big"))
	if got := sorted(names(t, e.m("big"))); !slices.Equal(got, want) {
		t.Fatalf("listing of big: %d names, want %d", len(got), len(want))
	}
	if err := os.WriteFile(e.s("big/new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.s("big/" + gone)); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	want = hostNames(t, e.s("big"))
	for {
		got := sorted(names(t, e.m("big")))
		if slices.Equal(got, want) {
			break
		}
		if time.Since(changed) > DefaultTimeout+500*time.Millisecond {
			t.Fatalf("%v after the host changed, big lists %d names (new %v, %s %v), want %d", time.Since(changed),
				len(got), slices.Contains(got, "new"), gone, slices.Contains(got, gone), len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("outside change to a %d-entry listing visible after %v (bound %v)", n, time.Since(changed), DefaultTimeout)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
