package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/toh-sandbox/toh/internal/approval"
	"github.com/toh-sandbox/toh/internal/fencerun"
	"github.com/toh-sandbox/toh/policy"
	"github.com/toh-sandbox/toh/sandbox"
)

type execFlags struct {
	policyFile   string
	session      string
	mode         string
	command      string
	commandSet   bool
	runner       string
	bwrapPath    string
	probeTimeout durationFlag
	requireFull  bool
	refreshProbe bool
	probeCache   string
	escalateTo   string
	escalateSet  bool
	justif       string
	justifSet    bool
	approvalCmd  string
	jsonOut      bool
	resultFD     int
	verbose      bool
	fence        bool
	fenceSet     bool
}

func newExecFlagSet(f *execFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("toh-exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.policyFile, "policy", "", "")
	fs.StringVar(&f.session, "session", "", "")
	fs.Func("mode", "", func(s string) error {
		if _, err := policy.ParseMode(s); err != nil {
			return err
		}
		f.mode = s
		return nil
	})
	fs.Func("c", "", func(s string) error { f.command, f.commandSet = s, true; return nil })
	fs.StringVar(&f.runner, "runner", "", "")
	fs.StringVar(&f.bwrapPath, "bwrap", "", "")
	f.probeTimeout = durationFlag(sandbox.DefaultProbeTimeout)
	fs.Var(&f.probeTimeout, "probe-timeout", "")
	fs.BoolVar(&f.requireFull, "require-full", false, "")
	fs.BoolVar(&f.refreshProbe, "refresh-probe", false, "")
	fs.StringVar(&f.probeCache, "probe-cache", "", "")
	fs.Func("sandbox-permissions", "", func(s string) error { f.escalateTo, f.escalateSet = s, true; return nil })
	fs.Func("justification", "", func(s string) error { f.justif, f.justifSet = s, true; return nil })
	fs.StringVar(&f.approvalCmd, "approval-command", "", "")
	fs.BoolVar(&f.jsonOut, "json", false, "")
	fs.IntVar(&f.resultFD, "result-fd", -1, "")
	fs.BoolVar(&f.verbose, "verbose", false, "")
	fs.Var(boolSetFlag{&f.fence, &f.fenceSet}, "fence", "")
	return fs
}

// boolSetFlag is a boolean flag that also remembers whether it was given, so that
// --fence=false can override the policy file's "fence" key.
type boolSetFlag struct {
	v   *bool
	set *bool
}

func (b boolSetFlag) IsBoolFlag() bool { return true }
func (b boolSetFlag) String() string {
	if b.v != nil && *b.v {
		return "true"
	}
	return "false"
}
func (b boolSetFlag) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*b.v, *b.set = v, true
	return nil
}

// report is what toh-exec emits through --json and --result-fd.
type report struct {
	Result *sandbox.Facts `json:"result,omitempty"`
	Error  *reportError   `json:"error,omitempty"`
	Stdout *string        `json:"stdout,omitempty"`
	Stderr *string        `json:"stderr,omitempty"`
	// StdoutOmitted and StderrOmitted count the bytes left out of the middle of a
	// stream longer than captureHalf twice (see capture).
	StdoutOmitted int64 `json:"stdoutOmitted,omitempty"`
	StderrOmitted int64 `json:"stderrOmitted,omitempty"`
}

type reportError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func runExec(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var f execFlags
	fs := newExecFlagSet(&f)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			return 0
		}
		return usageError(stderr, "%v", err)
	}
	argv := fs.Args()
	if f.commandSet {
		argv = append([]string{"bash", "-c", f.command}, argv...)
	}
	if len(argv) == 0 {
		return usageError(stderr, "no command given")
	}
	var deployment policy.Mode
	if f.mode != "" {
		m, err := policy.ParseMode(f.mode)
		if err != nil {
			return usageError(stderr, "--mode: %v", err)
		}
		deployment = m
	}
	if f.runner != "" {
		switch sandbox.Backend(f.runner) {
		case sandbox.BackendBwrap, sandbox.BackendLandlock, sandbox.BackendSeatbelt:
		default:
			return usageError(stderr, "--runner: unknown runner %q (want bwrap, landlock or seatbelt)", f.runner)
		}
	}
	if f.approvalCmd != "" && !filepath.IsAbs(f.approvalCmd) {
		return usageError(stderr, "--approval-command: %q is not an absolute path (a name would be looked up in $PATH, where a confined command may have put its own)", f.approvalCmd)
	}
	if f.probeTimeout <= 0 {
		return usageError(stderr, "--probe-timeout: must be positive, got %v", time.Duration(f.probeTimeout))
	}
	out := newOutput(f, stdout, stderr)
	if out.err != nil {
		return usageError(stderr, "%v", out.err)
	}
	defer out.close()

	pf, pfPath, code, err := loadPolicyFile(f.policyFile)
	if err != nil {
		return out.fail(code, policyErrorCode(code), err)
	}
	pol, code, err := resolveLoaded(pf, pfPath, f.session, deployment, "")
	if err != nil {
		return out.fail(code, policyErrorCode(code), err)
	}
	cwd, _ := os.Getwd()
	env := os.Environ()
	var path string // the command's program; with an escalation, the one the approver was shown
	notFound := func() int {
		return out.fail(exitNotFound, "COMMAND_NOT_FOUND", fmt.Errorf("%s: command not found", argv[0]))
	}
	if f.escalateSet || f.justifSet {
		// A flag given as "" still counts as given: validation must name it, never
		// mistake it for an absent one.
		var requested policy.Mode
		if f.escalateSet {
			requested = policy.Mode(f.escalateTo)
			if requested == "" {
				requested = " "
			}
		}
		var justification string
		if f.justifSet {
			justification = f.justif
			if justification == "" {
				justification = " "
			}
		}
		if err := policy.ValidateEscalation(requested, justification, pol.Mode); err != nil {
			return out.fail(exitEscalation, escalationCode(err), err)
		}
		// What a grant runs is resolved before asking, from the file already read:
		// the approver is shown its program and roots, and exactly that runs.
		granted, code, err := resolveLoaded(pf, pfPath, f.session, deployment, requested)
		if err != nil {
			return out.fail(code, policyErrorCode(code), err)
		}
		if path, err = lookCommand(argv[0], env, cwd); err != nil {
			return notFound()
		}
		req := approval.Request{Subject: "command", Argv: argv, Program: path, Cwd: cwd, SessionID: pol.SessionID,
			WorkspaceRoot: granted.WorkspaceRoot, CurrentMode: pol.Mode, RequestedMode: requested,
			WritableRoots: granted.WritableRoots, Network: granted.Network, Justification: f.justif}
		reach := everWritable(pf, cwd, pol, granted)
		approver, err := approverRefusal(reach, f.approvalCmd)
		if err != nil {
			return out.fail(exitEscalation, "ESCALATION_UNAVAILABLE", err)
		}
		ap := approval.Choose(pol.Approval, f.approvalCmd)
		if c, ok := ap.(approval.Command); ok {
			// What runs is the file the checks above resolved and checked, by the
			// path they resolved: a link on the way could be pointed elsewhere
			// between the check and the run (found by review); every link and
			// directory on that path is the caller's or root's (strictmodes.Check).
			c.Path = approver
			c.Dir, c.Env = "/", approverEnv(env, reach)
			ap = c
		}
		outcome, aerr := ap.Ask(context.Background(), req)
		if aerr != nil {
			fmt.Fprintf(out.diag(), "toh-exec: %v\n", aerr)
		}
		switch outcome {
		case approval.AllowedOnce:
			pol = granted
		case approval.Rejected:
			return out.fail(exitEscalation, "ESCALATION_REJECTED", errors.New(policy.RejectedText("command", requested)))
		case approval.Unavailable:
			return out.fail(exitEscalation, "ESCALATION_UNAVAILABLE", errors.New(policy.UnavailableApprovalText(requested)))
		default:
			return out.fail(exitEscalation, "ESCALATION_CANCELLED", errors.New(policy.CancelledText(requested)))
		}
	}
	if path == "" {
		if path, err = lookCommand(argv[0], env, cwd); err != nil {
			return notFound()
		}
	}

	if pol.Mode == policy.DangerFullAccess {
		onePForSpawn()
		facts, err := sandbox.RunUnconfined(pol.Mode, path, argv, cwd, env, out.stdio(stdin, catchSignals()))
		if err != nil {
			return out.fail(exitCannotStart, "CANNOT_START", err)
		}
		return out.finish(facts)
	}

	self, err := os.Executable()
	if err != nil {
		return out.fail(exitCannotStart, "CANNOT_START", fmt.Errorf("locating the toh-exec binary: %w", err))
	}
	cachePath := f.probeCache
	if cachePath == "" {
		cachePath = probeCachePath()
	} else if !filepath.IsAbs(cachePath) {
		return out.fail(exitUsage, "USAGE", fmt.Errorf("--probe-cache: %q is not an absolute path", cachePath))
	}
	chain, err := sandbox.NewChain(sandbox.Options{
		Runner:       sandbox.Backend(f.runner),
		BwrapPath:    f.bwrapPath,
		Self:         self,
		ProbeTimeout: f.probeTimeout.Duration(),
		Cache:        &sandbox.ProbeCache{Path: cachePath},
		RefreshProbe: f.refreshProbe,
	})
	if err != nil {
		return out.unavailable(&sandbox.UnavailableError{Mode: pol.Mode, Cause: err})
	}
	if f.fenceSet {
		pol.Fence = f.fence
	}
	// Before the argv is built: an existing lock is kept read-only with the file.
	ensurePolicyLock(pol)
	conf, err := chain.Confine(context.Background(), argv, pol)
	if err != nil {
		return out.unavailable(err)
	}
	if pol.Fence && pol.Mode == policy.WorkspaceWrite && conf.FencedRoots == nil {
		return out.unavailable(&sandbox.UnavailableError{Mode: pol.Mode,
			Cause: fmt.Errorf("--fence: the %s backend cannot serve writable roots through the fence", conf.Backend)})
	}
	if len(conf.FencedRoots) > 0 {
		// The fence judges by what the runner lets the command write on the host,
		// not by the policy's roots (sandbox.Confined.FenceWritable).
		fenced := pol
		fenced.WritableRoots = conf.FenceWritable
		stage, err := fencerun.New(self, fenced, conf.FencedRoots, []string{cachePath})
		if err != nil {
			return out.unavailable(&sandbox.UnavailableError{Mode: pol.Mode, Cause: fmt.Errorf("--fence: %w", err)})
		}
		conf.Stage = stage
	}
	mount := filepath.Join(filepath.Dir(self), "toh-mount")
	// As invoked too: a link to toh-exec inside a root (a project's bin/) is what
	// the next call runs, whatever it leads to now.
	invoked := ""
	if strings.Contains(os.Args[0], "/") {
		invoked = filepath.Join(cwd, os.Args[0])
		if filepath.IsAbs(os.Args[0]) {
			invoked = os.Args[0]
		}
	}
	if err := sandbox.CheckRoots(pol); err != nil {
		return out.fail(exitCannotStart, "CANNOT_START", err)
	}
	if err := ownProgramRefusal(pol, conf.Backend, program{"toh-exec", self}, program{"toh-exec", invoked},
		program{"toh-mount", mount}, program{"the runner", conf.Argv[0]}, program{"the approval command", f.approvalCmd}); err != nil {
		return out.fail(exitCannotStart, "CANNOT_START", err)
	}
	if err := pathAheadRefusal(pol, conf.Backend, os.Args[0], cwd, os.Getenv("PATH")); err != nil {
		return out.fail(exitCannotStart, "CANNOT_START", err)
	}
	if f.verbose {
		fmt.Fprintf(stderr, "toh-exec: %s\n", describe(conf, pol))
	}
	if f.requireFull && conf.Enforcement != sandbox.EnforcementFull {
		return out.fail(exitEnforcement, "ENFORCEMENT_PARTIAL",
			fmt.Errorf("--require-full: the %s backend would enforce %q mode only partially; refusing to run", conf.Backend, pol.Mode))
	}
	if conf.Backend != sandbox.BackendLandlock || conf.Stage != nil {
		onePForSpawn()
	}
	restoreTerminals := keepTerminals(stdin, stdout, stderr)
	stdio := out.stdio(stdin, catchSignals())
	stdio.Exited = restoreTerminals
	facts, err := sandbox.Run(conf, pol, cwd, env, stdio)
	restoreTerminals()
	// A verdict the command could have written is not left for later calls.
	if ferr := chain.ForgetIfWritable(pol); ferr != nil {
		fmt.Fprintf(stderr, "toh-exec: %v\n", ferr)
	}
	if err != nil {
		var interrupted *sandbox.InterruptedError
		if errors.As(err, &interrupted) {
			// Nothing ran: end as the signal would have ended toh-exec had it not
			// been caught.
			out.close()
			return dieBy(interrupted.Signal)
		}
		var spawnErr *sandbox.SpawnError
		if errors.As(err, &spawnErr) {
			return out.fail(exitCannotStart, "CANNOT_START", err)
		}
		var lost *sandbox.FenceLostError
		if errors.As(err, &lost) {
			return out.fail(exitFenceLost, "FENCE_LOST", err)
		}
		if facts.RunnerFailed {
			chain.DropCache()
			out.facts = &facts
		}
		// Otherwise nothing ran (the fence stage could not be set up, say): no
		// result, whose exitCode would read as the command's.
		return out.unavailable(err)
	}
	if facts.Denied {
		fmt.Fprintln(out.diag(), policy.DenialMarker(pol.Mode))
		if pol.Approval != policy.ApprovalNever {
			fmt.Fprintln(out.diag(), policy.EscalationHint("command"))
		}
	}
	return out.finish(facts)
}

// policyErrorCode names a resolvePolicy failure by its exit code: the working
// directory gone is a failure to start, not an invalid policy.
func policyErrorCode(code int) string {
	if code == exitCannotStart {
		return "CANNOT_START"
	}
	return "POLICY_INVALID"
}

func escalationCode(err error) string {
	var ee *policy.EscalationError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	return "INVALID_ESCALATION"
}

// describe prints the effective confinement in the spirit of go-landlock's
// Config.String(): what is actually enforced, not what was asked for.
func describe(c sandbox.Confined, pol policy.Execution) string {
	roots := "none"
	if len(pol.WritableRoots) > 0 {
		roots = strings.Join(pol.WritableRoots, ", ")
	}
	fenced := ""
	if pol.Fence {
		fenced = "; fenced: none"
		if len(c.FencedRoots) > 0 {
			fenced = "; fenced: " + strings.Join(c.FencedRoots, ", ")
		}
	}
	return fmt.Sprintf("{%s; mode %s; enforcement %s; writable: %s%s; network %s}",
		c.Backend, pol.Mode, c.Enforcement, roots, fenced, c.Network)
}

// lookCommand finds argv0 the way the confined exec will (the same PATH, the same
// file system), so "command not found" is reported as such instead of as a runner
// failure of the backend's exec.
func lookCommand(argv0 string, env []string, cwd string) (string, error) {
	if strings.Contains(argv0, "/") {
		p := argv0
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if _, err := os.Stat(p); err != nil {
			return "", err
		}
		return argv0, nil
	}
	for _, dir := range sandbox.PathDirs(env) {
		p := filepath.Join(dir, argv0)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			if !filepath.IsAbs(p) {
				p = filepath.Join(cwd, p)
			}
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// output routes the command's streams and toh-exec's report.
type output struct {
	jsonOut        bool
	resultFile     *os.File
	stdout, stderr io.Writer
	capOut, capErr capture
	facts          *sandbox.Facts
	err            error
}

func newOutput(f execFlags, stdout, stderr io.Writer) *output {
	o := &output{jsonOut: f.jsonOut, stdout: stdout, stderr: stderr}
	if f.resultFD >= 0 {
		if f.resultFD <= 2 {
			o.err = fmt.Errorf("--result-fd: %d is a standard stream; use another descriptor", f.resultFD)
			return o
		}
		o.resultFile = os.NewFile(uintptr(f.resultFD), "result-fd")
		if _, err := o.resultFile.Stat(); err != nil {
			o.err = fmt.Errorf("--result-fd: descriptor %d is not open: %w", f.resultFD, err)
		}
	}
	return o
}

func (o *output) stdio(stdin io.Reader, sigs chan os.Signal) sandbox.Stdio {
	if o.jsonOut {
		return sandbox.Stdio{Stdin: stdin, Stdout: &o.capOut, Stderr: &o.capErr, Signals: sigs, EndLeftovers: true}
	}
	return sandbox.Stdio{Stdin: stdin, Stdout: o.stdout, Stderr: o.stderr, Signals: sigs, EndLeftovers: true}
}

// captureHalf bounds what --json keeps of each stream: its first and its last
// captureHalf bytes. A command's output is the command's to choose, and kept whole
// (and then escaped into JSON, six bytes for each control character) it could grow
// toh-exec until the kernel killed it before it reported anything.
const captureHalf = 4 << 20

// capture keeps the head and the tail of a stream, and counts what lies between.
type capture struct {
	head    []byte
	tail    []byte // a ring of up to captureHalf bytes once head is full
	next    int    // where the ring's oldest byte is, once it is full
	omitted int64  // bytes that fell out of the ring
}

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	if room := captureHalf - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 {
		if len(c.tail) < captureHalf {
			k := min(captureHalf-len(c.tail), len(p))
			c.tail = append(c.tail, p[:k]...)
			p = p[k:]
			continue
		}
		if len(p) >= captureHalf {
			// The whole ring and all of p but its last captureHalf bytes fall out:
			// len(p) bytes in all.
			c.omitted += int64(len(p))
			c.tail = append(c.tail[:0], p[len(p)-captureHalf:]...)
			c.next = 0
			break
		}
		k := min(captureHalf-c.next, len(p))
		c.omitted += int64(k)
		copy(c.tail[c.next:], p[:k])
		c.next = (c.next + k) % captureHalf
		p = p[k:]
	}
	return n, nil
}

// String is the head, then the tail in order.
func (c *capture) String() string {
	var b strings.Builder
	b.Grow(len(c.head) + len(c.tail))
	b.Write(c.head)
	b.Write(c.tail[c.next:])
	b.Write(c.tail[:c.next])
	return b.String()
}

// catchSignals catches the termination signals for the run, which forwards them to
// the command (sandbox.Stdio.Signals). Registered only once everything that may
// wait on the user (the approval prompt) or on probes is done, and never stopped:
// toh-exec exits right after the run, and signal.Stop alone cost 0.2 ms per run.
func catchSignals() chan os.Signal {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	return sigs
}

// onePForSpawn leaves toh-exec one P for a run that spawns a program and waits for
// it (bwrap, the fence host, danger-full-access): toh-exec then does one thing at a
// time (its other goroutines forward signals and copy stderr), and fewer runtime
// threads spinning beside bwrap on a small machine made the bwrap rung 0.3 ms faster
// (bench/README.md, issue 3). Not on the Landlock rung, which starts the command from
// a thread of its own: there one P made the run 0.16-0.21 ms slower (interleaved
// A/B), about half of it the stop-the-world of the change itself. It cannot reach the command: the environment is not touched.
func onePForSpawn() { runtime.GOMAXPROCS(1) }

// dieBy ends toh-exec by sig, with its default action; 128+sig if it survives that.
func dieBy(sig os.Signal) int {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return exitCannotStart
	}
	signal.Reset(s)
	_ = syscall.Kill(os.Getpid(), s)
	time.Sleep(100 * time.Millisecond) // delivery is asynchronous
	return 128 + int(s)
}

// diag is where toh-exec's own lines go: into the envelope's stderr with --json.
func (o *output) diag() io.Writer {
	if o.jsonOut {
		return &o.capErr
	}
	return o.stderr
}

func (o *output) close() {
	if o.resultFile != nil {
		o.resultFile.Close()
	}
}

func (o *output) emit(r report) {
	if o.resultFile != nil {
		line, _ := json.Marshal(report{Result: r.Result, Error: r.Error})
		o.resultFile.Write(append(line, '\n'))
	}
	if o.jsonOut {
		so, se := o.capOut.String(), o.capErr.String()
		r.Stdout, r.Stderr = &so, &se
		r.StdoutOmitted, r.StderrOmitted = o.capOut.omitted, o.capErr.omitted
		line, _ := json.Marshal(r)
		o.stdout.Write(append(line, '\n'))
	}
}

func (o *output) finish(facts sandbox.Facts) int {
	o.emit(report{Result: &facts})
	return facts.Status()
}

func (o *output) fail(code int, errCode string, err error) int {
	fmt.Fprintf(o.diag(), "toh-exec: %v\n", err)
	o.emit(report{Error: &reportError{Code: errCode, Message: err.Error()}, Result: o.facts})
	return code
}

func (o *output) unavailable(err error) int {
	var ue *sandbox.UnavailableError
	if !errors.As(err, &ue) {
		return o.fail(exitCannotStart, "CANNOT_START", err)
	}
	w := o.diag()
	fmt.Fprintln(w, ue.Error())
	if ue.RunnerFailure != "" {
		fmt.Fprintln(w, sandbox.RunnerFailureNotice(ue.Mode))
	} else if ue.Cause != nil {
		fmt.Fprintf(w, "toh-exec: %v\n", ue.Cause)
	}
	o.emit(report{Error: &reportError{Code: ue.Code(), Message: ue.Error()}, Result: o.facts})
	return exitUnavailable
}
