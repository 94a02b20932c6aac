package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/policy"
)

// exitWhyDenied is the status of "toh-exec why" for a denial: why runs no command,
// so its statuses are a predicate (0 allow, 1 deny) beside toh-exec's own failure
// codes.
const exitWhyDenied = 1

// probeCacheReason is the reason toh-exec gives its probe cache as a further
// guarded path: the bwrap rung rebinds an existing cache file read-only like the
// policy file.
const probeCacheReason policy.ProtectReason = "probe-cache"

// runWhy answers whether a confined command could make one mutation, from the same
// resolved policy as a run: policy.Execution.Decide does the deciding.
func runWhy(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toh-exec why", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("policy", "", "")
	session := fs.String("session", "", "")
	mode := fs.String("mode", "", "")
	var unsafePath, opName string
	var pathSet, opSet bool
	fs.Func("path", "", func(s string) error { unsafePath, pathSet = s, true; return nil })
	fs.Func("op", "", func(s string) error { opName, opSet = s, true; return nil })
	probeCache := fs.String("probe-cache", "", "")
	jsonOut := fs.Bool("json", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			return 0
		}
		return usageError(stderr, "why: %v", err)
	}
	switch {
	case fs.NArg() != 0:
		return usageError(stderr, "why: unexpected argument %q", fs.Arg(0))
	case !pathSet || unsafePath == "":
		return usageError(stderr, "why: --path is required and may not be empty")
	case !opSet:
		return usageError(stderr, "why: --op is required (write, create, delete or rename)")
	case *probeCache != "" && !filepath.IsAbs(*probeCache):
		return usageError(stderr, "--probe-cache: %q is not an absolute path", *probeCache)
	}
	op, err := policy.ParseOp(opName)
	if err != nil {
		return usageError(stderr, "--op: %v", err)
	}
	var deployment policy.Mode
	if *mode != "" {
		m, err := policy.ParseMode(*mode)
		if err != nil {
			return usageError(stderr, "--mode: %v", err)
		}
		deployment = m
	}

	pol, code, err := resolvePolicy(*file, *session, deployment, "")
	if err != nil {
		fmt.Fprintf(stderr, "toh-exec: %v\n", err)
		if *jsonOut {
			errCode := "POLICY_INVALID"
			if code == exitCannotStart {
				errCode = "CANNOT_START"
			}
			line, _ := json.Marshal(report{Error: &reportError{Code: errCode, Message: err.Error()}})
			fmt.Fprintf(stdout, "%s\n", line)
		}
		return code
	}
	// The probe cache is guarded the way a run guards it: when it exists.
	var extra []policy.ProtectedPath
	cache := *probeCache
	if cache == "" {
		cache = probeCachePath()
	}
	if cache != "" {
		if fi, err := os.Stat(cache); err == nil {
			kind := policy.PathFile
			if fi.IsDir() {
				kind = policy.PathDir
			}
			extra = append(extra, policy.ProtectedPath{Path: canon.Canonical(cache), Exists: true, Kind: kind, Reason: probeCacheReason})
		}
	}

	d := pol.Decide(unsafePath, op, extra...)
	if *jsonOut {
		line, _ := json.Marshal(d)
		fmt.Fprintf(stdout, "%s\n", line)
	} else {
		verdict := "allow"
		if !d.Allow {
			verdict = "deny (" + d.Rule + ")"
		}
		fmt.Fprintf(stdout, "%s\ntarget: %s\nbecause: %s\n", verdict, d.Target, because(d, pol))
	}
	if !d.Allow {
		return exitWhyDenied
	}
	return 0
}

// because says in words why d came out as it did.
func because(d policy.Decision, pol policy.Execution) string {
	switch d.Rule {
	case policy.RuleAllowed:
		return fmt.Sprintf("%s is within the writable root %s", d.Target, d.Root)
	case policy.RuleDangerFullAccess:
		return "the mode is danger-full-access: nothing is confined"
	case policy.RuleSink:
		return "/dev/null stays writable in every mode"
	case policy.RuleReadOnly:
		return fmt.Sprintf("the mode is %s: no file may change", d.Mode)
	case policy.RuleOutside:
		for _, r := range pol.WritableRoots {
			if r == d.Target {
				return fmt.Sprintf("%s is a writable root; its own name lives in its parent, which is in no writable root", d.Target)
			}
		}
		roots := "none"
		if len(pol.WritableRoots) > 0 {
			roots = strings.Join(pol.WritableRoots, ", ")
		}
		return fmt.Sprintf("%s is in no writable root (writable roots: %s)", d.Target, roots)
	case policy.RuleUnknownOp:
		return fmt.Sprintf("%q is not an operation why knows", d.Op)
	}
	if d.Guard == nil {
		return d.Rule
	}
	g := *d.Guard
	var what string
	switch g.Reason {
	case policy.ProtectEntry:
		what = fmt.Sprintf("protect entry %q", g.Entry)
		if g.GitDir != "" {
			what += " of the git directory " + g.GitDir
		}
	case policy.ProtectGit:
		what = "a file through which git finds protected hooks and configuration"
		if g.Kind == policy.PathDir && g.Entry == "" && g.GitDir != "" && path.Base(g.Path) == "modules" {
			// policy.ProtectedPaths: a git directory's modules/.
			what = "the modules/ of the git directory " + g.GitDir + ", which may gain no entry (git would take one as a submodule's git directory)"
			if len(g.Except) > 0 {
				what += "; only within the submodule git directories in it may the command write"
			}
		}
	case policy.ProtectValid:
		name := path.Base(g.Path)
		if g.Kind == policy.PathDir {
			name += "/"
		}
		what = fmt.Sprintf("the %s of the submodule git directory %s, kept valid so that git refuses a git directory planted inside it", name, g.GitDir)
		if name == "HEAD" {
			what += "; the fence allows a rename that brings a valid HEAD, and bwrap puts HEAD back after the run"
		} else {
			what += "; what lies within stays writable, and bwrap puts it back after the run"
		}
	case policy.ProtectPolicy:
		what = "the policy file"
		if strings.HasSuffix(g.Path, ".lock") && g.Path != pol.PolicyFile {
			what = "the policy file's lock"
		}
	case probeCacheReason:
		what = "toh-exec's probe cache"
	default:
		what = string(g.Reason)
	}
	if !g.Exists {
		what += ", missing: it may not be created"
	}
	switch {
	case d.Target == g.Path:
		return fmt.Sprintf("%s is %s", d.Target, what)
	case canon.LexicallyWithin(d.Target, g.Path):
		return fmt.Sprintf("%s is beneath %s, %s", d.Target, g.Path, what)
	}
	return fmt.Sprintf("%s would carry %s, %s", d.Target, g.Path, what)
}
