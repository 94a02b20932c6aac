package main

// toh-exec --fence through the built binary with real bwrap, Landlock and FUSE (issue
// 5): every refused mutation inside the fenced roots is in the run's own result, as
// {op, path, rule, pid}; denied rests on those records; concurrent runs never see
// each other's records; a run that cannot be fenced does not run; without --fence
// the result is what it always was.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toh-sandbox/toh/internal/testutil"
)

type fenceDenial struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	Rule string `json:"rule"`
	PID  uint32 `json:"pid"`
}

type fenceFacts struct {
	Denied    bool           `json:"denied"`
	DeniedBy  []string       `json:"deniedBy"`
	Denials   *[]fenceDenial `json:"denials"`
	ExitCode  *int           `json:"exitCode"`
	Backend   string         `json:"backend"`
	RunnerErr bool           `json:"runnerFailed"`
	Fence     *struct {
		Roots   []string `json:"roots"`
		Dropped int      `json:"dropped"`
	} `json:"fence"`
}

type fenceEnvelope struct {
	Result *fenceFacts `json:"result"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

// fenceScratch is a workspace holding a git repository made before any run, so its
// hooks and config are protected from the first run on.
type fenceScratch struct {
	*scratch
	cache string
}

func newFenceScratch(t *testing.T) *fenceScratch {
	t.Helper()
	testutil.RequireBwrap(t)
	testutil.RequireFUSE(t)
	s := newScratch(t)
	testutil.MakeTree(t, filepath.Dir(s.ws), "dir ws/.git", "dir ws/.git/hooks", "file ws/.git/config [core]",
		"file ws/.git/HEAD ref: refs/heads/main")
	return &fenceScratch{scratch: s, cache: filepath.Join(s.beside, "cache.json")}
}

func (s *fenceScratch) run(t *testing.T, runner, script string, extra ...string) (fenceEnvelope, runResult) {
	t.Helper()
	args := append([]string{"--json", "--policy", s.noPolicy, "--runner", runner, "--mode", "workspace-write",
		"--probe-cache", s.cache}, extra...)
	args = append(args, "-c", script)
	r := toh(t, s.ws, nil, args...)
	var e fenceEnvelope
	if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
		t.Fatalf("--json output is not one JSON object: %v\n%s\nstderr: %s", err, r.stdout, r.stderr)
	}
	return e, r
}

func hasDenial(ds []fenceDenial, op, path, rule string) bool {
	return slices.ContainsFunc(ds, func(d fenceDenial) bool {
		return d.Op == op && d.Path == path && d.Rule == rule && d.PID != 0
	})
}

func runners(t *testing.T) []string {
	out := []string{"bwrap"}
	if testutil.LandlockABI() >= 1 {
		out = append(out, "landlock")
	}
	return out
}

func TestFenceRecordsEachRefusedMutation(t *testing.T) {
	for _, runner := range runners(t) {
		t.Run(runner, func(t *testing.T) {
			s := newFenceScratch(t)
			hook := filepath.Join(s.ws, ".git/hooks/pre-commit")
			config := filepath.Join(s.ws, ".git/config")
			// Errors are swallowed: stderr says nothing, so only the records can tell.
			script := `echo ok > allowed.txt
echo evil > .git/hooks/pre-commit 2>/dev/null
echo '[core] hooksPath = /tmp' >> .git/config 2>/dev/null
mv .git/config .git/config.old 2>/dev/null
exit 0`
			e, r := s.run(t, runner, script, "--fence")
			if e.Result == nil || *e.Result.ExitCode != 0 {
				t.Fatalf("run failed: %d %+v %s", r.code, e.Error, r.stderr)
			}
			// Positive control: the allowed write landed through the fence.
			present(t, filepath.Join(s.ws, "allowed.txt"), "ok\n")
			// Negative controls: nothing protected changed.
			absent(t, hook)
			present(t, config, "[core]")
			s.checkCanary(t)
			if e.Result.Denials == nil || e.Result.Fence == nil {
				t.Fatalf("a fenced run's result has no denials or fence: %s", r.stdout)
			}
			ds := *e.Result.Denials
			for _, want := range []struct{ op, path string }{
				{"create", hook}, {"open", config}, {"rename", config},
			} {
				if !hasDenial(ds, want.op, want.path, "protected") {
					t.Errorf("no %s denial of %s with rule protected and a PID in %+v", want.op, want.path, ds)
				}
			}
			if !e.Result.Denied || !slices.Equal(e.Result.DeniedBy, []string{"fence"}) {
				t.Errorf("denied %v by %q, want true by [fence] (the dialect saw nothing: stderr was silenced)", e.Result.Denied, e.Result.DeniedBy)
			}
			if !slices.Contains(e.Result.Fence.Roots, s.ws) {
				t.Errorf("fence roots %q do not name the workspace %s", e.Result.Fence.Roots, s.ws)
			}
			if len(ds) != 3 {
				t.Errorf("want exactly the 3 refused mutations, got %+v", ds)
			}

			// Without --fence nothing changes: no new keys, and the silenced denial
			// is invisible to the dialect, as it always was.
			e2, r2 := s.run(t, runner, script)
			if e2.Result == nil || e2.Result.Denials != nil || e2.Result.Fence != nil || e2.Result.DeniedBy != nil {
				t.Fatalf("an unfenced run's result changed: %s", r2.stdout)
			}
			if e2.Result.Denied {
				t.Errorf("unfenced run claims denied from a silent stderr: %s", r2.stdout)
			}
			if runner == "bwrap" {
				absent(t, hook) // Landlock alone cannot protect inside a root (partial)
			}
		})
	}
}

// A process of the run that is not the shell: its own PID is in the record.
func TestFenceRecordCarriesTheCallersPID(t *testing.T) {
	s := newFenceScratch(t)
	e, r := s.run(t, "bwrap", `sh -c 'echo $$ > /dev/null; exec sh -c "echo \$\$ > pid.txt; echo x > .git/hooks/post-commit"' 2>/dev/null; exit 0`, "--fence")
	if e.Result == nil || e.Result.Denials == nil {
		t.Fatalf("no result: %s %s", r.stdout, r.stderr)
	}
	ds := *e.Result.Denials
	if len(ds) != 1 || ds[0].Op != "create" || ds[0].PID == 0 {
		t.Fatalf("want one create denial with a PID, got %+v", ds)
	}
	// The PID is as the host sees it: the sandbox's PID namespace hides it from the
	// command itself, so only its existence and uniqueness in this run are checked.
	if b, _ := os.ReadFile(filepath.Join(s.ws, "pid.txt")); len(b) == 0 {
		t.Fatal("the allowed write did not land")
	}
	absent(t, filepath.Join(s.ws, ".git/hooks/post-commit"))
}

func TestFenceConcurrentRunsSeeOnlyTheirOwnRecords(t *testing.T) {
	s := newFenceScratch(t)
	const n = 4
	var wg sync.WaitGroup
	results := make([]fenceEnvelope, n)
	outs := make([]runResult, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each run refuses its own hook name several times while the others run.
			script := fmt.Sprintf(`for k in 1 2 3 4 5 6 7 8 9 10; do echo x > .git/hooks/h%d 2>/dev/null; sleep 0.05; done; exit 0`, i)
			results[i], outs[i] = s.run(t, "bwrap", script, "--fence")
		}()
	}
	wg.Wait()
	for i := range n {
		e := results[i]
		if e.Result == nil || e.Result.Denials == nil || e.Error != nil {
			t.Fatalf("run %d: no result, or an error: %s %s", i, outs[i].stdout, outs[i].stderr)
		}
		own := filepath.Join(s.ws, fmt.Sprintf(".git/hooks/h%d", i))
		ds := *e.Result.Denials
		if len(ds) != 10 {
			t.Errorf("run %d: %d denials, want its own 10: %+v", i, len(ds), ds)
		}
		for _, d := range ds {
			if d.Path != own {
				t.Errorf("run %d sees a record of another run: %+v", i, d)
			}
		}
		absent(t, own)
	}
}

func TestFenceDeniedRestsOnRecordsNotOnText(t *testing.T) {
	s := newFenceScratch(t)
	// Under bwrap the fence answers EACCES where bwrap would answer EROFS: a command
	// that prints the bwrap dialect's words about a fenced root without any refusal
	// still matches the dialect (outside the fenced roots the dialect is all there
	// is), and deniedBy says so; one that prints EACCES text is not a denial at all.
	e, r := s.run(t, "bwrap", `echo "sh: cannot create x: Permission denied" >&2; exit 1`, "--fence")
	if e.Result == nil || e.Result.Denied || len(e.Result.DeniedBy) != 0 || len(*e.Result.Denials) != 0 {
		t.Fatalf("text alone made a fenced bwrap run denied: %s %s", r.stdout, r.stderr)
	}
	// A real refusal outside the fenced roots is still seen, by the dialect.
	e, r = s.run(t, "bwrap", `echo x > /usr/toh-fence-test`, "--fence")
	if e.Result == nil || !e.Result.Denied || !slices.Equal(e.Result.DeniedBy, []string{"dialect"}) || len(*e.Result.Denials) != 0 {
		t.Fatalf("a denial outside the fenced roots: want denied by [dialect] with no records: %s %s", r.stdout, r.stderr)
	}
	absent(t, "/usr/toh-fence-test")
}

func TestFencePolicyKeyAndOverride(t *testing.T) {
	s := newFenceScratch(t)
	pol := filepath.Join(s.beside, "policy.json")
	if err := os.WriteFile(pol, []byte(`{"version":1,"mode":"workspace-write","fence":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(s.ws, ".git/hooks/pre-push")
	script := "echo x > .git/hooks/pre-push 2>/dev/null; exit 0"
	for _, tc := range []struct {
		name   string
		extra  []string
		fenced bool
	}{
		{"key", nil, true},
		{"flag-off", []string{"--fence=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--json", "--policy", pol, "--runner", "bwrap", "--probe-cache", s.cache}, tc.extra...)
			r := toh(t, s.ws, nil, append(args, "-c", script)...)
			var e fenceEnvelope
			if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || e.Result == nil {
				t.Fatalf("bad output: %v %s %s", err, r.stdout, r.stderr)
			}
			if got := e.Result.Denials != nil; got != tc.fenced {
				t.Fatalf("fenced = %v, want %v: %s", got, tc.fenced, r.stdout)
			}
			if tc.fenced && !hasDenial(*e.Result.Denials, "create", hook, "protected") {
				t.Errorf("no record of the refused hook: %s", r.stdout)
			}
			absent(t, hook)
		})
	}
}

func TestFenceReadOnlyFencesNothingAndSaysSo(t *testing.T) {
	s := newFenceScratch(t)
	r := toh(t, s.ws, nil, "--json", "--policy", s.noPolicy, "--runner", "bwrap", "--probe-cache", s.cache,
		"--fence", "-c", "echo x > new.txt")
	var e fenceEnvelope
	if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || e.Result == nil {
		t.Fatalf("bad output: %v %s %s", err, r.stdout, r.stderr)
	}
	if e.Result.Fence == nil || len(e.Result.Fence.Roots) != 0 || e.Result.Denials == nil || len(*e.Result.Denials) != 0 {
		t.Fatalf("read-only --fence: want fence.roots [] and denials []: %s", r.stdout)
	}
	if !e.Result.Denied || !slices.Equal(e.Result.DeniedBy, []string{"dialect"}) {
		t.Fatalf("read-only denial: want denied by [dialect]: %s", r.stdout)
	}
	absent(t, filepath.Join(s.ws, "new.txt"))
}

// A run that cannot be fenced does not run: here /dev/fuse is replaced by a device
// that is no FUSE device, in a private mount namespace of the test.
func TestFenceFailsClosedWithoutFUSE(t *testing.T) {
	testutil.RequireBwrap(t)
	s := &fenceScratch{scratch: newScratch(t)}
	s.cache = filepath.Join(s.beside, "cache.json")
	marker := filepath.Join(s.ws, "ran")
	args := []string{"--json", "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write",
		"--probe-cache", s.cache, "--fence", "-c", "echo ran > " + marker}
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c",
			`mount --bind /dev/null /dev/fuse && exec "$0" "$@"`, tohExec}, args...)...)
	} else {
		if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err == nil {
			f.Close()
			t.Skip("this user can open /dev/fuse; the root leg covers the failure")
		}
		cmd = exec.Command(tohExec, args...)
	}
	cmd.Dir = s.ws
	out, err := cmd.Output()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitUnavailable {
		t.Fatalf("want exit %d, got %v: %s %s", exitUnavailable, err, out, stderrOf(err))
	}
	var e fenceEnvelope
	if err := json.Unmarshal(out, &e); err != nil || e.Error == nil || e.Error.Code != "SANDBOX_UNAVAILABLE" {
		t.Fatalf("want a SANDBOX_UNAVAILABLE error: %v %s", err, out)
	}
	if !strings.Contains(e.Stderr, "fence") {
		t.Errorf("the message does not say the fence failed: %q", e.Stderr)
	}
	if e.Result != nil {
		// Nothing ran: a result's exitCode 0 would read as the command's.
		t.Errorf("a result for a run that never started: %s", out)
	}
	absent(t, marker)
	// Positive control: the same run without --fence runs.
	r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write",
		"--probe-cache", s.cache, "-c", "echo ran > "+marker)
	if r.code != 0 {
		t.Fatalf("unfenced control failed: %d %s", r.code, r.stderr)
	}
	present(t, marker, "ran\n")
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// Git through a fenced run: the whole workflow works, and every attempt on hooks or
// config of the main repository, a linked worktree's gitdir and a submodule's gitdir
// is refused and recorded; an existing hook still runs.
func TestFenceGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	testutil.RequireBwrap(t)
	testutil.RequireFUSE(t)
	g := newGitScratch(t)
	sub := filepath.Join(g.beside, "lib")
	g.git(t, g.beside, "init", "-q", "-b", "main", sub)
	g.git(t, sub, "commit", "-q", "--allow-empty", "-m", "lib")
	fenced := func(t *testing.T, script string) fenceEnvelope {
		t.Helper()
		args := []string{"--json", "--policy", g.noPolicy, "--runner", "bwrap", "--mode", "workspace-write",
			"--probe-cache", filepath.Join(g.beside, "cache.json"), "--fence", "-c", gitPrefix + script}
		r := toh(t, g.ws, g.env, args...)
		var e fenceEnvelope
		if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || e.Result == nil {
			t.Fatalf("bad output: %v %s %s", err, r.stdout, r.stderr)
		}
		return e
	}
	// Run 1: git init (no .git yet, so nothing under it is protected yet).
	if e := fenced(t, "set -e; g init -q"); *e.Result.ExitCode != 0 {
		t.Fatalf("git init: %+v %s", e.Result, e.Stderr)
	}
	// An existing hook, made outside any run.
	hook := filepath.Join(g.ws, ".git/hooks/pre-commit")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho hook-ran >&2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := fenced(t, `set -e
echo a > a.txt; g add a.txt; g commit -q -m one
g branch feature; g checkout -q feature; echo b > b.txt; g add b.txt; g commit -q -m two
g checkout -q main; echo dirty >> a.txt; g stash -q; g stash pop -q; g checkout -q -- a.txt
g worktree add -q wt feature
(cd wt && echo c > c.txt && g add c.txt && g commit -q -m three)`)
	if *e.Result.ExitCode != 0 {
		t.Fatalf("git workflow through the fence failed: %+v\n%s", e.Result, e.Stderr)
	}
	if !strings.Contains(e.Stderr, "hook-ran") {
		t.Errorf("the existing pre-commit hook did not run: %s", e.Stderr)
	}
	// worktree add tries to record itself in the protected .git/config (git
	// reports it and goes on, as under bwrap alone): exactly those attempts are on
	// record, nothing else.
	config := filepath.Join(g.ws, ".git/config")
	for _, d := range *e.Result.Denials {
		if d.Path != config {
			t.Errorf("the git workflow was refused something other than .git/config: %+v", d)
		}
	}
	// A submodule, added by the user: in a run .git/modules gains no entry (run 3).
	g.git(t, g.ws, "submodule", "add", "-q", sub, "lib")
	g.git(t, g.ws, "commit", "-q", "-m", "sub")
	// Run 3: every attempt on hooks and config of the three git directories, and
	// on a git directory for a submodule not yet initialised.
	targets := []string{".git/hooks/post-checkout", ".git/config",
		".git/worktrees/wt/config.worktree", ".git/worktrees/wt/hooks",
		".git/modules/lib/hooks/pre-commit", ".git/modules/lib/config", ".git/modules/evil"}
	var script strings.Builder
	for _, p := range targets {
		fmt.Fprintf(&script, "echo evil >> %s 2>/dev/null\n", p)
	}
	script.WriteString("exit 0\n")
	before := treeState(t, filepath.Join(g.ws, ".git"))
	e = fenced(t, script.String())
	after := treeState(t, filepath.Join(g.ws, ".git"))
	sameTree(t, ".git", before, after)
	ds := *e.Result.Denials
	for _, p := range []string{".git/hooks/post-checkout", ".git/config", ".git/modules/lib/hooks/pre-commit", ".git/modules/lib/config", ".git/modules/evil"} {
		full := filepath.Join(g.ws, p)
		if !slices.ContainsFunc(ds, func(d fenceDenial) bool { return d.Path == full && d.Rule == "protected" }) {
			t.Errorf("no protected denial of %s in %+v", p, ds)
		}
	}
	if !e.Result.Denied || !slices.Contains(e.Result.DeniedBy, "fence") {
		t.Errorf("want denied by the fence: %+v", e.Result)
	}
	// Run 4: the submodule's git directory stays writable for a commit in it.
	e = fenced(t, "set -e; cd lib; echo x > f; g add f; g commit -q -m in-sub")
	if *e.Result.ExitCode != 0 || e.Result.Denials != nil && len(*e.Result.Denials) > 0 {
		t.Fatalf("a commit in the submodule through the fence: %+v %+v\n%s", e.Result, e.Result.Denials, e.Stderr)
	}
	if got := g.git(t, filepath.Join(g.ws, "lib"), "log", "--format=%s", "-1"); got != "in-sub" {
		t.Errorf("submodule log = %q", got)
	}
}

// The fence host sits between toh-exec and the runner: the command's status and its
// death by a signal still pass through unchanged.
func TestFenceStatusAndSignalPassThrough(t *testing.T) {
	for _, runner := range runners(t) {
		t.Run(runner, func(t *testing.T) {
			s := newFenceScratch(t)
			for script, want := range map[string]int{"exit 7": 7, "exit 0": 0, "kill -TERM $$": 128 + 15} {
				r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--runner", runner, "--mode", "workspace-write",
					"--probe-cache", s.cache, "--fence", "-c", script)
				if r.code != want {
					t.Errorf("%q: exit %d, want %d (stderr %q)", script, r.code, want, r.stderr)
				}
			}
		})
	}
}

// The fence is served by the toh-mount beside toh-exec; without it a fenced run does
// not start, and says what is missing.
func TestFenceWithoutTohMountDoesNotRun(t *testing.T) {
	testutil.RequireBwrap(t)
	s := &fenceScratch{scratch: newScratch(t)}
	s.cache = filepath.Join(s.beside, "cache.json")
	lone := filepath.Join(s.beside, "bin", "toh-exec")
	if err := os.MkdirAll(filepath.Dir(lone), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tohExec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(s.ws, "ran")
	cmd := exec.Command(lone, "--policy", s.noPolicy, "--runner", "bwrap", "--mode", "workspace-write",
		"--probe-cache", s.cache, "--fence", "-c", "echo ran > "+marker)
	cmd.Dir = s.ws
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitUnavailable {
		t.Fatalf("want exit %d, got %v: %s", exitUnavailable, err, out)
	}
	if !strings.Contains(string(out), "toh-mount") {
		t.Errorf("the message does not name toh-mount: %s", out)
	}
	absent(t, marker)
}

// A hostile command cannot take the fence away: unmounting it (to reach the
// directory underneath) fails, and the refused write is still refused and recorded.
func TestFenceCannotBeUnmountedFromInside(t *testing.T) {
	for _, runner := range runners(t) {
		t.Run(runner, func(t *testing.T) {
			s := newFenceScratch(t)
			hook := filepath.Join(s.ws, ".git/hooks/post-merge")
			e, r := s.run(t, runner, `umount -l "$PWD" 2>/dev/null; umount "$PWD" 2>/dev/null; umount -l /proc/self/cwd 2>/dev/null
cd "$PWD"; echo x > .git/hooks/post-merge 2>/dev/null; grep -c fuse.toh /proc/self/mountinfo; exit 0`, "--fence")
			if e.Result == nil || e.Result.Denials == nil {
				t.Fatalf("no result: %s %s", r.stdout, r.stderr)
			}
			absent(t, hook)
			if !hasDenial(*e.Result.Denials, "create", hook, "protected") {
				t.Errorf("the write after the unmount attempts was not refused by the fence: %+v (stdout %q)", *e.Result.Denials, e.Stdout)
			}
		})
	}
}

// The policy file inside a fenced root is guarded by the fence itself, so an
// attempt on it is on record like any other refusal (bwrap would answer EROFS first).
func TestFencePolicyFileAttemptIsRecorded(t *testing.T) {
	s := newFenceScratch(t)
	pol := filepath.Join(s.ws, "policy.json")
	doc := `{"version":1,"mode":"workspace-write"}`
	if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, runner := range runners(t) {
		args := []string{"--json", "--policy", pol, "--runner", runner, "--probe-cache", s.cache, "--fence",
			"-c", `echo '{"version":1,"mode":"danger-full-access"}' > policy.json 2>/dev/null; echo ok > allowed.txt; exit 0`}
		r := toh(t, s.ws, nil, args...)
		var e fenceEnvelope
		if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || e.Result == nil || e.Result.Denials == nil {
			t.Fatalf("%s: bad output: %v %s %s", runner, err, r.stdout, r.stderr)
		}
		present(t, pol, doc)
		present(t, filepath.Join(s.ws, "allowed.txt"), "ok\n")
		if !slices.ContainsFunc(*e.Result.Denials, func(d fenceDenial) bool { return d.Path == pol }) || !e.Result.Denied {
			t.Errorf("%s: the attempt on the policy file is not on record: %s", runner, r.stdout)
		}
	}
}

// TestFenceLooksUpFusermountInSystemDirsOnly: for a caller other than root the fence
// mounts through fusermount3, which go-fuse looks up in $PATH; a workspace directory
// on $PATH (a virtualenv's bin) let a command plant one that ran unconfined at the
// next fenced run. The host looks helpers up in system directories only, and the
// command still gets the caller's $PATH. Controls: the fenced run works, and its
// command sees the planted directory first on its $PATH.
func TestFenceLooksUpFusermountInSystemDirsOnly(t *testing.T) {
	testutil.RequireFUSE(t)
	if os.Geteuid() == 0 {
		t.Skip("root mounts without fusermount3; the unprivileged leg runs this")
	}
	s := &fenceScratch{scratch: newScratch(t)}
	s.cache = filepath.Join(s.beside, "cache.json")
	bin := filepath.Join(s.ws, "bin")
	marker := filepath.Join(s.beside, "planted-ran")
	os.MkdirAll(bin, 0o755)
	script := fmt.Sprintf("#!/bin/sh\necho ran > %s\nexec /usr/bin/fusermount3 \"$@\"\n", marker)
	if err := os.WriteFile(filepath.Join(bin, "fusermount3"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	path := "PATH=" + bin + ":" + os.Getenv("PATH")
	e := s.runWithin(t, tohLimit, "landlock", `echo "$PATH" > path-seen`, path)
	if e.Result == nil || e.Result.ExitCode == nil || *e.Result.ExitCode != 0 {
		t.Fatalf("the fenced run failed: %+v %+v %q", e.Result, e.Error, e.Stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the fusermount3 planted on $PATH ran")
	}
	if b, _ := os.ReadFile(filepath.Join(s.ws, "path-seen")); !strings.HasPrefix(string(b), bin+":") {
		t.Errorf("the command's $PATH is %q, want the caller's", b)
	}
}
