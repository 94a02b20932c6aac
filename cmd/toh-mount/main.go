// Command toh-mount serves toh's FUSE fence: a mirror of SOURCE at MOUNTPOINT whose
// every mutation is judged by the shared policy file. It is CLI only: flags, signals,
// exit codes and printing; the fence lives in package fusefence, the policy in
// package policy.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/toh-sandbox/toh/internal/fencerun"
	"github.com/toh-sandbox/toh/internal/fencerun/fencehost"
)

// Exit codes of toh-mount itself.
const (
	exitOK      = 0
	exitFailure = 1 // mounting, unmounting or the audit log failed
	exitUsage   = 2 // bad flags or arguments
	exitPolicy  = 3 // the policy file is malformed or does not resolve (unknown session)
	exitNoFUSE  = 4 // FUSE is unusable: /dev/fuse cannot be opened, or fusermount3 is missing
)

func main() {
	if len(os.Args) > 1 {
		// The two internal roles toh-mount plays for toh-exec --fence.
		switch os.Args[1] {
		case fencerun.HostArg:
			os.Exit(fencehost.HostMain(os.Args[2:]))
		case fencerun.StageArg:
			os.Exit(fencehost.StageMain(os.Args[2:]))
		}
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usageText = `Usage:
  toh-mount [--policy FILE] [--session ID] [--audit FILE] [--debug] [--cpuprofile FILE] SOURCE MOUNTPOINT
  toh-mount -u MOUNTPOINT
  toh-mount audit FILE [--op OP] [--rule RULE] [--since TIME] [--json]

Mirrors the directory SOURCE at MOUNTPOINT and fences every mutation made through
the mount by the policy file: reads pass through in every mode; a mutation whose
real target is outside the policy's writable roots, protected, or the policy file
fails with EACCES (permission denied) and is recorded in the audit log. The policy
file is watched: a mode switch or session event applies to the next operation, and
a malformed file denies every mutation until a valid one returns.

toh-mount runs in the foreground; SIGINT or SIGTERM unmounts and exits, ending
the mount also where a sandbox started meanwhile holds a copy of it (ENOTCONN
there; without root this needs the fuse control file system mounted, as systemd
does, else toh-mount waits for those sandboxes). A stale mount left on MOUNTPOINT
by a killed toh-mount (ENOTCONN) is detached first. -u unmounts it here only: a
copy held elsewhere stays served until toh-mount is signalled, and then ends only
through the fuse control file system (root included: the mount is gone here).
As root the mount is visible to every user (allow_other) with the kernel checking
each caller's permissions (default_permissions); otherwise only to the user
running toh-mount, who needs read-write access to /dev/fuse and fusermount3.

Options:
  --policy FILE   policy file (default: $XDG_CONFIG_HOME/toh/policy.json or
                  ~/.config/toh/policy.json); a missing file is the embedded
                  default: read-only, workspace root = the working directory
  --session ID    resolve the policy for session ID
  --audit FILE    append one JSON line per denial to FILE (created 0600); FILE
                  must be yours alone: no symlink, no other owner or name, no
                  group/other write on it or on a directory above it
  --debug         log every FUSE request and every denial on stderr
  --cpuprofile FILE
                  write a Go CPU profile of the daemon to FILE until it unmounts
  -u MOUNTPOINT   unmount MOUNTPOINT and exit
  -h, --help      show this help

toh-mount audit FILE prints the denials recorded in FILE, oldest first:
  --op OP         only operation OP (create, open, write, unlink, rename, ...)
  --rule RULE     only rule RULE: ` + rulesList + `
  --since TIME    only denials at or after TIME (RFC 3339)
  --json          print the records as JSON lines instead of text

Exit status:
  0  unmounted cleanly (or the audit query succeeded)
  1  mounting, unmounting or the audit log failed
  2  usage error
  3  the policy file is malformed, or the session is unknown
  4  FUSE is unusable here (no access to /dev/fuse, or no fusermount3)
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "audit" {
		return runAudit(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("toh-mount", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	policyFile := fs.String("policy", "", "")
	session := fs.String("session", "", "")
	audit := fs.String("audit", "", "")
	debug := fs.Bool("debug", false, "")
	cpuprofile := fs.String("cpuprofile", "", "")
	unmount := fs.String("u", "", "")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	if *unmount != "" {
		if len(pos) != 0 {
			return usageError(stderr, "-u takes only the mount point")
		}
		return runUnmount(*unmount, stderr)
	}
	if len(pos) != 2 {
		return usageError(stderr, "want SOURCE and MOUNTPOINT, got %s", countArgs(len(pos)))
	}
	return runMount(mountOptions{
		source: pos[0], mountpoint: pos[1],
		policy: *policyFile, session: *session, audit: *audit, debug: *debug,
		cpuprofile: *cpuprofile,
	}, stderr)
}

type mountOptions struct {
	source, mountpoint     string
	policy, session, audit string
	debug                  bool
	cpuprofile             string
}

// parseInterspersed parses flags anywhere among the positional arguments ("--"
// ends the flags).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func usageError(stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "toh-mount: "+format+"\n", a...)
	fmt.Fprintln(stderr, "Run 'toh-mount --help' for usage.")
	return exitUsage
}

// defaultPolicyPath is where the policy file lives when --policy is not given; the
// same place toh-exec looks.
func defaultPolicyPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("locating the default policy file: %w (pass --policy)", err)
	}
	return filepath.Join(dir, "toh", "policy.json"), nil
}

// rulesList is fusefence.Rules, laid out for the help text (a test keeps them equal).
const rulesList = `read-only, outside-writable-roots, protected,
                  policy-file, audit-log, device-node, symlink-race,
                  multiply-linked, policy-invalid, ioctl, own-mount,
                  unreachable, protected-symlink`

// countArgs is "1 argument", "2 arguments".
func countArgs(n int) string {
	if n == 1 {
		return "1 argument"
	}
	return fmt.Sprintf("%d arguments", n)
}
