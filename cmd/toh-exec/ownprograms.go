package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/internal/strictmodes"
	"github.com/toh-sandbox/toh/policy"
	"github.com/toh-sandbox/toh/sandbox"
	"golang.org/x/sys/unix"
)

// The programs toh-exec runs outside any sandbox, or that decide one: toh-exec
// itself (the Landlock launcher stage is its own binary), the toh-mount beside it
// (the fence host of --fence runs, started before the sandbox exists), the runner,
// and the approval command. A workspace-write run whose command could replace one of
// them hands the next call to the command: the replaced toh-mount runs as the
// caller, unconfined, at the next --fence run; the replaced approver says
// allowed-once. So such a run is refused before it starts (found by review: the
// README's own "go build -o bin/toh-exec" in a repository, then a workspace-write
// run there). Decisions:
//
//   - "Could replace" is: lies within a writable root the command writes on the host.
//     Under bwrap /tmp is a private tmpfs (a program under /tmp, but in no other
//     root, is out of the command's reach); under Landlock and Seatbelt every root
//     is the host's.
//   - Both the path as given and the file it leads to are checked, so neither a
//     link in a root nor a link out of one to a program in another passes.
//   - The approval command must be absolute (a name would be looked up in $PATH,
//     which often holds directories a command can write: a virtualenv's bin,
//     node_modules/.bin), and is checked before it is asked as well, against the
//     writable roots of the standing mode.
//   - A program that does not exist (a toh-mount not installed) is checked by its
//     path only: it lies beside toh-exec, where toh-exec's own check applies.
//   - A path is not the only way in: another hard link to the same file inside a
//     root is (found by review; a bind mount would be too, and is not looked for).
//     A program with more than one link that the caller could write through such
//     a link (root, or write permission) is refused too, since the links cannot be
//     listed. A confined command cannot make such a link itself: bwrap's roots are
//     other mounts than the programs' (EXDEV), and Landlock refuses a link from
//     outside its roots (no refer right there).

// program is one of toh-exec's own programs: what it is, and its path ("" for none).
type program struct{ what, path string }

// ownProgramRefusal says why a run of pol by backend ("" when not known yet: every
// root then counts as the host's) must not start, or returns nil.
func ownProgramRefusal(pol policy.Execution, backend sandbox.Backend, programs ...program) error {
	if pol.Mode != policy.WorkspaceWrite {
		return nil
	}
	seen := map[string]bool{}
	for _, pr := range programs {
		if pr.path == "" || seen[pr.path] {
			continue // the Landlock rung's runner is toh-exec itself
		}
		seen[pr.path] = true
		if r := hostRootHolding(pol, backend, pr.path); r != "" {
			return fmt.Errorf("%s %q lies beneath the writable root %q: the command could replace it, and the next call would run the replacement outside the sandbox; install it outside the writable roots", pr.what, pr.path, r)
		}
		var st unix.Stat_t
		if unix.Stat(pr.path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 &&
			(os.Geteuid() == 0 || unix.Access(pr.path, unix.W_OK) == nil) {
			return fmt.Errorf("%s %q has %d hard links, and one of them could lie in a writable root, where the command could rewrite it for the next call to run outside the sandbox; install a copy of its own (cp, not ln)", pr.what, pr.path, st.Nlink)
		}
	}
	return nil
}

// hostRootHolding returns the writable root of pol in which the command could write
// at p on the host, or "". p is canonicalized once (a few lstats), then compared
// lexically with each (canonical) root, as given and as canonicalized.
func hostRootHolding(pol policy.Execution, backend sandbox.Backend, p string) string {
	spellings := []string{filepath.Clean(p), canon.Canonical(p)}
	for _, r := range pol.WritableRoots {
		if r == "/tmp" && backend == sandbox.BackendBwrap {
			continue
		}
		for _, sp := range spellings {
			if canon.LexicallyWithin(sp, r) {
				return r
			}
		}
	}
	return ""
}

// pathAheadRefusal is the same question for the next call by name. toh-exec invoked
// as name (no slash) was found in $PATH, and the next call will be looked up there
// again: a directory listed ahead of the one that holds it, inside a writable root,
// is where the command could put a program called name that the next call runs
// instead, outside the sandbox. A Python virtualenv or node_modules/.bin inside the
// workspace, or "." (or an empty entry), are the usual ones. Decisions:
//
//   - Every entry up to and including the first that holds an executable name is
//     checked, existing or not (the command can create a directory that is
//     missing); entries after it are never reached by that lookup.
//   - Relative entries are taken from the working directory, where this call's
//     caller looked them up too; a leading "~" or "~/" is $HOME, as bash reads it
//     ("~user" is not looked up). The name in each entry counts too: a link there
//     into a root, dangling or not, is a program the command can make.
//   - Only toh-exec's own $PATH can be checked. A caller that looks toh-exec up in
//     another $PATH than the one it hands it (Go's os/exec looks in its own) is
//     checked against the one it handed; the README says to call toh-exec by its
//     absolute path.
func pathAheadRefusal(pol policy.Execution, backend sandbox.Backend, name, cwd, path string) error {
	if pol.Mode != policy.WorkspaceWrite || name == "" || strings.Contains(name, "/") {
		return nil
	}
	home, _ := os.UserHomeDir()
	for _, entry := range filepath.SplitList(path) {
		dir := entry
		switch {
		case dir == "":
			dir = "."
		case (dir == "~" || strings.HasPrefix(dir, "~/")) && home != "":
			dir = home + dir[1:] // bash expands a leading ~ in $PATH at lookup
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		// The directory, and what a name in it leads to: a dangling link there to a
		// place in a root is a program the command can create (found by review).
		for _, p := range []string{dir, filepath.Join(dir, name)} {
			if r := hostRootHolding(pol, backend, p); r != "" {
				return fmt.Errorf("$PATH lists %q, and %s there lies beneath the writable root %q, ahead of (or as) the directory %s was found in: the command could put a %s there, and the next call by that name would run it outside the sandbox; call %s by its absolute path, or list its directory before %q", entry, p, r, name, name, name, entry)
			}
		}
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return nil
		}
	}
	return nil
}

// everWritable is the reach of every call under the policy file f: a workspace-write
// Execution whose roots are every root such a call could write on the host, whatever
// the mode in force now: this call's and the grant's roots, the file's
// workspace root and writable roots, every session's working directory, the working
// directory of this call (a file without a workspace root makes each call's own the
// workspace), /tmp and $TMPDIR. The approval command decides for every later call, so
// it must lie outside all of them: the check against the standing mode's roots alone
// let an earlier workspace-write call, made without --approval-command, rewrite the
// approver that a later read-only call asked (found by review). Working directories
// of earlier calls without a workspace root cannot be known; the README says to keep
// the approver in a directory no call runs in.
func everWritable(f *policy.File, cwd string, pols ...policy.Execution) policy.Execution {
	cands := []string{cwd, "/tmp", os.Getenv("TMPDIR")}
	for _, p := range pols {
		cands = append(cands, p.WorkspaceRoot)
		cands = append(cands, p.WritableRoots...)
	}
	if f != nil {
		cands = append(cands, f.WorkspaceRoot)
		cands = append(cands, f.WritableRoots...)
		for _, s := range f.Sessions {
			cands = append(cands, s.Cwd)
		}
	}
	return policy.Execution{Mode: policy.WorkspaceWrite, WritableRoots: canon.WritableRoots(cands)}
}

// approverRefusal says why the approval command must not be asked: it lies in one of
// reach's roots (everWritable), could be rewritten through another link
// (ownProgramRefusal), or by another user (strictmodes.Check): it decides for every
// later call. Otherwise it returns the path the checks resolved, which is what runs
// (runExec): resolving the name again could follow a link changed since.
func approverRefusal(reach policy.Execution, approver string) (resolved string, err error) {
	if approver == "" {
		return "", nil // the terminal, or never
	}
	if err := ownProgramRefusal(reach, "", program{"the approval command", approver}); err != nil {
		return "", err
	}
	return strictmodes.Check("the approval command", approver)
}

// approverEnv is the environment the approval command runs with: the caller's, with
// $PATH stripped of every entry a call could write in (reach, from everWritable) and
// of relative and empty entries. The approval command runs outside every
// sandbox, and an approver that runs "#!/usr/bin/env bash", jq or python3 by name ran
// whatever a workspace-write call had planted in a virtualenv's bin listed in $PATH
// (found by review). It runs in "/" (Command.Dir), so nothing is looked up relative to
// the workspace either.
func approverEnv(env []string, reach policy.Execution) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		val, ok := strings.CutPrefix(kv, "PATH=")
		if !ok {
			out = append(out, kv)
			continue
		}
		var keep []string
		for _, dir := range filepath.SplitList(val) {
			if filepath.IsAbs(dir) && hostRootHolding(reach, "", dir) == "" {
				keep = append(keep, dir)
			}
		}
		out = append(out, "PATH="+strings.Join(keep, string(filepath.ListSeparator)))
	}
	return out
}

// ensurePolicyLock makes the policy file's lock file (policy.EnsureLock) before a
// workspace-write run when the policy file lies in one of its roots, where the
// command could otherwise take the lock's name (a directory there stopped every
// later writer, so the mode could no longer be tightened; found by review).
func ensurePolicyLock(pol policy.Execution) {
	if pol.Mode == policy.WorkspaceWrite && pol.PolicyFile != "" && hostRootHolding(pol, "", pol.PolicyFile) != "" {
		policy.EnsureLock(pol.PolicyFile)
	}
}
