package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/toh-sandbox/toh/policy"
)

// defaultPolicyPath is where the policy file lives when --policy is not given.
func defaultPolicyPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("locating the default policy file: %w (pass --policy)", err)
	}
	return filepath.Join(dir, "toh", "policy.json"), nil
}

// resolvePolicy loads the policy file (missing = embedded default) and resolves the
// execution policy of one call, linked worktrees' common directories included. The
// returned code is toh-exec's exit code on error.
func resolvePolicy(file, session string, deployment policy.Mode, escalation policy.Mode) (policy.Execution, int, error) {
	f, path, code, err := loadPolicyFile(file)
	if err != nil {
		return policy.Execution{}, code, err
	}
	return resolveLoaded(f, path, session, deployment, escalation)
}

// loadPolicyFile reads the policy file (the default path when file is ""): the file,
// its path, and on failure the exit code.
func loadPolicyFile(file string) (*policy.File, string, int, error) {
	path := file
	if path == "" {
		p, err := defaultPolicyPath()
		if err != nil {
			return nil, "", exitPolicy, err
		}
		path = p
	}
	f, _, err := policy.Load(path)
	if err != nil {
		return nil, "", exitPolicy, err
	}
	return f, path, 0, nil
}

// resolveLoaded resolves one call of the policy file f read from path.
func resolveLoaded(f *policy.File, path, session string, deployment policy.Mode, escalation policy.Mode) (policy.Execution, int, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return policy.Execution{}, exitCannotStart, fmt.Errorf("working directory: %w", err)
	}
	req := policy.Request{
		SessionID:      session,
		Escalation:     escalation,
		DeploymentMode: deployment,
		Cwd:            cwd,
		TmpDir:         os.Getenv("TMPDIR"),
		// Missing or not, the path is the policy file's: the backends keep a command
		// from writing it, and from creating it where it is missing (a file created
		// there would set the mode of every later call).
		PolicyFile: path,
	}
	pol, err := policy.Resolve(f, req)
	if err != nil {
		return policy.Execution{}, exitPolicy, err
	}
	// A linked worktree's verified common git directory becomes writable, so git can
	// commit there (policy's package doc, "Linked worktrees").
	return pol.WithWorktreeRoots(), 0, nil
}

func runPolicy(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usageError(stderr, "policy: missing subcommand (show, validate, set-mode, new-session)")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("toh-exec policy "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("policy", "", "")
	session := fs.String("session", "", "")
	mode := fs.String("mode", "", "")
	cwdFlag := fs.String("cwd", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			return 0
		}
		return usageError(stderr, "policy %s: %v", sub, err)
	}
	path := *file
	if path == "" && sub != "validate" {
		p, err := defaultPolicyPath()
		if err != nil {
			fmt.Fprintf(stderr, "toh-exec: %v\n", err)
			return exitPolicy
		}
		path = p
	}
	switch sub {
	case "show":
		if fs.NArg() != 0 {
			return usageError(stderr, "policy show: unexpected argument %q", fs.Arg(0))
		}
		var deployment policy.Mode
		if *mode != "" {
			m, err := policy.ParseMode(*mode)
			if err != nil {
				return usageError(stderr, "--mode: %v", err)
			}
			deployment = m
		}
		pol, code, err := resolvePolicy(path, *session, deployment, "")
		if err != nil {
			fmt.Fprintf(stderr, "toh-exec: %v\n", err)
			return code
		}
		// The resolved protected paths are shown beside the policy: they depend on the
		// file system (which git directories exist), so they are not part of it.
		shown := struct {
			policy.Execution
			ProtectedPaths []policy.ProtectedPath `json:"protectedPaths"`
		}{pol, pol.ProtectedPaths()}
		b, _ := json.MarshalIndent(shown, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	case "validate":
		if fs.NArg() != 1 {
			return usageError(stderr, "policy validate: want exactly one FILE")
		}
		data, err := os.ReadFile(fs.Arg(0))
		if err != nil {
			fmt.Fprintf(stderr, "toh-exec: %v\n", err)
			return exitPolicy
		}
		if _, err := policy.Parse(data); err != nil {
			fmt.Fprintf(stderr, "toh-exec: %s: %v\n", fs.Arg(0), err)
			return exitPolicy
		}
		fmt.Fprintf(stdout, "%s: valid\n", fs.Arg(0))
		return 0
	case "set-mode":
		if fs.NArg() != 1 {
			return usageError(stderr, "policy set-mode: want exactly one MODE")
		}
		m, err := policy.ParseMode(fs.Arg(0))
		if err != nil {
			return usageError(stderr, "policy set-mode: %v", err)
		}
		if err := policy.SetMode(path, *session, m); err != nil {
			fmt.Fprintf(stderr, "toh-exec: %v\n", err)
			return exitPolicy
		}
		return 0
	case "new-session":
		if *session == "" || fs.NArg() != 0 {
			return usageError(stderr, "policy new-session: want --session ID and no arguments")
		}
		cwd := *cwdFlag
		if cwd == "" {
			wd, err := os.Getwd()
			if err != nil {
				fmt.Fprintf(stderr, "toh-exec: working directory: %v\n", err)
				return exitCannotStart
			}
			cwd = wd
		}
		abs, err := filepath.Abs(cwd)
		if err != nil {
			return usageError(stderr, "--cwd: %v", err)
		}
		if err := policy.AddSession(path, *session, abs); err != nil {
			fmt.Fprintf(stderr, "toh-exec: %v\n", err)
			return exitPolicy
		}
		return 0
	default:
		return usageError(stderr, "policy: unknown subcommand %q (want show, validate, set-mode, new-session)", sub)
	}
}

// durationFlag is a time.Duration flag that keeps 0 distinguishable for validation.
type durationFlag time.Duration

func (d *durationFlag) String() string          { return time.Duration(*d).String() }
func (d *durationFlag) Duration() time.Duration { return time.Duration(*d) }
func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationFlag(v)
	return nil
}
