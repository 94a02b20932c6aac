//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// legs maps toh.leg=N to its checks. Each leg first asserts that the host's setup took
// effect (kernel series, Landlock ABI, user namespaces, LSM list), then the outcomes.
var legs = map[string]func(*reporter){
	"1": leg1OldLandlock,
	"2": leg2CurrentKernel,
	"3": leg3NoUserNamespaces,
	"4": leg4NothingConfines,
	"5": leg5NoFuseAccess,
}

const (
	noticePartial = "landlock-run: partial enforcement (older Landlock ABI)"
	probeFull     = "landlock: fully enforced"
	probePartial  = "landlock: partially enforced (older ABI)"
	exitPartial   = 122
	exitUnavail   = 123
)

// leg1OldLandlock: Debian's 6.1 has Landlock ABI 2, so the Landlock rung is partial and
// --require-full refuses it, while bwrap stays full; the fence works.
func leg1OldLandlock(r *reporter) {
	kernelSeries(r, "6.1.")
	abi := landlockABI()
	r.add("landlock-abi", "1..4", itoa(abi), abi >= 1 && abi < 5)
	landlockProbe(r, probePartial)

	// The Landlock rung: partial, with the exact notice, refused by --require-full.
	rungRun(r, "ll-ro", []string{"--runner", "landlock"}, "landlock", "partial")
	res := toh("--runner", "landlock", "--", "true")
	notices := countLines(res.stderr, noticePartial)
	r.add("ll-notice", "exit=0, stderr is exactly 1 line: "+noticePartial,
		fmt.Sprintf("exit=%d, %d notice line(s), %d other line(s)", res.code, notices, countLines(res.stderr, "")-notices),
		res.code == 0 && notices == 1 && countLines(res.stderr, "") == 1)
	if res.code != 0 || notices != 1 {
		r.detail("ll-notice", res.stderr)
	}
	requireFullRefused(r, "ll-require-full-ro", "--runner", "landlock")
	requireFullRefused(r, "ll-require-full-ww", "--runner", "landlock", "--mode", "workspace-write")
	deniedWrite(r, "ll-deny", "--runner", "landlock")
	allowedWrite(r, "ll-ww-write", "landlock", "partial", "--runner", "landlock")

	// The bwrap rung is unaffected by the Landlock ABI.
	rungRun(r, "bwrap-ro", []string{"--runner", "bwrap"}, "bwrap", "full")
	requireFullAccepted(r, "bwrap-require-full", "--runner", "bwrap")
	deniedWrite(r, "bwrap-deny", "--runner", "bwrap")
	chainPicks(r, "chain", "bwrap", "full")

	// fuse is a module in Debian's 6.1: the image carries fuse.ko and init loads it.
	fi, err := os.Stat("/dev/fuse")
	r.add("fuse-device", "/dev/fuse is a character device", fuseDevText(fi, err), err == nil && fi.Mode()&os.ModeCharDevice != 0)
	fenceAsRoot(r)
	canary(r)
}

// leg2CurrentKernel: Debian's 6.12 (Landlock ABI >= 5): both rungs full for read-only;
// workspace-write is full on bwrap and partial on Landlock by design (metadata beside
// the roots and protected paths are not governed there).
func leg2CurrentKernel(r *reporter) {
	kernelSeries(r, "6.12.")
	abi := landlockABI()
	r.add("landlock-abi", ">=5", itoa(abi), abi >= 5)
	landlockProbe(r, probeFull)

	rungRun(r, "ll-ro", []string{"--runner", "landlock"}, "landlock", "full")
	res := toh("--runner", "landlock", "--", "true")
	r.add("ll-no-notice", "exit=0, empty stderr", fmt.Sprintf("exit=%d, %d stderr line(s)", res.code, countLines(res.stderr, "")),
		res.code == 0 && res.stderr == "")
	requireFullAccepted(r, "ll-require-full-ro", "--runner", "landlock")
	deniedWrite(r, "ll-deny", "--runner", "landlock")
	rungRun(r, "ll-ww", []string{"--runner", "landlock", "--mode", "workspace-write"}, "landlock", "partial")
	allowedWrite(r, "ll-ww-write", "landlock", "partial", "--runner", "landlock")

	rungRun(r, "bwrap-ro", []string{"--runner", "bwrap"}, "bwrap", "full")
	requireFullAccepted(r, "bwrap-require-full", "--runner", "bwrap")
	deniedWrite(r, "bwrap-deny", "--runner", "bwrap")
	rungRun(r, "bwrap-ww", []string{"--runner", "bwrap", "--mode", "workspace-write"}, "bwrap", "full")
	allowedWrite(r, "bwrap-ww-write", "bwrap", "full", "--runner", "bwrap")
	chainPicks(r, "chain", "bwrap", "full")
	canary(r)
}

// leg3NoUserNamespaces: user.max_user_namespaces=0 (set on the kernel command line).
// bwrap cannot start, doctor says why, the chain falls to Landlock, and confined runs
// still deny.
func leg3NoUserNamespaces(r *reporter) {
	kernelSeries(r, "6.12.")
	userNamespacesOff(r)
	abi := landlockABI()
	r.add("landlock-abi", ">=5", itoa(abi), abi >= 5)

	bwrapFails(r, "bwrap-runner")
	doctor(r, "doctor", 0, map[string]string{"bwrap": "user.max_user_namespaces = 0"}, "landlock")
	chainPicks(r, "chain", "landlock", "full")
	deniedWrite(r, "chain-deny")
	deniedWrite(r, "chain-ww-deny-outside", "--mode", "workspace-write")
	allowedWrite(r, "chain-ww-write", "landlock", "partial")
	canary(r)
}

// leg4NothingConfines: Landlock left out of lsm= and no user namespaces. Every
// confined run fails closed with SANDBOX_UNAVAILABLE and provably does not run;
// danger-full-access still runs.
func leg4NothingConfines(r *reporter) {
	kernelSeries(r, "6.12.")
	userNamespacesOff(r)
	lsm := readTrim("/sys/kernel/security/lsm")
	r.add("lsm-list", "no landlock", lsm, !strings.Contains(lsm, "landlock") && !strings.HasPrefix(lsm, "error"))
	abi := landlockABI()
	r.add("landlock-abi", "0 (disabled)", itoa(abi), abi == 0)
	res := asUser(tohExec, "__landlock-run", "--probe")
	line := firstLine(res.stderr, "")
	r.add("landlock-probe", "exit=125, one landlock-run: line", fmt.Sprintf("exit=%d, %s", res.code, orNone(line)),
		res.code == 125 && strings.HasPrefix(line, "landlock-run: ") && countLines(res.stderr, "") == 1)

	for _, c := range []struct {
		name string
		args []string
	}{
		{"chain-ro", nil},
		{"chain-ww", []string{"--mode", "workspace-write"}},
		{"bwrap-ro", []string{"--runner", "bwrap"}},
		{"bwrap-ww", []string{"--runner", "bwrap", "--mode", "workspace-write"}},
		{"landlock-ro", []string{"--runner", "landlock"}},
		{"landlock-ww", []string{"--runner", "landlock", "--mode", "workspace-write"}},
	} {
		failsClosed(r, c.name, c.args...)
	}
	res = toh("--mode", "danger-full-access", "--json", "--", "sh", "-c", "echo ran > danger.marker")
	r.add("danger-full-access", "exit=0, marker present", fmt.Sprintf("exit=%d, marker %s", res.code, presence(wsPath("danger.marker"))),
		res.code == 0 && exists(wsPath("danger.marker")))
	doctor(r, "doctor", exitUnavail, map[string]string{
		"bwrap":    "user.max_user_namespaces = 0",
		"landlock": "disabled at boot",
	}, "none")
	canary(r)
}

// leg5NoFuseAccess: an unprivileged user without access to /dev/fuse cannot mount the
// fence; toh-mount says so and exits non-zero. With access (0666, as Debian's udev
// rules set it) the same command mounts: the positive control.
func leg5NoFuseAccess(r *reporter) {
	kernelSeries(r, "6.12.")
	fenceUnprivileged(r)
	canary(r)
}

// kernelSeries asserts the guest booted the kernel the leg is about.
func kernelSeries(r *reporter, prefix string) {
	r.add("kernel", prefix+"*", r.kernel, strings.HasPrefix(r.kernel, prefix))
}

func landlockProbe(r *reporter, want string) {
	res := asUser(tohExec, "__landlock-run", "--probe")
	got := strings.TrimSpace(res.stdout)
	r.add("landlock-probe", want, fmt.Sprintf("%s (exit=%d)", got, res.code), got == want && res.code == 0)
}

func userNamespacesOff(r *reporter) {
	v := readTrim("/proc/sys/user/max_user_namespaces")
	r.add("userns-max", "0", v, v == "0")
}

// rungRun runs `true` read-only (or as args say) and checks backend and enforcement
// in the JSON result.
func rungRun(r *reporter, name string, args []string, backend, enforcement string) {
	res := toh(append(args, "--json", "--", "true")...)
	want := fmt.Sprintf("exit=0 backend=%s enforcement=%s", backend, enforcement)
	got := res.summary()
	r.add(name, want, got, got == want)
	if got != want {
		r.detail(name, res.allOutput())
	}
}

// requireFullRefused: --require-full on a partial rung exits 122 and the command
// does not run (its marker, which it could write if it ran, is absent).
func requireFullRefused(r *reporter, name string, args ...string) {
	marker := name + ".marker"
	res := toh(append(args, "--require-full", "--json", "--", "sh", "-c", "echo ran; echo ran > "+marker+"; echo ran > /tmp/"+marker)...)
	e, _ := res.envelope()
	ran := strings.Contains(e.Stdout, "ran") || exists(wsPath(marker)) || exists("/tmp/"+marker)
	code := ""
	if e.Error != nil {
		code = e.Error.Code
	}
	r.add(name, fmt.Sprintf("exit=%d ENFORCEMENT_PARTIAL, did not run", exitPartial),
		fmt.Sprintf("exit=%d %s, %s", res.code, orNone(code), ranText(ran)),
		res.code == exitPartial && code == "ENFORCEMENT_PARTIAL" && !ran)
}

// requireFullAccepted: on a full rung --require-full runs the command (positive
// control for requireFullRefused).
func requireFullAccepted(r *reporter, name string, args ...string) {
	res := toh(append(args, "--require-full", "--json", "--", "sh", "-c", "echo ran")...)
	e, _ := res.envelope()
	ran := strings.TrimSpace(e.Stdout) == "ran"
	r.add(name, "exit=0, ran", fmt.Sprintf("exit=%d, %s", res.code, ranText(ran)), res.code == 0 && ran)
}

// deniedWrite: a write to a new file in the workspace under read-only (or, with
// --mode workspace-write, to a file outside the writable roots) is denied and the file
// is absent afterwards.
func deniedWrite(r *reporter, name string, args ...string) {
	target := wsPath(name + ".denied")
	if containsArg(args, "workspace-write") {
		target = home + "/" + name + ".outside"
	}
	res := toh(append(args, "--json", "--", "sh", "-c", "echo x > "+target)...)
	e, _ := res.envelope()
	denied := e.Result != nil && e.Result.Denied
	r.add(name, "exit!=0, denied, file absent",
		fmt.Sprintf("exit=%d, denied=%t, file %s (%s)", res.code, denied, presence(target), backendOf(e)),
		res.code != 0 && res.code != exitUnavail && denied && !exists(target))
	if !denied {
		r.detail(name, res.allOutput())
	}
}

// allowedWrite: under workspace-write a write in the workspace lands (positive control
// for deniedWrite).
func allowedWrite(r *reporter, name, backend, enforcement string, args ...string) {
	target := wsPath(name + ".allowed")
	res := toh(append(args, "--mode", "workspace-write", "--json", "--", "sh", "-c", "echo landed > "+target)...)
	got := readTrim(target)
	want := fmt.Sprintf("exit=0 backend=%s enforcement=%s, file landed", backend, enforcement)
	obs := fmt.Sprintf("%s, file %s", res.summary(), map[bool]string{true: "landed", false: "absent"}[got == "landed"])
	r.add(name, want, obs, obs == want)
	if obs != want {
		r.detail(name, res.allOutput())
	}
}

// chainPicks: the default chain, probed afresh, selects backend.
func chainPicks(r *reporter, name, backend, enforcement string) {
	res := chain("--json", "--", "true")
	want := fmt.Sprintf("exit=0 backend=%s enforcement=%s", backend, enforcement)
	got := res.summary()
	r.add(name, want, got, got == want)
	if got != want {
		r.detail(name, res.allOutput())
	}
}

// bwrapFails: the bwrap rung cannot start; toh-exec reports SANDBOX_UNAVAILABLE with
// bwrap's own line as the runner failure, and the command did not run.
func bwrapFails(r *reporter, name string) {
	res := toh("--runner", "bwrap", "--mode", "workspace-write", "--json", "--", "sh", "-c", "echo ran; echo ran > "+name+".marker")
	e, _ := res.envelope()
	code, failure := "", ""
	if e.Error != nil {
		code = e.Error.Code
	}
	if e.Result != nil {
		failure = e.Result.RunnerFailure
	}
	ran := strings.Contains(e.Stdout, "ran") || exists(wsPath(name+".marker"))
	r.add(name, fmt.Sprintf("exit=%d SANDBOX_UNAVAILABLE, runner failure 'bwrap: ...', did not run", exitUnavail),
		fmt.Sprintf("exit=%d %s, runner failure '%s', %s", res.code, orNone(code), failure, ranText(ran)),
		res.code == exitUnavail && code == "SANDBOX_UNAVAILABLE" && strings.Contains(failure, "bwrap: ") && !ran)
}

// failsClosed: the run is refused with SANDBOX_UNAVAILABLE and provably did not run:
// it would have printed "ran" and left markers in the workspace and in /tmp.
func failsClosed(r *reporter, name string, args ...string) {
	marker := name + ".marker"
	res := toh(append(append([]string{"--refresh-probe", "--probe-timeout", probeTimeout}, args...),
		"--json", "--", "sh", "-c", "echo ran; echo ran > "+marker+"; echo ran > /tmp/"+marker)...)
	e, _ := res.envelope()
	code := ""
	if e.Error != nil {
		code = e.Error.Code
	}
	ran := strings.Contains(e.Stdout, "ran") || exists(wsPath(marker)) || exists("/tmp/"+marker)
	r.add(name, fmt.Sprintf("exit=%d SANDBOX_UNAVAILABLE, did not run", exitUnavail),
		fmt.Sprintf("exit=%d %s, %s", res.code, orNone(code), ranText(ran)),
		res.code == exitUnavail && code == "SANDBOX_UNAVAILABLE" && !ran)
	if res.code != exitUnavail {
		r.detail(name, res.allOutput())
	}
}

// doctorReport is the part of `toh-exec doctor --json` the legs judge.
type doctorReport struct {
	Rungs []struct {
		Backend string `json:"backend"`
		OK      bool   `json:"ok"`
		Cause   string `json:"cause"`
		Remedy  string `json:"remedy"`
	} `json:"rungs"`
	Effective struct {
		Backend string `json:"backend"`
	} `json:"effective"`
}

// rung returns backend's verdict as "ok" or "failed: <cause>", and the cause.
func (d doctorReport) rung(backend string) (ok bool, cause string) {
	for _, r := range d.Rungs {
		if r.Backend == backend {
			return r.OK, r.Cause
		}
	}
	return false, "(rung not reported)"
}

// doctor runs `toh-exec doctor --json` as the user and checks which rungs fail, that
// each failure's measured cause contains the given text, and the effective backend.
func doctor(r *reporter, name string, wantExit int, failing map[string]string, effective string) {
	res := toh("doctor", "--json", "--probe-timeout", probeTimeout)
	var d doctorReport
	err := json.Unmarshal([]byte(res.stdout), &d)
	want := []string{fmt.Sprintf("exit=%d", wantExit)}
	got := []string{fmt.Sprintf("exit=%d", res.code)}
	ok := err == nil && res.code == wantExit && d.Effective.Backend == effective
	for _, backend := range []string{"bwrap", "landlock"} {
		rungOK, cause := d.rung(backend)
		if text, fails := failing[backend]; fails {
			want = append(want, fmt.Sprintf("%s failed, cause has %q", backend, text))
			switch {
			case rungOK:
				got = append(got, backend+" ok")
			case strings.Contains(cause, text):
				got = append(got, fmt.Sprintf("%s failed, cause has %q", backend, text))
			default:
				got = append(got, fmt.Sprintf("%s failed, cause %q", backend, cause))
			}
			ok = ok && !rungOK && strings.Contains(cause, text)
		} else {
			want = append(want, backend+" ok")
			if rungOK {
				got = append(got, backend+" ok")
			} else {
				got = append(got, fmt.Sprintf("%s failed, cause %q", backend, cause))
			}
			ok = ok && rungOK
		}
	}
	want = append(want, "effective="+effective)
	got = append(got, "effective="+d.Effective.Backend)
	if err != nil {
		got = append(got, "no JSON: "+err.Error())
	}
	r.add(name, strings.Join(want, ", "), strings.Join(got, ", "), ok)
	if !ok {
		r.detail(name, res.stdout+res.stderr)
	}
}

func canary(r *reporter) {
	got, ok := canaryIntact()
	r.add("canary", "intact", got, ok)
}

// countLines counts the lines of s equal to line (all non-empty lines when line is "").
func countLines(s, line string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if (line == "" && strings.TrimSpace(l) != "") || (line != "" && l == line) {
			n++
		}
	}
	return n
}

func containsArg(args []string, a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}

func backendOf(e envelope) string {
	if e.Result == nil || e.Result.Backend == "" {
		return "no backend"
	}
	return "backend=" + e.Result.Backend
}

func ranText(ran bool) string {
	if ran {
		return "ran"
	}
	return "did not run"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func fuseDevText(fi os.FileInfo, err error) string {
	if err != nil {
		return err.Error()
	}
	if fi.Mode()&os.ModeCharDevice != 0 {
		return "/dev/fuse is a character device"
	}
	return "/dev/fuse is " + fi.Mode().String()
}
