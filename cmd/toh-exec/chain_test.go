package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/internal/testutil"
)

// loggingBwrap writes a bwrap wrapper that records each invocation's last argument
// (the probe runs `true`) and then execs the real bwrap.
func loggingBwrap(t *testing.T, dir, real string) (wrapper, log string) {
	t.Helper()
	wrapper, log = filepath.Join(dir, "bwrap-logging"), filepath.Join(dir, "bwrap.log")
	script := "#!/bin/sh\nfor a; do last=$a; done\necho \"$last\" >> " + log + "\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, log
}

func invocations(t *testing.T, log string) []string {
	t.Helper()
	b, _ := os.ReadFile(log)
	return strings.Fields(string(b))
}

func TestProbeVerdictIsCachedAcrossInvocations(t *testing.T) {
	real := testutil.RequireBwrap(t)
	s := newScratch(t)
	bw, log := loggingBwrap(t, s.beside, real)
	cache := filepath.Join(s.beside, "cache", "probe.json")
	var last string // the last run's stderr and probe cache, for failure messages
	run := func(extra ...string) {
		t.Helper()
		os.Remove(log)
		// A generous probe timeout: this test is about caching. Once in CI (under
		// -race, every package testing at once) the refreshed run went elsewhere,
		// most likely a probe past the 5 s default, whose "unavailable" verdict is
		// rightly cached.
		args := append([]string{"--policy", s.noPolicy, "--bwrap", bw, "--probe-cache", cache, "--probe-timeout", "60s"}, extra...)
		r := toh(t, s.ws, nil, append(args, "--", "echo", "ran")...)
		if r.code != 0 || r.stdout != "ran\n" {
			t.Fatalf("run: %d %q %q", r.code, r.stdout, r.stderr)
		}
		b, _ := os.ReadFile(cache)
		last = fmt.Sprintf("stderr %q, probe cache %s", r.stderr, b)
	}
	run()
	if got := invocations(t, log); len(got) != 2 || got[0] != "true" || got[1] != "ran" {
		t.Fatalf("cold run: bwrap invocations %q, want the probe then the command; %s", got, last)
	}
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("no cache written: %v", err)
	}
	run()
	if got := invocations(t, log); len(got) != 1 || got[0] != "ran" {
		t.Fatalf("warm run: bwrap invocations %q, want the command alone (no probe on the hot path); %s", got, last)
	}
	run("--refresh-probe")
	if got := invocations(t, log); len(got) != 2 {
		t.Fatalf("--refresh-probe: invocations %q, want a probe; %s", got, last)
	}
	// A changed runner binary invalidates the verdict.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(bw, later, later); err != nil {
		t.Fatal(err)
	}
	run()
	if got := invocations(t, log); len(got) != 2 {
		t.Fatalf("after the runner changed: invocations %q, want a probe; %s", got, last)
	}
	// --runner makes bwrap the sole candidate: no probe, no cache.
	os.Remove(cache)
	run("--runner", "bwrap")
	if got := invocations(t, log); len(got) != 1 {
		t.Fatalf("sole candidate: invocations %q, want no probe", got)
	}
	if _, err := os.Stat(cache); err == nil {
		t.Fatalf("a sole candidate wrote a verdict")
	}
}

func TestFailingBwrapProbeFallsToLandlockNeverUnconfined(t *testing.T) {
	testutil.RequireBwrap(t)
	testutil.RequireLandlockABI(t, 1)
	s := newScratch(t)
	broken := filepath.Join(s.beside, "bwrap-broken")
	os.WriteFile(broken, []byte("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"), 0o755)
	cache := filepath.Join(s.beside, "probe.json")
	target := filepath.Join(s.beside, "written")
	e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--bwrap", broken, "--probe-cache", cache, "-c", "echo x > "+target)
	absent(t, target)
	if e.Result == nil || e.Result.Backend != "landlock" || !e.Result.Denied {
		t.Fatalf("code %d facts %+v error %+v stderr %q", r.code, e.Result, e.Error, r.stderr)
	}
	b, _ := os.ReadFile(cache)
	if !strings.Contains(string(b), `"backend":"landlock"`) || !strings.Contains(string(b), "uid map") {
		t.Fatalf("cached verdict %s", b)
	}
}

func TestProbeCacheIsUnwritableFromInside(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	// The cache lies inside the workspace: the run neither trusts nor refreshes it, and
	// bwrap keeps it read-only while the rest of the directory stays writable.
	cacheDir := filepath.Join(s.ws, "cache")
	cache := filepath.Join(cacheDir, "probe.json")
	testutil.MakeTree(t, s.ws, "dir cache", `file cache/probe.json {"version":1}`)
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", cache, "--mode", "workspace-write", "-c",
		"echo poison > cache/probe.json; mv cache cache2; echo ok > cache2/sibling; echo ok > cache/sibling2")
	if b, _ := os.ReadFile(cache); string(b) != `{"version":1}` {
		t.Fatalf("the confined command rewrote the probe cache: %q (%q)", b, r.stderr)
	}
	present(t, filepath.Join(cacheDir, "sibling2"), "ok\n")
	absent(t, filepath.Join(s.ws, "cache2"))
}
