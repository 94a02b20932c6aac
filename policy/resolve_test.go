package policy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// resolveTree builds, under a canonical temp dir:
//
//	real/proj/        the project
//	link -> real/proj
//	ws/               the deployment workspace root, also reached via wslink -> ws
//	extra/            an extra writable root, also reached via extralink -> extra
//	tmpd/             the caller's $TMPDIR, reached via tmplink -> tmpd
//
// It lies outside /tmp: /tmp is a writable root of every workspace-write call, and
// Resolve refuses a root spelled through a link within a writable root.
func resolveTree(t *testing.T) string {
	t.Helper()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp(home, "toh-resolve-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	root, err := filepath.EvalSymlinks(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"real/proj", "ws", "extra", "tmpd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"link": "real/proj", "wslink": "ws", "extralink": "extra", "tmplink": "tmpd"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestResolve(t *testing.T) {
	root := resolveTree(t)
	at := func(p string) string { return filepath.Join(root, p) }
	tmp, err := filepath.EvalSymlinks("/tmp")
	if err != nil {
		t.Fatal(err)
	}

	file := func(edit func(*File)) *File {
		f := &File{
			Version: 1,
			Sessions: map[string]Session{
				// The cwd is spelled through a symlink and "..": it means where chdir
				// lands (root/real), not the lexical parent (root).
				"s-ww":    {Cwd: root + "/link/..", Events: []Event{{Mode: ReadOnly}, {Mode: WorkspaceWrite}}},
				"s-empty": {Cwd: at("link")},
				"s-ro":    {Cwd: at("link"), Events: []Event{{Mode: WorkspaceWrite}, {Mode: ReadOnly, Source: "delegation"}}, Approval: ApprovalNever},
				"s-full":  {Cwd: at("link"), Events: []Event{{Mode: DangerFullAccess}}},
			},
		}
		if edit != nil {
			edit(f)
		}
		return f
	}
	// base is what every case starts from: the defaults for a session-less call.
	base := func(mode Mode, ws string) Execution {
		return Execution{
			Mode: mode, WorkspaceRoot: ws,
			WritableRoots: []string{}, ExtraRoots: []string{},
			Protect: []string{".git/hooks", ".git/config"},
			Network: NetworkAllow, Approval: ApprovalAsk,
		}
	}
	with := func(x Execution, edit func(*Execution)) Execution { edit(&x); return x }
	cwd := at("link") // the caller's cwd in most cases

	tests := []struct {
		name string
		f    *File
		req  Request
		want Execution
	}{
		// Step 1: mode precedence.
		{"nil file is the default", nil, Request{Cwd: cwd},
			base(ReadOnly, at("real/proj"))},
		{"no mode anywhere is read-only", file(nil), Request{Cwd: cwd},
			base(ReadOnly, at("real/proj"))},
		{"file mode", file(func(f *File) { f.Mode = DangerFullAccess }), Request{Cwd: cwd},
			base(DangerFullAccess, at("real/proj"))},
		{"deployment mode beats file mode", file(func(f *File) { f.Mode = DangerFullAccess }), Request{Cwd: cwd, DeploymentMode: ReadOnly},
			base(ReadOnly, at("real/proj"))},
		{"session without events falls back to deployment mode", file(func(f *File) { f.Mode = ReadOnly }),
			Request{Cwd: "/", SessionID: "s-empty", DeploymentMode: DangerFullAccess},
			with(base(DangerFullAccess, at("real/proj")), func(x *Execution) { x.SessionID = "s-empty" })},
		{"session without events falls back to file mode", file(func(f *File) { f.Mode = DangerFullAccess }),
			Request{Cwd: "/", SessionID: "s-empty"},
			with(base(DangerFullAccess, at("real/proj")), func(x *Execution) { x.SessionID = "s-empty" })},
		{"session's last event beats deployment and file mode", file(func(f *File) { f.Mode = DangerFullAccess }),
			Request{Cwd: "/", SessionID: "s-ro", DeploymentMode: DangerFullAccess},
			with(base(ReadOnly, at("real/proj")), func(x *Execution) { x.SessionID = "s-ro"; x.Approval = ApprovalNever })},
		{"escalation beats the session", file(nil),
			Request{Cwd: "/", SessionID: "s-ro", Escalation: DangerFullAccess},
			with(base(DangerFullAccess, at("real/proj")), func(x *Execution) {
				x.SessionID = "s-ro"
				x.Approval = ApprovalNever
				x.Escalated = true
			})},
		{"escalation beats the deployment mode", file(nil),
			Request{Cwd: cwd, DeploymentMode: ReadOnly, Escalation: WorkspaceWrite, TmpDir: at("tmplink")},
			with(base(WorkspaceWrite, at("real/proj")), func(x *Execution) {
				x.Escalated = true
				x.TmpDir = at("tmpd")
				x.WritableRoots = []string{at("real/proj"), tmp, at("tmpd")}
			})},

		// Step 2: workspace root precedence and canonicalization.
		{"session cwd link/.. is where chdir lands", file(func(f *File) { f.WorkspaceRoot = at("ws") }),
			Request{Cwd: at("extra"), SessionID: "s-ww"},
			with(base(WorkspaceWrite, at("real")), func(x *Execution) {
				x.SessionID = "s-ww"
				x.WritableRoots = []string{at("real"), tmp}
			})},
		{"workspaceRoot beats the caller's cwd", file(func(f *File) { f.WorkspaceRoot = at("wslink") }),
			Request{Cwd: cwd},
			base(ReadOnly, at("ws"))},
		{"caller's cwd link/.. is where chdir lands", file(nil),
			Request{Cwd: root + "/link/.."},
			base(ReadOnly, at("real"))},
		{"caller's cwd may be relative when unused", file(nil),
			Request{Cwd: "relative", SessionID: "s-empty"},
			with(base(ReadOnly, at("real/proj")), func(x *Execution) { x.SessionID = "s-empty" })},

		// Writable roots: workspace-write only, canonical, deduplicated, in order.
		{"writable roots", file(func(f *File) {
			f.Mode = WorkspaceWrite
			f.WorkspaceRoot = at("wslink")
			f.WritableRoots = []string{at("extralink"), at("ws"), at("extra"), "/tmp", at("missing/dir")}
		}), Request{Cwd: cwd, TmpDir: at("tmplink")},
			with(base(WorkspaceWrite, at("ws")), func(x *Execution) {
				x.TmpDir = at("tmpd")
				x.ExtraRoots = []string{at("extra"), at("ws"), tmp, at("missing/dir")}
				x.WritableRoots = []string{at("ws"), at("extra"), tmp, at("missing/dir"), at("tmpd")}
			})},
		{"no writable or extra roots outside workspace-write", file(func(f *File) {
			f.Mode = ReadOnly
			f.WritableRoots = []string{at("extra")}
		}), Request{Cwd: cwd, TmpDir: at("tmpd")},
			with(base(ReadOnly, at("real/proj")), func(x *Execution) { x.TmpDir = at("tmpd") })},
		{"no writable roots under danger-full-access either", file(func(f *File) {
			f.WritableRoots = []string{at("extra")}
		}), Request{Cwd: cwd, SessionID: "s-full"},
			with(base(DangerFullAccess, at("real/proj")), func(x *Execution) { x.SessionID = "s-full" })},
		{"relative TMPDIR is ignored", file(func(f *File) { f.Mode = WorkspaceWrite }),
			Request{Cwd: cwd, TmpDir: "tmpd"},
			with(base(WorkspaceWrite, at("real/proj")), func(x *Execution) {
				x.WritableRoots = []string{at("real/proj"), tmp}
			})},

		// The other keys.
		{"explicit empty protect list", file(func(f *File) { f.Protect = &[]string{} }),
			Request{Cwd: cwd},
			with(base(ReadOnly, at("real/proj")), func(x *Execution) { x.Protect = []string{} })},
		{"explicit protect list", file(func(f *File) { f.Protect = &[]string{"secrets"} }),
			Request{Cwd: cwd},
			with(base(ReadOnly, at("real/proj")), func(x *Execution) { x.Protect = []string{"secrets"} })},
		{"network and approval from the file", file(func(f *File) { f.Network = NetworkDeny; f.Approval = ApprovalNever }),
			Request{Cwd: cwd},
			with(base(ReadOnly, at("real/proj")), func(x *Execution) { x.Network = NetworkDeny; x.Approval = ApprovalNever })},
		{"session approval beats the file's", file(func(f *File) { f.Approval = ApprovalAsk }),
			Request{Cwd: cwd, SessionID: "s-ro"},
			with(base(ReadOnly, at("real/proj")), func(x *Execution) { x.SessionID = "s-ro"; x.Approval = ApprovalNever })},
		{"policy file is canonical", file(nil),
			Request{Cwd: cwd, PolicyFile: at("link/toh.json")},
			with(base(ReadOnly, at("real/proj")), func(x *Execution) { x.PolicyFile = at("real/proj/toh.json") })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.f, tt.req)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Resolve mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	f := &File{Version: 1, Sessions: map[string]Session{
		"s": {Cwd: "/", Events: []Event{{Mode: WorkspaceWrite}}},
	}}
	tests := []struct {
		name string
		f    *File
		req  Request
		want string
	}{
		{"unknown session", f, Request{Cwd: "/", SessionID: "nope"}, `policy: unknown session "nope"`},
		{"invalid file", &File{Version: 1, Mode: "rw"}, Request{Cwd: "/"}, `policy: mode: unknown mode "rw" (want read-only, workspace-write or danger-full-access)`},
		{"unversioned file", &File{}, Request{Cwd: "/"}, `policy: version: missing (want 1)`},
		{"bad escalation mode", f, Request{Cwd: "/", Escalation: "root"}, `policy: request escalation: unknown mode "root" (want read-only, workspace-write or danger-full-access)`},
		{"bad deployment mode", f, Request{Cwd: "/", DeploymentMode: "ro"}, `policy: request deployment mode: unknown mode "ro" (want read-only, workspace-write or danger-full-access)`},
		{"escalation not wider than the session", f, Request{Cwd: "/", SessionID: "s", Escalation: WorkspaceWrite},
			`sandbox escalation to "workspace-write" is not strictly wider than this call's current "workspace-write" mode`},
		{"escalation narrower", f, Request{Cwd: "/", DeploymentMode: DangerFullAccess, Escalation: ReadOnly},
			`sandbox escalation to "read-only" is not strictly wider than this call's current "danger-full-access" mode`},
		{"relative caller cwd when needed", f, Request{Cwd: "proj"}, `policy: caller's working directory "proj" is not an absolute path`},
		{"empty caller cwd when needed", f, Request{}, `policy: caller's working directory "" is not an absolute path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := Resolve(tt.f, tt.req)
			if err == nil {
				t.Fatalf("Resolve = %+v, want error %q", x, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Resolve error\n got: %s\nwant: %s", err, tt.want)
			}
		})
	}
	if _, err := Resolve(f, Request{SessionID: "nope"}); !errors.Is(err, ErrUnknownSession) {
		t.Errorf("unknown session error %v does not match ErrUnknownSession", err)
	}
}

// The Execution must not alias the File or the package defaults.
func TestResolveSelfContained(t *testing.T) {
	protect := []string{"a"}
	f := &File{Version: 1, Mode: WorkspaceWrite, WorkspaceRoot: "/", Protect: &protect, WritableRoots: []string{"/tmp"}}
	x, err := Resolve(f, Request{})
	if err != nil {
		t.Fatal(err)
	}
	y, err := Resolve(&File{Version: 1}, Request{Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	before, beforeY := cloneExecution(x), cloneExecution(y)
	protect[0] = "changed"
	f.WritableRoots[0] = "/changed"
	y.Protect[0] = "changed"
	if DefaultProtect[0] != ".git/hooks" {
		t.Fatalf("mutating an Execution changed DefaultProtect to %q", DefaultProtect)
	}
	y.Protect[0] = beforeY.Protect[0]
	if diff := cmp.Diff(before, x); diff != "" {
		t.Errorf("mutating the File changed the Execution (-before +after):\n%s", diff)
	}
}

func cloneExecution(x Execution) Execution {
	x.WritableRoots = append([]string{}, x.WritableRoots...)
	x.ExtraRoots = append([]string{}, x.ExtraRoots...)
	x.Protect = append([]string{}, x.Protect...)
	return x
}
