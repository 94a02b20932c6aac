package sandbox

// A runner's own word on whether the command started.
//
// SPEC §4.3 reads runner failures from stderr: a "bwrap: " line, or exit 125 with a
// "landlock-run: " line. The confined command writes to the same stderr and chooses its
// own exit status, so by that rule alone a command could print such a line and be
// reported as never having run (SANDBOX_UNAVAILABLE, "this is a sandbox problem, not
// a command failure"). A harness that answers that by retrying unconfined, as the
// SPEC's own unavailable text suggests, would be steered by the command it confines.
//
// So every runner Run execs gets a status pipe at descriptor [statusFD], written by the
// runner outside the command's reach, and the stderr rule is read only when the pipe
// does not say the command started:
//
//   - bwrap: --json-status-fd. bwrap writes {"exit-code": N} there when its child
//     exits, and only when the child reached its execve (bwrap ≥ 0.3.2: its
//     close-on-exec "setup finished" pipe carried exactly one byte). The sandboxed
//     child closes its copy before its set-up, so the command never holds it.
//     With that record, no stderr line makes the run a runner failure. Without it
//     (bwrap failed, or was killed) the SPEC rule applies as before.
//   - The Landlock launcher stage, when it runs as a process of its own (behind a
//     fence stage, or where the direct start cannot hold the command at its exec):
//     --status-fd. The launcher marks it close-on-exec first thing and writes its
//     failure line there before it exits 125, so a successful execve closes it
//     empty. A run through the launcher is a runner failure exactly when that line
//     arrived, and its detail is that line; a "landlock-run: " line the command
//     prints is its own output. The direct start reads no dialect at all (Run
//     started the command itself).
//
// Only this process holds the read end; the write end's copies are the runner's own
// (and, under a fence, the host's until it started the stage). A confined command
// cannot reach them through /proc: the bwrap rung gives it a PID namespace of its
// own, and Landlock refuses ptrace access (and so /proc/PID/fd) to processes outside
// its domain.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// statusFD is the descriptor at which a runner finds the run's status pipe: the first
// extra file of the process Run starts, kept there by the fence host and stage.
const statusFD = 3

// statusKind says how a runner reports on its status pipe.
type statusKind int

const (
	statusNone     statusKind = iota
	statusBwrap               // bwrap --json-status-fd
	statusLauncher            // the Landlock launcher's --status-fd
)

// statusMax is the most read from a status pipe; bwrap's records are a few hundred
// bytes, the launcher's line is one line.
const statusMax = 64 << 10

// statusPipe is one run's status pipe. The read end is non-blocking: it is read once
// the runner was reaped, when everything the runner wrote is in the pipe, so nothing
// is waited for (a copy of the write end that leaked somewhere cannot hold the run).
type statusPipe struct {
	kind statusKind
	r    int
	w    *os.File
	// forwarded is the last signal passed on to the runner while it ran (see
	// ForwardSignals), nil when none; report hands it on.
	forwarded os.Signal
}

func newStatusPipe(kind statusKind) (*statusPipe, error) {
	var fds [2]int
	syscall.ForkLock.RLock()
	err := syscall.Pipe(fds[:])
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	return &statusPipe{kind: kind, r: fds[0], w: os.NewFile(uintptr(fds[1]), "status")}, nil
}

// started closes this process's write end once the runner holds its own.
func (p *statusPipe) started() {
	if p != nil && p.w != nil {
		p.w.Close()
		p.w = nil
	}
}

// report reads what the runner wrote, once it was reaped, and closes the pipe.
func (p *statusPipe) report() runnerStatus {
	p.started()
	var b []byte
	buf := make([]byte, 512)
	for len(b) < statusMax {
		n, err := syscall.Read(p.r, buf)
		if err == syscall.EINTR {
			continue
		}
		if n <= 0 || err != nil {
			break // EOF, or EAGAIN: nothing more is coming from a reaped runner
		}
		b = append(b, buf[:n]...)
	}
	syscall.Close(p.r)
	st := parseStatus(p.kind, b)
	st.forwarded = p.forwarded
	return st
}

// runnerStatus is what a status pipe said.
type runnerStatus struct {
	// commandStarted: the runner says the command reached its execve.
	commandStarted bool
	// failure is the launcher's own failure line ("" when none arrived).
	failure string
	// forwarded is the last signal toh-exec passed on to the runner (nil when
	// none): the caller asked the run to stop.
	forwarded os.Signal
}

// parseStatus reads a status pipe's bytes in kind's format.
func parseStatus(kind statusKind, b []byte) runnerStatus {
	switch kind {
	case statusBwrap:
		// One JSON object per line; the exit record is the last.
		for line := range bytes.SplitSeq(b, []byte("\n")) {
			var rec map[string]json.RawMessage
			if json.Unmarshal(line, &rec) != nil {
				continue
			}
			var code int
			if raw, ok := rec["exit-code"]; ok && json.Unmarshal(raw, &code) == nil {
				return runnerStatus{commandStarted: true}
			}
		}
	case statusLauncher:
		if len(b) == 0 {
			// Closed empty: the launcher's execve succeeded, or it died before it
			// could say anything (a signal, a crash), which is no runner failure.
			return runnerStatus{commandStarted: true}
		}
		line, _, _ := bytes.Cut(b, []byte("\n"))
		return runnerStatus{failure: string(line)}
	}
	return runnerStatus{}
}

// withStatusFD returns argv with the runner's status flag for kind inserted where
// that runner takes it: right after bwrap's program name, or after the launcher's
// stage argument.
func withStatusFD(kind statusKind, argv []string) []string {
	var at int
	var flag string
	switch kind {
	case statusBwrap:
		at, flag = 1, "--json-status-fd"
	case statusLauncher:
		at, flag = 2, "--status-fd"
	default:
		return argv
	}
	out := make([]string, 0, len(argv)+2)
	out = append(out, argv[:at]...)
	out = append(out, flag, strconv.Itoa(statusFD))
	return append(out, argv[at:]...)
}
