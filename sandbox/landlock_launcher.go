package sandbox

// The Landlock launcher stage (SPEC §4.2), platform-independent half: the launcher's
// command line, its exact texts, and which policies it can enforce at all.
//
// The launcher is toh-exec's own binary re-exec'd; it restricts itself and then
// execve(2)s the target, so the target runs confined and its exit status passes
// through untouched, 125 included. It is the Landlock rung's argv ([Confined].Argv),
// what the probe runs, and what runs behind a fence stage. A plain toh-exec run does
// not re-exec: [Run] applies the very same plan, parsed from this command line, to one
// thread of its own and starts the target from it (landlock_direct_linux.go says why
// that is the same confinement, and why it was done: a second Go start per run).
// Command line (built by [LandlockArgv]):
//
//	toh-exec __landlock-run [--status-fd N] [--probe] [--mode read-only|workspace-write] [--rw PATH]... [--net-deny] [--max-abi N] -- ARGV...
//
//   - --mode is required for a run; with --probe it defaults to read-only and may only be
//     read-only (the probe applies the read-only profile).
//   - --rw PATH (repeatable, workspace-write only) grants full file access beneath an
//     absolute, canonical PATH. A rule path that cannot be opened, or whose spelling
//     passes through a symlink, is fatal, never dropped.
//   - --net-deny denies TCP bind/connect (Landlock ABI >= 4) and the creation of every
//     socket that is not AF_UNIX (seccomp). Landlock alone would miss UDP below ABI 10,
//     raw sockets and Multipath TCP; the socket filter closes them and Landlock's TCP
//     rules stay as a second layer. A kernel or architecture that cannot do both fails
//     the launcher (SPEC §7).
//   - --max-abi N builds the ruleset for at most ABI N (>= 1). It can only lower what
//     the kernel offers, never raise it; it exists so tests on a new kernel can run the
//     older-ABI paths for real. [LandlockArgv] never emits it.
//   - --status-fd N (N >= 3; first, when given) names a pipe the launcher marks
//     close-on-exec before anything else and writes its failure line to, as well as
//     to stderr, before it exits 125: a successful execve closes it empty, so the
//     caller can tell the launcher's failure from a command imitating it
//     (status.go). [Run] passes it whenever the launcher runs as a process of its
//     own; [LandlockArgv] never emits it.
//   - --probe applies the profile, prints one of the probe texts on stdout and exits 0;
//     no ARGV is accepted.
//   - "--" ends the flags; ARGV is looked up in $PATH like execvp(3) does.
//
// Before the exec the launcher empties every capability set of its thread (ambient,
// bounding when the caller may shrink it, then effective, permitted and inheritable),
// so a command run by root holds none, as under bwrap --cap-drop ALL.
//
// Exit status: every launcher-level failure (bad flags, Landlock unavailable, a rule
// path that cannot be opened, execve failing) exits 125 and prints exactly one stderr
// line starting "landlock-run: ". The partial-enforcement notice shares that prefix but
// is not a failure; when it was printed and execve then fails, stderr holds the notice
// and exactly one failure line.
//
// What each Landlock ABI governs (the ruleset always handles every file-system right of
// the highest ABI that is <= the kernel's and known here, so the kernel denies each of
// them outside the allowed hierarchies):
//
//	ABI  governs                                                     toh reports
//	1    write/read files, read dirs, execute, make_* (create reg,   partial
//	     dir, symlink, fifo, socket, char, block), remove_file/dir;
//	     cross-directory rename/link is always denied
//	2    + refer: cross-directory rename/link allowed between roots  partial
//	3    + truncate(2)/ftruncate/O_TRUNC                             partial
//	4    + TCP bind/connect (used only for --net-deny)               partial
//	5    + ioctl on character/block devices                          full (read-only)
//	6    + scoping: signals to processes outside the sandbox are     full (read-only)
//	     denied (when the kernel's signal-scope erratum is fixed);
//	     with --net-deny, abstract unix sockets outside too
//	9    + connect/sendmsg on pathname unix sockets (granted on /)   full (read-only)
//	10   + UDP bind/connect/send (used only for --net-deny)          full (read-only)
//
// Landlock never governs metadata: chmod, chown, utimes/utimensat, set/removexattr and
// inode-flag ioctls (chattr) succeed wherever DAC allows. SPEC §1 makes metadata part of
// every mode, so every profile adds a seccomp filter (amd64 and arm64 only): io_uring
// and others' limits (below) in every mode, and in read-only it also
// fails chmod, fchmod, fchmodat, fchmodat2, chown, fchown, lchown, fchownat, utime,
// utimes, futimesat, utimensat, setxattr, lsetxattr, fsetxattr, setxattrat,
// removexattr, lremovexattr, fremovexattr, removexattrat, file_setattr and the
// FS_IOC_SETFLAGS / FS_IOC_FSSETXATTR / FS_IOC_SETVERSION / FS_IOC_ENABLE_VERITY /
// FS_IOC_SET_ENCRYPTION_POLICY / FS_IOC_SETFSLABEL ioctls with EACCES (not EPERM: the
// Landlock dialect of SPEC §4.3 is "permission denied", and a metadata denial must be
// classified like any other), io_uring with ENOSYS (its SETXATTR and SOCKET
// operations would bypass the filter), and prlimit64 setting another process's limits
// with EPERM (the command could otherwise kill toh-exec with an address-space limit;
// see landlock_direct_linux.go). Syscalls of a foreign architecture (i386 on
// amd64, arm32 on arm64) and x32 syscalls kill the process: the filter cannot name them.
// Consequences:
//
//   - read-only is "full" on ABI >= 5 with the filter, "partial" below ABI 5 or without
//     the filter (another architecture).
//   - `touch /dev/null` fails under read-only (utimensat is denied everywhere);
//     writing to /dev/null works.
//   - workspace-write is always "partial": seccomp cannot tell paths apart, so metadata
//     outside the roots stays ungoverned, and Landlock cannot deny beneath an allowed
//     root, so protected paths (SPEC §8) stay writable. A policy file beneath a root
//     would be writable too; SPEC §8 says it never may be, so [LandlockEnforcement]
//     refuses that policy instead of reporting it partial.
//   - The notice "landlock-run: partial enforcement (older Landlock ABI)" is printed
//     only when the ABI is below 5 (its text names that cause); the other partial
//     causes are reported by [LandlockEnforcement] alone.
//
// Other limitations: writable file descriptors inherited from the caller (stdout,
// stderr) stay writable wherever they point; reads are granted on every entry of "/"
// but /dev, where only null, zero, full, random and urandom may be read (the host's
// terminals live there: reading another of the user's /dev/pts/N takes what is typed
// into it), so a terminal re-opened by path (/dev/tty, /dev/stdin on a terminal) can be
// neither read nor written, and on ABI >= 5 device ioctls on newly opened devices
// fail; file-system-specific ioctls beyond the list above (btrfs subvolume flags, for
// instance) are not filtered; --net-deny leaves pathname unix sockets reachable (as
// bwrap --unshare-net does) and, below ABI 6, abstract unix sockets too.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
)

// Exact texts and codes of the launcher (SPEC §4.2).
const (
	landlockStageArg      = "__landlock-run"
	landlockExitFailure   = 125
	landlockFailurePrefix = "landlock-run: "
	landlockNoticePartial = "landlock-run: partial enforcement (older Landlock ABI)"
	landlockProbeFull     = "landlock: fully enforced"
	landlockProbePartial  = "landlock: partially enforced (older ABI)"

	// landlockFullABI is the lowest ABI that governs every file effect Landlock can
	// govern (ioctl on devices arrived in ABI 5); SPEC §1 calls anything below partial.
	landlockFullABI = 5
	// landlockNetABI is the lowest ABI with TCP rules (SPEC §7).
	landlockNetABI = 4
)

// landlockFlags is the launcher's parsed command line.
type landlockFlags struct {
	mode    policy.Mode
	rw      []string
	netDeny bool
	probe   bool
	maxABI  int // 0: no cap
	// statusFD is the status pipe (--status-fd), 0 when none.
	statusFD int
	argv     []string
}

// LandlockArgv builds the launcher invocation for argv under pol:
// [self, "__landlock-run", "--mode", MODE, ("--rw", ROOT)..., ["--net-deny"], "--", argv...].
// self is the absolute path of the toh-exec binary. Call [LandlockEnforcement] first:
// this function cannot refuse. It fails closed where it must choose: any network value
// other than "allow" becomes --net-deny, and a mode the launcher does not know is passed
// through for the launcher to reject (exit 125).
func LandlockArgv(self string, pol policy.Execution, argv []string) []string {
	out := []string{self, landlockStageArg, "--mode", string(pol.Mode)}
	if pol.Mode == policy.WorkspaceWrite {
		for _, r := range pol.WritableRoots {
			out = append(out, "--rw", r)
		}
	}
	if pol.Network != policy.NetworkAllow {
		out = append(out, "--net-deny")
	}
	out = append(out, "--")
	return append(out, argv...)
}

// parseLandlockFlags parses the launcher's arguments (os.Args[2:]). It accepts only
// what LandlockArgv and the probe emit; everything else is an error.
func parseLandlockFlags(args []string) (landlockFlags, error) {
	var f landlockFlags
	i := 0
	sawDashDash := false
	for i < len(args) {
		a := args[i]
		i++
		switch a {
		case "--":
			sawDashDash = true
		case "--probe":
			f.probe = true
		case "--net-deny":
			f.netDeny = true
		case "--mode", "--rw", "--max-abi", "--status-fd":
			if i >= len(args) {
				return f, fmt.Errorf("flag %s needs a value", a)
			}
			v := args[i]
			i++
			if a == "--status-fd" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 3 || f.statusFD != 0 {
					return f, fmt.Errorf("--status-fd %q: want one descriptor >= 3", v)
				}
				f.statusFD = n
				continue
			}
			if a == "--max-abi" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 || f.maxABI != 0 {
					return f, fmt.Errorf("--max-abi %q: want one integer >= 1", v)
				}
				f.maxABI = n
				continue
			}
			if a == "--rw" {
				if !filepath.IsAbs(v) || filepath.Clean(v) != v {
					return f, fmt.Errorf("--rw %q: not a clean absolute path", v)
				}
				f.rw = append(f.rw, v)
				continue
			}
			if f.mode != "" {
				return f, errors.New("--mode given twice")
			}
			f.mode = policy.Mode(v)
		default:
			return f, fmt.Errorf("unknown flag %q", a)
		}
		if sawDashDash {
			break
		}
	}
	f.argv = args[i:]
	switch {
	case f.probe && f.mode == "":
		f.mode = policy.ReadOnly
	case f.mode == "":
		return f, errors.New("missing --mode")
	}
	switch f.mode {
	case policy.ReadOnly:
		if len(f.rw) > 0 {
			return f, errors.New("--rw needs --mode workspace-write")
		}
	case policy.WorkspaceWrite:
		if f.probe {
			return f, errors.New("--probe applies the read-only profile; --mode must be read-only")
		}
	default:
		return f, fmt.Errorf("--mode %q: want read-only or workspace-write", f.mode)
	}
	switch {
	case f.probe && len(f.argv) > 0:
		return f, errors.New("--probe takes no command")
	case f.probe:
	case !sawDashDash:
		return f, errors.New(`missing "--" before the command`)
	case len(f.argv) == 0 || f.argv[0] == "":
		return f, errors.New("missing command after --")
	}
	return f, nil
}

// landlockEnforcement is [LandlockEnforcement] with the platform's seccomp support
// passed in, so every combination is testable on any machine.
func landlockEnforcement(pol policy.Execution, abi int, seccompOK bool) (Enforcement, error) {
	if abi < 1 {
		return "", errors.New("landlock: not supported by this kernel or disabled at boot")
	}
	switch pol.Mode {
	case policy.ReadOnly, policy.WorkspaceWrite:
	default:
		return "", fmt.Errorf("landlock: mode %q cannot be confined (want read-only or workspace-write)", pol.Mode)
	}
	switch pol.Network {
	case policy.NetworkAllow:
	case policy.NetworkDeny:
		if abi < landlockNetABI {
			return "", fmt.Errorf("landlock: network deny needs Landlock ABI %d, the kernel has ABI %d", landlockNetABI, abi)
		}
		if !seccompOK {
			return "", errors.New("landlock: network deny needs the seccomp socket filter, which this architecture lacks (Landlock alone leaves UDP and raw sockets open)")
		}
	default:
		return "", fmt.Errorf("landlock: network %q: want allow or deny", pol.Network)
	}
	if pol.Mode == policy.ReadOnly {
		if abi < landlockFullABI || !seccompOK {
			return EnforcementPartial, nil
		}
		return EnforcementFull, nil
	}
	for _, r := range pol.WritableRoots {
		if !filepath.IsAbs(r) {
			return "", fmt.Errorf("landlock: writable root %q is not absolute", r)
		}
		// A fenced root (pol.Fence: every root but the host's /tmp) is served by the
		// fence, which guards the policy file as its own.
		fenced := pol.Fence && r != "/tmp"
		// A missing policy file counts too: the command could create it, and set the
		// mode of every later call.
		if pol.PolicyFile != "" && !fenced && canon.Within(pol.PolicyFile, r) {
			if _, err := os.Lstat(pol.PolicyFile); errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("landlock: the policy file %q does not exist and lies beneath writable root %q, where Landlock cannot keep it from being created (SPEC §8); pass --policy with a file outside the writable roots", pol.PolicyFile, r)
			}
			return "", fmt.Errorf("landlock: the policy file %q lies beneath writable root %q and Landlock cannot keep it read-only there (SPEC §8)", pol.PolicyFile, r)
		}
	}
	// Metadata beneath and beside the roots and the protect list are ungoverned.
	return EnforcementPartial, nil
}

// launcherStatusFD finds --status-fd in the launcher's arguments before they are
// parsed, so that a failure to parse the rest is reported on the pipe too: the value
// of the first --status-fd ahead of "--" when it is a descriptor >= 3, else 0.
func launcherStatusFD(args []string) int {
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == "--status-fd" && i+1 < len(args) {
			if n, err := strconv.Atoi(args[i+1]); err == nil && n >= 3 {
				return n
			}
			break
		}
	}
	return 0
}

// landlockFailureLine renders err as the launcher's single stderr line.
func landlockFailureLine(err error) string {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	return landlockFailurePrefix + msg
}
