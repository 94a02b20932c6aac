package policy

import (
	"fmt"
	"path"
	"slices"

	"github.com/toh-sandbox/toh/canon"
)

// Resolve computes the execution policy of one call, identically for both programs
// (SPEC §2). f == nil stands for [Default]. f is validated first, so a File built in
// code cannot bypass the parser's rules. The result shares no memory with f.
//
//   - Mode: req.Escalation, else the session's effective mode (its last event), else
//     req.DeploymentMode, else f.Mode, else read-only. An escalation must be strictly
//     wider than the mode the call would otherwise get; anything else is the NOT_WIDER
//     [*EscalationError] (the caller validated it with [ValidateEscalation] already, so
//     this only fires when the file changed in between or the caller skipped a step).
//   - WorkspaceRoot: canonical(session cwd), else canonical(f.WorkspaceRoot), else
//     canonical(req.Cwd), which must then be absolute. Canonicalization resolves
//     symlinks before any lexical cleaning, so "link/.." is where chdir lands.
//   - WritableRoots (workspace-write only): canon.WritableRoots of the workspace root,
//     each f.WritableRoots entry, "/tmp" and TmpDir. ExtraRoots: canonical
//     f.WritableRoots, also for workspace-write only, so no backend can bind them
//     writable under another mode by mistake.
//   - Protect: *f.Protect when the key is present (even empty), else [DefaultProtect].
//   - Network: f.Network, else allow. Approval: the session's, else f's, else ask.
//   - TmpDir: canonical(req.TmpDir) when absolute, else "".
//   - PolicyFile: canonical(req.PolicyFile) when non-empty.
//
// An unknown req.SessionID is an error, never a fall-back to the deployment mode. A
// writable root spelled through a symlink that lies within a writable root is a
// [*MovableRootError] (see [Execution.CheckRootSpellings]).
func Resolve(f *File, req Request) (Execution, error) {
	if f == nil {
		f = Default()
	}
	if err := f.Validate(); err != nil {
		return Execution{}, err
	}
	for _, m := range []struct {
		name string
		mode Mode
	}{{"escalation", req.Escalation}, {"deployment mode", req.DeploymentMode}} {
		if m.mode != "" && !m.mode.Valid() {
			_, err := ParseMode(string(m.mode))
			return Execution{}, fmt.Errorf("policy: request %s: %w", m.name, err)
		}
	}

	var sess *Session
	if req.SessionID != "" {
		s, ok := f.Sessions[req.SessionID]
		if !ok {
			return Execution{}, fmt.Errorf("policy: %w %q", ErrUnknownSession, req.SessionID)
		}
		sess = &s
	}

	base := ReadOnly
	switch {
	case sess != nil && sess.EffectiveMode() != "":
		base = sess.EffectiveMode()
	case req.DeploymentMode != "":
		base = req.DeploymentMode
	case f.Mode != "":
		base = f.Mode
	}
	mode := base
	if req.Escalation != "" {
		if !IsStrictlyWider(base, req.Escalation) {
			return Execution{}, &EscalationError{CodeNotWider, notWiderText(req.Escalation, base)}
		}
		mode = req.Escalation
	}

	var ws string
	switch {
	case sess != nil:
		ws = canon.Canonical(sess.Cwd)
	case f.WorkspaceRoot != "":
		ws = canon.Canonical(f.WorkspaceRoot)
	default:
		if !path.IsAbs(req.Cwd) {
			return Execution{}, fmt.Errorf("policy: caller's working directory %q is not an absolute path", req.Cwd)
		}
		ws = canon.Canonical(req.Cwd)
	}

	x := Execution{
		Mode:          mode,
		WorkspaceRoot: ws,
		WritableRoots: []string{},
		ExtraRoots:    []string{},
		Protect:       slices.Clone(DefaultProtect),
		Network:       NetworkAllow,
		Approval:      ApprovalAsk,
		SessionID:     req.SessionID,
		Escalated:     req.Escalation != "",
	}
	if path.IsAbs(req.TmpDir) {
		x.TmpDir = canon.Canonical(req.TmpDir)
	}
	if req.PolicyFile != "" {
		x.PolicyFile = canon.Canonical(req.PolicyFile)
	}
	if f.Protect != nil {
		x.Protect = append([]string{}, *f.Protect...)
	}
	if f.Network != "" {
		x.Network = f.Network
	}
	if f.Fence != nil {
		x.Fence = *f.Fence
	}
	switch {
	case sess != nil && sess.Approval != "":
		x.Approval = sess.Approval
	case f.Approval != "":
		x.Approval = f.Approval
	}
	if mode == WorkspaceWrite {
		x.ExtraRoots = append(x.ExtraRoots, canon.WritableRoots(f.WritableRoots)...)
		candidates := append([]string{ws}, f.WritableRoots...)
		candidates = append(candidates, "/tmp", x.TmpDir)
		x.WritableRoots = append(x.WritableRoots, canon.WritableRoots(candidates)...)
	}
	if err := x.CheckRootSpellings(f, req); err != nil {
		return Execution{}, err
	}
	return x, nil
}
