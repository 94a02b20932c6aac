// Package sandbox owns the provider contract of toh-exec: turning an argv and an
// execution policy into an argv that enforces the policy (or refusing to), choosing a
// backend from the runner chain, running the confined command, and classifying what
// happened from the backend's own dialect.
//
// # Contract
//
// [Confine] returns a [Confined] whose Argv enforces the policy, or an
// [*UnavailableError] (code SANDBOX_UNAVAILABLE). It never returns an argv that would
// run unconfined. danger-full-access never reaches a provider: callers run the argv as
// it is and report only {mode, denied:false}.
//
// # Threat model
//
// The confined command is hostile. It may print any text (including a backend's
// denial or failure dialect), spawn descendants, and race the file system. What it can
// never do is decide which runner confines it: runner selection reads no environment
// variable, and runner programs are looked up in fixed system locations or given
// explicitly by the operator.
//
// Classification of a finished run is a report, not a security boundary: stderr
// dialects are a guess (an application can print the same words; a denial can scroll
// out of the retained tail). The boundary is the kernel mechanism itself.
//
// # Enforcement per rung
//
// What each rung governs, against SPEC §1's file effects (each row is tested through
// the built binary in cmd/toh-exec/rungs_linux_test.go and protect_linux_test.go):
//
//	effect                          bwrap            Landlock read-only    Landlock workspace-write
//	content, name, existence        full (EROFS)     full (EACCES)         full inside/outside roots
//	truncate                        full             ABI >= 3              ABI >= 3
//	rename/link across dirs         full             ABI >= 2 (else all    ABI >= 2 (else all denied)
//	                                                 denied)
//	device ioctls                   private /dev     ABI >= 5              ABI >= 5
//	mode, owner, times, xattrs      full (EROFS)     seccomp filter        NOT governed beside roots
//	                                                 (amd64, arm64)
//	/tmp                            private tmpfs    read-only             host /tmp writable
//	/dev                            private --dev    writes: /dev/null;    writes: /dev/null;
//	                                                 reads: null, zero,    reads: the same
//	                                                 full, random, urandom
//	network deny                    --unshare-net +  TCP rules (ABI >= 4) + non-unix sockets refused
//	                                vsock refused
//	host IPC (SysV, POSIX mqueues)  own namespace    NOT governed          NOT governed
//	deputies (services that run     known ones       NOT governed          NOT governed
//	  commands on request)          hidden
//	protect, existing paths         read-only binds  (all read-only)       NOT governed
//	protect, missing paths          stand-ins        (all read-only)       NOT governed
//	protect, below a non-directory  non-dir pinned   (all read-only)       NOT governed
//	protect, a symlink's own name   run refused      (all read-only)       NOT governed
//	missing commondir               stand-in "."     (all read-only)       NOT governed
//	git modules/: no new entry      read-only bind,  (all read-only)       NOT governed
//	  (submodule git dirs in use    those rebound
//	  writable)
//	a submodule git dir in use      put back after   (all read-only)       NOT governed
//	  left invalid (its HEAD)       the run
//	missing policy lock             NOT governed     (all read-only)       NOT governed
//
// Seatbelt (macOS, built and golden-tested here, never run): every protected path,
// existing or missing, gets a deny rule, and the directories on the way to one may be
// neither created nor removed nor renamed (see [SeatbeltProfile]).
//
// The Landlock rung's argv re-execs toh-exec as the launcher stage (SPEC §4.2); [Run]
// skips that re-exec and applies the launcher's own plan to a thread of its own, then
// starts the command from it (landlock_direct_linux.go). Both paths are tested against
// the same expectations. Because Run then sees the command start, it reads only the
// denial dialect afterwards: a command that prints a "landlock-run: " line and exits
// 125 is its own result, not a runner failure.
//
// # Runner failures
//
// SPEC §4.3 reads a runner failure from stderr, which the command writes too. So
// every runner Run execs reports on a status pipe the command never holds
// (status.go): bwrap's --json-status-fd, whose exit record says its child reached
// execve, and the launcher stage's --status-fd, which carries its failure line. A run
// whose runner says the command started is never a runner failure, whatever the
// command printed; a launcher run is one exactly when the launcher's line arrived.
// The SPEC's stderr rule is read only where no runner said so: bwrap that failed (or
// a fake runner in tests), and Seatbelt. This is stricter than the SPEC's rule, never
// looser: it only drops runner failures the command made up, which a harness could
// otherwise answer by running it again unconfined.
//
// One line the SPEC counts as a runner failure is not: the runner's report that it
// set the sandbox up and then the command's own execve failed (bwrap's "execvp",
// the Landlock rung's "executing", for exactly the command's argv[0]). The command
// could not be started, the sandbox works, and advice to go unconfined would be
// wrong: it is a [CommandExecError], which toh-exec reports as CANNOT_START (124).
//
// One bwrap failure is not final: bubblewrap 0.8 copies the host's mounts and then
// remounts each read-only by its path, so a directory above a mount renamed in
// between fails the set-up ("remount ...: No such file or directory"), before the
// command starts; 3 of 300 runs did during a rename loop (bwrapMountRace). [Run]
// starts bwrap again, at most three times in all with short pauses, when its status
// pipe says the command never started and its standard input is a file or nothing,
// saying so on stderr; the probe does the same, since a probe that failed so would
// leave the chain, and its cached verdict, on the Landlock rung. Any other failure
// is reported at once.
//
// Enforcement is "full" for bwrap, "full" for Landlock read-only on ABI >= 5 with the
// seccomp filter, and "partial" otherwise (Landlock workspace-write always, since a
// seccomp filter cannot tell paths apart and Landlock cannot deny inside an allowed
// tree, so protected paths stay writable; --require-full refuses such a run). Landlock
// below ABI 5 prints the exact partial notice. Network deny that a rung cannot apply
// fails closed.
//
// # Protected paths
//
// Every backend takes its protected paths from policy.Execution.ProtectedPaths, so
// they agree on which paths (the git directories of linked worktrees and submodules
// included) and on the git rule (no ".git/..." protection where no git directory
// exists yet, so "git init" works). bwrap rebinds an existing one read-only and pins
// the directories above it; for a missing one [Run] first creates an empty stand-in
// that bwrap rebinds the same way, and removes it after the run, so nothing is left
// in the user's tree (standins_linux.go: mechanism, concurrent runs, what a SIGKILL of
// toh-exec leaves). A missing commondir gets a stand-in holding ".", not an empty one:
// git dies on an empty commondir, and reads "." as the git directory itself, what no
// commondir means. Until 2026-12-02 it got none, and a command could create
// ".git/commondir" in an ordinary repository, so that the user's next "git status"
// read config and hooks (a core.fsmonitor, run at once) from a directory of the
// command's (TestCommondirCannotBeCreated); a missing file the protected config
// includes had no stand-in either, and gets an empty one now, which git reads as no
// settings (TestConfigIncludeCannotBeCreated). Paths whose mere existence matters to
// the policy writers (the policy file and its lock) get no stand-in, so bwrap cannot
// keep them from being created when missing; Seatbelt and the fence deny them. A lock file a command creates can only
// ever be a lock (the writers refuse one that is not a regular file of its own name). A missing policy file is different:
// created, it would set the mode of every later call, so a run in which it is
// missing within a writable root is refused by bwrap (before the command starts) and
// by Landlock, unless the root is fenced. A rung is also only as strong as the weakest run over the same tree at the same
// time: a concurrent Landlock or danger-full-access run can write protected paths.
//
// Two cases where bwrap cannot do what it does for other paths, decided so that runs
// keep working where that is safe and are refused where it is not ([BwrapArgv] has the
// details):
//
//   - A missing protected path below an existing non-directory ("secrets/key.pem"
//     while "secrets" is a file) can get no stand-in. It cannot exist while the file
//     stays, so bwrap pins the file (a writable bind onto itself): the run works and
//     may write the file, but cannot remove, rename or replace it, so the protected
//     path cannot be created. Stricter than the policy's answer, which lets the file
//     be deleted and refuses only making the name again.
//   - A protected symlink's own name (".git -> elsewhere", ".git/hooks -> ../hooks",
//     an entry that is or passes through a link) cannot be a mountpoint, and a command
//     that could replace it could point git at hooks of its own. When such a name lies
//     within a bound root, [Run] refuses the run before the command starts, with an
//     error naming the link and the remedies (a "gitdir:" file instead of a .git link,
//     removing the entry, or the fence, which denies the name itself like Seatbelt).
//
// # Fenced runs
//
// With pol.Fence in workspace-write, a provider reports in Confined.FencedRoots the
// roots its argv expects to be served by the fence (bwrap: every bound root, not the
// private /tmp; Landlock: every writable root), and bwrap leaves the protected paths
// inside them to the fence, so that each refused attempt is recorded rather than
// answered EROFS unseen. Such an argv must only run through a [Stage] that fences
// those roots (toh-exec's internal/fencerun); [Run] then attaches the records to the
// facts and derives Denied from them plus the dialect (DeniedBy says which).
//
// # Platform support
//
// Linux: bwrap, then Landlock. macOS: Seatbelt (sandbox-exec) only. Anything else: no
// chain; every confined call fails closed without probing.
//
// # Limitations
//
// The bwrap rung needs unprivileged user namespaces (or a setuid bwrap). Under bwrap
// /tmp is a private tmpfs: files a confined command leaves there vanish with it.
// Processes a command leaves in the background die with bwrap's PID namespace; under
// Landlock, toh-exec ([Stdio.EndLeftovers]) is their child subreaper and kills them
// once the command exited (leftovers_linux.go), since such a process would keep the
// stdin it was given and, when that is the user's terminal, read what the user types
// after toh-exec returned. A library caller that does not set it gets them left
// running, confined, and the run ends [PipeGrace] after the command exited even while
// they hold its stderr, closing that pipe on them.
//
// Open, found by review (2026-12-01) and not closed here, each beyond SPEC §1's file
// effects:
//
//   - Deputies under Landlock. Pathname unix sockets stay connectable there (network
//     deny included; Landlock governs their connect only from ABI 9, above this
//     machine's 7), and a service listening on one that runs what it is asked is an
//     escape from every mode: the session bus ("systemd-run --user"), root's
//     systemd for a command run as root, docker.sock for a member of the docker
//     group, the user's tmux server. The bwrap rung hides the ones it knows of
//     (deputies.go, with the decision and what it costs); Landlock has no mount
//     namespace to hide them in. Run agents as a user without such services, or
//     where bwrap works.
//   - Kernel keyrings: under Landlock (any user), and under bwrap run by root (no
//     user namespace), a command can read, update and revoke the caller's keys.
//     A seccomp rule could refuse keyctl(2), add_key(2) and request_key(2), at the
//     cost of every command that reads credentials from a keyring.
package sandbox

import (
	"os/exec"

	"github.com/toh-sandbox/toh/policy"
)

// Backend names a confinement mechanism.
type Backend string

const (
	BackendBwrap    Backend = "bwrap"
	BackendLandlock Backend = "landlock"
	BackendSeatbelt Backend = "seatbelt"
)

// Enforcement says whether a backend governs every file effect the mode promises
// ("full") or only a subset ("partial").
type Enforcement string

const (
	EnforcementFull    Enforcement = "full"
	EnforcementPartial Enforcement = "partial"
)

// Confined is a ready-to-spawn argv plus what is needed to interpret its run.
type Confined struct {
	Argv        []string
	Backend     Backend
	Enforcement Enforcement
	// DenialSignatures are case-insensitive substrings of the retained stderr tail that
	// mean "the backend denied a file effect" when the run exited non-zero.
	DenialSignatures []string
	// RunnerFailureRules say which stderr lines mean "the runner itself failed and the
	// command never ran". Runner failure outranks denial.
	RunnerFailureRules RunnerFailureRules
	// Network is what the backend actually applied to the network.
	Network policy.Network
	// SignalAsStatus is true when the backend reports its child's death by signal N as
	// an ordinary exit status 128+N (bwrap's PID-1 monitor does). Such statuses can
	// then not be told apart from a signal death, so they are never classified as a
	// denial or a runner failure: a signal death never is (SPEC §4.3).
	SignalAsStatus bool
	// FencedRoots are the writable roots this argv expects to be served by the fence
	// (pol.Fence in workspace-write): the backend left protecting paths inside them to
	// the fence, so the argv must only ever run through a [Stage] that mounts a fence
	// on each of them. Under bwrap "/tmp" is a private tmpfs and is never fenced.
	FencedRoots []string
	// FenceWritable are the writable roots a fence serving this argv may let a
	// mutation reach: those the command can write on the host by itself. The fence
	// resolves links on the host, so a root the runner keeps from the host must not
	// count: under bwrap "/tmp" is a private tmpfs, and a link in a fenced root to
	// the host's /tmp would otherwise reach it (found by review). Under Landlock
	// every writable root is the host's.
	FenceWritable []string
	// Stage, when set, starts Argv through the caller's own process (toh-exec's fence
	// stage); see [Stage].
	Stage Stage
	// standIns, when set, are the protected paths [Run] must lock, and create where
	// missing, before the spawn, and clean up after it (bwrap only).
	standIns *standInPlan
	// landlock, when set, is the launcher stage's command line parsed back from Argv
	// (Landlock only): [Run] then applies the same plan on an OS thread of its own and
	// starts the command from that thread instead of re-exec'ing toh-exec as the
	// launcher (landlock_direct_linux.go). Argv stays the launcher's, and is what runs
	// when a Stage is set.
	landlock *landlockFlags
	// command is the command's argv[0] as Argv hands it to the runner (bwrap and
	// Landlock): what the runner names when the command's own execve fails
	// ([CommandExecError]).
	command string
	// hidden are the directories the bwrap argv covers with an empty tmpfs to hide
	// deputies (deputies.go): they hold the working directory Confine saw, never the
	// one a caller of [Run] may pass instead, which Run checks.
	hidden []string
	// status, when set, is how Argv's runner reports on its status pipe, which Argv
	// names at descriptor 3 (status.go): [Run] must then pass that pipe whenever it
	// execs Argv.
	status statusKind
	// netFilter, when set, makes [Run] start Argv (or the Stage) from a thread with
	// the bwrap rung's network-deny seccomp filter (bwrap_filter_linux.go): like the
	// stand-ins, Argv alone does not carry it.
	netFilter bool
}

// Stage is a process of the caller's that [Run] starts in place of Argv and that
// execs Argv once it is ready: toh-exec's fence stage, which mounts the fence on
// the run's writable roots inside a mount namespace of the run's own first.
type Stage interface {
	// Wrap rewrites cmd before it starts: its program, arguments, namespaces and
	// extra files. cmd.Args holds Argv when Wrap is called.
	Wrap(cmd *exec.Cmd) error
	// Started is called once the process started and returns when Argv may run
	// (Stage execs it). An error means it must not: Run kills the process, and the
	// run fails as SANDBOX_UNAVAILABLE with that cause.
	Started() error
	// Finished is called after the process was reaped. It returns what the fence
	// recorded, and a non-empty failure when the stage could not exec Argv (a
	// runner failure: the command never ran).
	Finished() (fence *FenceFacts, failure string)
}

// FenceFacts are what the fence saw of one run (SPEC §5.1).
type FenceFacts struct {
	// Roots are the fenced writable roots.
	Roots []string
	// Denials are the run's refused mutations inside Roots, in the order they
	// happened; only this run's, since the fence serves only its mount namespace.
	Denials []Denial
	// Dropped counts denials beyond the retained ones.
	Dropped int
	// Lost: the fence's process ended, after the stage was ready, without its
	// report. Whether the command ran, and what it was refused, is not known; Run
	// then returns a *FenceLostError, never a claim that the command did not run.
	Lost bool
}

// Denial is one refused mutation, as the fence judged it.
type Denial struct {
	Op   string `json:"op"`
	Path string `json:"path"` // the host path the mutation would have changed
	Rule string `json:"rule"`
	PID  uint32 `json:"pid"` // as the host's PID namespace sees it; 0 for the kernel
}

// RunnerFailureRules is the runner-failure half of a backend's dialect.
type RunnerFailureRules struct {
	// Marker is the case-sensitive substring a stderr line must contain.
	Marker string
	// ExitStatus, when non-zero, is the exit status the run must have for a marker line
	// to count (Landlock's launcher exits 125).
	ExitStatus int
	// Except lists whole lines (case-insensitive) that contain Marker but are notices,
	// not failures.
	Except []string
}
