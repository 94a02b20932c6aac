package sandbox

// Tests of how Run drains the command's output pipes after the command exited
// (PipeGrace): everything the command wrote reaches the caller's writer and the
// retained tail however slowly that writer takes it, and a process left behind that
// holds the pipe, or keeps writing to it, does not hold the run.

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/policy"
)

// heldWriter keeps everything written to it; its first Write returns only after
// hold, as a terminal or a caller that is busy elsewhere would.
type heldWriter struct {
	hold time.Duration
	mu   sync.Mutex
	held bool
	buf  bytes.Buffer
}

func (w *heldWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.held {
		w.held = true
		time.Sleep(w.hold)
	}
	return w.buf.Write(p)
}

func (w *heldWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// directLandlock is the Landlock rung as Run takes it directly, for a run of argv.
func directLandlock(t *testing.T, mode policy.Mode, argv ...string) (Confined, policy.Execution) {
	t.Helper()
	f, err := parseLandlockFlags(append([]string{"--mode", string(mode), "--"}, argv...))
	if err != nil {
		t.Fatal(err)
	}
	denial, rules := LandlockDialect()
	c := Confined{
		Argv:               append([]string{"/nonexistent/toh-exec-direct-test", landlockStageArg, "--mode", string(mode), "--"}, argv...),
		Backend:            BackendLandlock,
		Enforcement:        EnforcementFull,
		DenialSignatures:   denial,
		RunnerFailureRules: rules,
		Network:            policy.NetworkAllow,
		landlock:           &f,
	}
	return c, policy.Execution{Mode: mode, Network: policy.NetworkAllow}
}

// A command writes a little less than a pipe holds to stderr, its last line a
// denial, and exits at once; the caller's stderr takes the first chunk only after
// three times PipeGrace. Everything arrives, in order, and the run is classified as
// denied from the line that was still in the pipe when the grace ended.
//
// Negative control: the mechanism Run used before (exec.Cmd with WaitDelay =
// PipeGrace) loses the end of the same output to the same writer, denial line
// included: the grace must bound how long a run waits for the pipe's writers, not how
// long it takes to hand over what they already wrote.
func TestRunKeepsOutputTheCallerIsSlowToTake(t *testing.T) {
	requireLandlock(t, 1)
	const body = 60 << 10
	script := `head -c ` + strconv.Itoa(body) + ` /dev/zero | tr '\0' x >&2; printf '\nbash: /x: Permission denied\n' >&2; exit 1`
	want := strings.Repeat("x", body) + "\nbash: /x: Permission denied\n"
	hold := 3 * PipeGrace

	control := &heldWriter{hold: hold}
	cmd := exec.Command("bash", "-c", script)
	cmd.Stderr, cmd.WaitDelay = control, PipeGrace
	_ = cmd.Run()
	if got := control.String(); got == want || strings.HasSuffix(got, "Permission denied\n") {
		t.Fatalf("negative control: exec.Cmd with WaitDelay kept all %d bytes; the loss this guards against is not reproduced", len(got))
	}

	c, pol := directLandlock(t, policy.ReadOnly, "bash", "-c", script)
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &heldWriter{hold: hold}
	facts, err := Run(c, pol, dir, os.Environ(), Stdio{Stderr: stderr})
	if err != nil {
		t.Fatal(err)
	}
	if got := stderr.String(); got != want {
		t.Errorf("the caller's stderr got %d bytes ending %q, want all %d ending %q", len(got), tailOf(got), len(want), tailOf(want))
	}
	if !facts.Denied || facts.ExitCode != 1 || facts.Signaled {
		t.Errorf("facts %+v, want denied with exit 1", facts)
	}
}

func tailOf(s string) string { return s[max(0, len(s)-40):] }

// A process the command leaves behind holds stderr and writes to it without pause:
// the run still ends soon after PipeGrace, with the command's own status, and keeps
// the command's own output. Positive control: what the command wrote before it
// exited arrived whole.
func TestRunNotHeldByAWriterLeftBehind(t *testing.T) {
	requireLandlock(t, 1)
	script := `printf 'own line\n' >&2; (while :; do echo spam >&2; done) >/dev/null & echo $!; exit 3`
	c, pol := directLandlock(t, policy.ReadOnly, "bash", "-c", script)
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	start := time.Now()
	facts, err := Run(c, pol, dir, os.Environ(), Stdio{Stdout: &stdout, Stderr: &stderr})
	took := time.Since(start)
	if pid, _ := strconv.Atoi(strings.TrimSpace(stdout.String())); pid > 0 {
		// Its next write to the closed pipe ends it already; either way nothing of
		// this test outlives it.
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Fatal(err)
	}
	if facts.ExitCode != 3 || facts.Signaled {
		t.Errorf("facts %+v, want the command's exit 3", facts)
	}
	if !strings.HasPrefix(stderr.String(), "own line\n") {
		t.Errorf("stderr starts %q, want the command's own line first", stderr.String()[:min(40, stderr.Len())])
	}
	if limit := PipeGrace + 5*time.Second; took > limit {
		t.Errorf("the run took %v with a writer left behind, want well under %v", took, limit)
	}
}

// A caller that gives one writer for both streams gets one pipe for both, as exec.Cmd
// gives it, so that writer is never written from two goroutines at once and the
// streams keep their order. Negative control: Run (stderr teed into the tail) gives
// two pipes to two writers.
func TestRunOneWriterForBothStreamsIsOnePipe(t *testing.T) {
	script := `a=$(readlink /proc/$$/fd/1); b=$(readlink /proc/$$/fd/2); echo "$a $b" >&2`
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var both bytes.Buffer
	if _, err := RunUnconfined(policy.DangerFullAccess, "/bin/sh", []string{"sh", "-c", script}, dir, os.Environ(), Stdio{Stdout: &both, Stderr: &both}); err != nil {
		t.Fatal(err)
	}
	if l := strings.Fields(both.String()); len(l) != 2 || l[0] != l[1] || !strings.HasPrefix(l[0], "pipe:") {
		t.Errorf("one writer for both: fds 1 and 2 are %q, want one pipe", l)
	}

	requireLandlock(t, 1)
	c, pol := directLandlock(t, policy.ReadOnly, "sh", "-c", script)
	var stdout, stderr bytes.Buffer
	if _, err := Run(c, pol, dir, os.Environ(), Stdio{Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatal(err)
	}
	if l := strings.Fields(stderr.String()); len(l) != 2 || l[0] == l[1] {
		t.Errorf("negative control: fds 1 and 2 are %q, want two pipes", l)
	}
}
