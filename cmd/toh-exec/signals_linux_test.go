package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/internal/testutil"
)

// TestTerminationSignalsReachTheCommand: SIGINT, SIGTERM and SIGHUP sent to toh-exec
// (a terminal's ^C reaches it, the command runs in a session of its own) reach the
// command, whose handler runs and whose exit status passes through, on both rungs.
// Under bwrap they once went to bwrap, which died by them and took the run with it:
// the handler never ran, and toh-exec said the command died of the signal (found by
// review, 2026-12-02). Negative control within: a process of the run that left the
// command's process group (setsid) is not signalled, as a terminal's signal would
// not reach it; it ends with the run.
func TestTerminationSignalsReachTheCommand(t *testing.T) {
	testutil.RequireBwrap(t)
	s := newScratch(t)
	script := `trap 'echo "$1" > handled; exit 7' INT TERM HUP
setsid sh -c 'trap "echo stray > stray-handled; exit 3" INT TERM HUP; echo up > stray-ready; sleep 30 & wait' &
echo up > ready
sleep 30 & wait`
	for _, rung := range []string{"bwrap", "landlock"} {
		if rung == "landlock" && testutil.LandlockABI() == 0 {
			continue
		}
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
			t.Run(fmt.Sprintf("%s/%v", rung, sig), func(t *testing.T) {
				for _, f := range []string{"ready", "stray-ready", "handled", "stray-handled"} {
					os.Remove(filepath.Join(s.ws, f))
				}
				cmd := exec.Command(tohExec, "--policy", s.noPolicy, "--runner", rung, "--mode", "workspace-write",
					"-c", script, "sh", sig.String())
				cmd.Dir = s.ws
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the command and its stray to start", func() bool {
					_, e1 := os.Stat(filepath.Join(s.ws, "ready"))
					_, e2 := os.Stat(filepath.Join(s.ws, "stray-ready"))
					return e1 == nil && e2 == nil
				})
				cmd.Process.Signal(sig)
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					cmd.Process.Kill()
					t.Fatal("toh-exec did not end")
				}
				if code := cmd.ProcessState.ExitCode(); code != 7 {
					t.Errorf("exit status %d, want the handler's 7", code)
				}
				if b, err := os.ReadFile(filepath.Join(s.ws, "handled")); err != nil || string(b) != sig.String()+"\n" {
					t.Errorf("the command's handler: %q, %v", b, err)
				}
				if _, err := os.Stat(filepath.Join(s.ws, "stray-handled")); err == nil {
					t.Errorf("a process in a session of its own was signalled too")
				}
			})
		}
		// A pipeline ends on ^C as in a terminal: every process of the command's group
		// gets it, not only the shell, which would wait for the pipeline (before
		// 2026-12-02 under Landlock: the run went on for the whole sleep).
		t.Run(rung+"/pipeline", func(t *testing.T) {
			cmd := exec.Command(tohExec, "--policy", s.noPolicy, "--runner", rung, "-c", "sleep 300 | cat")
			cmd.Dir = s.ws
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Both exec'd: a shell's child between fork and exec has the shell's own
			// handler, and a ^C there is lost, as in a terminal (the pipeline then
			// ends with cat's 0 when sleep dies).
			waitFor(t, "the pipeline to start", func() bool {
				return len(descendantsOf(cmd.Process.Pid, "sleep", "300")) == 1 && len(descendantsOf(cmd.Process.Pid, "cat")) == 1
			})
			cmd.Process.Signal(syscall.SIGINT)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				t.Fatal("toh-exec did not end: the pipeline did not get the signal")
			}
			if code := cmd.ProcessState.ExitCode(); code != 130 {
				t.Errorf("exit status %d, want 130", code)
			}
		})
	}
}
