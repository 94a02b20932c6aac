package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
)

// TailBytes is how much of a run's stderr is retained for classification. The dialects
// are matched only against this tail: a denial that scrolled out of it is not seen.
const TailBytes = 64 << 10

// PipeGrace is how long a run goes on waiting for the command's stderr (and stdout,
// when it is captured) after the command exited, for descendants that still hold
// them. Then the pipes are closed and the run ends: a command that leaves a process
// behind in the background ("server &") does not hold toh-exec until that process
// exits. Under bwrap such processes die with the run's PID namespace, and under
// Landlock with [Stdio.EndLeftovers] they are ended as soon as the command exited,
// so the grace only matters without it (danger-full-access, a library caller): there
// they live on, and a later write of theirs to the closed pipe fails (EPIPE, or
// SIGPIPE unless ignored).
//
// The grace bounds the wait for the pipe's writers, never the hand-over of what is
// already in the pipe: when it ends, whatever the pipe holds at that moment (at most
// one pipe buffer) is still read and passed on, however slowly the caller's writer
// takes it. A run that closed the pipe on output the command had written before it
// exited would cut it short and could drop the denial line classification needs (a
// caller reading toh-exec's stderr more slowly than the command wrote it was enough;
// exec.Cmd's WaitDelay, which 4a742b1 used, does exactly that). See outputPipe.
const PipeGrace = 500 * time.Millisecond

// Facts are the result facts of one run (SPEC §5). A danger-full-access run carries
// only Mode and Denied; every confined run carries all of Enforcement, RunnerFailed,
// Backend and exactly one of ExitCode or Signal.
type Facts struct {
	Mode         policy.Mode
	Denied       bool
	Confined     bool
	Enforcement  Enforcement
	RunnerFailed bool
	Backend      Backend
	Network      policy.Network
	// Signaled is true when the child died of Signal; ExitCode is meaningful otherwise.
	Signaled bool
	Signal   int
	ExitCode int
	// RunnerFailure is the matching runner-failure line, when RunnerFailed.
	RunnerFailure string
	// Fence is what the fence recorded when the run's writable roots were fenced
	// (Confined.Stage); nil otherwise.
	Fence *FenceFacts
	// DeniedBy names the evidence Denied rests on, for fenced runs: "fence" (the
	// run's own denial records) and "dialect" (the backend's stderr dialect, which
	// still covers everything outside the fenced roots). Empty when Denied is false.
	DeniedBy []string
}

// Status is the exit status toh-exec passes through: the child's code, or 128+signal.
func (f Facts) Status() int {
	if f.Signaled {
		return 128 + f.Signal
	}
	return f.ExitCode
}

// MarshalJSON emits the SPEC §5 shape: danger-full-access runs carry {mode, denied}
// and nothing else; confined runs carry exitCode or signal, never both.
func (f Facts) MarshalJSON() ([]byte, error) {
	type exitCode struct {
		ExitCode int `json:"exitCode"`
	}
	m := map[string]any{"mode": f.Mode, "denied": f.Denied}
	if !f.Confined {
		if f.Signaled {
			m["signal"] = f.Signal
		} else {
			m["exitCode"] = f.ExitCode
		}
		return json.Marshal(m)
	}
	m["enforcement"] = f.Enforcement
	m["runnerFailed"] = f.RunnerFailed
	m["backend"] = f.Backend
	m["network"] = f.Network
	if f.RunnerFailed {
		m["runnerFailure"] = f.RunnerFailure
	}
	if f.Fence != nil {
		// Which source each fact came from: denials from the fence alone, denied
		// from the evidence named in deniedBy, everything else from the backend.
		denials := f.Fence.Denials
		if denials == nil {
			denials = []Denial{}
		}
		by := f.DeniedBy
		if by == nil {
			by = []string{}
		}
		roots := f.Fence.Roots
		if roots == nil {
			roots = []string{}
		}
		m["denials"] = denials
		m["deniedBy"] = by
		fence := map[string]any{"roots": roots}
		if f.Fence.Dropped > 0 {
			fence["dropped"] = f.Fence.Dropped
		}
		m["fence"] = fence
	}
	if f.Signaled {
		m["signal"] = f.Signal
	} else {
		m["exitCode"] = f.ExitCode
	}
	return json.Marshal(m)
}

// Stdio is where a run's standard streams go. Stderr is also teed into the retained
// tail used for classification.
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Signals, when not nil, is a channel the caller registered with signal.Notify
	// for the termination signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) and keeps
	// registered: Run neither registers nor stops it. A signal that arrived on it
	// before the command started ends the run before the start (an
	// *InterruptedError); later ones are forwarded to the command. toh-exec
	// registers at its start, so a signal during its setup is not lost, and skips
	// signal.Stop, which costs 0.2 ms and buys nothing in a process about to exit.
	Signals chan os.Signal
	// EndLeftovers, set by a caller that owns its process and has no other child
	// to wait for (toh-exec), makes a Landlock or bwrap run end every process the
	// command (or the runner) leaves behind once it exited (leftovers_linux.go).
	// Run then makes the process a child subreaper, for good.
	EndLeftovers bool
	killOnly     bool // bwrap: killLeftovers, not endLeftovers
	// Exited, when set, is called once the command was reaped (and its leftovers
	// ended), before its output pipes are drained: toh-exec puts the user's
	// terminal back there, since output the command stopped (tcflow TCOOFF) would
	// block the draining of its stderr to that terminal for good. It is called
	// after every start of the runner, so more than once when Run starts bwrap
	// again (see bwrapRaced).
	Exited func()
}

// InterruptedError is a run stopped by a termination signal before its command
// started; nothing ran. toh-exec ends itself by the same signal.
type InterruptedError struct {
	Signal os.Signal
}

func (e *InterruptedError) Error() string {
	return fmt.Sprintf("interrupted by %v before the command started", e.Signal)
}

// FenceLostError is a fenced run whose fence process ended without its report
// (killed, or crashed) after the stage was ready. The command may have run, confined
// by the backend as ever (the fenced roots fail every operation once the fence is
// gone); what it did and was refused is not known. It is not a runner failure:
// that says the command never ran, and SANDBOX_UNAVAILABLE's text advises running
// it unconfined, which a command that could end the fence would then have earned
// (found by review, with a command that set its fence's CPU limit).
type FenceLostError struct {
	Mode   policy.Mode
	Detail string
}

func (e *FenceLostError) Error() string {
	// The detail is the stage's line, "toh-exec: fence: ..."; toh-exec prefixes its
	// own errors itself.
	return fmt.Sprintf("%s: the command may have run, confined under %s mode, and what the fence refused it is not known; nothing ran unconfined", strings.TrimPrefix(e.Detail, "toh-exec: "), e.Mode)
}

// SpawnError is a failure to start the argv for a reason that is not the runner's
// (for example an unusable working directory). The command did not run.
type SpawnError struct {
	Argv0 string
	Err   error
}

func (e *SpawnError) Error() string { return fmt.Sprintf("starting %q: %v", e.Argv0, e.Err) }
func (e *SpawnError) Unwrap() error { return e.Err }

// CommandExecError is the runner's report that it set the sandbox up and then could
// not execute the command itself: bwrap's "bwrap: execvp CMD: ..." line, or the
// Landlock rung's `landlock-run: executing "CMD": ...`, both written after every
// restriction was in place. Its #! interpreter is missing, it is not executable or
// not a program for this machine, or it lies where the sandbox does not show it (a
// hidden directory under bwrap, a file under /dev under Landlock). [Run] returns it
// inside a *SpawnError.
//
// SPEC §4.3 reads these lines as runner failures, and so toh-exec once answered
// SANDBOX_UNAVAILABLE, whose text tells the caller to switch to danger-full-access,
// for a script with a typo in its #! line: advice to turn the sandbox off for a
// command that would fail the same way unconfined, and a dropped probe cache for a
// rung that works. Decision: the command did not start, and the sandbox is not what
// failed. Only the runner's own line counts: the command never ran, so nothing it
// prints can reach here (the line is read only when the status pipe says the
// command never started, status.go).
type CommandExecError struct {
	Argv0 string
	// Detail is the runner's line.
	Detail string
}

func (e *CommandExecError) Error() string {
	return fmt.Sprintf("it could not be executed inside the sandbox (%s): a missing #! interpreter, a file that is not executable or not a program for this machine, or a path the sandbox does not show; the sandbox itself was set up", e.Detail)
}

// commandExecFailure returns the error for a runner failure line of c's runner that
// says the command's own execve failed after the sandbox was set up, or nil.
func commandExecFailure(c Confined, line string) error {
	if c.command == "" {
		return nil
	}
	var prefix string
	switch c.Backend {
	case BackendBwrap:
		prefix = "bwrap: execvp " + c.command + ": "
	case BackendLandlock:
		// As the launcher renders it: runs of blanks in the name become one.
		prefix = landlockFailureLine(fmt.Errorf("executing %q:", c.command)) + " "
	default:
		return nil
	}
	if !strings.HasPrefix(line, prefix) {
		return nil
	}
	return &SpawnError{Argv0: c.command, Err: &CommandExecError{Argv0: c.command, Detail: line}}
}

// Run spawns c.Argv in dir with env, waits for it, and classifies the outcome. A
// runner failure is returned as an *UnavailableError together with the facts; the
// caller must not treat the run as the command's own result. Termination signals
// delivered to this process are forwarded to the child while it runs.
//
// For the bwrap rung Run also prepares the stand-ins of missing protected paths
// before the spawn and removes them after the child exited, however it ended (see
// standins_linux.go); a failure to prepare them is a *SpawnError and nothing runs.
func Run(c Confined, pol policy.Execution, dir string, env []string, stdio Stdio) (Facts, error) {
	facts := Facts{
		Mode:        pol.Mode,
		Confined:    true,
		Enforcement: c.Enforcement,
		Backend:     c.Backend,
		Network:     c.Network,
	}
	if err := checkDir(dir); err != nil {
		return facts, &SpawnError{Argv0: c.Argv[0], Err: err}
	}
	if c.Stage != nil {
		if err := checkFencedAncestors(c, pol); err != nil {
			return facts, &UnavailableError{Mode: pol.Mode, Cause: err}
		}
	}
	// Signals are caught from here on (or already, by the caller): one that arrived
	// before the command starts, while stand-ins are prepared included, stops the run
	// before the start (after cleaning up); later ones are forwarded to the child, and
	// cleanup still happens after it exits.
	sigs := stdio.Signals
	if sigs == nil {
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, forwarded...)
		defer signal.Stop(sigs)
	}
	var pending os.Signal
	interrupted := func() bool {
		if pending == nil {
			select {
			case sg := <-sigs:
				pending = sg
			default:
			}
		}
		return pending != nil
	}
	if c.standIns != nil {
		s, err := c.standIns.prepare(interrupted)
		if interrupted() {
			if err == nil {
				s.release()
			}
			return facts, &SpawnError{Argv0: c.Argv[0], Err: &InterruptedError{Signal: pending}}
		}
		if err != nil {
			return facts, &SpawnError{Argv0: c.Argv[0], Err: fmt.Errorf("preparing protected paths: %w", err)}
		}
		defer func() {
			// The run is over: bwrap's PID namespace took every process in it.
			for _, note := range s.restoreHeads() {
				if stdio.Stderr != nil {
					fmt.Fprintf(stdio.Stderr, "toh-exec: %s\n", note)
				}
			}
			s.release()
		}()
	} else if interrupted() {
		return facts, &SpawnError{Argv0: c.Argv[0], Err: &InterruptedError{Signal: pending}}
	}
	if c.Backend != BackendLandlock && c.Backend != BackendBwrap {
		// Seatbelt has no way to (leftovers_linux.go says why bwrap runs need it).
		stdio.EndLeftovers = false
	}
	stdio.killOnly = c.Backend == BackendBwrap
	tail := &tailBuffer{max: TailBytes}
	var start func(*exec.Cmd) (child, error)
	// direct: Run starts the command itself (the Landlock rung without a stage), and
	// Argv's runner never runs; otherwise Argv is exec'd and gets its status pipe.
	direct := c.landlock != nil && c.Stage == nil
	if direct {
		f := *c.landlock
		start = func(cmd *exec.Cmd) (child, error) { return startLandlocked(cmd, f) }
	} else if c.netFilter {
		start = startFiltered
	}
	if c.Backend == BackendBwrap && len(c.Argv) > 0 {
		// Where the directory really is: $PWD may spell it through a link into what
		// the argv covers (a link to /dev/shm would start the command in the private
		// /dev, quietly), or out of it (a link in /tmp to the workspace).
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		if err := bwrapShowsDir(pol, c.hidden, dir); err != nil {
			return facts, &SpawnError{Argv0: c.Argv[0], Err: err}
		}
		// Where the command starts, or a runner failure: without it bwrap starts the
		// command in $HOME when dir is not there inside (under a tmpfs), quietly.
		c.Argv = slices.Concat(c.Argv[:1], []string{"--chdir", dir}, c.Argv[1:])
		if len(c.Argv)-1 > bwrapMaxArgs {
			// bwrap refuses it with a "bwrap: " line, which reads as the sandbox being
			// unavailable, with its advice to run unconfined (found by review).
			return facts, &SpawnError{Argv0: c.Argv[0], Err: fmt.Errorf("bwrap takes at most %d arguments and this run needs %d: pass the command's through a file or xargs, or use --runner landlock", bwrapMaxArgs, len(c.Argv)-1)}
		}
	}
	if c.standIns != nil {
		// Access widened above the guarded paths is taken back after the run,
		// however it ended (access_linux.go).
		if before := ancestorsOfProtected(c.standIns.guards); len(before) > 0 {
			defer func() {
				for _, note := range restoreAccess(before) {
					if stdio.Stderr != nil {
						fmt.Fprintf(stdio.Stderr, "toh-exec: %s\n", note)
					}
				}
			}()
		}
	}
	var status *statusPipe
	if !direct && c.status != statusNone {
		var err error
		if status, err = newStatusPipe(c.status); err != nil {
			return facts, &SpawnError{Argv0: c.Argv[0], Err: err}
		}
	}
	code, sig, err := spawn(c.Argv[0], c.Argv, dir, env, stdio, tail, true, sigs, c.Stage, status, start)
	if hr := (*holdRefusedError)(nil); errors.As(err, &hr) {
		// The direct start could not hold the command at its exec, and nothing ran:
		// the launcher stage confines it the same way without ptrace.
		start, direct = nil, false
		if c.status != statusNone {
			if status, err = newStatusPipe(c.status); err != nil {
				return facts, &SpawnError{Argv0: c.Argv[0], Err: err}
			}
		}
		code, sig, err = spawn(c.Argv[0], c.Argv, dir, env, stdio, tail, true, sigs, c.Stage, status, nil)
	}
	var said runnerStatus
	if status != nil {
		said = status.report()
	}
	for try := 1; try < bwrapTries && bwrapRaced(c, stdio, err, sig, said, tail); try++ {
		if said.forwarded != nil {
			// The caller asked to stop while bwrap was failing, and nothing ran.
			return facts, &SpawnError{Argv0: c.Argv[0], Err: &InterruptedError{Signal: said.forwarded}}
		}
		if stdio.Stderr != nil {
			fmt.Fprintln(stdio.Stderr, "toh-exec: bwrap failed before the command started, because the host's mounts moved while it copied them; starting it again")
		}
		time.Sleep(bwrapRetryPause * time.Duration(try)) // out of step with whatever moves them
		if interrupted() {
			// Nothing ran, and the caller asked to stop meanwhile.
			return facts, &SpawnError{Argv0: c.Argv[0], Err: &InterruptedError{Signal: pending}}
		}
		tail = &tailBuffer{max: TailBytes}
		if status, err = newStatusPipe(c.status); err != nil {
			return facts, &SpawnError{Argv0: c.Argv[0], Err: err}
		}
		code, sig, err = spawn(c.Argv[0], c.Argv, dir, env, stdio, tail, true, sigs, c.Stage, status, start)
		said = status.report()
	}
	var stageFailure string
	if c.Stage != nil {
		// Collected whatever happened: a stage that failed before the exec has
		// nothing recorded but still says why.
		facts.Fence, stageFailure = c.Stage.Finished()
	}
	if err != nil {
		var lf *launcherFailure
		if errors.As(err, &lf) {
			if ce := commandExecFailure(c, lf.line); ce != nil {
				return facts, ce
			}
			// The Landlock rung failed before the command ran, as the launcher stage
			// would have reported with exit 125 and this line.
			facts.RunnerFailed = true
			facts.RunnerFailure = lf.line
			return facts, &UnavailableError{Mode: pol.Mode, RunnerFailure: lf.line}
		}
		var se *stageError
		if errors.As(err, &se) {
			return facts, &UnavailableError{Mode: pol.Mode, Cause: se.err}
		}
		if isRunnerSpawnError(err, c.Argv[0]) {
			facts.RunnerFailed = true
			facts.RunnerFailure = err.Error()
			return facts, &UnavailableError{Mode: pol.Mode, RunnerFailure: facts.RunnerFailure, Cause: err}
		}
		return facts, &SpawnError{Argv0: c.Argv[0], Err: err}
	}
	exit := Exit{Code: code}
	if c.SignalAsStatus && code > 128 && code <= 128+64 {
		exit = Exit{Signaled: true, Signal: code - 128}
	}
	if sig != 0 {
		exit = Exit{Signaled: true, Signal: sig}
		facts.Signaled, facts.Signal = true, sig
	} else {
		facts.ExitCode = code
	}
	if facts.Fence != nil && facts.Fence.Lost {
		return facts, &FenceLostError{Mode: pol.Mode, Detail: stageFailure}
	}
	if stageFailure != "" {
		facts.RunnerFailed = true
		facts.RunnerFailure = stageFailure
		return facts, &UnavailableError{Mode: pol.Mode, RunnerFailure: stageFailure}
	}
	dialect := c
	if direct || said.commandStarted || (status != nil && status.kind == statusLauncher) {
		// The command started (Run started it itself, or its runner says so), or the
		// launcher's failure, if any, is on its status pipe: nothing the command
		// prints can be the runner failing, so only the denial dialect is read.
		dialect.RunnerFailureRules = RunnerFailureRules{}
	}
	cl := Classify(dialect, exit, tail.Bytes())
	if said.failure != "" {
		cl = Classification{RunnerFailed: true, Detail: said.failure}
	}
	if cl.RunnerFailed {
		if ce := commandExecFailure(c, cl.Detail); ce != nil {
			return facts, ce
		}
	}
	facts.Denied = cl.Denied
	if pol.Fence && facts.Fence == nil {
		// Asked for, with nothing to fence (read-only has no writable roots): the
		// result says so, and denied rests on the dialect alone.
		facts.Fence = &FenceFacts{}
	}
	if facts.Fence != nil {
		if len(facts.Fence.Denials) > 0 || facts.Fence.Dropped > 0 {
			facts.DeniedBy = append(facts.DeniedBy, "fence")
		}
		if cl.Denied {
			facts.DeniedBy = append(facts.DeniedBy, "dialect")
		}
		facts.Denied = len(facts.DeniedBy) > 0
	}
	if cl.RunnerFailed {
		facts.RunnerFailed = true
		facts.RunnerFailure = cl.Detail
		return facts, &UnavailableError{Mode: pol.Mode, RunnerFailure: cl.Detail}
	}
	return facts, nil
}

// bwrapTries is how many times Run starts bwrap when it fails as bwrapMountRace
// says, the command never having started.
const bwrapTries = 3

// bwrapRetryPause is the pause before the second start; the third waits twice as
// long.
const bwrapRetryPause = 10 * time.Millisecond

// bwrapRaced reports whether a bwrap run (without a fence stage) that ended with
// err, sig and said failed in its set-up because the host's mount table changed
// under it, so that starting it again is safe and may well succeed: the status
// pipe says the command never started (bwrap writes "exit-code" only once its
// set-up finished, and nothing the command could print reaches that pipe first),
// bwrap's own line says so (bwrapMountRace), and the command's standard input is
// a file or nothing (a reader os/exec copies from may have been read from).
func bwrapRaced(c Confined, stdio Stdio, err error, sig int, said runnerStatus, tail *tailBuffer) bool {
	if c.Backend != BackendBwrap || c.Stage != nil || c.status != statusBwrap || err != nil || sig != 0 || said.commandStarted {
		return false
	}
	if _, isFile := stdio.Stdin.(*os.File); stdio.Stdin != nil && !isFile {
		return false
	}
	for line := range strings.SplitSeq(string(tail.Bytes()), "\n") {
		if bwrapMountRace(line) {
			return true
		}
	}
	return false
}

// bwrapMountRace reports whether line is bwrap's fatal line for a submount that
// moved or went away between its recursive bind of "/" and its remount of that
// submount read-only by path, as bubblewrap 0.8 words it:
//
//	bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/var/tmp/p1/mnt": No such file or directory
//
// A directory above a mount renamed on the host while a sandbox starts is
// enough (measured: 3 of 300 runs failed during a RENAME_EXCHANGE loop of such a
// directory). The sandbox was never complete and the command never ran.
func bwrapMountRace(line string) bool {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "bwrap: ")
	return ok && strings.Contains(rest, "remount \"") &&
		(strings.HasSuffix(rest, ": No such file or directory") || strings.HasSuffix(rest, ": Invalid argument"))
}

// checkFencedAncestors refuses a fenced run in which a fenced root lies beneath a
// writable root that is the host's own directory and not fenced: under Landlock the
// host's /tmp stays unfenced, and a command could move a fenced workspace's parent
// there away and put a look-alike with protected paths (.git/hooks) in its place,
// outside every fence and on no record. Under bwrap /tmp is a private tmpfs, where
// such a move changes nothing on the host.
func checkFencedAncestors(c Confined, pol policy.Execution) error {
	if c.Backend != BackendLandlock {
		return nil
	}
	for _, w := range pol.WritableRoots {
		if slices.Contains(c.FencedRoots, w) {
			continue
		}
		for _, r := range c.FencedRoots {
			if r != w && canon.LexicallyWithin(r, w) {
				return fmt.Errorf("--fence: the fenced root %s lies beneath the writable root %s, which Landlock leaves unfenced: the command could move %s's parent away and put a look-alike in its place; move the workspace out of %s or use bwrap", r, w, r, w)
			}
		}
	}
	return nil
}

// RunUnconfined runs argv as it is: the danger-full-access path. path is argv[0]
// resolved by the caller. Its facts carry only the mode, denied=false and the exit
// status.
func RunUnconfined(mode policy.Mode, path string, argv []string, dir string, env []string, stdio Stdio) (Facts, error) {
	facts := Facts{Mode: mode}
	if err := checkDir(dir); err != nil {
		return facts, &SpawnError{Argv0: argv[0], Err: err}
	}
	stdio.EndLeftovers = false // the user's own command, left as it would be without toh-exec
	code, sig, err := spawn(path, argv, dir, env, stdio, nil, false, nil, nil, nil, nil)
	if err != nil {
		return facts, &SpawnError{Argv0: argv[0], Err: err}
	}
	facts.ExitCode, facts.Signal, facts.Signaled = code, sig, sig != 0
	return facts, nil
}

// PathDirs is the search list of PATH as env sets it (the last PATH= entry wins, as
// in os/exec), an empty entry meaning ".", as execvp(3) reads it.
func PathDirs(env []string) []string {
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	dirs := filepath.SplitList(pathEnv)
	for i, d := range dirs {
		if d == "" {
			dirs[i] = "."
		}
	}
	return dirs
}

// checkDir verifies independently of the spawn that dir is a usable working directory,
// so a later ENOENT from the spawn can be attributed to the runner program alone.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("working directory %q: %w", dir, syscall.ENOTDIR)
	}
	if err := syscall.Access(dir, 1 /* X_OK */); err != nil {
		return fmt.Errorf("working directory %q: %w", dir, err)
	}
	return nil
}

// bwrapMaxArgs is bwrap's MAX_ARGS: the most arguments it takes after its own name,
// its options and the command's together (checked with bwrap 0.8: 9001 arguments
// after the name fail).
const bwrapMaxArgs = 9000

// CheckRoots refuses a run whose writable roots are not all directories: a session
// whose directory is gone, a cache root not made yet. Run spawned anyway, bwrap
// fails to bind such a root and the Landlock launcher to open it (a rule path that
// cannot be opened is fatal), which both read as the sandbox being unavailable,
// with its advice to run unconfined (found by review); toh-exec calls this first
// and names the cause instead (exit 124).
func CheckRoots(pol policy.Execution) error {
	for _, r := range pol.WritableRoots {
		fi, err := os.Stat(r)
		switch {
		case err != nil:
			return fmt.Errorf("writable root %q: %w (create it, or take it out of the policy)", r, errors.Unwrap(err))
		case !fi.IsDir():
			return fmt.Errorf("writable root %q: %w", r, syscall.ENOTDIR)
		}
	}
	return nil
}

// bwrapShowsDir refuses a working directory the bwrap rung's argv covers with a mount
// of its own: the private /dev, a process's directory in /proc (the command gets the
// /proc of its own PID namespace, where /proc/N is another process's or none;
// /proc/self and /proc/thread-self resolve to one), a directory hidden for its deputies
// (Confine never hides its own working directory; a library caller may pass
// another), and under workspace-write the private /tmp unless a bound root holds it.
// Spawned anyway, bwrap would fail to enter it, which reads as the sandbox being
// unavailable; this names the cause instead.
func bwrapShowsDir(pol policy.Execution, hidden []string, dir string) error {
	if canon.LexicallyWithin(dir, "/dev") {
		return fmt.Errorf("working directory %q: the bwrap rung gives the command a private /dev, where it does not exist; start the command elsewhere", dir)
	}
	if rest, ok := strings.CutPrefix(dir, "/proc/"); ok {
		if pid, _, _ := strings.Cut(rest, "/"); pid != "" && strings.Trim(pid, "0123456789") == "" {
			return fmt.Errorf("working directory %q: the bwrap rung gives the command the /proc of its own PID namespace, where /proc/%s is not the host's process %s (or does not exist); start the command elsewhere", dir, pid, pid)
		}
	}
	for _, h := range hidden {
		if canon.LexicallyWithin(dir, h) {
			return fmt.Errorf("working directory %q: the bwrap rung hides %s (deputies.go), and this run was confined for another working directory", dir, h)
		}
	}
	if pol.Mode != policy.WorkspaceWrite || !canon.LexicallyWithin(dir, "/tmp") {
		return nil
	}
	for _, r := range pol.WritableRoots {
		if r != "/tmp" && canon.LexicallyWithin(dir, r) {
			return nil
		}
	}
	return fmt.Errorf("working directory %q: under workspace-write the bwrap rung gives the command a private /tmp, where it does not exist; start the command in the workspace, or make the directory a writable root", dir)
}

// isRunnerSpawnError is SPEC §4.3's attribution rule: ENOENT or EACCES for exactly the
// runner program.
func isRunnerSpawnError(err error, runner string) bool {
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != runner {
		return false
	}
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EACCES)
}

var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// spawn starts the program at path (no PATH lookup happens here) with argv, forwards
// termination signals, and waits. It returns the exit code or the signal number.
//
// A confined run (newSession) starts in a session of its own, without a controlling
// terminal: a confined command that still holds a terminal fd could otherwise push
// input into it with TIOCSTI (kernels with dev.tty.legacy_tiocsti=1, this machine
// included) and have the user's shell run it after the sandbox exits. Terminal
// signals then reach toh-exec, which forwards them: under bwrap to the command's
// processes (signalSandbox: bwrap forwards none, and dies by them), else to the
// child. The backends' argv
// stays the exact SPEC profile; bwrap's own --new-session would change it.
//
// sigs, when not nil, is a channel the caller already registered for the forwarded
// signals; spawn then forwards what it received before the start too.
//
// start, when not nil, starts the prepared command in place of cmd.Start (the
// Landlock rung's own start, startLandlocked); its errors are returned as they are.
func spawn(path string, argv []string, dir string, env []string, stdio Stdio, tail *tailBuffer, newSession bool, sigs chan os.Signal, stage Stage, status *statusPipe, start func(*exec.Cmd) (child, error)) (code, sig int, err error) {
	// WaitDelay only matters for a Stdin that is not a file (exec.Cmd's own copying
	// goroutine); stdout and stderr are drained by outputPipe.
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: dir, Env: env, Stdin: stdio.Stdin, WaitDelay: PipeGrace}
	if newSession {
		cmd.SysProcAttr = newSessionAttr()
	}
	if status != nil {
		// Descriptor 3 (statusFD): the first extra file, ahead of any a stage adds.
		cmd.ExtraFiles = []*os.File{status.w}
		defer status.started()
	}
	if stage != nil {
		if err := stage.Wrap(cmd); err != nil {
			return 0, 0, &stageError{err}
		}
	}
	var stderr io.Writer = stdio.Stderr
	if tail != nil {
		stderr = &teeWriter{tail: tail, w: stdio.Stderr}
	}
	var outs []*outputPipe
	defer func() {
		// Every return after this point: the parent's write ends are closed, then
		// what the pipes still hold is passed on (see PipeGrace).
		for _, p := range outs {
			p.finish()
		}
	}()
	for _, o := range []struct {
		dst  io.Writer
		into *io.Writer
	}{{stdio.Stdout, &cmd.Stdout}, {stderr, &cmd.Stderr}} {
		if f, ok := o.dst.(*os.File); ok || o.dst == nil {
			if ok {
				*o.into = f
			}
			continue
		}
		if o.into == &cmd.Stderr && len(outs) == 1 && sameWriter(o.dst, stdio.Stdout) {
			// One writer for both: one pipe and one copier, as exec.Cmd does, so
			// the writer is never written from two goroutines at once.
			cmd.Stderr = cmd.Stdout
			continue
		}
		p, err := newOutputPipe(o.dst)
		if err != nil {
			return 0, 0, err
		}
		outs = append(outs, p)
		*o.into = p.w
	}
	if sigs == nil {
		sigs = stdio.Signals
	}
	if sigs == nil {
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, forwarded...)
		defer signal.Stop(sigs)
	}
	if start == nil {
		// The fork that skips os/exec's pidfd test child (startForked). Runs with
		// a stage (the fence) keep os/exec's start, as they were measured and
		// reviewed: their cost is the fence's, far above the 0.1 ms.
		start = startForked
		if stage != nil {
			start = startExec
		}
	}
	var inherited map[int]bool
	if stdio.EndLeftovers {
		if err := becomeSubreaper(); err != nil {
			return 0, 0, err
		}
		if inherited, err = ownChildren(); err != nil {
			return 0, 0, err
		}
	}
	proc, err := start(cmd)
	status.started()
	for _, p := range outs {
		// The child holds its own copies now (or never will): the pipes end when
		// the command and whatever it left behind close theirs.
		p.closeWriter()
	}
	if err != nil {
		if stage != nil {
			// The stage, not the runner, failed to start (a namespace the kernel
			// refused, for example): the runner's ENOENT rule does not apply.
			return 0, 0, &stageError{fmt.Errorf("starting the fence stage: %w", err)}
		}
		return 0, 0, err
	}
	if stage != nil {
		if err := stage.Started(); err != nil {
			_ = proc.Kill()
			_, _, _ = proc.wait()
			return 0, 0, &stageError{err}
		}
	}
	var target interface{ Signal(os.Signal) error } = proc
	switch {
	case status != nil && status.kind == statusBwrap:
		target = sandboxTarget{proc}
	case newSession:
		target = groupTarget{proc}
	}
	stop := ForwardSignals(sigs, target)
	jobs := followJobControl(stdio.Stdin, proc, status != nil && status.kind == statusBwrap)
	code, sig, err = proc.wait()
	jobs()
	if last := stop(); status != nil {
		status.forwarded = last
	}
	if stdio.EndLeftovers {
		// Before the pipes are drained: a leftover holding one ends now, and the
		// pipe with it, instead of PipeGrace later.
		end := endLeftovers
		if stdio.killOnly {
			end = killLeftovers
		}
		if lerr := end(inherited); lerr != nil && stdio.Stderr != nil {
			fmt.Fprintf(stdio.Stderr, "toh-exec: %v\n", lerr)
		}
	}
	if stdio.Exited != nil {
		stdio.Exited()
	}
	for _, p := range outs {
		p.finish()
	}
	return code, sig, err
}

// child is a started command as spawn waits for it: os/exec's (startExec), or the
// one the Landlock rung forks itself (startLandlocked).
type child interface {
	Signal(os.Signal) error
	Kill() error
	// wait waits for the command to end and reaps it: its exit code, or the signal
	// that ended it; err only when neither is known.
	wait() (code, sig int, err error)
	pid() int
}

// startExec starts cmd with os/exec.
func startExec(cmd *exec.Cmd) (child, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return execChild{cmd}, nil
}

type execChild struct{ cmd *exec.Cmd }

func (c execChild) Signal(s os.Signal) error { return c.cmd.Process.Signal(s) }
func (c execChild) Kill() error              { return c.cmd.Process.Kill() }
func (c execChild) pid() int                 { return c.cmd.Process.Pid }

func (c execChild) wait() (code, sig int, err error) {
	werr := c.cmd.Wait()
	ps := c.cmd.ProcessState
	if ps == nil {
		return 0, 0, werr
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 0, int(ws.Signal()), nil
	}
	return ps.ExitCode(), 0, nil
}

// sandboxTarget is where a bwrap run's forwarded signals go: the processes of its PID
// namespace that a terminal's signal would reach (signalSandbox), or bwrap itself
// while there are none yet.
type sandboxTarget struct{ c child }

func (t sandboxTarget) Signal(s os.Signal) error {
	if sig, ok := s.(syscall.Signal); ok && signalSandbox(t.c.pid(), sig) {
		return nil
	}
	return t.c.Signal(s)
}

// groupTarget is where the other runs' forwarded signals go: the command's process
// group, which it leads (it starts in a session of its own), as a terminal's signal
// would; the command alone when the group is gone. Before 2026-12-02 only the
// command got them, and ^C left "sleep 100 | cat" under Landlock running to its end
// (bash waits for its pipeline).
type groupTarget struct{ c child }

func (t groupTarget) Signal(s os.Signal) error {
	if sig, ok := s.(syscall.Signal); ok && t.c.pid() > 0 && syscall.Kill(-t.c.pid(), sig) == nil {
		return nil
	}
	return t.c.Signal(s)
}

// ForwardSignals passes every signal received on sigs to p until stop is called;
// stop returns once forwarding has ended, with the last signal it passed on (nil
// when none). Call it right after p was reaped (Wait), so a forwarded signal never
// reaches a recycled pid: os.Process.Signal, like the Landlock rung's own child
// (forkedChild), refuses a process it has seen reaped.
func ForwardSignals(sigs <-chan os.Signal, p interface{ Signal(os.Signal) error }) (stop func() (last os.Signal)) {
	done := make(chan struct{})
	ended := make(chan struct{})
	var last os.Signal
	go func() {
		defer close(ended)
		for {
			select {
			case s := <-sigs:
				last = s
				_ = p.Signal(s)
			case <-done:
				return
			}
		}
	}()
	return func() os.Signal {
		close(done)
		<-ended
		return last
	}
}

// stageError is a Stage that failed before the command ran.
type stageError struct{ err error }

func (e *stageError) Error() string { return e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

// outputPipe carries one output stream of the command to a writer that is not a file
// (the tee of the retained tail, a buffer of --json): the command gets the write end,
// and a goroutine copies from the read end to the writer until end of file. Once the
// command exited, finish gives the pipe's writers PipeGrace more; when that has
// passed, the goroutine takes what the pipe holds at that moment, passes it on and
// stops, so a process left behind that keeps writing cannot hold the run, and what
// the command wrote before it exited is never dropped for being slow to pass on.
// Errors of the writer are ignored: a closed terminal must not stop the draining,
// or the command would block on a full pipe. A writer that blocks for good holds the
// run: a command whose stdout is the caller's terminal can suspend that terminal's
// output (tcflow TCOOFF on the descriptor it inherited, which neither Landlock, whose
// device-ioctl right covers only devices opened under it, nor bwrap governs), and
// toh-exec then waits forever to write the command's stderr and its own lines there.
// That is the caller's terminal, seen the same way under every rung.
type outputPipe struct {
	r, w   *os.File
	wOnce  sync.Once
	finish func()
}

func newOutputPipe(dst io.Writer) (*outputPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating an output pipe: %w", err)
	}
	p := &outputPipe{r: r, w: w}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.Close()
		p.copy(dst)
	}()
	p.finish = sync.OnceFunc(func() {
		p.closeWriter()
		// The deadline wakes a read that waits for writers which are not the
		// command; reads of data already in the pipe are not waits.
		_ = r.SetReadDeadline(time.Now().Add(PipeGrace))
		<-done
	})
	return p, nil
}

// sameWriter is a == b for writers whose dynamic type may not be comparable.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

func (p *outputPipe) closeWriter() { p.wOnce.Do(func() { p.w.Close() }) }

func (p *outputPipe) copy(dst io.Writer) {
	buf := make([]byte, 32<<10)
	for {
		n, err := p.r.Read(buf)
		if n > 0 {
			_, _ = dst.Write(buf[:n])
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The grace is over (a read after the deadline fails at once, even with
			// data waiting): what the pipe holds now is the last of it.
			p.drainHeld(dst, buf)
			return
		default:
			return
		}
	}
}

// drainHeld passes on exactly what the pipe holds now; later writes stay unread.
func (p *outputPipe) drainHeld(dst io.Writer, buf []byte) {
	n, err := pipeHeldBytes(p.r)
	for err == nil && n > 0 {
		// Each read is of data already there; the deadline only guards against a
		// count the kernel got wrong, and is renewed because passing the data on
		// may take long.
		if err = p.r.SetReadDeadline(time.Now().Add(PipeGrace)); err != nil {
			return
		}
		var m int
		m, err = p.r.Read(buf[:min(n, len(buf))])
		if m > 0 {
			_, _ = dst.Write(buf[:m])
			n -= m
		}
	}
}

// teeWriter retains everything in tail and forwards it to w; a failing w (a closed
// terminal) must not stop the retention nor block the child.
type teeWriter struct {
	tail *tailBuffer
	w    io.Writer
}

func (t *teeWriter) Write(p []byte) (int, error) {
	t.tail.Write(p)
	if t.w != nil {
		_, _ = t.w.Write(p)
	}
	return len(p), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf)
}
