package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/internal/posixacl"
	"github.com/toh-sandbox/toh/internal/testutil"
	"golang.org/x/sys/unix"
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
	// The cache lies inside the workspace: the run neither trusts nor refreshes it,
	// bwrap keeps it read-only while the rest of the directory stays writable, and
	// after the run it is gone (ForgetIfWritable), whatever the command did. A cache
	// file that does not exist (dropped by the last such run) cannot be created
	// either: a stand-in holds its name during the run, and is gone after it, so a
	// call running meanwhile reads no verdict of the command's. Control: a cache
	// whose directory the command may not write is no stand-in's, and the run goes
	// on.
	for _, existing := range []bool{true, false} {
		s := newScratch(t)
		cacheDir := filepath.Join(s.ws, "cache")
		cache := filepath.Join(cacheDir, "probe.json")
		testutil.MakeTree(t, s.ws, "dir cache")
		if existing {
			testutil.MakeTree(t, s.ws, `file cache/probe.json {"version":1}`)
		}
		r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", cache, "--mode", "workspace-write", "--runner", "bwrap", "-c",
			"if echo poison > cache/probe.json; then echo written; else echo refused; fi; "+
				"if mv cache cache2; then echo moved; fi; echo ok > cache2/sibling; echo ok > cache/sibling2")
		if r.code != 0 || r.stdout != "refused\n" {
			t.Fatalf("existing=%v, inside the run: exit %d stdout %q, want the write refused and the directory kept (%q)", existing, r.code, r.stdout, r.stderr)
		}
		absent(t, cache)
		present(t, filepath.Join(cacheDir, "sibling2"), "ok\n")
		absent(t, filepath.Join(s.ws, "cache2"))
	}
	// The same cache spelled with "..", "." and a trailing slash: one place.
	s := newScratch(t)
	testutil.MakeTree(t, s.ws, "dir cache")
	unclean := filepath.Join(s.ws, "cache") + "/../cache/./probe.json/"
	if r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", unclean, "--mode", "workspace-write", "--runner", "bwrap", "-c",
		"if echo poison > cache/probe.json; then echo written; else echo refused; fi"); r.code != 0 || r.stdout != "refused\n" {
		t.Fatalf("cache spelled %s: exit %d stdout %q (%q), want the write refused", unclean, r.code, r.stdout, r.stderr)
	}
	absent(t, filepath.Join(s.ws, "cache", "probe.json"))
	// A cache behind a linked directory is no cache (its directory is reached with no
	// link), and gets no stand-in, which could not be made there: the run goes on.
	testutil.MakeTree(t, s.ws, "dir real/toh", "link lnk -> real")
	if r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", filepath.Join(s.ws, "lnk", "toh", "probe.json"), "--mode", "workspace-write", "--runner", "bwrap", "-c", "echo ran"); r.code != 0 || r.stdout != "ran\n" {
		t.Fatalf("cache behind a link: exit %d stdout %q (%q)", r.code, r.stdout, r.stderr)
	}
	if os.Getuid() != 0 {
		s := newScratch(t)
		ro := filepath.Join(s.ws, "ro")
		testutil.MakeTree(t, s.ws, "dir ro")
		os.Chmod(ro, 0o555)
		t.Cleanup(func() { os.Chmod(ro, 0o755) })
		if r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", filepath.Join(ro, "probe.json"), "--mode", "workspace-write", "--runner", "bwrap", "-c", "echo ran"); r.code != 0 || r.stdout != "ran\n" {
			t.Fatalf("cache in a directory the caller may not write: exit %d stdout %q (%q)", r.code, r.stdout, r.stderr)
		}
	}
}

// While a bwrap run keeps the cache read-only, other calls leave its name alone: a
// workspace-write call over the same tree that ends meanwhile does not drop it, and
// a call with its roots elsewhere, which probes, does not store its verdict over it.
// Either would detach the rebind inside the running sandbox (an unlink or rename of
// a name mounted on in another mount namespace does), and the command could then
// write the cache. Both with a cache file and with none (a stand-in). After the run,
// its own drop removes the name as before.
func TestProbeCacheHeldWhileARunLasts(t *testing.T) {
	testutil.RequireBwrap(t)
	for _, existing := range []bool{true, false} {
		s := newScratch(t)
		cache := filepath.Join(s.ws, "cache", "probe.json")
		testutil.MakeTree(t, s.ws, "dir cache")
		if existing {
			testutil.MakeTree(t, s.ws, `file cache/probe.json {"version":1}`)
		}
		long := make(chan runResult, 1)
		go func() {
			long <- toh(t, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", cache, "--mode", "workspace-write", "--runner", "bwrap", "-c",
				"touch started; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; "+
					"if echo poison > cache/probe.json; then echo written; else echo refused; fi")
		}()
		for i := 0; ; i++ {
			if _, err := os.Stat(filepath.Join(s.ws, "started")); err == nil {
				break
			}
			if i == 600 {
				t.Fatal("the long run did not start")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", cache, "--mode", "workspace-write", "--runner", "bwrap", "-c", "true"); r.code != 0 {
			t.Fatalf("existing=%v: a second run over the tree: exit %d (%q)", existing, r.code, r.stderr)
		}
		if r := toh(t, s.beside, nil, "--policy", s.noPolicy, "--probe-cache", cache, "--", "true"); r.code != 0 {
			t.Fatalf("existing=%v: a call with its roots elsewhere: exit %d (%q)", existing, r.code, r.stderr)
		}
		if err := os.WriteFile(filepath.Join(s.ws, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if r := <-long; r.code != 0 || r.stdout != "refused\n" {
			t.Fatalf("existing=%v: the long run: exit %d stdout %q, want the write refused (%q)", existing, r.code, r.stdout, r.stderr)
		}
		absent(t, cache)
	}
}

// A verdict written by a command whose run could write the cache does not choose the
// runner of a later call: here a Landlock run (which cannot keep the cache read-only)
// makes it say that nothing confines, and the next call, whose roots do not hold
// the cache, would refuse to run (SANDBOX_UNAVAILABLE, "switch the consumer to
// danger-full-access"). After such a run toh-exec drops the cache. A directory the
// command made read-only (so the drop fails, for a user other than root) or opened
// to another user (by its mode or an ACL, so that user can put a verdict back after
// the drop) is no cache; neither is one the command replaced by a link (here to the
// later call's own working directory, through /proc/self/cwd): the later call
// neither reads a verdict there nor writes one. Control: the same verdict planted by
// hand in the cache's own directory, with no run in between, is believed.
func TestPoisonedProbeVerdictOutlivesNoRun(t *testing.T) {
	testutil.RequireBwrap(t)
	testutil.RequireLandlockABI(t, 1)
	acl := aclGranting(65534)
	for _, variant := range []string{"plain", "read-only directory", "group-writable directory", "ACL on the directory", "directory linked away", "directory held locked"} {
		t.Run(variant, func(t *testing.T) {
			s := newScratch(t)
			dir := filepath.Join(s.ws, "cache")
			cache := filepath.Join(dir, "probe.json")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(dir, 0o755) })
			// The chain's verdict, stored by a read-only call (no writable roots).
			if r := toh(t, s.beside, nil, "--policy", s.noPolicy, "--probe-cache", cache, "--", "true"); r.code != 0 {
				t.Fatalf("warming the cache: %d %q", r.code, r.stderr)
			}
			good, err := os.ReadFile(cache)
			if err != nil || !strings.Contains(string(good), `"backend":"bwrap"`) {
				t.Fatalf("cached verdict %q, %v", good, err)
			}
			key := strings.SplitN(string(good), `,"backend"`, 2)[0]
			poison := key + `,"backend":"","probes":[{"backend":"bwrap","error":"made up"},{"backend":"landlock","error":"made up"}]}`
			script := "printf '%s' '" + poison + "' > cache/probe.json"
			later := s.beside // the later call's working directory
			switch variant {
			case "read-only directory":
				script += " && chmod 555 cache"
			case "group-writable directory":
				script += " && chmod 775 cache"
			case "ACL on the directory":
				script += " && setfattr -n system.posix_acl_access -v 0s" + base64.StdEncoding.EncodeToString(acl) + " cache"
			case "directory linked away":
				later = filepath.Join(s.ws, "later")
				script = "mkdir -p later/sub && printf '%s' '" + poison + "' > later/sub/probe.json && rm -r cache && ln -s /proc/self/cwd/sub cache"
			case "directory held locked":
				// The lock a bwrap run holds while it keeps the cache read-only, held
				// here by a process the command could have handed a descriptor to:
				// the drop cannot remove the name then, and empties the file.
				lock, err := os.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { lock.Close() })
				if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
					t.Fatal(err)
				}
			}
			r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", cache, "--runner", "landlock", "--mode", "workspace-write",
				"-c", script+" && echo planted")
			if r.code != 0 || r.stdout != "planted\n" {
				t.Fatalf("the Landlock run could not plant its verdict (the attack needs it): %d %q %q", r.code, r.stdout, r.stderr)
			}
			switch variant {
			case "group-writable directory", "ACL on the directory":
				// Another user the directory is open to puts the verdict back.
				if err := os.WriteFile(cache, []byte(poison), 0o644); err != nil {
					t.Fatal(err)
				}
			case "plain":
				absent(t, cache)
			}
			if r := toh(t, later, nil, "--policy", s.noPolicy, "--probe-cache", cache, "--", "true"); r.code != 0 {
				t.Fatalf("the call after the poisoning run: exit %d (%q)", r.code, r.stderr)
			}
			if variant == "directory linked away" {
				absent(t, filepath.Join(later, "probe.json"))
				return
			}
			unix.Removexattr(dir, "system.posix_acl_access")
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cache, []byte(poison), 0o644); err != nil {
				t.Fatal(err)
			}
			if r := toh(t, later, nil, "--policy", s.noPolicy, "--probe-cache", cache, "--", "true"); r.code != exitUnavailable || !strings.Contains(r.stderr, "made up") {
				t.Fatalf("control, a verdict planted with no run after it: exit %d (%q), want it believed", r.code, r.stderr)
			}
		})
	}
}

// aclGranting is a POSIX ACL that gives uid rwx, as "setfacl -m u:UID:rwx" writes it
// (the value of system.posix_acl_access or system.posix_acl_default).
func aclGranting(uid uint32) []byte {
	all := ^uint32(0)
	return posixacl.Encode(posixacl.Entry{Tag: posixacl.UserObj, Perm: 7, ID: all}, posixacl.Entry{Tag: posixacl.User, Perm: 7, ID: uid},
		posixacl.Entry{Tag: posixacl.GroupObj, Perm: 5, ID: all}, posixacl.Entry{Tag: posixacl.Mask, Perm: 7, ID: all},
		posixacl.Entry{Tag: posixacl.Other, Perm: 5, ID: all})
}

// A FIFO at the cache's place (planted by a command that could once write there) does
// not hold the next call in open(2): it is no cache, and the call probes.
func TestProbeCacheFIFODoesNotHang(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	cache := filepath.Join(s.beside, "probe.json")
	if err := syscall.Mkfifo(cache, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runWithin(t, 30*time.Second, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", cache, "--", "true")
	if r.code != 0 {
		t.Fatalf("exit %d (%q)", r.code, r.stderr)
	}
}

// bwrapRaceLine is bubblewrap 0.8's line for a mount moved on the host while it
// set the sandbox up.
const bwrapRaceLine = `bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/var/tmp/p1/mnt": No such file or directory`

// flakyBwrap writes a bwrap wrapper that fails its first `fails` invocations as
// bwrap 0.8 does when a mount moves while it copies the host's (line, exit 1,
// nothing on the status pipe), and execs the real bwrap after that. Each
// invocation appends a line to the log.
func flakyBwrap(t *testing.T, dir, real, line string, fails int) (wrapper, log string) {
	t.Helper()
	wrapper, log = filepath.Join(dir, "bwrap-flaky"), filepath.Join(dir, "bwrap-flaky.log")
	said := filepath.Join(dir, "bwrap-flaky.line")
	script := fmt.Sprintf("#!/bin/sh\necho run >> %s\nn=$(wc -l < %s)\nif [ \"$n\" -le %d ]; then cat %s >&2; exit 1; fi\nexec %s \"$@\"\n",
		log, log, fails, said, real)
	if err := os.WriteFile(said, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, log
}

// TestBwrapStartedAgainWhenMountsMoved: bwrap 0.8 copies the host's mounts and then
// remounts each one by its path; a directory above a mount renamed in between
// fails the set-up (`remount "...": No such file or directory`) before the command
// starts. toh-exec starts bwrap again, up to three times, and only then reports
// the runner failed; never when the command had started, nor for another failure.
func TestBwrapStartedAgainWhenMountsMoved(t *testing.T) {
	real := testutil.RequireBwrap(t)
	s := newScratch(t)
	race := bwrapRaceLine
	counter := filepath.Join(s.ws, "command-ran")
	cmd := "echo x >> " + counter
	lines := func(p string) int {
		b, _ := os.ReadFile(p)
		return strings.Count(string(b), "\n")
	}
	run := func(bw string, command string) runResult {
		t.Helper()
		os.Remove(counter)
		return toh(t, s.ws, nil, "--policy", s.noPolicy, "--bwrap", bw, "--runner", "bwrap", "--mode", "workspace-write", "-c", command)
	}

	// Positive: two failures, then the real bwrap: the command runs once.
	bw, log := flakyBwrap(t, s.beside, real, race, 2)
	r := run(bw, cmd)
	if r.code != 0 || lines(counter) != 1 || lines(log) != 3 {
		t.Fatalf("two races: code %d, command ran %d times, bwrap started %d times (want 0, 1, 3); stderr %q", r.code, lines(counter), lines(log), r.stderr)
	}
	if strings.Count(r.stderr, "starting it again") != 2 {
		t.Fatalf("two races: stderr %q, want the retry said twice", r.stderr)
	}

	// Negative: it keeps failing: three starts, then the runner failure; nothing ran.
	bw, log = flakyBwrap(t, s.beside, real, race, 100)
	os.Remove(log)
	r = run(bw, cmd)
	if r.code == 0 || lines(counter) != 0 || lines(log) != 3 || !strings.Contains(r.stderr, "Runner failure: bwrap: Can't bind mount") {
		t.Fatalf("always racing: code %d, command ran %d times, bwrap started %d times (want non-zero, 0, 3); stderr %q", r.code, lines(counter), lines(log), r.stderr)
	}

	// Another set-up failure is not retried.
	bw, log = flakyBwrap(t, s.beside, real, "bwrap: setting up uid map: Permission denied", 100)
	os.Remove(log)
	r = run(bw, cmd)
	if r.code == 0 || lines(log) != 1 || strings.Contains(r.stderr, "starting it again") {
		t.Fatalf("other failure: code %d, bwrap started %d times (want 1); stderr %q", r.code, lines(log), r.stderr)
	}

	// The probe meeting the race probes again, rather than leaving the chain (and
	// its cached verdict) on Landlock.
	bw, log = flakyBwrap(t, s.beside, real, race, 1)
	os.Remove(log)
	cache := filepath.Join(s.beside, "probe-race.json")
	e, r := tohJSON(t, s.ws, nil, "--policy", s.noPolicy, "--bwrap", bw, "--probe-cache", cache, "--probe-timeout", "60s", "--", "true")
	if e.Result == nil || e.Result.Backend != "bwrap" || lines(log) != 3 {
		t.Fatalf("probe race: bwrap started %d times (want 3: probe, probe, command), result %+v error %+v stderr %q", lines(log), e.Result, e.Error, r.stderr)
	}
	if b, _ := os.ReadFile(cache); !strings.Contains(string(b), `"backend":"bwrap"`) {
		t.Fatalf("probe race: cached verdict %s", b)
	}

	// The command itself printing the line and failing is the command's result:
	// bwrap said it started, so it is not started again.
	bw, log = flakyBwrap(t, s.beside, real, race, 0)
	os.Remove(log)
	r = run(bw, cmd+"; cat "+filepath.Join(s.beside, "bwrap-flaky.line")+" >&2; exit 1")
	if r.code != 1 || lines(counter) != 1 || lines(log) != 1 || strings.Contains(r.stderr, "starting it again") {
		t.Fatalf("command's own line: code %d, command ran %d times, bwrap started %d times (want 1, 1, 1); stderr %q", r.code, lines(counter), lines(log), r.stderr)
	}
}

// TestBwrapNotStartedAgainAfterASignal: a signal toh-exec passed on to a bwrap
// that then failed with the race line ends the run (nothing ran, and the caller
// asked to stop), as a signal before the start does; bwrap is not started again.
// The fake ignores the signal, as a bwrap already on its way out would.
func TestBwrapNotStartedAgainAfterASignal(t *testing.T) {
	real := testutil.RequireBwrap(t)
	s := newScratch(t)
	log := filepath.Join(s.beside, "bwrap-signalled.log")
	said := filepath.Join(s.beside, "bwrap-signalled.line")
	if err := os.WriteFile(said, []byte(bwrapRaceLine+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bw := filepath.Join(s.beside, "bwrap-signalled")
	script := fmt.Sprintf("#!/bin/sh\necho run >> %s\nn=$(wc -l < %s)\nif [ \"$n\" -le 1 ]; then trap '' TERM; kill -TERM $PPID; sleep 0.5; cat %s >&2; exit 1; fi\nexec %s \"$@\"\n",
		log, log, said, real)
	if err := os.WriteFile(bw, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	counter := filepath.Join(s.ws, "command-ran")
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--bwrap", bw, "--runner", "bwrap", "--mode", "workspace-write", "-c", "echo x >> "+counter)
	b, _ := os.ReadFile(log)
	if starts := strings.Count(string(b), "\n"); starts != 1 || r.code == 0 {
		t.Fatalf("bwrap started %d times (want 1), code %d (want the signal's); stderr %q", starts, r.code, r.stderr)
	}
	absent(t, counter)
}
