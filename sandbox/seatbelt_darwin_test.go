package sandbox

// The Seatbelt rung on macOS: what the provider promises (argv, facts, dialect), that
// the chain's sole candidate is selected without a probe, that a runner that cannot
// be spawned or that fails is SANDBOX_UNAVAILABLE, and runs through the real
// sandbox-exec. The end-to-end tests through the built binary are in
// cmd/toh-exec/seatbelt_darwin_test.go. Written on Linux and only compiled there
// (GOOS=darwin go vet); they run on a Mac (the Vagrant macos box runs them).

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// canonicalTempDir is t.TempDir() as the kernel spells it (/var is /private/var on
// macOS): Seatbelt matches resolved paths, and policy.Execution's roots are canonical.
func canonicalTempDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSeatbeltConfineFacts(t *testing.T) {
	root := canonicalTempDir(t)
	argv := []string{"/bin/sh", "-c", "echo hi"}
	for _, tc := range []struct {
		name    string
		pol     policy.Execution
		network policy.Network
	}{
		{"read-only", policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}, policy.NetworkAllow},
		{"read-only network deny", policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkDeny}, policy.NetworkDeny},
		{"workspace-write", policy.Execution{Mode: policy.WorkspaceWrite, WritableRoots: []string{root}, Network: policy.NetworkAllow}, policy.NetworkAllow},
		{"workspace-write network deny", policy.Execution{Mode: policy.WorkspaceWrite, WritableRoots: []string{root}, Network: policy.NetworkDeny}, policy.NetworkDeny},
		// A policy that names no network setting gets none denied, and says so.
		{"network unset", policy.Execution{Mode: policy.ReadOnly}, policy.NetworkAllow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newSeatbeltProvider().Confine(argv, tc.pol)
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string{"/usr/bin/sandbox-exec", "-p", SeatbeltProfile(tc.pol), "--"}, argv...)
			if !slices.Equal(c.Argv, want) {
				t.Fatalf("argv %q, want %q", c.Argv, want)
			}
			if !slices.Equal(c.Argv[1:], SeatbeltArgv(tc.pol, argv)) {
				t.Fatalf("argv after the runner is not SeatbeltArgv: %q", c.Argv)
			}
			if c.Backend != BackendSeatbelt || c.Enforcement != EnforcementFull || c.Network != tc.network {
				t.Fatalf("facts: backend %q enforcement %q network %q, want seatbelt full %q", c.Backend, c.Enforcement, c.Network, tc.network)
			}
			if denyRule := strings.Contains(c.Argv[2], "(deny network*)"); denyRule != (tc.network == policy.NetworkDeny) {
				t.Fatalf("network %q but the profile's (deny network*) present=%v: %s", tc.network, denyRule, c.Argv[2])
			}
			denial, rules := SeatbeltDialect()
			if !slices.Equal(c.DenialSignatures, denial) || !slices.Equal(c.DenialSignatures, []string{"operation not permitted"}) {
				t.Fatalf("denial signatures %q, want Seatbelt's own [operation not permitted]", c.DenialSignatures)
			}
			if c.RunnerFailureRules.Marker != "sandbox-exec: " || c.RunnerFailureRules.ExitStatus != 0 || len(c.RunnerFailureRules.Except) != 0 ||
				c.RunnerFailureRules.Marker != rules.Marker {
				t.Fatalf("runner failure rules %+v, want marker %q only", c.RunnerFailureRules, "sandbox-exec: ")
			}
			if c.SignalAsStatus || c.standIns != nil {
				t.Fatalf("sandbox-exec execs the command: no status translation, no stand-ins (%+v)", c)
			}
			c.Argv[len(c.Argv)-1] = "changed"
			if argv[len(argv)-1] != "echo hi" {
				t.Fatal("Confine's argv aliases the caller's")
			}
		})
	}
}

// TestSeatbeltSoleCandidateIsSelectedWithoutProbe: macOS's chain is Seatbelt alone
// (SPEC §4.1), selected without a probe and without touching the cache. The probe
// timeout is 1ns: had Select probed, the probe would have failed and Select returned
// no provider.
func TestSeatbeltSoleCandidateIsSelectedWithoutProbe(t *testing.T) {
	cache := filepath.Join(canonicalTempDir(t), "cache", "probe.json")
	for _, refresh := range []bool{false, true} {
		c, err := NewChain(Options{ProbeTimeout: time.Nanosecond, Cache: &ProbeCache{Path: cache}, RefreshProbe: refresh})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Candidates) != 1 || c.Candidates[0].Backend() != BackendSeatbelt {
			t.Fatalf("macOS chain %v, want seatbelt alone", c.Candidates)
		}
		p, results := c.Select(context.Background(), true)
		if p == nil || p.Backend() != BackendSeatbelt || results != nil {
			t.Fatalf("refresh=%v: Select = %v, %v; want seatbelt and no probe results", refresh, p, results)
		}
		conf, err := c.Confine(context.Background(), []string{"/usr/bin/true"}, policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow})
		if err != nil || conf.Backend != BackendSeatbelt {
			t.Fatalf("refresh=%v: Confine = %+v, %v", refresh, conf, err)
		}
		if _, err := os.Lstat(filepath.Dir(cache)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("refresh=%v: the sole candidate touched the probe cache (%v)", refresh, err)
		}
	}
	if _, err := NewChain(Options{Runner: BackendSeatbelt, ProbeTimeout: time.Second}); err != nil {
		t.Fatalf("--runner seatbelt: %v", err)
	}
	for _, b := range []Backend{BackendBwrap, BackendLandlock} {
		if _, err := NewChain(Options{Runner: b, ProbeTimeout: time.Second}); err == nil {
			t.Fatalf("--runner %s is accepted on macOS", b)
		}
	}
	c, _ := NewChain(Options{ProbeTimeout: time.Second})
	if _, err := c.Confine(context.Background(), []string{"/usr/bin/true"}, policy.Execution{Mode: policy.DangerFullAccess}); err == nil {
		t.Fatal("danger-full-access reached the Seatbelt provider")
	}
}

// TestSeatbeltRunnerThatCannotRunIsUnavailable: sandbox-exec's path is fixed, so the
// runner is swapped in the Confined argv; Run takes the same path as for a missing
// /usr/bin/sandbox-exec. Every case is SANDBOX_UNAVAILABLE with the runner's detail,
// and the command provably did not run. A runner line outranks the denial dialect.
func TestSeatbeltRunnerThatCannotRunIsUnavailable(t *testing.T) {
	dir := canonicalTempDir(t)
	ran := filepath.Join(dir, "ran")
	noExec := filepath.Join(dir, "sandbox-exec-noexec")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\nexec \"$@\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	failing := filepath.Join(dir, "sandbox-exec-failing")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho 'noise' >&2\necho 'sandbox-exec: sandbox_apply: Operation not permitted' >&2\nexit 71\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	pol := policy.Execution{Mode: policy.WorkspaceWrite, WritableRoots: []string{dir}, Network: policy.NetworkAllow}
	for _, tc := range []struct{ name, runner, detail string }{
		{"missing", filepath.Join(dir, "no-such-sandbox-exec"), "no such file or directory"},
		{"not executable", noExec, "permission denied"},
		{"fatal line", failing, "sandbox-exec: sandbox_apply: Operation not permitted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newSeatbeltProvider().Confine([]string{"/bin/sh", "-c", "echo x > " + ran}, pol)
			if err != nil {
				t.Fatal(err)
			}
			c.Argv[0] = tc.runner
			var stdout, stderr bytes.Buffer
			facts, err := Run(c, pol, dir, os.Environ(), Stdio{Stdout: &stdout, Stderr: &stderr})
			if _, serr := os.Lstat(ran); !errors.Is(serr, os.ErrNotExist) {
				t.Fatalf("the command ran (%v)", serr)
			}
			var ue *UnavailableError
			if !errors.As(err, &ue) || ue.Code() != "SANDBOX_UNAVAILABLE" {
				t.Fatalf("err = %v, want *UnavailableError", err)
			}
			if !facts.RunnerFailed || facts.Denied || facts.Backend != BackendSeatbelt {
				t.Fatalf("facts %+v, want a Seatbelt runner failure and no denial", facts)
			}
			if !strings.Contains(strings.ToLower(ue.RunnerFailure), strings.ToLower(tc.detail)) ||
				!strings.Contains(ue.Error(), " Runner failure: ") ||
				!strings.HasPrefix(ue.Error(), `sandbox mode "workspace-write" is requested but no sandbox backend is usable on this host;`) {
				t.Fatalf("error %q (runner failure %q), want the exact text with %q", ue.Error(), ue.RunnerFailure, tc.detail)
			}
		})
	}
}

// TestSeatbeltRunsOnThisMac runs the real sandbox-exec: the probe passes, a read-only
// run is denied in Seatbelt's dialect while reads and /dev/null work, and a
// workspace-write run lands inside its root and is denied beside it.
func TestSeatbeltRunsOnThisMac(t *testing.T) {
	testutil.RequireSeatbelt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := newSeatbeltProvider().Probe(ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
	dir := canonicalTempDir(t)
	ws, beside := filepath.Join(dir, "ws"), filepath.Join(dir, "beside")
	for _, d := range []string{ws, beside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(pol policy.Execution, script string) (Facts, string, string) {
		t.Helper()
		c, err := newSeatbeltProvider().Confine([]string{"/bin/sh", "-c", script}, pol)
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		facts, err := Run(c, pol, ws, os.Environ(), Stdio{Stdout: &stdout, Stderr: &stderr})
		if err != nil {
			t.Fatalf("%q: %v (stderr %q)", script, err, stderr.String())
		}
		if facts.Backend != BackendSeatbelt || facts.Enforcement != EnforcementFull || facts.RunnerFailed {
			t.Fatalf("%q: facts %+v", script, facts)
		}
		return facts, stdout.String(), stderr.String()
	}

	ro := policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}
	facts, stdout, stderr := run(ro, "cat notes.txt && echo sink > /dev/null")
	if facts.ExitCode != 0 || facts.Denied || stdout != "notes" {
		t.Fatalf("read-only read: %+v %q %q", facts, stdout, stderr)
	}
	facts, _, stderr = run(ro, "echo x > new.txt")
	if facts.ExitCode == 0 || !facts.Denied || !strings.Contains(strings.ToLower(stderr), "operation not permitted") {
		t.Fatalf("read-only write: %+v %q, want a denial in Seatbelt's dialect", facts, stderr)
	}
	if _, err := os.Lstat(filepath.Join(ws, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the denied write landed (%v)", err)
	}

	ww := policy.Execution{Mode: policy.WorkspaceWrite, WritableRoots: []string{ws}, Network: policy.NetworkAllow}
	facts, _, stderr = run(ww, "printf in > in.txt")
	if b, err := os.ReadFile(filepath.Join(ws, "in.txt")); facts.ExitCode != 0 || facts.Denied || err != nil || string(b) != "in" {
		t.Fatalf("workspace-write inside: %+v %q, file %q %v", facts, stderr, b, err)
	}
	facts, _, stderr = run(ww, "printf out > "+filepath.Join(beside, "out.txt"))
	if facts.ExitCode == 0 || !facts.Denied {
		t.Fatalf("workspace-write beside: %+v %q, want denied", facts, stderr)
	}
	if _, err := os.Lstat(filepath.Join(beside, "out.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the write beside the root landed (%v)", err)
	}
}
