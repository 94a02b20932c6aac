package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/toh-sandbox/toh/policy"
)

// A termination signal the caller caught (Stdio.Signals) before the command started
// ends the run before the start: the command never runs and Run says so with an
// *InterruptedError. Positive control: the same run with nothing caught runs the
// command. The channel stays the caller's: Run does not stop it.
func TestRunCallerSignalsBeforeStartInterrupt(t *testing.T) {
	requireLandlock(t, 1)
	ws := landlockScratch(t)
	marker := filepath.Join(ws, "ran")
	args := []string{"--mode", "workspace-write", "--rw", ws, "--", "bash", "-c", `echo > "$0"`, marker}
	c := landlockConfined(t, "/nonexistent/toh-exec-signals-test", args, true)
	pol := policy.Execution{Mode: policy.WorkspaceWrite, WritableRoots: []string{ws}, Network: policy.NetworkAllow}
	dir, _ := os.Getwd()

	sigs := make(chan os.Signal, 4)
	sigs <- syscall.SIGINT
	_, err := Run(c, pol, dir, os.Environ(), Stdio{Signals: sigs})
	var ie *InterruptedError
	if !errors.As(err, &ie) || ie.Signal != syscall.SIGINT {
		t.Fatalf("want an InterruptedError for SIGINT, got %v", err)
	}
	if landlockExists(marker) {
		t.Fatalf("the command ran although the run was interrupted before its start")
	}

	facts, err := Run(c, pol, dir, os.Environ(), Stdio{Signals: sigs})
	if err != nil || facts.ExitCode != 0 || !landlockExists(marker) {
		t.Fatalf("positive control: %v, %+v, ran=%v", err, facts, landlockExists(marker))
	}
}
