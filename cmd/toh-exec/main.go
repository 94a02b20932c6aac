// Command toh-exec runs a command confined by a kernel mechanism under toh's policy
// file. It is CLI only: flags, exit codes and printing; every decision lives in the
// policy and sandbox packages.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/toh-sandbox/toh/sandbox"
)

// Exit codes of toh-exec's own failures. A child's own status passes through
// unchanged (128+N for a death by signal N); --json and --result-fd tell the two apart
// unambiguously, since a child may exit with any code.
const (
	exitUsage        = 2   // bad flags, unknown mode, missing command
	exitPolicy       = 120 // policy file malformed or invalid, unknown session
	exitEscalation   = 121 // escalation invalid, rejected, cancelled or unavailable
	exitEnforcement  = 122 // --require-full and the run would be partial
	exitFenceLost    = 119 // FENCE_LOST: the fence process ended mid-run; the command may have run
	exitUnavailable  = 123 // SANDBOX_UNAVAILABLE: no backend, or the runner failed
	exitCannotStart  = 124 // the command could not be started (working directory, I/O, protected paths, its own exec in the sandbox)
	exitNotFound     = 127 // the command was not found (checked before confining)
	landlockStageArg = "__landlock-run"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == landlockStageArg {
		os.Exit(sandbox.LandlockLauncherMain(os.Args[2:]))
	}
	closeInheritedFDs()
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "policy":
			return runPolicy(args[1:], stdout, stderr)
		case "doctor":
			return runDoctor(args[1:], stdout, stderr)
		case "why":
			return runWhy(args[1:], stdout, stderr)
		case "help":
			fmt.Fprint(stdout, usageText)
			return 0
		}
	}
	return runExec(args, stdin, stdout, stderr)
}

func usageError(stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "toh-exec: "+format+"\n", a...)
	fmt.Fprintln(stderr, "Run 'toh-exec --help' for usage.")
	return exitUsage
}

const usageText = `Usage:
  toh-exec [OPTIONS] -- COMMAND [ARGS...]
  toh-exec [OPTIONS] -c STRING [ARG0 [ARGS...]]
  toh-exec policy show [--policy FILE] [--session ID] [--mode MODE]
  toh-exec policy validate FILE
  toh-exec policy set-mode [--policy FILE] [--session ID] MODE
  toh-exec policy new-session [--policy FILE] --session ID [--cwd DIR]
  toh-exec doctor [--json]
  toh-exec why --path P --op write|create|delete|rename [--policy FILE] [--session ID]
               [--mode MODE] [--probe-cache FILE] [--json]

Runs COMMAND confined by a kernel mechanism (bubblewrap, else Landlock, on Linux;
sandbox-exec on macOS) under the policy file. It never runs a confined command
unconfined: if no backend can confine, the command does not run.

Modes: read-only (default), workspace-write, danger-full-access.

Options:
  --policy FILE        policy file (default: $XDG_CONFIG_HOME/toh/policy.json or
                       ~/.config/toh/policy.json; missing means the embedded default:
                       read-only, workspace = the working directory)
  --session ID         resolve the policy for session ID
  --mode MODE          replace the policy file's deployment mode for this call
                       (a session's own mode log still wins)
  -c STRING            run 'bash -c STRING'
  --runner NAME        use only this backend: bwrap or landlock (Linux), seatbelt
                       (macOS); no probe is run
  --bwrap PATH         bwrap binary (default: first of /usr/bin/bwrap,
                       /usr/local/bin/bwrap, /bin/bwrap; PATH is never consulted)
  --probe-timeout DUR  bound for each runner probe (default 5s; 0 is rejected)
  --refresh-probe      probe the runner chain again instead of trusting the cached
                       verdict (kept in /var/cache/toh for root, /run/user/UID/toh
                       or ~/.cache/toh otherwise; invalidated when the kernel, a
                       runner binary or toh-exec changes)
  --probe-cache FILE   keep the probe verdict in FILE instead
  --require-full       refuse to run when enforcement would be partial
  --sandbox-permissions MODE
                       ask to run this one call under the wider MODE; needs
                       --justification; the approver decides (policy approval
                       "never" rejects without asking); a grant is never persisted
  --justification TEXT why the wider mode is needed (shown to the approver)
  --approval-command PATH
                       ask PATH instead of the terminal: it gets the request as one
                       JSON object on stdin and prints allowed-once, rejected or
                       cancelled; without it and without a terminal the request is
                       unavailable
  --json               capture the command's output and print one JSON envelope
                       {"result", "stdout", "stderr"} (or {"error"}) on stdout; of a
                       stream over 8 MiB the first and last 4 MiB are kept, and
                       "stdoutOmitted"/"stderrOmitted" count the bytes between
  --result-fd N        write the result facts as one JSON line to file descriptor N
  --verbose            print the effective confinement on stderr before running
  --fence[=true|false] serve the run's writable roots through the fence (Linux, FUSE)
                       inside the run's own mount namespace: every mutation the policy
                       refuses there is recorded, and the result (--json, --result-fd)
                       carries "denials": [{op, path, rule, pid}], "deniedBy" (fence,
                       dialect) and "fence": {roots}; also the policy key "fence": true.
                       If the fence cannot be set up the command does not run (123)
  -h, --help           show this help

toh-exec why answers whether a command confined under the same options could make
one change, and by which rule, from the same resolved policy and protected paths the
runners use (it runs nothing, changes nothing, and is only as true as the moment it
ran). --path P is relative to the working directory. --op is one of:
  write    change what P leads to (content, mode, owner, times; a symlink in the
           last component is followed)
  create   put a new entry at the name P (the name itself is not followed)
  delete   remove the name P (a file, a symlink, an empty directory)
  rename   move the name P away, or move something onto it
It prints "allow" or "deny (RULE)", then the canonical target and the reason; --json
prints the decision as one JSON object instead. Rules: allowed, danger-full-access,
sink (/dev/null), read-only, outside-writable-roots, protected (a protect entry, or a
file git finds one through), policy-file, probe-cache. Create and rename are also
refused at a directory above a protected path; a missing protected path counts.
why answers for the policy; where a backend enforces less or otherwise: Landlock
enforces no protected path; bwrap cannot keep a missing policy lock file from being
created (a missing policy file in a writable root refuses the run, under Landlock
too), and its /tmp is a private tmpfs; the fence
(toh-mount) refuses writes to files with several links, and resolves the protected
paths when its policy file changes, not at each operation.

After a denied run toh-exec prints on stderr:
  [sandbox: file access denied under <mode> mode]
and, when a wider mode could be requested, the escalation hint.

Exit status:
  the command's own status, or 128+N when it died of signal N
  2    usage error (bad flag, unknown mode, no command)
  119  FENCE_LOST (--fence): the fence process ended without its report after
       the command could have started; it may have run, confined, and what it
       was refused is not known
  120  the policy file is malformed or invalid, or the session is unknown
  121  escalation invalid, not wider, rejected, cancelled or unavailable; nothing ran
  122  --require-full and the backend would enforce only partially
  123  SANDBOX_UNAVAILABLE: no backend can confine, or the runner itself failed;
       the command did not run
  124  the command could not be started (unusable working directory, a
       protected path could not be prepared, or the sandbox was set up and the
       command's own exec failed there: a missing #! interpreter, say)
  127  the command was not found (checked before confining)
A child may itself exit with any of these codes; --json and --result-fd say which.
toh-exec why exits 0 for allow and 1 for deny (2, 120 and 124 as above).
`
