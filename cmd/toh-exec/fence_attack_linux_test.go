package main

// toh-exec --fence attacked as a hostile confined command would, through the built
// binary: a result too large for a pipe must not hang the run, a process the command
// leaves behind must not be refused anything that is not on record, the command keeps
// the caller's umask, and the host leaves nothing of its own on the host while the
// command runs. Each test has a negative control (the refused thing is absent) and a
// positive control (the allowed thing landed).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/internal/fencerun"
	"github.com/toh-sandbox/toh/internal/testutil"
)

func (s *fenceScratch) runWithin(t *testing.T, limit time.Duration, runner, script string, env ...string) fenceEnvelope {
	t.Helper()
	r := runWithin(t, limit, s.ws, env, "--json", "--policy", s.noPolicy, "--runner", runner, "--mode", "workspace-write",
		"--probe-cache", s.cache, "--fence", "-c", script)
	var e fenceEnvelope
	if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || e.Result == nil {
		t.Fatalf("--json output is not a result: %v\n%s\nstderr: %s", err, r.stdout, r.stderr)
	}
	return e
}

// More refusals than the result pipe's buffer holds in records (1000 records of
// ~90 bytes, beyond 64 KiB): the host once blocked writing its report while
// toh-exec waited for it to exit, and the run hung for good.
func TestFenceAttackManyDenialsDoNotHangTheRun(t *testing.T) {
	for _, runner := range runners(t) {
		t.Run(runner, func(t *testing.T) {
			s := newFenceScratch(t)
			const n = fencerun.MaxDenials + 500
			script := fmt.Sprintf(`echo ok > allowed.txt
i=0; while [ $i -lt %d ]; do i=$((i+1)); echo x > .git/hooks/h$i 2>/dev/null; done; exit 0`, n)
			e := s.runWithin(t, 30*time.Second, runner, script)
			if e.Result.ExitCode == nil || *e.Result.ExitCode != 0 || e.Result.RunnerErr {
				t.Fatalf("run failed: %+v %s", e.Result, e.Stderr)
			}
			present(t, filepath.Join(s.ws, "allowed.txt"), "ok\n")
			absent(t, filepath.Join(s.ws, ".git/hooks/h1"))
			absent(t, filepath.Join(s.ws, fmt.Sprintf(".git/hooks/h%d", n)))
			s.checkCanary(t)
			ds := *e.Result.Denials
			if len(ds) != fencerun.MaxDenials || e.Result.Fence.Dropped != n-fencerun.MaxDenials {
				t.Errorf("%d records and %d dropped, want %d and %d", len(ds), e.Result.Fence.Dropped, fencerun.MaxDenials, n-fencerun.MaxDenials)
			}
			if !e.Result.Denied || !slices.Equal(e.Result.DeniedBy, []string{"fence"}) {
				t.Errorf("denied %v by %q, want true by [fence]", e.Result.Denied, e.Result.DeniedBy)
			}
		})
	}
}

// Under Landlock (no PID namespace) the command can leave a process behind that goes
// on mutating after the shell exited. Every EACCES such a process sees must be on
// the run's record: the host once collected the records and still answered EACCES
// to denials until it exited. Its stderr is the run's, so each refusal it saw is
// counted there (but the one in flight when the run ends may be recorded with its
// message not yet written); after the host is gone it gets ENOTCONN, never the
// directory underneath.
func TestFenceAttackLeftoverProcessIsNeverRefusedOffRecord(t *testing.T) {
	if !slices.Contains(runners(t), "landlock") {
		t.Skip("needs Landlock: under bwrap the PID namespace ends every process of the run with it")
	}
	s := newFenceScratch(t)
	for round := range 6 {
		script := fmt.Sprintf(`echo ok > allowed%d.txt
( i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo x > .git/hooks/r%d-$i; done ) </dev/null >/dev/null &
sleep 0.0%d; exit 0`, round, round, round+1)
		e := s.runWithin(t, 30*time.Second, "landlock", script)
		present(t, filepath.Join(s.ws, fmt.Sprintf("allowed%d.txt", round)), "ok\n")
		hooks, _ := os.ReadDir(filepath.Join(s.ws, ".git/hooks"))
		if len(hooks) != 0 {
			t.Fatalf("round %d: a protected name was created: %v", round, hooks[0].Name())
		}
		// The leftover is one sequential loop, so at most one refusal is in flight
		// when the run ends: recorded by the fence, its message not yet on the
		// run's stderr when toh-exec stops reading it. More than one unaccounted
		// record, or any refusal not on record, is the bug.
		refused := strings.Count(e.Stderr, "Permission denied")
		recorded := len(*e.Result.Denials) + e.Result.Fence.Dropped
		if recorded < refused || recorded > refused+1 {
			t.Errorf("round %d: the command saw %d refusals, the result records %d", round, refused, recorded)
		}
		if refused > 0 && !e.Result.Denied {
			t.Errorf("round %d: refusals, but denied is false", round)
		}
	}
}

// The command runs with the caller's umask. Serving a fence sets the host's umask to
// 0, and a caller other than root mounts before the stage starts: its command once
// created every file world-writable.
func TestFenceAttackCommandKeepsTheCallersUmask(t *testing.T) {
	for _, runner := range runners(t) {
		t.Run(runner, func(t *testing.T) {
			s := newFenceScratch(t)
			script := `umask; echo ok > made.txt; mkdir made.d; exit 0`
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", "-c", `umask 027; exec "$0" "$@"`, tohExec, "--json", "--policy", s.noPolicy,
				"--runner", runner, "--mode", "workspace-write", "--probe-cache", s.cache, "--fence", "-c", script)
			cmd.Dir = s.ws
			out, err := cmd.Output()
			var e fenceEnvelope
			if jerr := json.Unmarshal(out, &e); err != nil || jerr != nil || e.Result == nil {
				t.Fatalf("run failed: %v %v %s %s", err, jerr, out, stderrOf(err))
			}
			if strings.TrimSpace(e.Stdout) != "0027" {
				t.Errorf("the command's umask is %q, want the caller's 0027", e.Stdout)
			}
			for name, want := range map[string]os.FileMode{"made.txt": 0o640, "made.d": 0o750 | os.ModeDir} {
				fi, err := os.Stat(filepath.Join(s.ws, name))
				if err != nil {
					t.Fatalf("%s was not made: %v", name, err)
				}
				if fi.Mode() != want {
					t.Errorf("%s has mode %v, want %v", name, fi.Mode(), want)
				}
			}
		})
	}
}

// A caller other than root mounts the fences on the host first, in its fence
// directory under XDG_RUNTIME_DIR, and detaches them before the command runs: while
// the command runs and after it, the host's mount table holds no fence of the run
// and no temporary directory is left. (Root mounts in the run's namespace only: the
// same checks hold trivially there.)
func TestFenceAttackNothingLeftOnTheHostDuringTheRun(t *testing.T) {
	for _, runner := range runners(t) {
		t.Run(runner, func(t *testing.T) {
			s := newFenceScratch(t)
			// Outside every writable root (a fence directory never lies in one).
			xdg := filepath.Join(s.beside, "xdg")
			if err := os.Mkdir(xdg, 0o700); err != nil {
				t.Fatal(err)
			}
			started := filepath.Join(s.ws, "started")
			release := filepath.Join(s.ws, "release")
			script := `echo x > started; i=0; while [ ! -e release ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
echo x > .git/hooks/late 2>/dev/null; exit 0`
			done := make(chan fenceEnvelope, 1)
			go func() {
				r := runWithin(t, 2*time.Minute, s.ws, []string{"XDG_RUNTIME_DIR=" + xdg}, "--json", "--policy", s.noPolicy,
					"--runner", runner, "--mode", "workspace-write", "--probe-cache", s.cache, "--fence", "-c", script)
				var e fenceEnvelope
				json.Unmarshal([]byte(r.stdout), &e)
				done <- e
			}()
			deadline := time.Now().Add(time.Minute)
			for {
				if _, err := os.Stat(started); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the command never started")
				}
				time.Sleep(20 * time.Millisecond)
			}
			left, _ := filepath.Glob(filepath.Join(xdg, "toh-fence-*"))
			mounts, _ := os.ReadFile("/proc/self/mountinfo")
			os.WriteFile(release, nil, 0o644)
			e := <-done
			if len(left) != 0 {
				t.Errorf("while the command runs, the host keeps %q", left)
			}
			if strings.Contains(string(mounts), xdg) {
				t.Errorf("while the command runs, a fence is mounted on the host under %s", xdg)
			}
			if e.Result == nil || e.Result.Denials == nil || !hasDenial(*e.Result.Denials, "create", filepath.Join(s.ws, ".git/hooks/late"), "protected") {
				t.Fatalf("the run's refusal is not on record: %+v", e)
			}
			absent(t, filepath.Join(s.ws, ".git/hooks/late"))
			present(t, started, "x\n")
			if left, _ := filepath.Glob(filepath.Join(xdg, "toh-fence-*")); len(left) != 0 {
				t.Errorf("after the run the host keeps %q", left)
			}
		})
	}
}

// A caller other than root serializes its runs' host mounts with a lock in its
// fence directory ($XDG_RUNTIME_DIR/toh-fence). The command must not reach it: a
// process it leaves behind holding the lock (Landlock has no PID namespace) once
// stalled every later fenced run of the user until setup timed out and the run
// failed. (As root no such lock exists: the checks hold trivially there.)
func TestFenceAttackCommandCannotHoldTheWindowLock(t *testing.T) {
	if !slices.Contains(runners(t), "landlock") {
		t.Skip("needs Landlock: under bwrap the PID namespace ends every process of the run with it")
	}
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("needs flock(1)")
	}
	s := newFenceScratch(t)
	// Outside every writable root (a fence directory never lies in one).
	xdg := filepath.Join(s.beside, "xdg")
	if err := os.Mkdir(xdg, 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{"XDG_RUNTIME_DIR=" + xdg}
	lock := filepath.Join(xdg, "toh-fence", "lock")
	script := fmt.Sprintf(`if exec 9<%q; then echo opened; ( flock -x 9 && sleep 12 ) 9<&9 </dev/null >/dev/null 2>&1 & fi; exit 0`, lock)
	first := s.runWithin(t, 30*time.Second, "landlock", script, env...)
	if first.Result.ExitCode == nil || *first.Result.ExitCode != 0 {
		t.Fatalf("first run failed: %+v %s", first.Result, first.Stderr)
	}
	if strings.Contains(first.Stdout, "opened") {
		t.Errorf("the command opened the fence directory's lock %s", lock)
	}
	// Positive control: the next run starts at once and its write lands.
	start := time.Now()
	second := s.runWithin(t, 8*time.Second, "landlock", "echo ok > second.txt", env...)
	if second.Error != nil || second.Result.ExitCode == nil || *second.Result.ExitCode != 0 {
		t.Fatalf("second run failed: %+v %+v %s", second.Error, second.Result, second.Stderr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the second run waited %v to start", d)
	}
	present(t, filepath.Join(s.ws, "second.txt"), "ok\n")
	s.checkCanary(t)
}

// Under Landlock the host's /tmp is a writable root the fence leaves alone. A fenced
// workspace beneath it once ran, and its command moved the workspace's parent away
// and put a look-alike with a .git/hooks/pre-commit at the workspace's path, outside
// every fence and on no record. Such a run does not start now; under bwrap, whose
// /tmp is a private tmpfs, the same move changes nothing on the host and the run goes
// on.
func TestFenceAttackWorkspaceParentSwapUnderTmp(t *testing.T) {
	testutil.RequireBwrap(t)
	testutil.RequireFUSE(t)
	s := newScratch(t)
	cache := filepath.Join(s.beside, "cache.json")
	for _, runner := range runners(t) {
		t.Run(runner, func(t *testing.T) {
			parent, err := os.MkdirTemp("/tmp", "toh-attack-ws-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(parent); os.RemoveAll(parent + ".moved") })
			ws := filepath.Join(parent, "proj")
			testutil.MakeTree(t, parent, "dir proj", "dir proj/.git", "dir proj/.git/hooks", "file proj/.git/config [core]")
			hook := filepath.Join(ws, ".git/hooks/pre-commit")
			script := fmt.Sprintf(`echo ok > ok.txt; cd /; mv %[1]s %[1]s.moved && mkdir -p %[2]s/.git/hooks && echo evil > %[3]s; exit 0`,
				parent, ws, hook)
			r := runWithin(t, time.Minute, ws, nil, "--json", "--policy", s.noPolicy, "--runner", runner, "--mode", "workspace-write",
				"--probe-cache", cache, "--fence", "-c", script)
			var e fenceEnvelope
			if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
				t.Fatalf("bad output: %v %s %s", err, r.stdout, r.stderr)
			}
			// Negative control, both runners: no look-alike hook at the workspace's path.
			absent(t, hook)
			present(t, filepath.Join(ws, ".git/config"), "[core]")
			if runner == "landlock" {
				if r.code != exitUnavailable || e.Error == nil || e.Error.Code != "SANDBOX_UNAVAILABLE" {
					t.Fatalf("want the run refused (exit %d), got %d: %s %s", exitUnavailable, r.code, r.stdout, r.stderr)
				}
				absent(t, filepath.Join(ws, "ok.txt"))
				return
			}
			// Positive control: under bwrap the run goes on and its write lands.
			if r.code != 0 || e.Result == nil {
				t.Fatalf("bwrap run failed: %d %s %s", r.code, r.stdout, r.stderr)
			}
			present(t, filepath.Join(ws, "ok.txt"), "ok\n")
		})
	}
	s.checkCanary(t)
}

// A link in a fenced root that leads to the host's /tmp. The fence follows links on
// the host, where /tmp is the host's own; under bwrap the command's /tmp is a
// private tmpfs, so the fence must not let it write the host's through a link (it
// once judged by the policy's roots, which list /tmp, and a command replaced a
// toh-exec installed in /tmp that the next call ran unconfined; found by review).
// Under Landlock the host's /tmp is the command's own, and the link reaches it.
func TestFenceAttackLinkToHostTmp(t *testing.T) {
	for _, runner := range runners(t) {
		t.Run(runner, func(t *testing.T) {
			s := newFenceScratch(t)
			name := fmt.Sprintf("toh-attack-hosttmp-%d-%s", os.Getpid(), runner)
			host := filepath.Join("/tmp", name)
			t.Cleanup(func() { os.Remove(host); os.Remove(host + "-direct") })
			script := fmt.Sprintf(`echo ok > ok.txt; ln -s /tmp hostTmp; echo via-link > hostTmp/%[1]s; echo direct > /tmp/%[1]s-direct; cat /tmp/%[1]s-direct; exit 0`, name)
			e := s.runWithin(t, time.Minute, runner, script)
			if e.Result.ExitCode == nil || *e.Result.ExitCode != 0 || e.Result.RunnerErr {
				t.Fatalf("run failed: %+v %s", e.Result, e.Stderr)
			}
			// Positive controls: the workspace write lands, and the command's own /tmp
			// takes a write.
			present(t, filepath.Join(s.ws, "ok.txt"), "ok\n")
			if e.Stdout != "direct\n" {
				t.Errorf("the command's own /tmp: stdout %q, want \"direct\\n\"", e.Stdout)
			}
			if runner == "landlock" {
				present(t, host, "via-link\n") // the host's /tmp is writable under Landlock
				return
			}
			// Negative controls: nothing in the host's /tmp, and the refusal is on record.
			absent(t, host)
			absent(t, host+"-direct")
			if !e.Result.Denied || e.Result.Denials == nil || !hasDenial(*e.Result.Denials, "create", host, "outside-writable-roots") {
				t.Errorf("want the write through the link denied on record, got denied %v, records %+v", e.Result.Denied, e.Result.Denials)
			}
			s.checkCanary(t)
		})
	}
}

// A program the caller may run but not read (a root-owned 0711 file) makes its
// process non-dumpable, and a fence host of a user other than root may then not
// read that process's namespaces: the fence refused its writes, with no record
// (found by review). It is judged by its parent instead. Needs such a program,
// which scripts/test.sh makes as root for its unprivileged leg ($TOH_TEST_XONLY).
func TestFenceRunsProgramsItCannotRead(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("as a user other than root: root may read every process's namespaces")
	}
	xonly := os.Getenv("TOH_TEST_XONLY")
	if xonly == "" {
		t.Skip("needs $TOH_TEST_XONLY, a copy of touch(1) this user may run but not read (scripts/test.sh)")
	}
	if _, err := os.ReadFile(xonly); err == nil {
		t.Fatalf("%s is readable: it would not make its process non-dumpable", xonly)
	}
	for _, runner := range runners(t) {
		t.Run(runner, func(t *testing.T) {
			s := newFenceScratch(t)
			hook := filepath.Join(s.ws, ".git", "hooks", "by-xonly")
			e := s.runWithin(t, time.Minute, runner, fmt.Sprintf("%[1]s made-by-xonly; %[1]s .git/hooks/by-xonly 2>/dev/null; exit 0", xonly))
			present(t, filepath.Join(s.ws, "made-by-xonly"), "")
			absent(t, hook)
			if e.Result.Denials == nil || !hasDenial(*e.Result.Denials, "create", hook, "protected") {
				t.Errorf("the protected write of a program the caller cannot read is not on record: %+v", e.Result.Denials)
			}
		})
	}
}

// The probe cache lies in a fenced root ($HOME's ~/.cache/toh when $HOME is the
// workspace). bwrap keeps it read-only where the command sees it, but the fence
// resolves links on the host: a link to its directory from another fenced root
// ($TMPDIR) let a bwrap run rewrite it, and a concurrent call elsewhere then ran
// under Landlock instead of bwrap (found by review). The fence now guards it too,
// on record. Control: another file through the same link lands.
func TestFenceAttackProbeCacheThroughALink(t *testing.T) {
	s := newFenceScratch(t)
	tmpd := filepath.Join(s.beside, "tmpd")
	testutil.MakeTree(t, s.ws, "dir cachedir", "file cachedir/cache.json orig")
	testutil.MakeTree(t, s.beside, "dir tmpd")
	cache := filepath.Join(s.ws, "cachedir", "cache.json")
	script := fmt.Sprintf(`ln -s %[1]s/cachedir $TMPDIR/c
echo poisoned > $TMPDIR/c/cache.json; cat $TMPDIR/c/cache.json; echo ok > $TMPDIR/c/other.txt; exit 0`, s.ws)
	r := runWithin(t, time.Minute, s.ws, []string{"TMPDIR=" + tmpd}, "--json", "--policy", s.noPolicy, "--runner", "bwrap",
		"--mode", "workspace-write", "--probe-cache", cache, "--fence", "-c", script)
	var e fenceEnvelope
	if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || e.Result == nil {
		t.Fatalf("--json output is not a result: %v\n%s\nstderr: %s", err, r.stdout, r.stderr)
	}
	present(t, filepath.Join(s.ws, "cachedir", "other.txt"), "ok\n")
	// What the command read back (toh-exec drops a cache inside the run's roots,
	// which it never trusts, once the run is over).
	if !strings.Contains(e.Stdout, "orig") || strings.Contains(e.Stdout, "poisoned") {
		t.Errorf("the probe cache read back as %q, want it unchanged", e.Stdout)
	}
	if e.Result.Denials == nil || !hasDenial(*e.Result.Denials, "open", cache, "protected") && !hasDenial(*e.Result.Denials, "truncate", cache, "protected") {
		t.Errorf("want the write to the probe cache refused on record, got %+v", e.Result.Denials)
	}
	s.checkCanary(t)
}

// For a caller other than root the fences exist on the host for a moment, in the
// user's fence directory, before the stage holds them. Another confined run of the
// same user whose workspace covers that directory ($HOME, the directory being
// ~/.cache/toh/fence) wrote through them into the fenced run's workspace, outside
// its own roots, and its refusals were recorded as the fenced run's (found by
// review). Now a fence acts only for its own run's processes.
func TestFenceAttackAnotherRunReachesTheWindow(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("as a user other than root: root's fences are mounted in the run's own namespace only")
	}
	if testutil.LandlockABI() < 1 {
		t.Skip("needs Landlock for the other run (no mount namespace of its own)")
	}
	s := newFenceScratch(t)
	home := filepath.Join(s.beside, "home")
	testutil.MakeTree(t, s.beside, "dir home/.cache/toh", "dir home/b")
	env := []string{"HOME=" + home, "XDG_RUNTIME_DIR="}
	fenceDir := filepath.Join(home, ".cache", "toh", "fence")

	// The other run: Landlock, workspace-write, its workspace the home holding the
	// fence directory; it writes into every fence it finds there, for a while.
	stop := filepath.Join(s.beside, "stop")
	other := fmt.Sprintf(`echo ran > b/own.txt
while [ ! -e %[1]s ]; do
  for d in %[2]s/*/; do echo B >> "$d/B-was-here"; echo x >> "$d/.git/hooks/pre-commit"; done 2>/dev/null
done
exit 0`, stop, fenceDir)
	done := make(chan runResult, 1)
	go func() {
		done <- runBinWithin(t, time.Minute, tohExec, home, env, "--json", "--policy", s.noPolicy, "--runner", "landlock",
			"--mode", "workspace-write", "--probe-cache", filepath.Join(s.beside, "cache-b.json"), "-c", other)
	}()
	defer func() {
		os.WriteFile(stop, nil, 0o600)
		<-done
	}()

	for i := range 12 {
		e := s.runWithin(t, time.Minute, "bwrap", "sleep 0.2", env...)
		if e.Result.ExitCode == nil || *e.Result.ExitCode != 0 || e.Result.RunnerErr {
			t.Fatalf("fenced run %d failed: %+v %s", i, e.Result, e.Stderr)
		}
		if e.Result.Denied || e.Result.Denials == nil || len(*e.Result.Denials) != 0 {
			n, first := 0, fenceDenial{}
			if e.Result.Denials != nil && len(*e.Result.Denials) > 0 {
				n, first = len(*e.Result.Denials), (*e.Result.Denials)[0]
			}
			t.Fatalf("fenced run %d, which only slept, is denied %v with %d records, the first %+v", i, e.Result.Denied, n, first)
		}
	}
	if _, err := os.Stat(fenceDir); err != nil {
		t.Skipf("the fenced runs used another fence directory than %s (%v): nothing was exposed to the other run", fenceDir, err)
	}
	os.WriteFile(stop, nil, 0o600)
	r := <-done
	done <- r
	// Positive control: the other run ran and wrote in its own workspace.
	present(t, filepath.Join(home, "b", "own.txt"), "ran\n")
	if r.code != 0 {
		t.Fatalf("the other run: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	// Negative controls: nothing of the other run's in the fenced workspace.
	absent(t, filepath.Join(s.ws, "B-was-here"))
	absent(t, filepath.Join(s.ws, ".git", "hooks", "pre-commit"))
	s.checkCanary(t)
}

// The host dies by the signal its stage's child died by, whatever the signal: Go's
// runtime once ignored a SIGPIPE the host sent itself and turned SIGSEGV into a
// crash report with status 2, so a fenced Landlock run said exitCode where the
// unfenced one says signal. (bwrap turns every death into a status itself.)
func TestFenceAttackEverySignalDeathPassesThrough(t *testing.T) {
	if !slices.Contains(runners(t), "landlock") {
		t.Skip("needs Landlock: bwrap reports a signal death as a status, fenced or not")
	}
	s := newFenceScratch(t)
	for _, sig := range []string{"PIPE", "USR1", "SEGV", "TERM"} {
		var got [2]string
		for i, extra := range [][]string{nil, {"--fence"}} {
			args := append([]string{"--json", "--policy", s.noPolicy, "--runner", "landlock", "--mode", "workspace-write",
				"--probe-cache", s.cache}, extra...)
			r := runWithin(t, time.Minute, s.ws, nil, append(args, "-c", "kill -"+sig+" $$")...)
			var e struct {
				Result *facts `json:"result"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || e.Result == nil {
				t.Fatalf("SIG%s %q: bad output: %v %s %s", sig, extra, err, r.stdout, r.stderr)
			}
			switch {
			case e.Result.Signal != nil && e.Result.ExitCode == nil:
				got[i] = fmt.Sprintf("signal %d", *e.Result.Signal)
			case e.Result.ExitCode != nil && e.Result.Signal == nil:
				got[i] = fmt.Sprintf("exitCode %d", *e.Result.ExitCode)
			default:
				t.Fatalf("SIG%s %q: not exactly one of signal and exitCode: %s", sig, extra, r.stdout)
			}
			if strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("SIG%s %q: a Go crash report on stderr: %s", sig, extra, r.stderr)
			}
		}
		// Positive control: the unfenced run reports the signal; the fenced one must too.
		if !strings.HasPrefix(got[0], "signal ") || got[1] != got[0] {
			t.Errorf("SIG%s: unfenced %s, fenced %s", sig, got[0], got[1])
		}
	}
}

// A fence process that ends without its report once the command could have started
// (killed here from outside; a command once did it by setting its CPU limit) is
// FENCE_LOST (119): the command may have run, confined. Never SANDBOX_UNAVAILABLE,
// which says the command did not run and advises running it unconfined. The
// command's marker proves it ran; its sleep proves the fence died first.
func TestFenceLostIsNeverReportedAsNotRun(t *testing.T) {
	for _, runner := range runners(t) {
		t.Run(runner, func(t *testing.T) {
			s := newFenceScratch(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, tohExec, "--json", "--policy", s.noPolicy, "--runner", runner, "--mode", "workspace-write",
				"--probe-cache", s.cache, "--fence", "-c", "echo x > started; sleep 30")
			cmd.Dir = s.ws
			var stdout strings.Builder
			cmd.Stdout = &stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the command to start", func() bool {
				_, err := os.Stat(filepath.Join(s.ws, "started"))
				return err == nil
			})
			host := childWithArg(cmd.Process.Pid, fencerun.HostArg)
			if host == 0 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("no fence host among toh-exec's children")
			}
			syscall.Kill(host, syscall.SIGKILL)
			cmd.Wait()
			var e fenceEnvelope
			if err := json.Unmarshal([]byte(stdout.String()), &e); err != nil {
				t.Fatalf("--json output: %v\n%s", err, stdout.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != exitFenceLost || e.Error == nil || e.Error.Code != "FENCE_LOST" ||
				!strings.Contains(e.Error.Message, "may have run") || strings.Contains(e.Stderr, "danger-full-access") ||
				strings.Contains(e.Stderr, "toh-exec: toh-exec:") {
				t.Fatalf("exit %d, error %+v, stderr %q; want FENCE_LOST", code, e.Error, e.Stderr)
			}
			present(t, filepath.Join(s.ws, "started"), "x\n")
			s.checkCanary(t)
		})
	}
}

// childWithArg returns a child of pid whose argv[1] is arg, or 0.
func childWithArg(pid int, arg string) int {
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		p, err := strconv.Atoi(ent.Name())
		if err != nil || ppid(p) != pid {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if args := strings.Split(string(b), "\x00"); len(args) > 1 && args[1] == arg {
			return p
		}
	}
	return 0
}
