package sandbox

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

// The conventional -update flag rewrites golden files. It is looked up rather than
// owned, so that another test file of this package may define the same flag first.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files under testdata/")
	}
}

func goldenUpdating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// goldenCompare compares got with testdata/<name>, or rewrites the file under -update.
func goldenCompare(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", filepath.FromSlash(name))
	if goldenUpdating() {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-golden +got), run with -update if intended:\n%s", p, diff)
	}
}

// bwrapGoldenLines renders argv one element per line, with dir (a per-run temporary
// directory) spelled "$TMP" so the golden files do not depend on the run.
func bwrapGoldenLines(t *testing.T, argv []string, dir string) string {
	t.Helper()
	var b strings.Builder
	for _, a := range argv {
		if strings.Contains(a, "\n") {
			t.Fatalf("argv element %q cannot be stored one per line", a)
		}
		if dir != "" {
			a = strings.ReplaceAll(a, dir, "$TMP")
		}
		b.WriteString(a + "\n")
	}
	return b.String()
}

var bwrapTestArgv = []string{"bash", "-c", "echo hi > out"}

func TestBwrapArgvGolden(t *testing.T) {
	// A real directory, because the policy-file rebind depends on existence. It is
	// canonicalised so that its spelling is the one policy.Execution would carry.
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	withLock := filepath.Join(ws, "toh.json")
	noLock := filepath.Join(ws, "a", ".toh", "toh.json")
	outside := filepath.Join(dir, "elsewhere", "toh.json")
	for _, f := range []string{withLock, withLock + ".lock", noLock, outside, outside + ".lock"} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// No "/tmp" root here: the temporary directory may lie under /tmp, which would make
	// the outside file inside.
	wsRoots := []string{ws}
	// A repository without .git/hooks, and a protected file below a missing directory:
	// both get stand-ins, named in the argv, created only by Run. Its submodule lib
	// is in use (lib/.git leads to its git directory), so modules/lib is rebound
	// writable; modules/stale is no checkout's and stays read-only.
	repo := filepath.Join(dir, "repo")
	testutil.MakeTree(t, dir, "file repo/.git/HEAD ref: refs/heads/main", "file repo/.git/config [core]",
		"dir repo/.git/objects", "dir repo/.git/refs", "dir repo/.git/modules/lib/hooks",
		"file repo/.git/modules/lib/HEAD ref: refs/heads/main", "dir repo/.git/modules/lib/objects", "dir repo/.git/modules/lib/refs",
		"file repo/lib/.git gitdir: ../.git/modules/lib",
		"file repo/.git/modules/stale/HEAD ref: refs/heads/main", "dir repo/.git/modules/stale/objects", "dir repo/.git/modules/stale/refs")
	repoBefore := treeNames(t, dir)

	tests := []struct {
		name string
		pol  policy.Execution
	}{
		{"read-only", policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}},
		{"read-only-network-deny", policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkDeny}},
		{"workspace-write", policy.Execution{
			Mode:          policy.WorkspaceWrite,
			WorkspaceRoot: "/home/u/proj",
			WritableRoots: []string{"/home/u/proj", "/opt/cache", "/tmp", "/var/tmp/u"},
			ExtraRoots:    []string{"/opt/cache"},
			TmpDir:        "/var/tmp/u",
			Network:       policy.NetworkAllow,
		}},
		{"workspace-write-network-deny", policy.Execution{
			Mode:          policy.WorkspaceWrite,
			WorkspaceRoot: "/home/u/proj",
			WritableRoots: []string{"/home/u/proj", "/tmp"},
			Network:       policy.NetworkDeny,
		}},
		// Roots under /tmp are bound after the tmpfs, so they show the host directories.
		{"workspace-write-roots-under-tmp", policy.Execution{
			Mode:          policy.WorkspaceWrite,
			WorkspaceRoot: "/tmp/ws",
			WritableRoots: []string{"/tmp/ws", "/tmp", "/tmp/tmpdir"},
			TmpDir:        "/tmp/tmpdir",
			Network:       policy.NetworkAllow,
		}},
		{"policy-file-and-lock-in-workspace", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: ws, WritableRoots: wsRoots,
			Network: policy.NetworkAllow, PolicyFile: withLock,
		}},
		{"policy-file-without-lock", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: ws, WritableRoots: wsRoots,
			Network: policy.NetworkAllow, PolicyFile: noLock,
		}},
		{"policy-file-missing", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: ws, WritableRoots: wsRoots,
			Network: policy.NetworkAllow, PolicyFile: filepath.Join(ws, "absent.json"),
		}},
		{"policy-file-outside-roots", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: ws, WritableRoots: wsRoots,
			Network: policy.NetworkAllow, PolicyFile: outside,
		}},
		{"read-only-policy-file", policy.Execution{
			Mode: policy.ReadOnly, Network: policy.NetworkAllow, PolicyFile: withLock,
		}},
		{"protect-git-and-missing-paths", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: repo, WritableRoots: []string{repo},
			Protect: append([]string{"secrets/key.pem"}, policy.DefaultProtect...), Network: policy.NetworkAllow,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BwrapArgv(tt.pol, bwrapTestArgv)
			checkBwrapInvariants(t, tt.pol, got, bwrapTestArgv)
			goldenCompare(t, "bwrap/"+tt.name+".golden", bwrapGoldenLines(t, got, dir))
		})
	}
	if after := treeNames(t, dir); after != repoBefore {
		t.Errorf("building argv changed the file system:\n%s", after)
	}
}

// checkBwrapInvariants checks what every bwrap argv must satisfy, independently of the
// golden files, so that regenerating them cannot silently accept a broken order.
func checkBwrapInvariants(t *testing.T, pol policy.Execution, got, argv []string) {
	t.Helper()
	sep := slices.Index(got, "--")
	if sep < 0 || !slices.Equal(got[sep+1:], argv) {
		t.Fatalf("argv must follow the first \"--\" unchanged: %q", got)
	}
	opts := got[:sep]
	if !slices.Equal(opts[:7], []string{"--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid", "--unshare-ipc"}) {
		t.Errorf("options must open with the read-only root, /dev, --unshare-pid and --unshare-ipc: %q", opts)
	}
	// The new procfs, then its sysctls and SysRq kept read-only (see BwrapArgv).
	procOpts := []string{"--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger"}
	proc := slices.Index(opts, "--proc")
	if proc < 0 || len(opts) < proc+len(procOpts) || !slices.Equal(opts[proc:proc+len(procOpts)], procOpts) {
		t.Errorf("--proc /proc must be followed by the read-only /proc/sys and /proc/sysrq-trigger: %q", opts)
	}
	if want := pol.Network == policy.NetworkDeny; slices.Contains(opts, "--unshare-net") != want {
		t.Errorf("--unshare-net present = %v, want %v: %q", !want, want, opts)
	}
	tmpfs := slices.Index(opts, "--tmpfs")
	if (pol.Mode == policy.WorkspaceWrite) != (tmpfs >= 0) {
		t.Errorf("--tmpfs present = %v in mode %s: %q", tmpfs >= 0, pol.Mode, opts)
	}
	for i, o := range opts {
		switch o {
		case "--bind":
			if tmpfs < 0 || i < tmpfs {
				t.Errorf("--bind %s must come after --tmpfs /tmp: %q", opts[i+1], opts)
			}
			if opts[i+1] == "/tmp" {
				t.Errorf("/tmp must stay the private tmpfs, not be bound: %q", opts)
			}
		case "--ro-bind":
			if i == 0 || i == proc+2 {
				continue
			}
			// A writable bind after it must neither cover it nor open a hole in it,
			// but for the except directories of its protected path.
			for k := i + 3; k < len(opts); k++ {
				if opts[k] != "--bind" {
					continue
				}
				w, r := opts[k+1], opts[i+1]
				if canon.LexicallyWithin(r, w) {
					t.Errorf("--bind %s after --ro-bind %s uncovers it: %q", w, r, opts)
				}
				if canon.LexicallyWithin(w, r) && !exceptWithin(pol, r, w) {
					t.Errorf("--bind %s after --ro-bind %s is no except of it: %q", w, r, opts)
				}
			}
			if !withinAny(opts[i+1], pol.WritableRoots) {
				t.Errorf("--ro-bind %s outside every writable root: %q", opts[i+1], opts)
			}
		}
	}
}

// treeNames lists every path below dir with its type.
func treeNames(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			b.WriteString(p + " " + fi.Mode().Type().String() + "\n")
		}
		return nil
	})
	return b.String()
}

// exceptWithin reports whether w lies within an except directory of pol's protected
// path r.
func exceptWithin(pol policy.Execution, r, w string) bool {
	for _, pp := range pol.ProtectedPaths() {
		if pp.Path == r && slices.ContainsFunc(pp.Except, func(e string) bool { return canon.LexicallyWithin(w, e) }) {
			return true
		}
	}
	return false
}

// The read-only profile must not depend on anything a read-only policy might still
// carry: an unexpected mode or stray roots get the read-only profile too.
func TestBwrapArgvReadOnlyIgnoresRoots(t *testing.T) {
	want := BwrapArgv(policy.Execution{Mode: policy.ReadOnly}, bwrapTestArgv)
	for _, m := range []policy.Mode{policy.ReadOnly, policy.DangerFullAccess, "", "bogus"} {
		pol := policy.Execution{Mode: m, WritableRoots: []string{"/home/u/proj", "/tmp"}}
		if diff := cmp.Diff(want, BwrapArgv(pol, bwrapTestArgv)); diff != "" {
			t.Errorf("mode %q (-read-only +got):\n%s", m, diff)
		}
	}
}

// Option-like words in the command stay after the separator, and the result never
// aliases the caller's slice.
func TestBwrapArgvPassesCommandThrough(t *testing.T) {
	argv := []string{"--bind", "/", "/", "--", "--unshare-net"}
	pol := policy.Execution{Mode: policy.WorkspaceWrite, WritableRoots: []string{"/w"}}
	got := BwrapArgv(pol, argv)
	checkBwrapInvariants(t, pol, got, argv)
	got[len(got)-1] = "changed"
	if argv[len(argv)-1] != "--unshare-net" {
		t.Error("BwrapArgv result aliases its argv argument")
	}
}

// Against real bwrap: the policy file and its lock stay unchanged, and cannot be
// replaced by renaming a directory above them away and planting a new file, while the
// rest of the workspace, the policy file's own directory included, stays writable.
func TestBwrapArgvProtectsPolicyFileForReal(t *testing.T) {
	bwrap := testutil.RequireBwrap(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	pf := filepath.Join(ws, "a", ".toh", "toh.json")
	canary := filepath.Join(dir, "canary")
	for f, content := range map[string]string{pf: `{"version":1}`, pf + ".lock": "", canary: "canary"} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pol := policy.Execution{
		Mode: policy.WorkspaceWrite, WorkspaceRoot: ws, WritableRoots: []string{ws, "/tmp"},
		Network: policy.NetworkAllow, PolicyFile: pf,
	}
	attack := `cd "$1"
echo PWNED > a/.toh/toh.json
echo PWNED > a/.toh/toh.json.lock
rm -f a/.toh/toh.json
mv a/.toh a/.toh2 && mkdir a/.toh && echo PWNED > a/.toh/toh.json
mv a b && mkdir -p a/.toh && echo PWNED > a/.toh/toh.json
echo PWNED > "$2"
echo ok > a/.toh/sibling
echo ok > okfile
`
	cmd := exec.Command(bwrap, BwrapArgv(pol, []string{"sh", "-c", attack, "sh", ws, canary})...)
	out, _ := cmd.CombinedOutput()
	t.Logf("confined attack output:\n%s", out)

	for f, want := range map[string]string{pf: `{"version":1}`, pf + ".lock": "", canary: "canary"} {
		if got, err := os.ReadFile(f); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q unchanged", f, got, err, want)
		}
	}
	for _, gone := range []string{filepath.Join(ws, "a", ".toh2"), filepath.Join(ws, "b")} {
		if _, err := os.Lstat(gone); err == nil {
			t.Errorf("%s exists: a directory holding the policy file was renamed", gone)
		}
	}
	// Positive controls: the workspace, including the policy file's directory, is
	// writable, so the denials above are the protection and not a broken run.
	for _, f := range []string{filepath.Join(ws, "okfile"), filepath.Join(ws, "a", ".toh", "sibling")} {
		if got, err := os.ReadFile(f); err != nil || string(got) != "ok\n" {
			t.Errorf("%s = %q, %v; want the confined command's write to land", f, got, err)
		}
	}
}
