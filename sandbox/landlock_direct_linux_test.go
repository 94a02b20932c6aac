package sandbox

// Tests of the Landlock rung's direct path (landlock_direct_linux.go). Most of them are
// the launcher's own tests in landlock_linux_test.go, run once through the launcher
// stage and once through Run's direct start (forEachLandlockPath), with the same
// expectations: same effects denied and allowed, same statuses, same
// "landlock-run: " lines. The direct runs happen in this test process, which is what
// TestLandlockDirectRetiresItsThread checks afterwards.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/policy"
	"golang.org/x/sys/unix"
)

// landlockRunner runs the Landlock rung with the launcher's arguments (everything after
// "__landlock-run") and returns what the command printed and its status, 125 when the
// rung failed before the command ran.
type landlockRunner func(t *testing.T, args ...string) landlockResult

// forEachLandlockPath runs body through the launcher stage (subtest "stage") and
// through Run's direct start (subtest "direct").
func forEachLandlockPath(t *testing.T, body func(t *testing.T, run landlockRunner)) {
	t.Run("stage", func(t *testing.T) { body(t, runLandlock) })
	t.Run("direct", func(t *testing.T) { body(t, runLandlockDirect) })
}

// landlockConfined is the Landlock rung's Confined for the launcher arguments args
// (everything after "__landlock-run"): with direct set, Run takes the direct path;
// otherwise it runs launcher, the argv that precedes args ("" for this test binary as
// the launcher, re-exec'd through TestLandlockHelperProcess).
func landlockConfined(t *testing.T, launcher string, args []string, direct bool) Confined {
	t.Helper()
	head := []string{os.Args[0], landlockHelperRun, "--", "launch"}
	if launcher != "" {
		head = []string{launcher, landlockStageArg}
	}
	denial, rules := LandlockDialect()
	c := Confined{
		Argv:               append(head, args...),
		Backend:            BackendLandlock,
		DenialSignatures:   denial,
		RunnerFailureRules: rules,
	}
	if direct {
		f, err := parseLandlockFlags(args)
		if err != nil {
			t.Fatalf("launcher arguments %q: %v", args, err)
		}
		c.landlock = &f
	}
	return c
}

// runLandlockDirect runs args through Run with the flags parsed as the Landlock
// provider parses them. Flags the launcher refuses keep the launcher path in
// production (Confine sets no direct flags), so they go to the stage here too. The
// Confined's launcher argv names a binary that does not exist: a run that did not
// take the direct path fails to start, which every expectation notices.
func runLandlockDirect(t *testing.T, args ...string) landlockResult {
	t.Helper()
	f, err := parseLandlockFlags(args)
	if err != nil || f.probe {
		return runLandlock(t, args...)
	}
	c := landlockConfined(t, "/nonexistent/toh-exec-direct-test", args, true)
	pol := policy.Execution{Mode: f.mode, WritableRoots: f.rw, Network: policy.NetworkAllow}
	if f.netDeny {
		pol.Network = policy.NetworkDeny
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), landlockHelperEnv+"="+landlockHelperValue)
	var stdout, stderr bytes.Buffer
	facts, err := Run(c, pol, dir, env, Stdio{Stdout: &stdout, Stderr: &stderr})
	res := landlockResult{stdout: stdout.String(), stderr: stderr.String()}
	switch {
	case err == nil:
		res.code = facts.Status()
	case facts.RunnerFailed:
		if !strings.HasPrefix(facts.RunnerFailure, landlockFailurePrefix) {
			t.Fatalf("direct run %q: runner failure %q is not the launcher's", args, facts.RunnerFailure)
		}
		res.code = landlockExitFailure
	default:
		t.Fatalf("direct run %q: %v", args, err)
	}
	return res
}

// The direct path restricts one thread of this process and must leave no restricted
// thread behind, the main thread included: every thread that remains has neither
// no_new_privs nor a seccomp filter, whatever the runs did (succeeded, were denied,
// failed half-way through applying the plan). Positive control: a thread restricted
// here on purpose, the way the direct path does it, is seen, and is gone once its
// goroutine returns.
func TestLandlockDirectRetiresItsThread(t *testing.T) {
	requireLandlock(t, landlockFullABI)
	if tasks := restrictedThreads(t); len(tasks) > 0 {
		t.Skipf("this test process already runs with no_new_privs or a seccomp filter (threads %v)", tasks)
	}
	scratch := landlockScratch(t)
	runs := [][]string{
		{"--mode", "read-only", "--", "true"},
		{"--mode", "read-only", "--", "bash", "-c", "echo x > /dev/full"},
		{"--mode", "workspace-write", "--rw", scratch, "--", "bash", "-c", `echo x > "$0/f"`, scratch},
		{"--mode", "workspace-write", "--rw", scratch, "--rw", filepath.Join(scratch, "missing"), "--", "true"},
		{"--mode", "read-only", "--", "toh-no-such-command-4711"},
	}
	for i := 0; i < 4; i++ {
		for _, args := range runs {
			runLandlockDirect(t, args...)
		}
	}
	if tasks := waitForUnrestrictedThreads(t); len(tasks) > 0 {
		t.Fatalf("threads left restricted after the direct runs: %v", tasks)
	}

	// Positive control: the check does see a restricted thread of this process (one
	// that is not the main thread, which the check leaves out).
	release := make(chan struct{})
	var tid int
	for range 10 {
		applied := make(chan int, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: retired when the goroutine returns
			if unix.Gettid() == os.Getpid() {
				applied <- 0 // try again on another thread
				return
			}
			plan, err := newLandlockPlan(landlockFlags{mode: policy.ReadOnly, argv: []string{"true"}}, LandlockABI(), landlockErrata(), landlockSeccompArch.supported())
			if err == nil {
				err = plan.apply()
			}
			if err != nil {
				applied <- -1
				return
			}
			applied <- unix.Gettid()
			<-release
		}()
		if tid = <-applied; tid != 0 {
			break
		}
	}
	if tid <= 0 {
		t.Fatalf("control: could not restrict a thread other than the main one (%d)", tid)
	}
	if tasks := restrictedThreads(t); !slices.Equal(tasks, []string{strconv.Itoa(tid)}) {
		t.Fatalf("control: want exactly thread %d restricted, got %v", tid, tasks)
	}
	close(release)
	if tasks := waitForUnrestrictedThreads(t); len(tasks) > 0 {
		t.Fatalf("control thread not retired: %v", tasks)
	}
	// And the process itself can still write where the runs could not, from many
	// goroutines (any of which could have landed on a restricted thread).
	errs := make(chan error, 32)
	for i := range 32 {
		go func() {
			p := filepath.Join(scratch, fmt.Sprintf("after-%d", i))
			err := os.WriteFile(p, []byte("x"), 0o600)
			if err == nil {
				err = os.Chmod(p, 0o644)
			}
			errs <- err
		}()
	}
	for range 32 {
		if err := <-errs; err != nil {
			t.Errorf("write after the direct runs: %v", err)
		}
	}
}

// restrictedThreads lists this process's threads that have no_new_privs set or a
// seccomp filter, the main thread included (the direct path never restricts it).
func restrictedThreads(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "status"))
		if errors.Is(err, os.ErrNotExist) {
			continue // exited meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		st := string(b)
		if strings.Contains(st, "\nNoNewPrivs:\t1\n") || !strings.Contains(st, "\nSeccomp:\t0\n") {
			out = append(out, e.Name())
		}
	}
	return out
}

// waitForUnrestrictedThreads waits up to 5 s for restricted threads to be retired
// (the runtime ends a locked thread shortly after its goroutine returned) and returns
// those that remain.
func waitForUnrestrictedThreads(t *testing.T) []string {
	t.Helper()
	var tasks []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tasks = restrictedThreads(t)
		if len(tasks) == 0 || time.Now().After(deadline) {
			return tasks
		}
	}
}

// A command that imitates the launcher (a "landlock-run: " line, exit 125) is an
// ordinary result on both paths: Run started the command itself on the direct path,
// and through the launcher stage the status pipe (status.go) closed empty at the
// launcher's execve. Positive control: a real launcher failure through the stage (an
// interpreter that does not exist) is a runner failure, its detail the line the
// launcher wrote on the pipe. Negative control: the stage without a status pipe
// (as before it existed) can only read the dialect, which calls the imitation a
// runner failure.
func TestLandlockCommandCannotFakeRunnerFailure(t *testing.T) {
	requireLandlock(t, 1)
	bad := filepath.Join(t.TempDir(), "bad-interpreter")
	if err := os.WriteFile(bad, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fake := []string{"--mode", "read-only", "--", "bash", "-c", `echo "landlock-run: made up" >&2; exit 125`}
	real := []string{"--mode", "read-only", "--", bad}
	pol := policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}
	env := append(os.Environ(), landlockHelperEnv+"="+landlockHelperValue)
	dir, _ := os.Getwd()
	run := func(t *testing.T, c Confined) (Facts, error, string) {
		var stderr bytes.Buffer
		facts, err := Run(c, pol, dir, env, Stdio{Stderr: &stderr})
		return facts, err, stderr.String()
	}
	withStatus := func(c Confined) Confined {
		// The helper's launcher arguments start after its four-word head.
		c.Argv = slices.Concat(c.Argv[:4], []string{"--status-fd", strconv.Itoa(statusFD)}, c.Argv[4:])
		c.status = statusLauncher
		return c
	}
	t.Run("direct", func(t *testing.T) {
		facts, err, stderr := run(t, landlockConfined(t, "", fake, true))
		if err != nil || facts.RunnerFailed || facts.ExitCode != 125 || stderr != "landlock-run: made up\n" {
			t.Errorf("err %v facts %+v stderr %q, want the command's own exit 125", err, facts, stderr)
		}
	})
	t.Run("stage", func(t *testing.T) {
		facts, err, stderr := run(t, withStatus(landlockConfined(t, "", fake, false)))
		if err != nil || facts.RunnerFailed || facts.ExitCode != 125 || stderr != "landlock-run: made up\n" {
			t.Errorf("err %v facts %+v stderr %q, want the command's own exit 125", err, facts, stderr)
		}
	})
	t.Run("stage real failure", func(t *testing.T) {
		facts, err, stderr := run(t, withStatus(landlockConfined(t, "", real, false)))
		want := fmt.Sprintf("landlock-run: executing %q: no such file or directory", bad)
		if err == nil || !facts.RunnerFailed || facts.RunnerFailure != want || stderr != want+"\n" {
			t.Errorf("err %v facts %+v stderr %q, want the runner failure %q", err, facts, stderr, want)
		}
	})
	t.Run("stage without status pipe", func(t *testing.T) {
		facts, err, _ := run(t, landlockConfined(t, "", fake, false))
		if err == nil || !facts.RunnerFailed || facts.RunnerFailure != "landlock-run: made up" {
			t.Errorf("err %v facts %+v, want the dialect's runner failure", err, facts)
		}
	})
}

// The command shares its Landlock domain with the thread that started it, and
// Landlock allows ptrace within a domain: while that thread lives, the command could
// attach to it and so write the memory of toh-exec's unrestricted threads. The
// direct path makes the process non-dumpable first, which takes that away.
//
// Negative control (the attack, replicated with the same plan and the same start
// from a restricted thread, this process dumpable): the command attaches to the
// thread that started it. With the process non-dumpable, as Run leaves it, the same
// attach is refused.
func TestLandlockDirectParentNotPtraceable(t *testing.T) {
	requireLandlock(t, 1)
	runLandlockDirect(t, "--mode", "read-only", "--", "true")
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d != 0 {
		t.Fatalf("after a direct run the process is dumpable (%d, %v)", d, err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) })
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(b)) != "0" {
		// The attack needs the classic ptrace rules: with Yama at 1 or more a
		// process may not attach to its ancestors at all, and the negative control
		// below could not show the attach landing.
		t.Skipf("Yama ptrace_scope %s refuses the attach whatever toh-exec does", strings.TrimSpace(string(b)))
	}

	env := append(os.Environ(), landlockHelperEnv+"="+landlockHelperValue)
	for _, dumpable := range []int{1, 0} {
		type result struct {
			err    error
			stderr string
		}
		got := make(chan result, 1)
		var attack func()
		attack = func() {
			runtime.LockOSThread() // never unlocked: retired when the goroutine returns
			if unix.Gettid() == os.Getpid() {
				go attack() // not on the main thread, as the direct path
				return
			}
			if err := unix.Prctl(unix.PR_SET_DUMPABLE, uintptr(dumpable), 0, 0, 0); err != nil {
				got <- result{err: err}
				return
			}
			plan, err := newLandlockPlan(landlockFlags{mode: policy.ReadOnly, argv: []string{"op"}}, LandlockABI(), landlockErrata(), landlockSeccompArch.supported())
			if err == nil {
				err = plan.apply()
			}
			if err != nil {
				got <- result{err: err}
				return
			}
			argv := landlockOp("ptrace-seize", strconv.Itoa(unix.Gettid()))
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err = cmd.Run()
			got <- result{err: err, stderr: stderr.String()}
		}
		go attack()
		r := <-got
		if dumpable == 1 {
			if r.err != nil {
				t.Fatalf("negative control: the command could not attach to the dumpable parent's restricted thread (%v, %q); the attack this guards against is not reproduced", r.err, r.stderr)
			}
			continue
		}
		if r.err == nil || !strings.Contains(r.stderr, "operation not permitted") {
			t.Fatalf("non-dumpable parent: want the attach refused, got %v, %q", r.err, r.stderr)
		}
	}
}

// Run with no environment (nil env: the inherited one, as exec.Cmd reads it) gives the
// command what the launcher stage gives it: the inherited PATH to find it by name, and
// PWD naming the run's directory. The direct path used to look the command up in an
// empty PATH (a runner failure) and to leave PWD at the caller's directory.
// Positive control: the launcher stage, run the same way.
func TestLandlockDirectNilEnvIsTheInheritedOne(t *testing.T) {
	requireLandlock(t, 1)
	// The launcher stage is this test binary; with no env of its own it must find its
	// role in the inherited environment.
	t.Setenv(landlockHelperEnv, landlockHelperValue)
	dir := landlockScratch(t)
	script := `printf '%s\n' "$PWD"`
	args := []string{"--mode", "read-only", "--", "sh", "-c", script}
	pol := policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}
	for _, direct := range []bool{false, true} {
		c := landlockConfined(t, "", args, direct)
		var stdout, stderr bytes.Buffer
		facts, err := Run(c, pol, dir, nil, Stdio{Stdout: &stdout, Stderr: &stderr})
		if err != nil || facts.ExitCode != 0 || stdout.String() != dir+"\n" {
			t.Errorf("direct %v: err %v facts %+v stdout %q stderr %q, want exit 0 and PWD %s", direct, err, facts, stdout.String(), stderr.String(), dir)
		}
	}
}

// The thread that starts the command shares the command's Landlock domain, and
// Landlock's signal scope allows signals within a domain: a command that reached that
// thread could SIGKILL or SIGSTOP toh-exec (kill(2) with the thread's id, tgkill, or
// pidfd_send_signal on /proc/TID). Run holds the command at its exec until that thread
// is gone, so it never can.
//
// The attack: the command lists toh-exec's threads and checks which ones it may
// signal (signal 0: the permission check alone). The starting thread is kept alive
// for a while after the start (landlockDirectAfterStart), as a loaded machine keeps
// it; a static binary hit it unaided in 18 of 40 runs of toh-exec before the hold.
// Negative control: without the hold (landlockDirectHold false) the command reaches
// exactly one thread. Positive control: with the hold the command ran, and reached
// none.
func TestLandlockDirectCommandCannotSignalItsStarter(t *testing.T) {
	requireLandlock(t, 6)
	if landlockErrata()&landlockErratumSignalScope == 0 {
		t.Skip("this kernel's Landlock has no usable signal scope: a command can signal toh-exec through any of its threads, on either path")
	}
	t.Cleanup(func() { landlockDirectHold, landlockDirectAfterStart = true, nil })
	landlockDirectAfterStart = func() { time.Sleep(300 * time.Millisecond) }
	script := `for t in /proc/$PPID/task/*; do kill -0 "${t##*/}" 2>/dev/null && echo "${t##*/}"; done; echo ran`
	for _, hold := range []bool{false, true} {
		landlockDirectHold = hold
		res := runLandlockDirect(t, "--mode", "read-only", "--", "bash", "-c", script)
		lines := strings.Fields(res.stdout)
		if res.code != 0 || len(lines) == 0 || lines[len(lines)-1] != "ran" {
			t.Fatalf("hold %v: exit %d stdout %q stderr %q, want the command to run", hold, res.code, res.stdout, res.stderr)
		}
		reached := lines[:len(lines)-1]
		switch {
		case !hold && len(reached) != 1:
			t.Fatalf("negative control: without the hold the command reached threads %v, want exactly the one that started it; the attack is not reproduced", reached)
		case hold && len(reached) != 0:
			t.Errorf("the command could signal toh-exec's threads %v", reached)
		}
	}
}

// The hold leaves no trace on the command: it runs untraced and not stopped, and its
// status and signal death pass through, as without the hold.
func TestLandlockDirectHoldLeavesNoTrace(t *testing.T) {
	requireLandlock(t, 1)
	t.Cleanup(func() { landlockDirectHold = true })
	script := `grep -E '^(State|TracerPid):' /proc/self/status; exit 7`
	var outs []string
	for _, hold := range []bool{true, false} {
		landlockDirectHold = hold
		res := runLandlockDirect(t, "--mode", "read-only", "--", "bash", "-c", script)
		if res.code != 7 {
			t.Fatalf("hold %v: exit %d stderr %q, want 7", hold, res.code, res.stderr)
		}
		outs = append(outs, res.stdout)
		if sig := runLandlockDirect(t, "--mode", "read-only", "--", "bash", "-c", `kill -SEGV $$`); sig.code != 128+11 {
			t.Errorf("hold %v: a SIGSEGV death came back as %d, want %d", hold, sig.code, 128+11)
		}
	}
	if outs[0] != outs[1] || !strings.Contains(outs[0], "TracerPid:\t0\n") || !strings.Contains(outs[0], "State:\tR (running)") {
		t.Errorf("with the hold %q, without %q: want the same, running and untraced", outs[0], outs[1])
	}
}
