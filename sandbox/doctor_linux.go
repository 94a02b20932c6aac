package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/toh-sandbox/toh/policy"
	"golang.org/x/sys/unix"
)

// measureHost reads the facts a failing rung can be explained by. It changes nothing:
// sysctls and /proc are read, the Landlock version is queried, and one child is cloned
// into new namespaces the way bwrap's probe needs them and exits at once.
func measureHost(ctx context.Context, c *Chain, opts Options) HostFacts {
	f := HostFacts{OS: "linux", UID: os.Getuid(), Seccomp: procStatusField("Seccomp")}
	switch f.Seccomp {
	case "0":
		f.Seccomp = "disabled"
	case "1":
		f.Seccomp = "strict"
	case "2":
		f.Seccomp = "filter"
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		f.Kernel = utsString(u.Release[:])
	}
	for _, p := range c.Candidates {
		if b, ok := p.(*bwrapProvider); ok {
			f.Bwrap = measureBwrap(b.path, opts.BwrapPath != "")
		}
	}
	// bwrap run by root, or setuid root, creates its namespaces with that privilege
	// and no user namespace.
	f.UserNS.NeedsUserNS = f.UID != 0 && !f.Bwrap.SetuidRoot
	f.UserNS.MaxUserNamespaces = readSysctl("/proc/sys/user/max_user_namespaces")
	f.UserNS.UnprivilegedUsernsClone = readSysctl("/proc/sys/kernel/unprivileged_userns_clone")
	f.UserNS.CloneErrno = measureClone(ctx, f.UserNS.NeedsUserNS)
	f.AppArmor = measureAppArmor(f.Bwrap.Path)
	f.Landlock = measureLandlock()
	f.LSMs = activeLSMs()
	return f
}

func procStatusField(name string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func readSysctl(path string) *int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	return &v
}

func measureBwrap(path string, explicit bool) BwrapFacts {
	b := BwrapFacts{Path: path, Explicit: explicit}
	if !explicit {
		b.Searched = bwrapLocations
	}
	fi, err := os.Stat(path)
	if err != nil {
		return b
	}
	b.Exists = true
	b.Executable = fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		b.SetuidRoot = fi.Mode()&os.ModeSetuid != 0 && st.Uid == 0
	}
	return b
}

// measureClone starts /bin/true in new mount and PID namespaces (and a user namespace
// when bwrap would need one) and returns the errno name, "" on success, "unknown" when
// there is nothing to start.
func measureClone(ctx context.Context, userns bool) string {
	var prog string
	for _, p := range []string{"/usr/bin/true", "/bin/true"} {
		if _, err := os.Stat(p); err == nil {
			prog = p
			break
		}
	}
	if prog == "" {
		return "unknown"
	}
	cmd := exec.CommandContext(ctx, prog)
	cmd.Env = probeEnv
	cmd.Dir = "/"
	flags := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID)
	if userns {
		flags |= unix.CLONE_NEWUSER
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
	err := cmd.Run()
	if err == nil {
		return ""
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errnoName(errno)
	}
	return "unknown"
}

// measureAppArmor finds profiles under /etc/apparmor.d that attach to bwrapPath and
// allow userns, and whether a bwrap profile is loaded (when the list is readable).
func measureAppArmor(bwrapPath string) AppArmorFacts {
	a := AppArmorFacts{RestrictUnprivilegedUserns: readSysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")}
	entries, _ := os.ReadDir("/etc/apparmor.d")
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join("/etc/apparmor.d", e.Name())
		b, err := os.ReadFile(p)
		if err != nil || len(b) > 1<<20 {
			continue
		}
		if bytes.Contains(b, []byte(bwrapPath)) && bytes.Contains(b, []byte("userns")) {
			a.Profiles = append(a.Profiles, p)
		}
	}
	if b, err := os.ReadFile("/sys/kernel/security/apparmor/profiles"); err == nil {
		a.LoadedKnown = true
		for _, line := range strings.Split(string(b), "\n") {
			name, _, _ := strings.Cut(line, " (")
			if strings.Contains(name, "bwrap") {
				a.BwrapLoaded = true
			}
		}
	}
	const extra = "/usr/share/apparmor/extra-profiles/bwrap-userns-restrict"
	if _, err := os.Stat(extra); err == nil {
		a.ExtraProfile = extra
	}
	return a
}

// measureLandlock queries the ABI and, when there is one, builds the plan the
// launcher's probe applies: the probe text below is what that launcher printed, since
// it is computed by the same function from the same kernel answers (the chain's probe
// keeps no output of a passing run).
func measureLandlock() LandlockFacts {
	l := LandlockFacts{SeccompFilter: landlockSeccompArch.supported()}
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		l.Errno = errnoName(errno)
		return l
	}
	l.ABI = int(v)
	plan, err := newLandlockPlan(landlockFlags{mode: policy.ReadOnly, probe: true}, l.ABI, landlockErrata(), l.SeccompFilter)
	if err != nil {
		return l
	}
	l.Ruleset = plan.String()
	l.ProbeText = landlockProbeFull
	if plan.partial {
		l.ProbeText = landlockProbePartial
	}
	return l
}

// errnoName is the conventional name of e; EOPNOTSUPP and ENOTSUP share a number on
// Linux and the Landlock documentation says EOPNOTSUPP.
func errnoName(e syscall.Errno) string {
	if e == unix.EOPNOTSUPP {
		return "EOPNOTSUPP"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return "errno " + strconv.Itoa(int(e))
}

// lsmNames maps the LSM ids of include/uapi/linux/lsm.h.
var lsmNames = map[uint64]string{
	100: "capability", 101: "selinux", 102: "smack", 103: "tomoyo", 104: "apparmor",
	105: "yama", 106: "loadpin", 107: "safesetid", 108: "lockdown", 109: "bpf",
	110: "landlock", 111: "ima", 112: "evm", 113: "ipe",
}

// activeLSMs reads /sys/kernel/security/lsm, or asks lsm_list_modules(2) (Linux 6.8)
// when securityfs is not mounted; nil when neither answers.
func activeLSMs() []string {
	if b, err := os.ReadFile("/sys/kernel/security/lsm"); err == nil {
		return strings.Split(strings.TrimSpace(string(b)), ",")
	}
	var ids [64]uint64
	size := uint32(len(ids) * 8)
	n, _, errno := unix.Syscall(unix.SYS_LSM_LIST_MODULES, uintptr(unsafe.Pointer(&ids[0])), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 || int(n) > len(ids) {
		return nil
	}
	out := []string{}
	for _, id := range ids[:n] {
		name, ok := lsmNames[id]
		if !ok {
			name = "lsm" + strconv.FormatUint(id, 10)
		}
		out = append(out, name)
	}
	return out
}
