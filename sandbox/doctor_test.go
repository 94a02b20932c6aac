package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toh-sandbox/toh/policy"
)

func intp(v int) *int { return &v }

// healthyLinux is an unprivileged user on a kernel where both rungs work.
func healthyLinux() HostFacts {
	return HostFacts{
		OS: "linux", UID: 1000, Seccomp: "disabled", ProbeTimeout: 5e9,
		Bwrap:    BwrapFacts{Path: "/usr/bin/bwrap", Searched: bwrapLocations, Exists: true, Executable: true},
		UserNS:   UserNSFacts{NeedsUserNS: true, MaxUserNamespaces: intp(15000)},
		Landlock: LandlockFacts{ABI: 7, SeccompFilter: true, ProbeText: landlockProbeFull},
		LSMs:     []string{"capability", "lockdown", "yama", "apparmor", "bpf"},
		Probes:   []ProbeFact{{Backend: BackendBwrap}, {Backend: BackendLandlock}},
	}
}

const (
	bwrapUserNSLine = "bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces."
	bwrapUIDMapLine = "bwrap: setting up uid map: Permission denied"
)

func TestDiagnose(t *testing.T) {
	type want struct {
		rung      int      // the rung the cause/remedy checks apply to
		ok        bool     // that rung's verdict
		cause     []string // substrings of its cause; nil means "no cause"
		remedy    []string // substrings of its remedy
		effective string   // the whole summary
	}
	const (
		effBwrap    = "bwrap (full) for read-only and workspace-write; network deny enforced"
		effLandlock = "landlock ABI 7 (read-only full; workspace-write partial: metadata outside roots, protected paths); network deny enforced"
		effNone     = "none — every confined run fails closed with SANDBOX_UNAVAILABLE"
	)
	failBwrap := func(f *HostFacts, line string) { f.Probes[0].Err = line }
	failLandlock := func(f *HostFacts, errno string) {
		f.Landlock = LandlockFacts{Errno: errno, SeccompFilter: true}
		f.Probes[1].Err = "landlock-run: the kernel offers no Landlock (not built in, or disabled at boot)"
	}
	cases := []struct {
		name  string
		setup func(f *HostFacts)
		want  want
	}{
		{"both rungs work", func(f *HostFacts) {}, want{0, true, nil, nil, effBwrap}},
		{"bwrap not installed", func(f *HostFacts) {
			f.Bwrap.Exists, f.Bwrap.Executable = false, false
			failBwrap(f, "fork/exec /usr/bin/bwrap: no such file or directory")
		}, want{0, false, []string{"not installed", "/usr/bin/bwrap, /usr/local/bin/bwrap, /bin/bwrap"}, []string{"apt-get install bubblewrap"}, effLandlock}},
		{"--bwrap names a missing file", func(f *HostFacts) {
			f.Bwrap = BwrapFacts{Path: "/opt/bwrap", Explicit: true}
			failBwrap(f, "fork/exec /opt/bwrap: no such file or directory")
		}, want{0, false, []string{"--bwrap /opt/bwrap does not exist"}, []string{"point --bwrap", "apt-get install bubblewrap"}, effLandlock}},
		{"bwrap not executable", func(f *HostFacts) {
			f.Bwrap.Executable = false
			failBwrap(f, "fork/exec /usr/bin/bwrap: permission denied")
		}, want{0, false, []string{"not an executable file"}, []string{"reinstall"}, effLandlock}},
		{"probe timed out", func(f *HostFacts) {
			failBwrap(f, "probe timed out: context deadline exceeded")
			f.Probes[0].TimedOut = true
		}, want{0, false, []string{"did not finish within 5s"}, []string{"--probe-timeout"}, effLandlock}},
		{"max_user_namespaces is 0", func(f *HostFacts) {
			f.UserNS.MaxUserNamespaces = intp(0)
			f.UserNS.CloneErrno = "ENOSPC"
			failBwrap(f, "bwrap: Creating new namespace failed: No space left on device")
		}, want{0, false, []string{"user.max_user_namespaces = 0"}, []string{"sysctl -w user.max_user_namespaces="}, effLandlock}},
		{"max_user_namespaces is 0 but bwrap runs as root", func(f *HostFacts) {
			f.UID, f.UserNS.NeedsUserNS = 0, false
			f.UserNS.MaxUserNamespaces = intp(0)
			failBwrap(f, "bwrap: something else")
		}, want{0, false, []string{"nothing doctor measured", "bwrap: something else"}, []string{"none known"}, effLandlock}},
		{"max_user_namespaces is 0 but bwrap is setuid", func(f *HostFacts) {
			f.Bwrap.SetuidRoot, f.UserNS.NeedsUserNS = true, false
			f.UserNS.MaxUserNamespaces = intp(0)
			failBwrap(f, "bwrap: something else")
		}, want{0, false, []string{"bwrap itself says: bwrap: something else"}, nil, effLandlock}},
		{"Debian unprivileged_userns_clone is 0", func(f *HostFacts) {
			f.UserNS.UnprivilegedUsernsClone = intp(0)
			failBwrap(f, bwrapUserNSLine)
		}, want{0, false, []string{"kernel.unprivileged_userns_clone = 0"}, []string{"sysctl -w kernel.unprivileged_userns_clone=1"}, effLandlock}},
		{"unprivileged_userns_clone is 1", func(f *HostFacts) {
			f.UserNS.UnprivilegedUsernsClone = intp(1)
			failBwrap(f, bwrapUserNSLine)
		}, want{0, false, []string{"bwrap itself says: " + bwrapUserNSLine}, nil, effLandlock}},
		{"Ubuntu AppArmor restriction without a bwrap profile", func(f *HostFacts) {
			f.AppArmor = AppArmorFacts{RestrictUnprivilegedUserns: intp(1), LoadedKnown: true,
				ExtraProfile: "/usr/share/apparmor/extra-profiles/bwrap-userns-restrict"}
			failBwrap(f, bwrapUIDMapLine)
		}, want{0, false, []string{"apparmor_restrict_unprivileged_userns = 1", "no AppArmor profile lets /usr/bin/bwrap"},
			[]string{"install -m 0644 /usr/share/apparmor/extra-profiles/bwrap-userns-restrict", "apparmor_parser -r", "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"}, effLandlock}},
		{"AppArmor restriction, profile installed but not loaded", func(f *HostFacts) {
			f.AppArmor = AppArmorFacts{RestrictUnprivilegedUserns: intp(1), LoadedKnown: true,
				Profiles: []string{"/etc/apparmor.d/bwrap-userns-restrict"}}
			failBwrap(f, bwrapUIDMapLine)
		}, want{0, false, []string{"/etc/apparmor.d/bwrap-userns-restrict is not loaded"}, []string{"apparmor_parser -r /etc/apparmor.d/bwrap-userns-restrict"}, effLandlock}},
		{"AppArmor restriction, profile installed and loaded: not blamed", func(f *HostFacts) {
			f.AppArmor = AppArmorFacts{RestrictUnprivilegedUserns: intp(1), LoadedKnown: true, BwrapLoaded: true,
				Profiles: []string{"/etc/apparmor.d/bwrap-userns-restrict"}}
			failBwrap(f, bwrapUIDMapLine)
		}, want{0, false, []string{"bwrap itself says: " + bwrapUIDMapLine}, nil, effLandlock}},
		{"AppArmor restriction, profile present, loaded list unreadable: not blamed", func(f *HostFacts) {
			f.AppArmor = AppArmorFacts{RestrictUnprivilegedUserns: intp(1), Profiles: []string{"/etc/apparmor.d/bwrap"}}
			failBwrap(f, bwrapUIDMapLine)
		}, want{0, false, []string{"nothing doctor measured"}, nil, effLandlock}},
		{"AppArmor restriction does not bind root", func(f *HostFacts) {
			f.UID, f.UserNS.NeedsUserNS = 0, false
			f.AppArmor = AppArmorFacts{RestrictUnprivilegedUserns: intp(1)}
			failBwrap(f, bwrapUIDMapLine)
		}, want{0, false, []string{"nothing doctor measured"}, nil, effLandlock}},
		{"container: seccomp filter refuses namespaces", func(f *HostFacts) {
			f.Seccomp, f.UserNS.CloneErrno = "filter", "EPERM"
			failBwrap(f, "bwrap: Creating new namespace failed: Operation not permitted")
		}, want{0, false, []string{"EPERM", "seccomp filter"}, []string{"seccomp", "landlock rung"}, effLandlock}},
		{"namespaces refused with EPERM without seccomp", func(f *HostFacts) {
			f.UserNS.CloneErrno = "EPERM"
			failBwrap(f, "bwrap: Creating new namespace failed: Operation not permitted")
		}, want{0, false, []string{"EPERM", "no seccomp filter"}, []string{"CAP_SYS_ADMIN"}, effLandlock}},
		{"user namespace limit reached", func(f *HostFacts) {
			f.UserNS.CloneErrno = "ENOSPC"
			failBwrap(f, "bwrap: Creating new namespace failed: No space left on device")
		}, want{0, false, []string{"ENOSPC"}, []string{"user.max_user_namespaces"}, effLandlock}},
		{"bwrap fails for another reason: its own line", func(f *HostFacts) {
			failBwrap(f, "exit status 1: noise\nbwrap: Can't mount proc on /newroot/proc: Operation not permitted\nmore noise")
		}, want{0, false, []string{"bwrap itself says: bwrap: Can't mount proc on /newroot/proc: Operation not permitted"}, nil, effLandlock}},

		{"Landlock not built in", func(f *HostFacts) {
			failLandlock(f, "ENOSYS")
		}, want{1, false, []string{"ENOSYS", "CONFIG_SECURITY_LANDLOCK"}, []string{"CONFIG_SECURITY_LANDLOCK=y"}, effBwrap}},
		{"Landlock disabled at boot", func(f *HostFacts) {
			failLandlock(f, "EOPNOTSUPP")
		}, want{1, false, []string{"disabled at boot", "EOPNOTSUPP", "active LSMs: capability,lockdown,yama,apparmor,bpf"},
			[]string{"lsm=lockdown,yama,apparmor,bpf,landlock"}, effBwrap}},
		{"Landlock disabled at boot, LSM list unreadable", func(f *HostFacts) {
			failLandlock(f, "EOPNOTSUPP")
			f.LSMs = nil
		}, want{1, false, []string{"active LSMs unknown"}, []string{"lsm=<active LSMs>,landlock"}, effBwrap}},
		{"Landlock active per the LSM list, refused by a seccomp filter", func(f *HostFacts) {
			failLandlock(f, "EOPNOTSUPP")
			f.Seccomp, f.LSMs = "filter", []string{"capability", "landlock"}
		}, want{1, false, []string{"active LSMs include landlock", "answers EOPNOTSUPP", "seccomp filter"}, []string{"landlock_restrict_self in its seccomp profile"}, effBwrap}},
		{"Landlock ENOSYS under a seccomp filter, LSM list unknown", func(f *HostFacts) {
			failLandlock(f, "ENOSYS")
			f.Seccomp, f.LSMs = "filter", nil
		}, want{1, false, []string{"CONFIG_SECURITY_LANDLOCK", "or the seccomp filter on this process answers"}, []string{"CONFIG_SECURITY_LANDLOCK=y", "in a container"}, effBwrap}},
		{"Landlock refused by a container's seccomp filter", func(f *HostFacts) {
			failLandlock(f, "EPERM")
			f.Seccomp = "filter"
		}, want{1, false, []string{"EPERM", "seccomp filter"}, []string{"landlock_create_ruleset"}, effBwrap}},
		{"Landlock refused with EPERM, no filter here", func(f *HostFacts) {
			failLandlock(f, "EPERM")
		}, want{1, false, []string{"EPERM", "outside toh"}, nil, effBwrap}},
		{"Landlock offered but the launcher failed", func(f *HostFacts) {
			f.Probes[1].Err = "landlock-run: opening rule path \"/dev/null\": no such file or directory"
		}, want{1, false, []string{"ABI 7", `landlock-run: opening rule path "/dev/null"`}, nil, effBwrap}},
		{"Landlock ruleset refused under a seccomp filter", func(f *HostFacts) {
			f.Seccomp = "filter"
			f.Probes[1].Err = "landlock-run: enforcing the Landlock ruleset: operation not permitted"
		}, want{1, false, []string{"refused with EPERM", "seccomp filter"}, nil, effBwrap}},

		{"Landlock ABI 4: partial read-only, network deny enforced", func(f *HostFacts) {
			failBwrap(f, bwrapUserNSLine)
			f.UserNS.MaxUserNamespaces = intp(0)
			f.Landlock.ABI, f.Landlock.ProbeText = 4, landlockProbePartial
		}, want{1, true, []string{"read-only is partial on ABI 4: not governed: ioctl on devices"}, []string{"6.10"},
			"landlock ABI 4 (read-only partial: ioctl on devices; workspace-write partial: metadata outside roots, protected paths, ioctl on devices); network deny enforced"}},
		{"Landlock ABI 2: network deny fails closed", func(f *HostFacts) {
			failBwrap(f, bwrapUserNSLine)
			f.UserNS.MaxUserNamespaces = intp(0)
			f.Landlock.ABI, f.Landlock.ProbeText = 2, landlockProbePartial
		}, want{1, true, []string{"not governed: truncate, ioctl on devices", "network deny fail closed", "needs Landlock ABI 4"}, []string{"6.7"},
			"landlock ABI 2 (read-only partial: truncate, ioctl on devices; workspace-write partial: metadata outside roots, protected paths, truncate, ioctl on devices); network deny fails closed"}},
		{"Landlock without toh's seccomp filter (other architecture)", func(f *HostFacts) {
			failBwrap(f, bwrapUserNSLine)
			f.UserNS.MaxUserNamespaces = intp(0)
			f.Landlock.SeccompFilter = false
		}, want{1, true, []string{"metadata (chmod", "network deny fail closed"}, []string{"architecture"},
			"landlock ABI 7 (read-only partial: metadata (chmod, chown, utimes, xattrs); workspace-write partial: metadata outside roots, protected paths); network deny fails closed"}},
		{"Landlock ABI 7 with bwrap failing", func(f *HostFacts) {
			failBwrap(f, bwrapUserNSLine)
			f.UserNS.MaxUserNamespaces = intp(0)
		}, want{1, true, nil, nil, effLandlock}},

		{"nothing confines", func(f *HostFacts) {
			f.Bwrap.Exists, f.Bwrap.Executable = false, false
			failBwrap(f, "fork/exec /usr/bin/bwrap: no such file or directory")
			failLandlock(f, "ENOSYS")
		}, want{1, false, []string{"ENOSYS"}, nil, effNone}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := healthyLinux()
			tc.setup(&f)
			d := diagnose(f)
			if len(d.Rungs) != 2 || d.Rungs[0].Backend != BackendBwrap || d.Rungs[1].Backend != BackendLandlock {
				t.Fatalf("rungs %+v, want bwrap then landlock", d.Rungs)
			}
			r := d.Rungs[tc.want.rung]
			if r.OK != tc.want.ok {
				t.Fatalf("rung %s ok=%v, want %v (%+v)", r.Backend, r.OK, tc.want.ok, r)
			}
			if tc.want.cause == nil && r.Cause != "" {
				t.Errorf("rung %s has cause %q, want none", r.Backend, r.Cause)
			}
			if tc.want.cause != nil && r.Cause == "" {
				t.Errorf("rung %s has no cause", r.Backend)
			}
			for _, s := range tc.want.cause {
				if !strings.Contains(r.Cause, s) {
					t.Errorf("cause %q lacks %q", r.Cause, s)
				}
			}
			for _, s := range tc.want.remedy {
				if !strings.Contains(r.Remedy, s) {
					t.Errorf("remedy %q lacks %q", r.Remedy, s)
				}
			}
			if !r.OK && r.Detail != f.Probes[tc.want.rung].Err {
				t.Errorf("detail %q, want the probe's own error %q", r.Detail, f.Probes[tc.want.rung].Err)
			}
			if !r.OK && r.Remedy == "" {
				t.Errorf("failed rung %s has no remedy", r.Backend)
			}
			if d.Effective.Summary != tc.want.effective {
				t.Errorf("effective\n got %q\nwant %q", d.Effective.Summary, tc.want.effective)
			}
			if d.Confines() != (tc.want.effective != effNone) {
				t.Errorf("Confines() = %v with effective %q", d.Confines(), d.Effective.Summary)
			}
		})
	}
}

func TestDiagnoseEffectiveIsFirstPassingRung(t *testing.T) {
	f := healthyLinux()
	d := diagnose(f)
	if d.Effective.Backend != "bwrap" || d.Effective.String() != "effective: bwrap (full) for read-only and workspace-write; network deny enforced" {
		t.Fatalf("effective %+v", d.Effective)
	}
	// Landlock passing does not make it effective while bwrap passes; and a failed
	// first rung never is.
	f.Probes[0].Err = "bwrap: x"
	d = diagnose(f)
	if d.Effective.Backend != "landlock" {
		t.Fatalf("effective %+v, want landlock", d.Effective)
	}
	l := d.Rungs[1]
	if l.ABI != 7 || l.Detail != landlockProbeFull || l.Enforcement[policy.ReadOnly] != EnforcementFull ||
		l.Enforcement[policy.WorkspaceWrite] != EnforcementPartial || l.NetworkDeny != "enforced" {
		t.Fatalf("landlock rung %+v", l)
	}
}

func TestDiagnoseBlamesContainersOnlyUnderAFilter(t *testing.T) {
	for _, errno := range []string{"ENOSYS", "EOPNOTSUPP", "EPERM"} {
		for _, seccomp := range []string{"disabled", "filter"} {
			f := healthyLinux()
			f.Seccomp = seccomp
			f.Landlock = LandlockFacts{Errno: errno}
			f.Probes[1].Err = "landlock-run: x"
			r := diagnose(f).Rungs[1]
			blamed := strings.Contains(r.Cause, "Seccomp: 2") || strings.Contains(r.Remedy, "container")
			if blamed != (seccomp == "filter") {
				t.Errorf("%s with seccomp %s: cause %q remedy %q", errno, seccomp, r.Cause, r.Remedy)
			}
		}
	}
}

func TestDiagnoseSeatbelt(t *testing.T) {
	f := HostFacts{OS: "darwin", SandboxExec: true, Probes: []ProbeFact{{Backend: BackendSeatbelt}}}
	d := diagnose(f)
	if !d.Rungs[0].OK || d.Effective.Summary != "seatbelt (full) for read-only and workspace-write; network deny enforced" {
		t.Fatalf("%+v", d)
	}
	f.Probes[0].Err = "sandbox-exec: sandbox_apply: Operation not permitted"
	d = diagnose(f)
	if d.Confines() || !strings.Contains(d.Rungs[0].Cause, "sandbox_apply: Operation not permitted") || !strings.Contains(d.Rungs[0].Remedy, "another sandbox") {
		t.Fatalf("%+v", d.Rungs[0])
	}
	f.SandboxExec = false
	f.Probes[0].Err = "fork/exec /usr/bin/sandbox-exec: no such file or directory"
	if c := diagnose(f).Rungs[0].Cause; !strings.Contains(c, "does not exist") {
		t.Fatalf("cause %q", c)
	}
}

func TestDiagnoseNoPlatformChain(t *testing.T) {
	d := diagnose(HostFacts{OS: "plan9"})
	if d.Confines() || !strings.Contains(d.Effective.Summary, "no sandbox backend on this platform") {
		t.Fatalf("%+v", d.Effective)
	}
}

func TestCacheStatus(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "probe.json")
	c, err := NewChain(Options{Self: "/proc/self/exe", ProbeTimeout: DefaultProbeTimeout, Cache: &ProbeCache{Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Candidates) < 2 {
		if s := c.cacheStatus("seatbelt"); s.State != "unused" || s.Current {
			t.Fatalf("single-candidate chain: %+v", s)
		}
		return
	}
	check := func(measured, state string, current bool) {
		t.Helper()
		s := c.cacheStatus(measured)
		if s.State != state || s.Current != current || s.Path != path || s.Note == "" {
			t.Fatalf("measured %s: status %+v, want state %s current %v", measured, s, state, current)
		}
	}
	check("bwrap", "missing", false)
	os.WriteFile(path, []byte("{not json"), 0o644)
	check("bwrap", "damaged", false)
	key := cacheKey(c.keyFiles)
	if err := c.cache.store(cacheFile{Version: 1, Key: "kernel=another", Backend: BackendBwrap}); err != nil {
		t.Fatal(err)
	}
	check("bwrap", "stale", false)
	c.cache.store(cacheFile{Version: 1, Key: key, Backend: BackendLandlock})
	check("bwrap", "disagrees", false)
	check("landlock", "current", true)
	c.cache.store(cacheFile{Version: 1, Key: key})
	check(EffectiveNone, "current", true)
	check("bwrap", "disagrees", false)

	noPath, _ := NewChain(Options{Self: "/proc/self/exe", ProbeTimeout: DefaultProbeTimeout, Cache: &ProbeCache{}})
	if s := noPath.cacheStatus("bwrap"); s.State != "none" || s.Current {
		t.Fatalf("no cache location: %+v", s)
	}
}

// TestCachedProbeErrorsArePrintable: a cached verdict's error text may have been
// written by a command (a cache inside an earlier run's writable root), and it is
// printed to the user's terminal: escape sequences come back escaped. Control: the
// verdict itself is still read from the cache.
func TestCachedProbeErrorsArePrintable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "probe.json")
	c, err := NewChain(Options{Self: "/proc/self/exe", ProbeTimeout: DefaultProbeTimeout, Cache: &ProbeCache{Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Candidates) < 2 {
		t.Skip("a single-candidate chain reads no cache")
	}
	hostile := "no namespaces\x1b]0;OWNED\x07\x1b[2J"
	if err := c.cache.store(cacheFile{Version: 1, Key: cacheKey(c.keyFiles),
		Probes: []cacheProbe{{Backend: BackendBwrap, Error: hostile}, {Backend: BackendLandlock, Error: "disabled"}}}); err != nil {
		t.Fatal(err)
	}
	p, results := c.Select(context.Background(), true)
	if p != nil || len(results) != 2 || results[0].Err == nil {
		t.Fatalf("the cached verdict was not used: %v %+v", p, results)
	}
	msg := results[0].Err.Error()
	if strings.ContainsAny(msg, "\x1b\x07") || !strings.Contains(msg, `no namespaces\x1b]0;OWNED\a\x1b[2J`) {
		t.Fatalf("cached error printed as %q", msg)
	}
}
