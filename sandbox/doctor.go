package sandbox

// Doctor: why each rung of the runner chain confines or not, measured on this host.
//
// [Diagnose] runs every rung's real functional probe (the one the chain runs, without
// reading or writing the probe cache), measures the host facts a failure can come from
// (platform code: doctor_linux.go, doctor_other.go), and hands both to [diagnose], a pure
// function of those facts, which names the cause and its remedy. The effective
// confinement is the first passing rung in chain order: exactly what a confined run
// would pick, given the same Options.
//
// A cause is only ever named from a measurement (a sysctl's value, an errno, a file's
// existence, the runner's own line); when nothing measured explains a failure, the
// runner's own line is the cause.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/toh-sandbox/toh/policy"
)

// Diagnosis is what `toh-exec doctor` reports.
type Diagnosis struct {
	Rungs      []Rung      `json:"rungs"`
	Effective  Effective   `json:"effective"`
	ProbeCache CacheStatus `json:"probeCache"`
	Host       HostFacts   `json:"host"`
}

// Confines reports whether some rung can confine a run on this host.
func (d Diagnosis) Confines() bool { return d.Effective.Backend != EffectiveNone }

// Rung is one rung's probe verdict and, when it failed or enforces less than full, the
// measured cause and a remedy.
type Rung struct {
	Backend Backend `json:"backend"`
	OK      bool    `json:"ok"`
	// Detail is the probe's own output: its error (the runner's line) when it failed.
	Detail string `json:"detail"`
	// Cause says why the rung failed or, when it passed, why it enforces less than
	// full or cannot enforce network deny; empty when there is nothing to say.
	Cause  string `json:"cause,omitempty"`
	Remedy string `json:"remedy,omitempty"`
	// ABI is the kernel's Landlock ABI (landlock rung only).
	ABI int `json:"abi,omitempty"`
	// Enforcement is what a run in each confined mode would get from this rung, when
	// it passed.
	Enforcement map[policy.Mode]Enforcement `json:"enforcement,omitempty"`
	// NotGoverned names, per mode enforced only partially, the file effects the rung
	// does not govern.
	NotGoverned map[policy.Mode][]string `json:"notGoverned,omitempty"`
	// NetworkDeny is "enforced" or "fails closed" (such runs are refused).
	NetworkDeny string `json:"networkDeny,omitempty"`
	// Ruleset is the Landlock ruleset the probe applies, in go-landlock's
	// Config.String() spirit (landlock rung only).
	Ruleset string `json:"ruleset,omitempty"`
}

// EffectiveNone is Effective.Backend when no rung confines.
const EffectiveNone = "none"

// Effective is the confinement a run would get: the first passing rung.
type Effective struct {
	Backend string `json:"backend"`
	Summary string `json:"summary"`
}

// CacheStatus says where the probe cache is and whether its verdict agrees with what
// doctor measured. Doctor neither trusts nor writes the cache.
type CacheStatus struct {
	Path string `json:"path"`
	// Current is true when a confined run would use the cached verdict and it names
	// the backend doctor measured.
	Current bool `json:"current"`
	// State is one of: none (no cache location), unused (the chain has one candidate,
	// which is never probed), missing, damaged, stale (stored for another kernel or
	// runner binary: the next run probes again), disagrees (a run would trust a verdict
	// that is no longer true), current.
	State string `json:"state"`
	// Verdict is the cached backend ("none" when it cached "unavailable").
	Verdict string `json:"verdict,omitempty"`
	Note    string `json:"note"`
}

// HostFacts is everything doctor measured. [diagnose] decides from these alone.
type HostFacts struct {
	OS     string `json:"os"`
	Kernel string `json:"kernel,omitempty"`
	UID    int    `json:"uid"`
	// Seccomp is this process's seccomp mode from /proc/self/status ("disabled",
	// "strict", "filter"); a filter is inherited by every runner.
	Seccomp      string        `json:"seccomp,omitempty"`
	ProbeTimeout time.Duration `json:"-"`

	Bwrap    BwrapFacts    `json:"bwrap"`
	UserNS   UserNSFacts   `json:"userns"`
	AppArmor AppArmorFacts `json:"apparmor"`
	Landlock LandlockFacts `json:"landlock"`
	// LSMs is the active LSM list (/sys/kernel/security/lsm, else lsm_list_modules(2));
	// nil when neither could be read.
	LSMs []string `json:"lsms,omitempty"`
	// SandboxExec says whether /usr/bin/sandbox-exec exists (macOS).
	SandboxExec bool `json:"sandboxExec,omitempty"`

	// Probes are the chain's candidates' probe outcomes, in chain order.
	Probes []ProbeFact `json:"-"`
}

// BwrapFacts describes the binary the bwrap rung runs.
type BwrapFacts struct {
	Path string `json:"path"`
	// Explicit is true when the operator named the path (--bwrap).
	Explicit   bool     `json:"explicit"`
	Searched   []string `json:"searched,omitempty"`
	Exists     bool     `json:"exists"`
	Executable bool     `json:"executable"`
	// SetuidRoot: bwrap then creates namespaces with its own privilege and needs no
	// unprivileged user namespace.
	SetuidRoot bool `json:"setuidRoot"`
}

// UserNSFacts are the knobs that decide whether an unprivileged process may create a
// user namespace. A nil sysctl does not exist on this kernel.
type UserNSFacts struct {
	// NeedsUserNS is false when bwrap runs as root or setuid root: it then creates
	// its namespaces without a user namespace, and the knobs below do not apply.
	NeedsUserNS             bool `json:"needsUserns"`
	MaxUserNamespaces       *int `json:"maxUserNamespaces,omitempty"`
	UnprivilegedUsernsClone *int `json:"unprivilegedUsernsClone,omitempty"`
	// CloneErrno is the errno name of doctor's own clone(2) with the namespace flags
	// bwrap's probe needs, "" when it succeeded, "unknown" when it was not measured.
	CloneErrno string `json:"cloneErrno"`
}

// AppArmorFacts describe Ubuntu's restriction of unprivileged user namespaces.
type AppArmorFacts struct {
	RestrictUnprivilegedUserns *int `json:"restrictUnprivilegedUserns,omitempty"`
	// Profiles are files under /etc/apparmor.d that attach to the bwrap binary and
	// allow userns.
	Profiles []string `json:"profiles,omitempty"`
	// LoadedKnown: the loaded-profile list was readable; BwrapLoaded: it names a
	// bwrap profile.
	LoadedKnown bool `json:"loadedKnown"`
	BwrapLoaded bool `json:"bwrapLoaded"`
	// ExtraProfile is a shipped but uninstalled bwrap-userns-restrict profile.
	ExtraProfile string `json:"extraProfile,omitempty"`
}

// LandlockFacts describe the kernel's Landlock.
type LandlockFacts struct {
	// ABI is the answer of the version query, 0 when it failed with Errno.
	ABI   int    `json:"abi"`
	Errno string `json:"errno,omitempty"`
	// SeccompFilter: toh's seccomp filter (metadata and sockets) exists for this
	// architecture.
	SeccompFilter bool `json:"seccompFilter"`
	// ProbeText is what the launcher's probe prints for this kernel, and Ruleset the
	// ruleset it applies; both empty when Landlock is unavailable.
	ProbeText string `json:"probeText,omitempty"`
	Ruleset   string `json:"ruleset,omitempty"`
}

// ProbeFact is one candidate's probe outcome.
type ProbeFact struct {
	Backend  Backend
	Err      string // "" when the probe passed
	TimedOut bool
}

// Diagnose probes every rung of the chain opts describes (opts.Runner is ignored:
// doctor diagnoses the whole chain) and explains the outcome. It never reads the cache
// to decide and never writes it.
func Diagnose(ctx context.Context, opts Options) (Diagnosis, error) {
	opts.Runner = ""
	c, err := NewChain(opts)
	if err != nil {
		return Diagnosis{}, err
	}
	var probes []ProbeFact
	for _, p := range c.Candidates {
		pctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
		err := p.Probe(pctx)
		cancel()
		pf := ProbeFact{Backend: p.Backend()}
		if err != nil {
			pf.Err = err.Error()
			pf.TimedOut = errors.Is(err, context.DeadlineExceeded)
		}
		probes = append(probes, pf)
	}
	mctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
	facts := measureHost(mctx, c, opts)
	cancel()
	facts.ProbeTimeout = c.ProbeTimeout
	facts.Probes = probes
	d := diagnose(facts)
	d.ProbeCache = c.cacheStatus(d.Effective.Backend)
	return d, nil
}

// diagnose turns measured facts into rungs and the effective confinement. It reads
// nothing but f.
func diagnose(f HostFacts) Diagnosis {
	d := Diagnosis{Host: f, Effective: Effective{Backend: EffectiveNone}}
	for _, p := range f.Probes {
		var r Rung
		switch p.Backend {
		case BackendBwrap:
			r = diagnoseBwrap(f, p)
		case BackendLandlock:
			r = diagnoseLandlock(f, p)
		case BackendSeatbelt:
			r = diagnoseSeatbelt(f, p)
		default:
			r = Rung{Backend: p.Backend, OK: p.Err == "", Detail: p.Err}
		}
		d.Rungs = append(d.Rungs, r)
		if r.OK && d.Effective.Backend == EffectiveNone {
			d.Effective = Effective{Backend: string(r.Backend), Summary: effectiveSummary(r)}
		}
	}
	if d.Effective.Backend == EffectiveNone {
		d.Effective.Summary = "none — every confined run fails closed with " + UnavailableCode
		if len(f.Probes) == 0 {
			d.Effective.Summary += " (no sandbox backend on this platform)"
		}
	}
	return d
}

// String is the one-line effective confinement, like go-landlock's Config.String().
func (e Effective) String() string { return "effective: " + e.Summary }

func effectiveSummary(r Rung) string {
	switch r.Backend {
	case BackendLandlock:
		s := fmt.Sprintf("landlock ABI %d (%s)", r.ABI, landlockModesString(r))
		return s + "; network deny " + r.NetworkDeny
	default:
		return fmt.Sprintf("%s (full) for read-only and workspace-write; network deny %s", r.Backend, r.NetworkDeny)
	}
}

func landlockModesString(r Rung) string {
	var parts []string
	for _, m := range []policy.Mode{policy.ReadOnly, policy.WorkspaceWrite} {
		s := fmt.Sprintf("%s %s", m, r.Enforcement[m])
		if gaps := r.NotGoverned[m]; len(gaps) > 0 {
			s += ": " + strings.Join(gaps, ", ")
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// landlockGaps names the file effects a Landlock run in mode m does not govern (see
// the ABI table in landlock_launcher.go).
func landlockGaps(m policy.Mode, abi int, seccompOK bool) []string {
	var gaps []string
	if m == policy.WorkspaceWrite {
		gaps = append(gaps, "metadata outside roots", "protected paths")
	} else if !seccompOK {
		gaps = append(gaps, "metadata (chmod, chown, utimes, xattrs)")
	}
	if abi < 3 {
		gaps = append(gaps, "truncate")
	}
	if abi < landlockFullABI {
		gaps = append(gaps, "ioctl on devices")
	}
	return gaps
}

const (
	bwrapInstallRemedy = "install the distribution's bubblewrap package: apt-get install bubblewrap (Debian, Ubuntu), dnf install bubblewrap (Fedora, RHEL), apk add bubblewrap (Alpine), pacman -S bubblewrap (Arch)"
	seccompNote        = "this process runs under a seccomp filter (Seccomp: 2 in /proc/self/status), as a container runtime's default profile does"
	// filterMayAnswer: a seccomp filter can answer a syscall with any errno (Docker's
	// answers ENOSYS for syscalls its profile does not know), so with one in place an
	// errno alone does not prove what the kernel lacks.
	filterMayAnswer       = " — or the seccomp filter on this process answers for the kernel (Seccomp: 2 in /proc/self/status, as in a container)"
	landlockSeccompRemedy = "run toh-exec outside the container, or allow landlock_create_ruleset, landlock_add_rule and landlock_restrict_self in its seccomp profile"
)

func diagnoseBwrap(f HostFacts, p ProbeFact) Rung {
	r := Rung{Backend: BackendBwrap, OK: p.Err == ""}
	if r.OK {
		r.Detail = fmt.Sprintf("%s ran `true` under the read-only profile", f.Bwrap.Path)
		r.Enforcement = map[policy.Mode]Enforcement{policy.ReadOnly: EnforcementFull, policy.WorkspaceWrite: EnforcementFull}
		r.NetworkDeny = "enforced"
		return r
	}
	r.Detail = p.Err
	b, u, aa := f.Bwrap, f.UserNS, f.AppArmor
	switch {
	case !b.Exists && b.Explicit:
		r.Cause = fmt.Sprintf("bubblewrap not found: --bwrap %s does not exist", b.Path)
		r.Remedy = "point --bwrap at the bwrap binary, or " + bwrapInstallRemedy
	case !b.Exists:
		r.Cause = fmt.Sprintf("bubblewrap is not installed: none of %s exists (PATH is never searched)", strings.Join(b.Searched, ", "))
		r.Remedy = bwrapInstallRemedy
	case !b.Executable:
		r.Cause = fmt.Sprintf("%s is not an executable file", b.Path)
		r.Remedy = "reinstall bubblewrap, or point --bwrap at an executable bwrap"
	case p.TimedOut:
		r.Cause, r.Remedy = timeoutCause(f)
	case u.NeedsUserNS && isZero(u.MaxUserNamespaces):
		r.Cause = "user namespaces are disabled: user.max_user_namespaces = 0, and bwrap (not root, not setuid) needs one"
		r.Remedy = "sysctl -w user.max_user_namespaces=15000 (persist it in /etc/sysctl.d/)"
	case u.NeedsUserNS && isZero(u.UnprivilegedUsernsClone):
		r.Cause = "unprivileged user namespaces are disabled: kernel.unprivileged_userns_clone = 0, and bwrap (not root, not setuid) needs one"
		r.Remedy = "sysctl -w kernel.unprivileged_userns_clone=1 (persist it in /etc/sysctl.d/)"
	case u.NeedsUserNS && isOne(aa.RestrictUnprivilegedUserns) && len(aa.Profiles) > 0 && aa.LoadedKnown && !aa.BwrapLoaded:
		r.Cause = fmt.Sprintf("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1) and the bwrap profile %s is not loaded", aa.Profiles[0])
		r.Remedy = "apparmor_parser -r " + aa.Profiles[0]
	case u.NeedsUserNS && isOne(aa.RestrictUnprivilegedUserns) && len(aa.Profiles) == 0 && !(aa.LoadedKnown && aa.BwrapLoaded):
		r.Cause = fmt.Sprintf("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1) and no AppArmor profile lets %s use one", b.Path)
		src := aa.ExtraProfile
		if src == "" {
			src = "/usr/share/apparmor/extra-profiles/bwrap-userns-restrict (package apparmor-profiles)"
		}
		r.Remedy = fmt.Sprintf("load a profile that allows bwrap userns, e.g. install -m 0644 %s /etc/apparmor.d/bwrap-userns-restrict && apparmor_parser -r /etc/apparmor.d/bwrap-userns-restrict; or lift the restriction: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0", src)
	case u.CloneErrno == "EPERM" && f.Seccomp == "filter":
		r.Cause = "creating namespaces is refused with EPERM and " + seccompNote
		r.Remedy = "run toh-exec outside the container, or give the container a seccomp profile that allows clone/unshare of namespaces (e.g. docker --security-opt seccomp=unconfined --cap-add SYS_ADMIN); the landlock rung may confine meanwhile"
	case u.CloneErrno == "EPERM":
		r.Cause = "creating namespaces is refused with EPERM (no seccomp filter on this process: a missing CAP_SYS_ADMIN, or a parent user namespace that forbids nesting)"
		r.Remedy = "run toh-exec where it may create namespaces (on the host, or in a container granted CAP_SYS_ADMIN); the landlock rung may confine meanwhile"
	case u.CloneErrno == "ENOSPC":
		r.Cause = "the user namespace limit is reached (clone answers ENOSPC): user.max_user_namespaces of this or a parent namespace"
		r.Remedy = "raise user.max_user_namespaces (sysctl -w user.max_user_namespaces=15000)"
	default:
		r.Cause = "nothing doctor measured explains it; bwrap itself says: " + runnerLine(p.Err, "bwrap: ")
		r.Remedy = "none known beyond bwrap's own message"
	}
	return r
}

func diagnoseLandlock(f HostFacts, p ProbeFact) Rung {
	l := f.Landlock
	r := Rung{Backend: BackendLandlock, OK: p.Err == "", ABI: l.ABI, Ruleset: l.Ruleset}
	if r.OK {
		r.Detail = l.ProbeText
		if r.Detail == "" {
			r.Detail = "the launcher applied the read-only profile"
		}
		r.Enforcement = map[policy.Mode]Enforcement{}
		for _, m := range []policy.Mode{policy.ReadOnly, policy.WorkspaceWrite} {
			e, err := landlockEnforcement(policy.Execution{Mode: m, Network: policy.NetworkAllow}, l.ABI, l.SeccompFilter)
			if err != nil {
				e = EnforcementPartial
			}
			r.Enforcement[m] = e
			if e != EnforcementFull {
				if r.NotGoverned == nil {
					r.NotGoverned = map[policy.Mode][]string{}
				}
				r.NotGoverned[m] = landlockGaps(m, l.ABI, l.SeccompFilter)
			}
		}
		r.NetworkDeny = "enforced"
		_, netErr := landlockEnforcement(policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkDeny}, l.ABI, l.SeccompFilter)
		if netErr != nil {
			r.NetworkDeny = "fails closed"
		}
		r.Cause, r.Remedy = landlockDegradation(l, netErr)
		return r
	}
	r.Detail = p.Err
	filter := f.Seccomp == "filter"
	switch {
	case p.TimedOut:
		r.Cause, r.Remedy = timeoutCause(f)
	case l.Errno != "" && filter && slices.Contains(f.LSMs, "landlock"):
		r.Cause = fmt.Sprintf("the kernel's active LSMs include landlock, yet landlock_create_ruleset answers %s: the seccomp filter on this process answers for the kernel (Seccomp: 2 in /proc/self/status, as in a container)", l.Errno)
		r.Remedy = landlockSeccompRemedy
	case l.Errno == "ENOSYS":
		r.Cause = "the kernel has no Landlock: landlock_create_ruleset answers ENOSYS (not built in: CONFIG_SECURITY_LANDLOCK is off, or the kernel predates Linux 5.13)"
		r.Remedy = "boot a kernel built with CONFIG_SECURITY_LANDLOCK=y (Linux 5.13 or later; 6.10 or later for full enforcement)"
		if filter {
			r.Cause += filterMayAnswer
			r.Remedy += "; in a container, " + landlockSeccompRemedy
		}
	case l.Errno == "EOPNOTSUPP":
		r.Cause = "Landlock is built in but disabled at boot: landlock_create_ruleset answers EOPNOTSUPP; " + lsmString(f.LSMs)
		r.Remedy = fmt.Sprintf("enable it on the kernel command line, keeping the active LSMs: lsm=%s (then reboot)", lsmParam(f.LSMs))
		if filter {
			r.Cause += filterMayAnswer
			r.Remedy += "; in a container, " + landlockSeccompRemedy
		}
	case l.Errno == "EPERM" && filter:
		r.Cause = "the Landlock syscalls are refused with EPERM and " + seccompNote
		r.Remedy = landlockSeccompRemedy
	case l.Errno == "EPERM":
		r.Cause = "the Landlock syscalls are refused with EPERM by something outside toh (no seccomp filter on this process)"
		r.Remedy = "run toh-exec where Landlock is permitted"
	case l.Errno != "":
		r.Cause = "landlock_create_ruleset answers " + l.Errno
		r.Remedy = "none known: check the kernel's Landlock support"
	case filter && strings.Contains(strings.ToLower(p.Err), "operation not permitted"):
		r.Cause = fmt.Sprintf("the kernel offers Landlock ABI %d, but applying the ruleset was refused with EPERM and %s", l.ABI, seccompNote)
		r.Remedy = "run toh-exec outside the container, or allow the Landlock and seccomp syscalls in its seccomp profile"
	default:
		r.Cause = fmt.Sprintf("the kernel offers Landlock ABI %d and nothing doctor measured explains the failure; the launcher says: %s", l.ABI, runnerLine(p.Err, "landlock-run: "))
		r.Remedy = "none known beyond the launcher's own message"
	}
	return r
}

// landlockDegradation explains a passing Landlock rung that governs less than full or
// cannot enforce network deny.
func landlockDegradation(l LandlockFacts, netErr error) (cause, remedy string) {
	var causes []string
	if gaps := landlockGaps(policy.ReadOnly, l.ABI, l.SeccompFilter); len(gaps) > 0 {
		causes = append(causes, fmt.Sprintf("read-only is partial on ABI %d: not governed: %s", l.ABI, strings.Join(gaps, ", ")))
	}
	if netErr != nil {
		causes = append(causes, "runs with network deny fail closed ("+strings.TrimPrefix(netErr.Error(), "landlock: ")+")")
	}
	if len(causes) == 0 {
		return "", ""
	}
	switch {
	case !l.SeccompFilter:
		remedy = "none on this architecture (toh's seccomp filter exists for amd64 and arm64); bwrap confines fully where it runs"
	case l.ABI < landlockNetABI:
		remedy = fmt.Sprintf("boot Linux 6.7 or later for Landlock ABI %d (network rules), 6.10 or later for ABI %d (full)", landlockNetABI, landlockFullABI)
	default:
		remedy = fmt.Sprintf("boot Linux 6.10 or later for Landlock ABI %d", landlockFullABI)
	}
	return strings.Join(causes, "; "), remedy
}

func diagnoseSeatbelt(f HostFacts, p ProbeFact) Rung {
	r := Rung{Backend: BackendSeatbelt, OK: p.Err == ""}
	if r.OK {
		r.Detail = "sandbox-exec ran `true` under the read-only profile"
		r.Enforcement = map[policy.Mode]Enforcement{policy.ReadOnly: EnforcementFull, policy.WorkspaceWrite: EnforcementFull}
		r.NetworkDeny = "enforced"
		return r
	}
	r.Detail = p.Err
	switch {
	case !f.SandboxExec:
		r.Cause = "/usr/bin/sandbox-exec does not exist"
		r.Remedy = "sandbox-exec ships with macOS; restore the system file"
	case p.TimedOut:
		r.Cause, r.Remedy = timeoutCause(f)
	case strings.Contains(p.Err, "Operation not permitted"):
		r.Cause = "sandbox-exec may not apply a profile here: " + runnerLine(p.Err, "sandbox-exec: ")
		r.Remedy = "run toh-exec outside another sandbox (an already sandboxed process cannot apply a new profile)"
	default:
		r.Cause = "nothing doctor measured explains it; sandbox-exec itself says: " + runnerLine(p.Err, "sandbox-exec: ")
		r.Remedy = "none known beyond sandbox-exec's own message"
	}
	return r
}

func timeoutCause(f HostFacts) (string, string) {
	return fmt.Sprintf("the probe did not finish within %v", f.ProbeTimeout),
		"retry with a larger --probe-timeout; a verdict from a timed-out probe is never cached"
}

// runnerLine picks the runner's own line out of a probe error.
func runnerLine(err, marker string) string {
	for _, line := range strings.Split(err, "\n") {
		if i := strings.Index(line, marker); i >= 0 {
			return strings.TrimSpace(line[i:])
		}
	}
	return err
}

func lsmString(lsms []string) string {
	if lsms == nil {
		return "active LSMs unknown (/sys/kernel/security/lsm is not readable)"
	}
	return "active LSMs: " + strings.Join(lsms, ",")
}

// lsmParam is the lsm= value that adds landlock to the active list ("capability" is
// always first and is not named).
func lsmParam(lsms []string) string {
	if lsms == nil {
		return "<active LSMs>,landlock"
	}
	var out []string
	for _, l := range lsms {
		if l != "capability" && l != "landlock" {
			out = append(out, l)
		}
	}
	return strings.Join(append(out, "landlock"), ",")
}

func isZero(v *int) bool { return v != nil && *v == 0 }
func isOne(v *int) bool  { return v != nil && *v == 1 }

// cacheStatus compares the cached verdict with the measured one. It reads the cache
// file only.
func (c *Chain) cacheStatus(measured string) CacheStatus {
	s := CacheStatus{}
	if c.cache != nil {
		s.Path = c.cache.Path
	}
	switch {
	case len(c.Candidates) < 2:
		s.State, s.Note = "unused", "the chain has a single candidate, which is never probed or cached"
		return s
	case s.Path == "":
		s.State, s.Note = "none", "no cache location: every confined run probes"
		return s
	}
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		s.State, s.Note = "missing", "no verdict stored yet: the next confined run probes and stores one"
		return s
	}
	var f cacheFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err != nil || dec.Decode(&f) != nil || f.Version != 1 {
		s.State, s.Note = "damaged", "unreadable or damaged: the next confined run probes again and replaces it"
		return s
	}
	s.Verdict = string(f.Backend)
	if f.Backend == "" {
		s.Verdict = EffectiveNone
	}
	switch {
	case f.Key != cacheKey(c.keyFiles):
		s.State, s.Note = "stale", "stored for another kernel, runner binary or toh-exec: the next confined run probes again"
	case s.Verdict != measured:
		s.State = "disagrees"
		s.Note = fmt.Sprintf("confined runs trust its verdict %s, but doctor measured %s: run toh-exec --refresh-probe (with the same --bwrap and --probe-cache) to replace it", s.Verdict, measured)
	default:
		s.State, s.Current = "current", true
		s.Note = "confined runs use this verdict without probing"
	}
	return s
}
