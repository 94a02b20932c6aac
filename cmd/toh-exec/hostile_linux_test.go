package main

// Fail-closed on a hostile host (issue 3): where bwrap cannot create namespaces and the
// kernel refuses Landlock, every confined run is SANDBOX_UNAVAILABLE and the command
// does not run, while danger-full-access still runs.
//
// The hostile host is real: toh-exec runs under a seccomp filter (internal/testutil's
// HostileHost) installed by a re-exec'd copy of this test binary, which refuses the
// Landlock syscalls (ENOSYS: not built in; EOPNOTSUPP: disabled at boot) and every
// namespace-creating clone/unshare. Each hostile run has a control that goes through
// the same helper, with the same no_new_privs and the same exec, minus the filter, and
// must run the command.
//
// Proof that a command did not run: it prints "ran" on a stdout that is a file this
// test owns (toh-exec itself prints nothing there without --json), and writes a marker
// in the workspace, which a confined workspace-write run (and any unconfined run) can
// write.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toh-sandbox/toh/internal/testutil"
	"golang.org/x/sys/unix"
)

const hostileHelperTest = "TestHostileHelperProcess"

// TestHostileHelperProcess is not a test: in a re-exec'd copy of the test binary
// (testutil.HostileCommand) it installs the hostile-host filter and execs the program
// under test.
func TestHostileHelperProcess(t *testing.T) { testutil.HostileHelper() }

// hostileCommand runs argv on host h. TOH_EXEC_BIN spares the helper's TestMain a
// rebuild of toh-exec.
func hostileCommand(t *testing.T, h testutil.HostileHost, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := testutil.HostileCommand(t, h, hostileHelperTest, argv...)
	cmd.Env = append(cmd.Env, "TOH_EXEC_BIN="+tohExec)
	return cmd
}

var (
	hostileOff = testutil.HostileHost{}
	// The two ways a kernel refuses Landlock, each with namespaces refused.
	hostileHosts = []testutil.HostileHost{
		{LandlockErrno: unix.ENOSYS, NoNamespaces: true},
		{LandlockErrno: unix.EOPNOTSUPP, NoNamespaces: true},
	}
)

// hostileUnavailableText is SPEC §4.4's text, spelled out here so that drift in the
// sandbox package cannot carry the test along.
const hostileUnavailableText = `sandbox mode "%s" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined. Install bubblewrap or run a Landlock-enforcing kernel (Linux), ensure sandbox-exec is usable (macOS), or ensure the ACL restricted-token runner can start (Windows) — otherwise switch the consumer to danger-full-access.`

// requireFriendlyHost skips unless both rungs work here: every hostile result is
// compared with a control run that must confine.
func requireFriendlyHost(t *testing.T) string {
	t.Helper()
	bwrap := testutil.RequireBwrap(t)
	testutil.RequireLandlockABI(t, 1)
	return bwrap
}

// hostileScratch is a scratch tree plus the command whose effects prove it ran.
type hostileScratch struct {
	*scratch
	script, ranFile, cache string
}

func newHostileScratch(t *testing.T) *hostileScratch {
	t.Helper()
	s := &hostileScratch{scratch: newScratch(t)}
	s.ranFile = filepath.Join(s.ws, "ran")
	s.cache = filepath.Join(s.beside, "probe.json")
	s.script = filepath.Join(s.beside, "cmd.sh")
	script := "#!/bin/sh\necho ran\n{ echo ran > " + s.ranFile + "; } 2>/dev/null\nexit 0\n"
	if err := os.WriteFile(s.script, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

type hostileResult struct {
	code           int
	stdout, stderr string
	report         envelope // from --result-fd
}

// onHost runs toh-exec ARGS -- <script> on host h in the workspace, with the result
// facts on fd 3 and the command's stdout going straight to a file.
func (s *hostileScratch) onHost(t *testing.T, h testutil.HostileHost, args ...string) hostileResult {
	t.Helper()
	stdout, err := os.CreateTemp(s.beside, "stdout-")
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	result, err := os.CreateTemp(s.beside, "result-")
	if err != nil {
		t.Fatal(err)
	}
	defer result.Close()
	argv := append([]string{tohExec, "--policy", s.noPolicy, "--result-fd", "3"}, args...)
	cmd := hostileCommand(t, h, append(argv, "--", s.script)...)
	cmd.Dir = s.ws
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = stdout, &stderr, []*os.File{result}
	err = cmd.Run()
	r := hostileResult{stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %q: %v", cmd.Args, err)
	}
	if strings.Contains(r.stderr, "hostile-helper: ") {
		t.Fatalf("the hostile helper failed (%s): %s", h, r.stderr)
	}
	out, _ := os.ReadFile(stdout.Name())
	r.stdout = string(out)
	line, _ := os.ReadFile(result.Name())
	if err := json.Unmarshal(line, &r.report); err != nil {
		t.Fatalf("on %s, toh-exec %q wrote no result line (%v): %q\nstderr: %s", h, args, err, line, r.stderr)
	}
	return r
}

// refused checks that the command did not run, confined or not, and that the run was
// SANDBOX_UNAVAILABLE in mode with exactly the SPEC text, followed by " Runner failure:
// bwrap: ..." when runnerFailure says bwrap failed at run time.
func (s *hostileScratch) refused(t *testing.T, r hostileResult, mode string, runnerFailure bool) {
	t.Helper()
	if r.stdout != "" {
		t.Fatalf("the command ran (exit %d): its stdout holds %q", r.code, r.stdout)
	}
	absent(t, s.ranFile)
	s.checkCanary(t)
	if r.code != exitUnavailable {
		t.Fatalf("exit %d, want %d (SANDBOX_UNAVAILABLE)\nstderr: %s", r.code, exitUnavailable, r.stderr)
	}
	e := r.report.Error
	if e == nil || e.Code != "SANDBOX_UNAVAILABLE" {
		t.Fatalf("result %+v, want error SANDBOX_UNAVAILABLE\nstderr: %s", r.report, r.stderr)
	}
	want := fmt.Sprintf(hostileUnavailableText, mode)
	if !runnerFailure {
		if e.Message != want {
			t.Fatalf("message\n%q\nwant exactly\n%q", e.Message, want)
		}
	} else {
		detail, ok := strings.CutPrefix(e.Message, want+" Runner failure: ")
		// bwrap's words differ by privilege ("Creating new namespace failed" as root,
		// "No permissions to creating new namespace" otherwise); both name the cause.
		if !ok || !strings.HasPrefix(detail, "bwrap: ") || !strings.Contains(detail, "namespace") {
			t.Fatalf("message\n%q\nwant the SPEC text, then \" Runner failure: bwrap: ...namespace...\"", e.Message)
		}
		f := r.report.Result
		if f == nil || f.RunnerFailed == nil || !*f.RunnerFailed || f.Backend != "bwrap" || f.RunnerFailure != detail {
			t.Fatalf("facts %+v, want a bwrap runner failure with detail %q", f, detail)
		}
		notice := "[sandbox: the sandbox runner itself failed under " + mode + " mode — the command did not run; this is a sandbox problem, not a command failure]"
		if !strings.Contains(r.stderr, notice) {
			t.Fatalf("no runner-failure notice in stderr:\n%s", r.stderr)
		}
	}
	if !strings.Contains(r.stderr, e.Message+"\n") {
		t.Fatalf("stderr lacks the message line:\n%s", r.stderr)
	}
}

// ran checks that the command ran under backend in mode (backend "" for
// danger-full-access), and removes its marker for the next run.
func (s *hostileScratch) ran(t *testing.T, r hostileResult, mode, backend string) {
	t.Helper()
	if r.code != 0 || r.stdout != "ran\n" || r.report.Error != nil {
		t.Fatalf("exit %d stdout %q result %+v, want the command to run\nstderr: %s", r.code, r.stdout, r.report, r.stderr)
	}
	f := r.report.Result
	if f == nil || f.Mode != mode || f.Backend != backend || f.Denied {
		t.Fatalf("facts %+v, want mode %s backend %q", f, mode, backend)
	}
	s.confinedAs(t, mode)
}

// confinedAs checks what the command's write of its marker did under mode (refused
// under read-only, landed otherwise) and that the canary is untouched, and removes
// the marker for the next run.
func (s *hostileScratch) confinedAs(t *testing.T, mode string) {
	t.Helper()
	if mode == "read-only" {
		absent(t, s.ranFile)
	} else {
		present(t, s.ranFile, "ran\n")
		os.Remove(s.ranFile)
	}
	s.checkCanary(t)
}

// TestHostileFilterRefusesWhatItClaims checks the filter itself, syscall by syscall,
// against the same helper without it.
func TestHostileFilterRefusesWhatItClaims(t *testing.T) {
	requireFriendlyHost(t)
	report := func(t *testing.T, h testutil.HostileHost) map[string]string {
		t.Helper()
		out, err := hostileCommand(t, h, testutil.HostileReport...).CombinedOutput()
		if err != nil {
			t.Fatalf("report on %s: %v\n%s", h, err, out)
		}
		m := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			k, v, _ := strings.Cut(l, "=")
			m[k] = v
		}
		return m
	}
	off := report(t, hostileOff)
	for _, h := range hostileHosts {
		t.Run(h.String(), func(t *testing.T) {
			got := report(t, h)
			want := map[string]string{
				"landlock_create_ruleset": unix.ErrnoName(h.LandlockErrno),
				"landlock_add_rule":       unix.ErrnoName(h.LandlockErrno),
				"landlock_restrict_self":  unix.ErrnoName(h.LandlockErrno),
				"unshare_newuser":         "EPERM",
				"unshare_newns":           "EPERM",
				"unshare_none":            "ok",
				"clone_newuser":           "EPERM",
				"clone_newns":             "EPERM",
				"clone3":                  "ENOSYS",
				"exec":                    "ok",
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q on %s, want %q", k, got[k], h, v)
				}
				// The control: without the filter the kernel answers something else
				// for every refused call (so the answer above is the filter's), and
				// the same for the allowed ones.
				if refusedHere := v != "ok"; refusedHere == (off[k] == v) {
					t.Errorf("%s = %q without the filter; with it %q", k, off[k], v)
				}
			}
			if len(got) != len(want) {
				t.Errorf("report %v, want the keys of %v", got, want)
			}
		})
	}
}

// TestHostileHostBreaksBothRungs shows each mechanism failing under the filter the way
// a real hostile host makes it fail, and working without it.
func TestHostileHostBreaksBothRungs(t *testing.T) {
	bwrap := requireFriendlyHost(t)
	run := func(h testutil.HostileHost, argv ...string) (int, string) {
		t.Helper()
		out, err := hostileCommand(t, h, argv...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	bwrapArgv := []string{bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid", "--proc", "/proc", "--die-with-parent", "--", "true"}
	probeArgv := []string{tohExec, landlockStageArg, "--probe"}
	if code, out := run(hostileOff, bwrapArgv...); code != 0 {
		t.Fatalf("control: bwrap failed without the filter: %d %s", code, out)
	}
	if code, out := run(hostileOff, probeArgv...); code != 0 || out != "landlock: fully enforced\n" && out != "landlock: partially enforced (older ABI)\n" {
		t.Fatalf("control: the Landlock probe failed without the filter: %d %q", code, out)
	}
	for _, h := range hostileHosts {
		t.Run(h.String(), func(t *testing.T) {
			code, out := run(h, bwrapArgv...)
			if code == 0 || !strings.HasPrefix(out, "bwrap: ") || !strings.Contains(out, "namespace") {
				t.Fatalf("bwrap under the filter: exit %d, %q; want a \"bwrap: ...namespace...\" failure", code, out)
			}
			t.Logf("bwrap: exit %d, %s", code, strings.TrimSpace(out))
			code, out = run(h, probeArgv...)
			if code != 125 || out != "landlock-run: the kernel offers no Landlock (not built in, or disabled at boot)\n" {
				t.Fatalf("Landlock probe under the filter: exit %d, %q", code, out)
			}
		})
	}
}

// TestHostileHostRefusesEveryConfinedRun: under the hostile host, every confined mode
// through every runner choice is SANDBOX_UNAVAILABLE and the command does not run; the
// same run without the filter confines and runs it.
func TestHostileHostRefusesEveryConfinedRun(t *testing.T) {
	requireFriendlyHost(t)
	for _, mode := range []string{"read-only", "workspace-write"} {
		for _, runner := range []string{"", "bwrap", "landlock"} {
			name := mode + "/runner=" + runner
			if runner == "" {
				name = mode + "/chain"
			}
			t.Run(name, func(t *testing.T) {
				s := newHostileScratch(t)
				args := []string{"--mode", mode, "--probe-cache", s.cache}
				backend := "bwrap"
				if runner != "" {
					args = append(args, "--runner", runner)
					backend = runner
				}
				for _, h := range hostileHosts {
					r := s.onHost(t, h, args...)
					s.refused(t, r, mode, runner == "bwrap")
					switch runner {
					case "":
						for _, want := range []string{"bwrap probe: bwrap: ", "landlock probe: landlock-run: the kernel offers no Landlock"} {
							if !strings.Contains(r.stderr, want) {
								t.Fatalf("on %s, stderr lacks %q:\n%s", h, want, r.stderr)
							}
						}
					case "landlock":
						if !strings.Contains(r.stderr, "landlock: not supported by this kernel or disabled at boot") {
							t.Fatalf("on %s, stderr lacks the Landlock cause:\n%s", h, r.stderr)
						}
					}
					// Each hostile run probes afresh, not from the previous one's verdict.
					os.Remove(s.cache)
				}
				s.ran(t, s.onHost(t, hostileOff, args...), mode, backend)
			})
		}
	}
}

// TestHostileHostStillRunsDangerFullAccess: danger-full-access never reaches a
// provider, so the hostile host does not stop it, whatever --runner says.
func TestHostileHostStillRunsDangerFullAccess(t *testing.T) {
	requireFriendlyHost(t)
	s := newHostileScratch(t)
	for _, h := range hostileHosts {
		for _, runner := range []string{"", "bwrap", "landlock"} {
			args := []string{"--mode", "danger-full-access", "--probe-cache", s.cache}
			if runner != "" {
				args = append(args, "--runner", runner)
			}
			s.ran(t, s.onHost(t, h, args...), "danger-full-access", "")
			if _, err := os.Stat(s.cache); err == nil {
				t.Fatalf("a danger-full-access run probed and cached a verdict")
			}
		}
	}
}

// TestHostileUnavailableVerdictIsCached: the hostile host's "unavailable" verdict is
// cached like any other; the next run probes nothing and refuses, --refresh-probe
// probes again.
func TestHostileUnavailableVerdictIsCached(t *testing.T) {
	realBwrap := requireFriendlyHost(t)
	for _, h := range hostileHosts {
		t.Run(h.String(), func(t *testing.T) {
			s := newHostileScratch(t)
			bw, log := loggingBwrap(t, s.beside, realBwrap)
			args := []string{"--mode", "workspace-write", "--bwrap", bw, "--probe-cache", s.cache}
			on := func(h testutil.HostileHost, extra ...string) (hostileResult, []string) {
				t.Helper()
				os.Remove(log)
				r := s.onHost(t, h, append(slices.Clone(args), extra...)...)
				return r, invocations(t, log)
			}

			r, calls := on(h)
			s.refused(t, r, "workspace-write", false)
			if !slices.Equal(calls, []string{"true"}) {
				t.Fatalf("cold run: bwrap invocations %q, want the probe alone", calls)
			}
			if b, _ := os.ReadFile(s.cache); !strings.Contains(string(b), `"backend":""`) {
				t.Fatalf("cached verdict %s, want \"unavailable\" (backend \"\")", b)
			}

			r, calls = on(h)
			s.refused(t, r, "workspace-write", false)
			if len(calls) != 0 || !strings.Contains(r.stderr, "(cached verdict; --refresh-probe probes again)") {
				t.Fatalf("warm run: bwrap invocations %q, want none and the cached verdict\nstderr: %s", calls, r.stderr)
			}

			r, calls = on(h, "--refresh-probe")
			s.refused(t, r, "workspace-write", false)
			if !slices.Equal(calls, []string{"true"}) || strings.Contains(r.stderr, "cached verdict") {
				t.Fatalf("--refresh-probe: bwrap invocations %q, want a fresh probe\nstderr: %s", calls, r.stderr)
			}

			// The cache key cannot see the filter, so the verdict outlives it: a
			// friendly run trusts "unavailable" and refuses (denial of service, never an
			// unconfined run) until it probes again.
			r, calls = on(hostileOff)
			s.refused(t, r, "workspace-write", false)
			if len(calls) != 0 {
				t.Fatalf("friendly run after the hostile verdict: bwrap invocations %q, want none", calls)
			}
			r, calls = on(hostileOff, "--refresh-probe")
			s.ran(t, r, "workspace-write", "bwrap")
			if !slices.Equal(calls, []string{"true", s.script}) {
				t.Fatalf("friendly --refresh-probe: bwrap invocations %q, want the probe then the command", calls)
			}
		})
	}
}

// TestHostileHostDefeatsStaleVerdict: a verdict cached on a friendly host is reused on
// the hostile one (the key cannot see the filter). The chosen rung must still fail
// closed at run time. A bwrap runner failure drops the cache, so the next run probes.
func TestHostileHostDefeatsStaleVerdict(t *testing.T) {
	realBwrap := requireFriendlyHost(t)
	for _, mode := range []string{"read-only", "workspace-write"} {
		t.Run(mode+"/bwrap", func(t *testing.T) {
			s := newHostileScratch(t)
			bw, log := loggingBwrap(t, s.beside, realBwrap)
			args := []string{"--mode", mode, "--bwrap", bw, "--probe-cache", s.cache}
			on := func(h testutil.HostileHost) (hostileResult, []string) {
				t.Helper()
				os.Remove(log)
				r := s.onHost(t, h, args...)
				return r, invocations(t, log)
			}

			r, calls := on(hostileOff)
			s.ran(t, r, mode, "bwrap")
			if !slices.Equal(calls, []string{"true", s.script}) {
				t.Fatalf("friendly run: bwrap invocations %q, want the probe then the command", calls)
			}
			if b, _ := os.ReadFile(s.cache); !strings.Contains(string(b), `"backend":"bwrap"`) {
				t.Fatalf("cached verdict %s, want bwrap", b)
			}

			for _, h := range hostileHosts {
				r, calls = on(h)
				if !slices.Equal(calls, []string{s.script}) {
					t.Fatalf("on %s with the friendly verdict: bwrap invocations %q, want the command alone (no probe)", h, calls)
				}
				s.refused(t, r, mode, true)
				if _, err := os.Stat(s.cache); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("on %s, the runner failure left the cached verdict in place (%v)", h, err)
				}

				r, calls = on(h)
				s.refused(t, r, mode, false)
				if !slices.Equal(calls, []string{"true"}) {
					t.Fatalf("on %s after the drop: bwrap invocations %q, want a probe", h, calls)
				}

				// Back to a friendly verdict for the next host.
				os.Remove(s.cache)
				s.ran(t, s.onHost(t, hostileOff, args...), mode, "bwrap")
			}
		})
		t.Run(mode+"/landlock", func(t *testing.T) {
			// bwrap that always fails makes Landlock the friendly verdict.
			s := newHostileScratch(t)
			broken := filepath.Join(s.beside, "bwrap-broken")
			if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			args := []string{"--mode", mode, "--bwrap", broken, "--probe-cache", s.cache}
			s.ran(t, s.onHost(t, hostileOff, args...), mode, "landlock")
			if b, _ := os.ReadFile(s.cache); !strings.Contains(string(b), `"backend":"landlock"`) {
				t.Fatalf("cached verdict %s, want landlock", b)
			}
			for _, h := range hostileHosts {
				// The cached "landlock" verdict is refused up front, and dropped: the
				// next run probes again (and the probe says why Landlock is gone). The
				// previous host's "unavailable" verdict is forgotten first: the key
				// cannot see a seccomp filter.
				os.Remove(s.cache)
				s.ran(t, s.onHost(t, hostileOff, args...), mode, "landlock")
				r := s.onHost(t, h, args...)
				s.refused(t, r, mode, false)
				if !strings.Contains(r.stderr, "landlock: not supported by this kernel or disabled at boot") {
					t.Fatalf("on %s, stderr lacks the Landlock cause:\n%s", h, r.stderr)
				}
				if _, err := os.Stat(s.cache); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("on %s, the stale landlock verdict was kept (%v)", h, err)
				}
				r = s.onHost(t, h, args...)
				s.refused(t, r, mode, false)
				if !strings.Contains(r.stderr, "landlock probe: landlock-run: the kernel offers no Landlock") {
					t.Fatalf("on %s after the drop, stderr lacks the probe's cause:\n%s", h, r.stderr)
				}
			}
		})
	}
}

// Where ptrace is refused (a container's seccomp profile), the Landlock rung cannot
// hold the command at its exec (PTRACE_TRACEME), and starts the launcher stage
// instead of failing every run: the rung exists for such containers. Each run is still
// confined: under read-only the command's write of its marker is refused (absent),
// under workspace-write it lands. Negative control of the host: the filter refuses
// ptrace (TestHostileFilterRefusesWhatItClaims covers the filter's other refusals).
func TestLandlockRungWithoutPtrace(t *testing.T) {
	requireFriendlyHost(t)
	s := newHostileScratch(t)
	h := testutil.HostileHost{NoPtrace: true}
	if _, err := exec.LookPath("strace"); err == nil {
		out, _ := hostileCommand(t, h, "strace", "-o", "/dev/null", "true").CombinedOutput()
		if !strings.Contains(string(out), "PTRACE_TRACEME: Operation not permitted") {
			t.Fatalf("the host does not refuse ptrace: %q", out)
		}
	}
	for _, mode := range []string{"read-only", "workspace-write"} {
		r := s.onHost(t, h, "--runner", "landlock", "--mode", mode)
		s.ran(t, r, mode, "landlock")
	}
}

// A toh-exec traced by strace -f cannot hold the command at its exec (strace takes the
// new child before PTRACE_TRACEME can), and starts the launcher stage instead: the
// trace shows the launcher's execve. Each run stays confined: under read-only the
// command's write of its marker is refused (absent), under workspace-write it lands.
func TestLandlockRungUnderStrace(t *testing.T) {
	testutil.RequireLandlockABI(t, 1)
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed")
	}
	s := newHostileScratch(t)
	for _, mode := range []string{"read-only", "workspace-write"} {
		trace := filepath.Join(s.beside, "trace-"+mode)
		cmd := exec.Command(strace, "-f", "-qq", "-e", "trace=execve", "-o", trace,
			tohExec, "--policy", s.noPolicy, "--runner", "landlock", "--mode", mode, "--", s.script)
		cmd.Dir = s.ws
		out, err := cmd.Output()
		if err != nil || string(out) != "ran\n" {
			t.Fatalf("%s under strace: %v, stdout %q", mode, err, out)
		}
		s.confinedAs(t, mode)
		// The launcher stage execs the command in its own process: the process that
		// execs the script exec'd once before (the launcher; strace may not be able
		// to read that argv, toh-exec being non-dumpable for an unprivileged tracer).
		b, _ := os.ReadFile(trace)
		launched := execdByLauncher(string(b), s.script)
		if !launched {
			t.Fatalf("%s under strace: the script was not exec'd by a launcher stage:\n%s", mode, b)
		}
	}
}

// execdByLauncher reports whether an strace -f -e trace=execve log shows script
// exec'd by a process that had exec'd once before (the launcher stage). A call
// another process's line interrupts is split in two: "execve(... <unfinished ...>"
// and later "<... execve resumed>) = 0".
func execdByLauncher(trace, script string) bool {
	execs := map[string]int{}
	unfinished := map[string]string{}
	for line := range strings.SplitSeq(trace, "\n") {
		pid, rest, ok := strings.Cut(line, " ")
		rest = strings.TrimLeft(rest, " ") // strace pads short pids
		switch {
		case !ok:
			continue
		case strings.HasPrefix(rest, "execve(") && strings.HasSuffix(rest, "<unfinished ...>"):
			unfinished[pid] = rest
			continue
		case strings.HasPrefix(rest, "<... execve resumed>"):
			call, split := unfinished[pid]
			delete(unfinished, pid)
			if !split || !strings.HasSuffix(rest, "= 0") {
				continue
			}
			rest = call // its start names the program
		case !strings.HasPrefix(rest, "execve(") || !strings.HasSuffix(rest, "= 0"):
			continue
		}
		if strings.HasPrefix(rest, `execve("`+script+`"`) && execs[pid] > 0 {
			return true
		}
		execs[pid]++
	}
	return false
}

// TestExecdByLauncher: the trace of a CI run where the launcher's execve was split
// by another process's line, and the same trace without the launcher's exec.
func TestExecdByLauncher(t *testing.T) {
	const script = "/root/beside/cmd.sh"
	split := `26763 execve("/tmp/toh-exec", ["/tmp/toh-exe"...], 0x7fff /* 38 vars */) = 0
26773 execve("/tmp/toh-exec", ["/tmp/toh-exe"..., "__landlock-run"], 0x17b4 /* 38 vars */ <unfinished ...>
26771 --- SIGURG {si_signo=SIGURG, si_code=SI_TKILL, si_pid=26763, si_uid=0} ---
26773 <... execve resumed>)             = 0
26773 execve("/root/beside/cmd.sh", ["/root/beside/"...], 0x3299 /* 38 vars */) = 0
`
	if !execdByLauncher(split, script) {
		t.Error("a launcher whose execve was split: not found")
	}
	direct := `26763 execve("/tmp/toh-exec", ["/tmp/toh-exe"...], 0x7fff /* 38 vars */) = 0
26770 execve("/root/beside/cmd.sh", ["/root/beside/"...], 0x3299 /* 38 vars */) = 0
`
	if execdByLauncher(direct, script) {
		t.Error("a script exec'd by a fresh child: taken for a launcher")
	}
}
