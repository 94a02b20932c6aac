package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/sandbox"
)

// doctorReport mirrors `toh-exec doctor --json`.
type doctorReport struct {
	Rungs []struct {
		Backend     string            `json:"backend"`
		OK          bool              `json:"ok"`
		Detail      string            `json:"detail"`
		Cause       string            `json:"cause"`
		Remedy      string            `json:"remedy"`
		ABI         int               `json:"abi"`
		Enforcement map[string]string `json:"enforcement"`
	} `json:"rungs"`
	Effective struct {
		Backend string `json:"backend"`
		Summary string `json:"summary"`
	} `json:"effective"`
	ProbeCache struct {
		Path    string `json:"path"`
		Current bool   `json:"current"`
		State   string `json:"state"`
		Verdict string `json:"verdict"`
	} `json:"probeCache"`
}

func doctorJSON(t *testing.T, dir string, args ...string) (doctorReport, runResult) {
	t.Helper()
	r := toh(t, dir, nil, append([]string{"doctor", "--json"}, args...)...)
	var d doctorReport
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatalf("doctor --json is not one JSON object: %v\n%s\nstderr: %s", err, r.stdout, r.stderr)
	}
	for _, k := range []string{"rungs", "effective", "probeCache"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("doctor --json lacks %q: %s", k, r.stdout)
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatal(err)
	}
	return d, r
}

func TestDoctorOnThisHost(t *testing.T) {
	testutil.RequireBwrap(t)
	abi := testutil.RequireLandlockABI(t, 1)
	s := newScratch(t)
	cache := filepath.Join(s.beside, "cache", "probe.json")

	r := toh(t, s.ws, nil, "doctor", "--probe-cache", cache)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("doctor: exit %d stderr %q\n%s", r.code, r.stderr, r.stdout)
	}
	for _, want := range []string{
		"bwrap: ok — ",
		"landlock: ok (ABI " + strconv.Itoa(abi) + ") — landlock: ",
		"\neffective: bwrap (full) for read-only and workspace-write; network deny enforced\n",
		"probe cache: " + cache + ": missing — ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, r.stdout)
		}
	}

	d, r := doctorJSON(t, s.ws, "--probe-cache", cache)
	if r.code != 0 {
		t.Fatalf("doctor --json: exit %d %q", r.code, r.stderr)
	}
	if len(d.Rungs) != 2 || d.Rungs[0].Backend != "bwrap" || !d.Rungs[0].OK || d.Rungs[1].Backend != "landlock" || !d.Rungs[1].OK {
		t.Fatalf("rungs %+v", d.Rungs)
	}
	if d.Rungs[1].ABI != abi || d.Rungs[1].Enforcement["workspace-write"] != "partial" || d.Rungs[0].Enforcement["read-only"] != "full" {
		t.Fatalf("landlock rung %+v, want ABI %d", d.Rungs[1], abi)
	}
	if d.Effective.Backend != "bwrap" {
		t.Fatalf("effective %+v", d.Effective)
	}
	if d.ProbeCache.Path != cache || d.ProbeCache.State != "missing" || d.ProbeCache.Current {
		t.Fatalf("probe cache %+v", d.ProbeCache)
	}
	if _, err := os.Stat(cache); err == nil {
		t.Fatalf("doctor wrote the probe cache")
	}

	// After a confined run stored its verdict, doctor calls it current.
	if r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--probe-cache", cache, "--", "true"); r.code != 0 {
		t.Fatalf("confined run: %d %q", r.code, r.stderr)
	}
	d, _ = doctorJSON(t, s.ws, "--probe-cache", cache)
	if !d.ProbeCache.Current || d.ProbeCache.State != "current" || d.ProbeCache.Verdict != "bwrap" {
		t.Fatalf("probe cache after a run %+v", d.ProbeCache)
	}
}

func TestDoctorBwrapMissing(t *testing.T) {
	testutil.RequireLandlockABI(t, 1)
	s := newScratch(t)
	d, r := doctorJSON(t, s.ws, "--bwrap", "/nonexistent/bwrap", "--probe-cache", filepath.Join(s.beside, "probe.json"))
	if r.code != 0 {
		t.Fatalf("exit %d, want 0 (landlock confines): %q", r.code, r.stderr)
	}
	b := d.Rungs[0]
	if b.Backend != "bwrap" || b.OK || !strings.Contains(b.Cause, "not found") || !strings.Contains(b.Remedy, "apt-get install bubblewrap") {
		t.Fatalf("bwrap rung %+v", b)
	}
	if d.Effective.Backend != "landlock" || !strings.HasPrefix(d.Effective.Summary, "landlock ABI ") {
		t.Fatalf("effective %+v, want landlock", d.Effective)
	}
	text := toh(t, s.ws, nil, "doctor", "--bwrap", "/nonexistent/bwrap")
	if text.code != 0 || !strings.Contains(text.stdout, "bwrap: FAILED — ") || !strings.Contains(text.stdout, "\neffective: landlock ABI ") {
		t.Fatalf("text: exit %d\n%s", text.code, text.stdout)
	}
}

func TestDoctorShowsBwrapsOwnLine(t *testing.T) {
	testutil.RequireLandlockABI(t, 1)
	s := newScratch(t)
	const line = "bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces."
	fake := filepath.Join(s.beside, "bwrap")
	os.WriteFile(fake, []byte("#!/bin/sh\necho 'some noise' >&2\necho '"+line+"' >&2\nexit 1\n"), 0o755)
	d, r := doctorJSON(t, s.ws, "--bwrap", fake)
	if r.code != 0 {
		t.Fatalf("exit %d %q", r.code, r.stderr)
	}
	b := d.Rungs[0]
	if b.OK || b.Detail != line || !strings.Contains(b.Cause, line) {
		t.Fatalf("bwrap rung %+v, want bwrap's own line", b)
	}
	if d.Effective.Backend != "landlock" {
		t.Fatalf("effective %+v", d.Effective)
	}
	text := toh(t, s.ws, nil, "doctor", "--bwrap", fake)
	if !strings.Contains(text.stdout, "bwrap: FAILED — "+line+"\n") {
		t.Fatalf("text output lacks the line:\n%s", text.stdout)
	}
}

func TestDoctorCacheDisagrees(t *testing.T) {
	real := testutil.RequireBwrap(t)
	testutil.RequireLandlockABI(t, 1)
	s := newScratch(t)
	// A bwrap that fails until a flag file appears: the cached verdict (landlock) is
	// then out of date while its key (the same binary) still matches.
	flagFile := filepath.Join(s.beside, "bwrap-works")
	bw := filepath.Join(s.beside, "bwrap")
	os.WriteFile(bw, []byte("#!/bin/sh\n[ -e "+flagFile+" ] && exec "+real+" \"$@\"\necho 'bwrap: broken for now' >&2\nexit 1\n"), 0o755)
	cache := filepath.Join(s.beside, "probe.json")
	if r := toh(t, s.ws, nil, "--policy", s.noPolicy, "--bwrap", bw, "--probe-cache", cache, "--", "true"); r.code != 0 {
		t.Fatalf("confined run: %d %q", r.code, r.stderr)
	}
	d, _ := doctorJSON(t, s.ws, "--bwrap", bw, "--probe-cache", cache)
	if d.ProbeCache.State != "current" || d.ProbeCache.Verdict != "landlock" {
		t.Fatalf("before: %+v", d.ProbeCache)
	}
	os.WriteFile(flagFile, nil, 0o644)
	d, r := doctorJSON(t, s.ws, "--bwrap", bw, "--probe-cache", cache)
	if d.ProbeCache.State != "disagrees" || d.ProbeCache.Current || d.Effective.Backend != "bwrap" {
		t.Fatalf("after: %+v effective %+v (%q)", d.ProbeCache, d.Effective, r.stderr)
	}
}

func TestDoctorNothingConfines(t *testing.T) {
	// The real "nothing confines" host is the hostile-host test's business; here the
	// diagnosis is given, and the CLI must print it and exit 123.
	saved := diagnose
	t.Cleanup(func() { diagnose = saved })
	var got sandbox.Options
	diagnose = func(ctx context.Context, opts sandbox.Options) (sandbox.Diagnosis, error) {
		got = opts
		return sandbox.Diagnosis{
			Rungs: []sandbox.Rung{
				{Backend: sandbox.BackendBwrap, Detail: "bwrap: nope", Cause: "c1", Remedy: "r1"},
				{Backend: sandbox.BackendLandlock, Detail: "landlock-run: nope", Cause: "c2", Remedy: "r2"},
			},
			Effective: sandbox.Effective{Backend: sandbox.EffectiveNone, Summary: "none — every confined run fails closed with SANDBOX_UNAVAILABLE"},
		}, nil
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"doctor", "--bwrap", "/x/bwrap", "--probe-timeout", "7s", "--probe-cache", "/x/c.json"}, nil, &stdout, &stderr)
	if code != exitUnavailable {
		t.Fatalf("exit %d, want %d", code, exitUnavailable)
	}
	if got.BwrapPath != "/x/bwrap" || got.ProbeTimeout.String() != "7s" || got.Cache == nil || got.Cache.Path != "/x/c.json" || got.Self == "" {
		t.Fatalf("options %+v", got)
	}
	want := "bwrap: FAILED — bwrap: nope\n  cause: c1\n  remedy: r1\nlandlock: FAILED — landlock-run: nope\n  cause: c2\n  remedy: r2\n" +
		"effective: none — every confined run fails closed with SANDBOX_UNAVAILABLE\n"
	if !strings.HasPrefix(stdout.String(), want) {
		t.Fatalf("output\n%s\nwant prefix\n%s", stdout.String(), want)
	}
	stdout.Reset()
	if code := run([]string{"doctor", "--json"}, nil, &stdout, &stderr); code != exitUnavailable {
		t.Fatalf("--json exit %d", code)
	}
	var d doctorReport
	if err := json.Unmarshal(stdout.Bytes(), &d); err != nil || d.Effective.Backend != "none" || len(d.Rungs) != 2 {
		t.Fatalf("--json %v %s", err, stdout.String())
	}
}

func TestDoctorControlCharactersAreNeutralised(t *testing.T) {
	saved := diagnose
	t.Cleanup(func() { diagnose = saved })
	diagnose = func(ctx context.Context, opts sandbox.Options) (sandbox.Diagnosis, error) {
		return sandbox.Diagnosis{
			Rungs:     []sandbox.Rung{{Backend: sandbox.BackendBwrap, Detail: "bwrap: \x1b[2Jgone\nsecond", OK: true}},
			Effective: sandbox.Effective{Backend: "bwrap", Summary: "s"},
		}, nil
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"doctor"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(stdout.String(), "\x1b") || !strings.Contains(stdout.String(), "bwrap: \ufffd[2Jgone\n    second\n") {
		t.Fatalf("output %q", stdout.String())
	}
}

func TestDoctorUsage(t *testing.T) {
	dir := t.TempDir()
	r := toh(t, dir, nil, "doctor", "--help")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage:\n  toh-exec doctor [--json]") || r.stderr != "" {
		t.Fatalf("--help: %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"doctor", "--bogus"},
		{"doctor", "--probe-timeout", "0"},
		{"doctor", "--probe-timeout", "soon"},
		{"doctor", "--probe-cache", "relative.json"},
		{"doctor", "extra"},
	} {
		r := toh(t, dir, nil, args...)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "toh-exec: doctor: ") || !strings.Contains(r.stderr, "Run 'toh-exec --help'") {
			t.Errorf("%q: exit %d stdout %q stderr %q, want usage error", args, r.code, r.stdout, r.stderr)
		}
	}
}
