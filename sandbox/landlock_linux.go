package sandbox

// The Landlock launcher stage on Linux. See landlock_launcher.go for the command line,
// the ABI table and the limitations.
//
// The ruleset is built with golang.org/x/sys/unix rather than go-landlock: go-landlock
// v0.11.2 imports libcap/psx (to restrict every thread of a long-lived process), which
// this module does not carry, and a launcher that execs right away needs none of it —
// it restricts the one OS thread that calls execve(2), which is what the new program
// inherits (go-landlock's own NewRulesetFD "Example 1" pattern). The ABI table mirrors
// go-landlock v0.11.2's abi_versions.go, and the ruleset is strict: it handles exactly
// the rights of the ABI chosen as min(kernel ABI, landlockMaxABI), which the kernel
// supports by construction, so nothing is silently downgraded.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"github.com/toh-sandbox/toh/policy"
	"golang.org/x/sys/unix"
)

// landlockMaxABI is the newest Landlock ABI whose rights this file knows.
const landlockMaxABI = 11

// landlockFSRights[v] is the set of file-system rights ABI v can handle.
var landlockFSRights = [landlockMaxABI + 1]uint64{
	0:  0,
	1:  1<<13 - 1,
	2:  1<<14 - 1, // + refer
	3:  1<<15 - 1, // + truncate
	4:  1<<15 - 1,
	5:  1<<16 - 1, // + ioctl_dev
	6:  1<<16 - 1,
	7:  1<<16 - 1,
	8:  1<<16 - 1,
	9:  1<<17 - 1, // + resolve_unix
	10: 1<<17 - 1,
	11: 1<<17 - 1,
}

// landlockFSFileRights are the rights that apply to a non-directory; a rule on a file
// may carry no others (the kernel answers EINVAL).
const landlockFSFileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
	unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

// landlockNetRights returns the network rights ABI v can handle.
func landlockNetRights(v int) uint64 {
	var r uint64
	if v >= 4 {
		r |= unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	if v >= 10 {
		r |= unix.LANDLOCK_ACCESS_NET_BIND_UDP | unix.LANDLOCK_ACCESS_NET_CONNECT_SEND_UDP
	}
	return r
}

// LandlockABI returns the kernel's Landlock ABI version, or 0 when Landlock is
// unavailable (not built in, or disabled at boot).
func LandlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// landlockErrata returns the kernel's bitmask of fixed Landlock errata (0 if unknown).
func landlockErrata() uint64 {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_ERRATA)
	if errno != 0 {
		return 0
	}
	return uint64(v)
}

// landlockErratumSignalScope is the erratum whose fix makes signal scoping safe to use
// (without it, go-landlock treats the kernel as ABI 5).
const landlockErratumSignalScope = 1 << 1

// LandlockEnforcement says what a run of pol under Landlock ABI abi would enforce, or
// why it cannot be confined at all: Landlock missing (abi 0), a mode other than
// read-only or workspace-write, network deny below ABI 4 or without the seccomp
// socket filter, or a policy file beneath a writable root. See landlock_launcher.go for
// why workspace-write is always partial.
func LandlockEnforcement(pol policy.Execution, abi int) (Enforcement, error) {
	return landlockEnforcement(pol, abi, landlockSeccompArch.supported())
}

// landlockRule grants access beneath path.
type landlockRule struct {
	path   string
	access uint64
	// exceptDev (only with path "/") grants access beneath every entry of "/" but
	// /dev, where only landlockReadableDevices may be read (see rootReadRules).
	exceptDev bool
	// optional: a path that cannot be opened gets no rule instead of failing the
	// run (rootReadRules' own; never a path the policy names).
	optional bool
}

// landlockReadableDevices are the device files a confined command may read besides
// /dev/null (which it may also write): bwrap's --dev offers the same, and nothing
// else in the host's /dev.
var landlockReadableDevices = []string{"/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// landlockPlan is everything one launcher run enforces, decided before anything is
// applied.
type landlockPlan struct {
	kernelABI  int // what the kernel reports
	abi        int // what the ruleset is built for
	handledFS  uint64
	handledNet uint64
	scoped     uint64
	rules      []landlockRule
	seccomp    seccompPlan
	partial    bool // some effect of the mode is not governed
	abiPartial bool // ... because the ABI is below landlockFullABI
}

// newLandlockPlan turns the launcher flags into a plan for a kernel with the given ABI
// and errata. seccompOK says whether this architecture has the seccomp filter.
func newLandlockPlan(f landlockFlags, kernelABI int, errata uint64, seccompOK bool) (landlockPlan, error) {
	if kernelABI < 1 {
		return landlockPlan{}, errors.New("the kernel offers no Landlock (not built in, or disabled at boot)")
	}
	p := landlockPlan{kernelABI: kernelABI, abi: min(kernelABI, landlockMaxABI), seccomp: seccompPlan{base: seccompOK}}
	if f.maxABI > 0 {
		p.abi = min(p.abi, f.maxABI)
	}
	p.handledFS = landlockFSRights[p.abi]
	if p.abi >= 6 && errata&landlockErratumSignalScope != 0 {
		// Parity with bwrap's --unshare-pid: the command cannot signal host processes.
		p.scoped |= unix.LANDLOCK_SCOPE_SIGNAL
	}
	if f.netDeny {
		if p.abi < landlockNetABI {
			return landlockPlan{}, fmt.Errorf("network deny needs Landlock ABI %d, the ruleset can use ABI %d", landlockNetABI, p.abi)
		}
		if !seccompOK {
			return landlockPlan{}, errors.New("network deny needs the seccomp socket filter, which this architecture lacks")
		}
		// No port rules: every handled network right is denied.
		p.handledNet = landlockNetRights(p.abi)
		if p.abi >= 6 {
			// Parity with bwrap's --unshare-net, which gives the command its own
			// abstract unix socket namespace.
			p.scoped |= unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
		}
		p.seccomp.net = true
	}

	// Reads and execution everywhere. Pathname unix sockets stay reachable, as under
	// bwrap; connecting to one is not a file effect.
	read := uint64(unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX)
	// Not beneath /dev: the host's terminals are there (/dev/pts/N), and reading one
	// of the user's other terminals takes what the user types into it (found by
	// review; bwrap's private /dev has none).
	p.rules = append(p.rules, landlockRule{path: "/", access: read & p.handledFS, exceptDev: true})
	// The one required sink: read and write (and O_TRUNC) on /dev/null, no ioctl.
	devNull := uint64(unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE)
	p.rules = append(p.rules, landlockRule{path: "/dev/null", access: devNull & p.handledFS})
	// Every handled right beneath each root, refer included (cross-directory mv within
	// and between roots), device ioctl excluded.
	rw := p.handledFS &^ unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	for _, r := range f.rw {
		p.rules = append(p.rules, landlockRule{path: r, access: rw})
	}

	switch f.mode {
	case policy.ReadOnly:
		if seccompOK {
			p.seccomp.metadata = true
		}
		p.partial = !seccompOK
	case policy.WorkspaceWrite:
		p.partial = true
	default:
		return landlockPlan{}, fmt.Errorf("mode %q cannot be confined", f.mode)
	}
	p.abiPartial = p.abi < landlockFullABI
	p.partial = p.partial || p.abiPartial
	return p, nil
}

// String prints what the plan enforces, in the spirit of go-landlock's Config.String.
func (p landlockPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{Landlock V%d (kernel V%d); fs: %s; net: %s; scoped: %s", p.abi, p.kernelABI,
		landlockRightsString(p.handledFS, p.handledFS, landlockFSNames),
		landlockRightsString(p.handledNet, 0, landlockNetNames),
		landlockRightsString(p.scoped, 0, landlockScopeNames))
	for _, r := range p.rules {
		fmt.Fprintf(&b, "; allow %s on %s", landlockRightsString(r.access, p.handledFS, landlockFSNames), r.path)
		if r.exceptDev {
			fmt.Fprintf(&b, " except /dev (read_file on %s)", strings.Join(landlockReadableDevices, ","))
		}
	}
	fmt.Fprintf(&b, "; seccomp: %s", p.seccomp)
	if p.partial {
		b.WriteString("; partial")
	} else {
		b.WriteString("; full")
	}
	if p.abiPartial {
		b.WriteString(" (older ABI)")
	}
	b.WriteString("}")
	return b.String()
}

var (
	landlockFSNames = []string{"execute", "write_file", "read_file", "read_dir", "remove_dir",
		"remove_file", "make_char", "make_dir", "make_reg", "make_sock", "make_fifo",
		"make_block", "make_sym", "refer", "truncate", "ioctl_dev", "resolve_unix"}
	landlockNetNames   = []string{"bind_tcp", "connect_tcp", "bind_udp", "connect_send_udp"}
	landlockScopeNames = []string{"abstract_unix_socket", "signal"}
)

// landlockRightsString names the bits of set; "all" when set is the whole of a
// non-empty handled.
func landlockRightsString(set, handled uint64, names []string) string {
	switch {
	case set == 0:
		return "none"
	case set == handled:
		return "all"
	}
	var parts []string
	for i, n := range names {
		if set&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, ",")
}

// rulesetAttrSize is the size of struct landlock_ruleset_attr for ABI v: the kernel
// rejects non-zero fields it does not know, and older kernels know fewer fields.
func rulesetAttrSize(v int) uintptr {
	var a unix.LandlockRulesetAttr
	switch {
	case v < 4:
		return unsafe.Offsetof(a.Handled_access_net)
	case v < 6:
		return unsafe.Offsetof(a.Scoped)
	default:
		return unsafe.Offsetof(a.Quiet_access_fs)
	}
}

// apply restricts the calling OS thread (which must be locked and must be the one that
// calls execve): Landlock ruleset, every capability dropped, no_new_privs, then the
// seccomp filter.
func (p landlockPlan) apply() error {
	attr := unix.LandlockRulesetAttr{
		Handled_access_fs:  p.handledFS,
		Handled_access_net: p.handledNet,
		Scoped:             p.scoped,
	}
	r, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), rulesetAttrSize(p.abi), 0)
	runtime.KeepAlive(&attr)
	if errno != 0 {
		return fmt.Errorf("creating the Landlock ruleset (ABI %d): %w", p.abi, errno)
	}
	rulesetFD := int(r)
	defer unix.Close(rulesetFD)
	for _, rule := range p.rules {
		rules := []landlockRule{rule}
		if rule.exceptDev {
			var err error
			if rules, err = rootReadRules(rule.access); err != nil {
				return err
			}
		}
		for _, r := range rules {
			if err := addLandlockPathRule(rulesetFD, r); err != nil {
				return err
			}
		}
	}
	if err := dropCapabilities(); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rulesetFD), 0, 0); errno != 0 {
		return fmt.Errorf("enforcing the Landlock ruleset: %w", errno)
	}
	if p.seccomp.any() {
		if err := installSeccomp(p.seccomp); err != nil {
			return err
		}
	}
	return nil
}

// rootReadRules expands a rule granting access on "/" except /dev: read_dir on "/"
// itself (so every directory, /dev's included, can be listed), access on each entry
// of "/" but "dev" (file rights only, for a file), and read_file on
// landlockReadableDevices. Landlock grants are inherited downwards and cannot be
// taken back below, hence one rule per entry. Entries that are symbolic links get
// none (those of a merged /usr lead into /usr, which has its own); an entry that
// cannot be opened (gone, or a mount this user may not enter) is skipped, since no
// grant was asked for it by name: reads there are refused, as without Landlock they
// would have failed. A new entry made in "/" after the run starts is not readable.
func rootReadRules(access uint64) ([]landlockRule, error) {
	entries, err := os.ReadDir("/")
	if err != nil {
		return nil, fmt.Errorf("listing / for the read rules: %w", err)
	}
	rules := []landlockRule{{path: "/", access: access & unix.LANDLOCK_ACCESS_FS_READ_DIR}}
	for _, e := range entries {
		t := e.Type()
		switch {
		case e.Name() == "dev", t&fs.ModeSymlink != 0:
			continue
		case t.IsDir():
			rules = append(rules, landlockRule{path: "/" + e.Name(), access: access, optional: true})
		case t.IsRegular():
			rules = append(rules, landlockRule{path: "/" + e.Name(), access: access & landlockFSFileRights, optional: true})
		}
	}
	for _, d := range landlockReadableDevices {
		rules = append(rules, landlockRule{path: d, access: access & unix.LANDLOCK_ACCESS_FS_READ_FILE, optional: true})
	}
	return rules, nil
}

// addLandlockPathRule opens rule.path and adds it to the ruleset. A path that cannot
// be opened (missing, or through a symlink) is an error, never skipped: dropping a read rule would deny reads, and
// dropping a write rule would run the command with less than the policy says while
// reporting success.
func addLandlockPathRule(rulesetFD int, rule landlockRule) error {
	if rule.access == 0 {
		return nil
	}
	// Rule paths are canonical (policy.Execution says so), so no component may be a
	// symlink: one swapped in since canonicalization would redirect the grant.
	fd, err := unix.Openat2(unix.AT_FDCWD, rule.path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if rule.optional && err != nil {
		return nil
	}
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("opening rule path %q: a component is a symlink (rule paths must be canonical)", rule.path)
	}
	if err != nil {
		return fmt.Errorf("opening rule path %q: %w", rule.path, err)
	}
	defer unix.Close(fd)
	access := rule.access
	var st unix.Stat_t
	if rule.optional {
		// Typed by the directory listing; should the entry have changed since,
		// the kernel refuses dir rights on a file (EINVAL) and the rule is skipped.
	} else if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat of rule path %q: %w", rule.path, err)
	} else if st.Mode&unix.S_IFMT != unix.S_IFDIR && access&^landlockFSFileRights != 0 {
		// A writable root that is not a directory: trimming the rule to file rights
		// would silently drop what the policy asked for.
		return fmt.Errorf("rule path %q is not a directory", rule.path)
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	runtime.KeepAlive(&attr)
	if errno != 0 && !rule.optional {
		return fmt.Errorf("adding Landlock rule for %q: %w", rule.path, errno)
	}
	return nil
}

// LandlockLauncherMain is the launcher stage: args are os.Args[2:] (after
// "__landlock-run"). On success it never returns: the target replaces this process.
// On failure it prints exactly one stderr line starting "landlock-run: " and returns
// 125. With --probe it returns 0 after printing the probe text on stdout.
func LandlockLauncherMain(args []string) int {
	// Landlock, no_new_privs and seccomp are applied to this OS thread, and execve must
	// run on it. The thread is never unlocked, so if this returns the runtime retires
	// it instead of reusing a restricted thread.
	runtime.LockOSThread()

	if fd := launcherStatusFD(args); fd != 0 {
		// Close-on-exec first: the command must never hold the pipe its runner
		// reports on. A descriptor that is not open is no pipe to report on.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err == nil {
			launcherStatus = os.NewFile(uintptr(fd), "status")
		}
	}
	f, err := parseLandlockFlags(args)
	if err != nil {
		return landlockFail(err)
	}
	seccompOK := landlockSeccompArch.supported()
	plan, err := newLandlockPlan(f, LandlockABI(), landlockErrata(), seccompOK)
	if err != nil {
		return landlockFail(err)
	}
	var path string
	if !f.probe {
		// Looked up before restricting so "not found" fails before anything is
		// printed; execve below can still fail (e.g. ENOEXEC).
		path, err = exec.LookPath(f.argv[0])
		if errors.Is(err, exec.ErrDot) {
			err = nil // execvp(3) semantics: the caller's $PATH decides.
		}
		if err != nil {
			return landlockFail(fmt.Errorf("command %q: %w", f.argv[0], unwrapExecError(err)))
		}
	}
	if err := plan.apply(); err != nil {
		return landlockFail(err)
	}
	if f.probe {
		text := landlockProbeFull
		if plan.partial {
			text = landlockProbePartial
		}
		fmt.Fprintln(os.Stdout, text)
		return 0
	}
	if plan.abiPartial {
		fmt.Fprintln(os.Stderr, landlockNoticePartial)
	}
	err = syscall.Exec(path, f.argv, os.Environ())
	return landlockFail(fmt.Errorf("executing %q: %w", f.argv[0], err))
}

// unwrapExecError drops os/exec's wrapping, which repeats the command name.
func unwrapExecError(err error) error {
	var e *exec.Error
	if errors.As(err, &e) {
		return e.Err
	}
	return err
}

// launcherStatus is the launcher's status pipe (--status-fd), nil when none.
var launcherStatus *os.File

// landlockFail prints err as the launcher's failure line, on stderr and on the status
// pipe, and returns the launcher's failure status.
func landlockFail(err error) int {
	line := landlockFailureLine(err)
	if launcherStatus != nil {
		_, _ = launcherStatus.WriteString(line + "\n")
	}
	fmt.Fprintln(os.Stderr, line)
	return landlockExitFailure
}
