package sandbox

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toh-sandbox/toh/internal/testutil"
	"github.com/toh-sandbox/toh/policy"
)

func TestSeatbeltProfileGolden(t *testing.T) {
	macRoots := []string{"/Users/u/proj", "/private/tmp", "/private/var/folders/ab/T"}
	// What ProtectedPaths finds for a worktree of /Users/u/main whose common directory
	// WithWorktreeRoots added, with a submodule: pointer, git directories, commondir
	// (existing in the worktree's directory, absent elsewhere).
	gitPaths := []policy.ProtectedPath{
		{Path: "/Users/u/proj/toh.json", Exists: true, Kind: policy.PathFile, Reason: policy.ProtectPolicy},
		{Path: "/Users/u/proj/toh.json.lock", Kind: policy.PathAbsent, Reason: policy.ProtectPolicy},
		{Path: "/Users/u/proj/.git", Exists: true, Kind: policy.PathFile, Reason: policy.ProtectGit},
		{Path: "/Users/u/main/.git/worktrees/proj/hooks", Kind: policy.PathDir, Reason: policy.ProtectEntry, Entry: ".git/hooks", GitDir: "/Users/u/main/.git/worktrees/proj"},
		{Path: "/Users/u/main/.git/worktrees/proj/config", Kind: policy.PathFile, Reason: policy.ProtectEntry, Entry: ".git/config", GitDir: "/Users/u/main/.git/worktrees/proj"},
		{Path: "/Users/u/main/.git/worktrees/proj/commondir", Exists: true, Kind: policy.PathFile, Reason: policy.ProtectGit, GitDir: "/Users/u/main/.git/worktrees/proj"},
		{Path: "/Users/u/main/.git/hooks", Exists: true, Kind: policy.PathDir, Reason: policy.ProtectEntry, Entry: ".git/hooks", GitDir: "/Users/u/main/.git"},
		{Path: "/Users/u/main/.git/config", Exists: true, Kind: policy.PathFile, Reason: policy.ProtectEntry, Entry: ".git/config", GitDir: "/Users/u/main/.git"},
		{Path: "/Users/u/main/.git/commondir", Kind: policy.PathAbsent, Reason: policy.ProtectGit, GitDir: "/Users/u/main/.git"},
		// modules/ may gain no entry, but its submodule git directories stay writable.
		{Path: "/Users/u/main/.git/modules", Exists: true, Kind: policy.PathDir, Reason: policy.ProtectGit, GitDir: "/Users/u/main/.git",
			Except: []string{"/Users/u/main/.git/modules/lib", "/Users/u/main/.git/modules/x/y"}},
		{Path: "/Users/u/main/.git/modules/lib/hooks", Exists: true, Kind: policy.PathDir, Reason: policy.ProtectEntry, Entry: ".git/hooks", GitDir: "/Users/u/main/.git/modules/lib"},
		// Outside every root: no rule.
		{Path: "/Users/u/elsewhere/hooks", Kind: policy.PathDir, Reason: policy.ProtectEntry, Entry: ".git/hooks", GitDir: "/Users/u/elsewhere"},
	}
	tests := []struct {
		name string
		pol  policy.Execution
		pps  []policy.ProtectedPath // nil: pol.ProtectedPaths()
	}{
		{"read-only", policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}, nil},
		{"read-only-network-deny", policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkDeny}, nil},
		// Protection in read-only is the blanket (deny file-write*): no extra rules.
		{"read-only-policy-file", policy.Execution{
			Mode: policy.ReadOnly, Network: policy.NetworkAllow,
			Protect: policy.DefaultProtect, PolicyFile: "/Users/u/proj/.toh/toh.json",
		}, nil},
		{"workspace-write", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: macRoots[0], WritableRoots: macRoots,
			Network: policy.NetworkAllow,
		}, nil},
		{"workspace-write-network-deny", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: macRoots[0], WritableRoots: macRoots,
			Network: policy.NetworkDeny,
		}, nil},
		// No repository on this host's disk at these paths: the git rule leaves only
		// the plain entry, the policy file and the directories on their way.
		{"workspace-write-protect", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: macRoots[0], WritableRoots: macRoots,
			Protect: append([]string{"secrets/prod.env"}, policy.DefaultProtect...), Network: policy.NetworkDeny,
			PolicyFile: "/Users/u/proj/.toh/toh.json",
		}, nil},
		{"workspace-write-git", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: macRoots[0],
			WritableRoots: append(slices.Clone(macRoots), "/Users/u/main/.git"), WorktreeRoots: []string{"/Users/u/main/.git"},
			Protect: policy.DefaultProtect, Network: policy.NetworkAllow, PolicyFile: "/Users/u/proj/toh.json",
		}, gitPaths},
		{"workspace-write-quoting", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: `/Users/u/we"ird\dir`,
			WritableRoots: []string{`/Users/u/we"ird\dir`, `/Volumes/x") (allow file-write* (subpath "/x`},
			Protect:       []string{`hooks"\`, `a"/b`},
			Network:       policy.NetworkAllow,
			PolicyFile:    `/Users/u/we"ird\dir/toh.json`,
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pps := tt.pps
			if pps == nil && tt.pol.Mode == policy.WorkspaceWrite {
				pps = tt.pol.ProtectedPaths()
			}
			got := seatbeltProfile(tt.pol, pps)
			if tt.pps == nil && got != SeatbeltProfile(tt.pol) {
				t.Errorf("SeatbeltProfile differs from seatbeltProfile with its own ProtectedPaths")
			}
			checkSeatbeltInvariants(t, tt.pol, pps, got)
			goldenCompare(t, "seatbelt/"+tt.name+".golden", got+"\n")
		})
	}
}

// checkSeatbeltInvariants parses the profile and checks its rules independently of the
// golden files: the base rules come first, every root is allowed by one subpath
// (whatever its spelling), every protected path within a root is denied after the
// allow, so is renaming or creating every directory between a root and a protected
// path, and nothing else is there.
func checkSeatbeltInvariants(t *testing.T, pol policy.Execution, pps []policy.ProtectedPath, profile string) {
	t.Helper()
	forms, err := parseSBPL(profile)
	if err != nil {
		t.Fatalf("profile does not parse: %v\n%s", err, profile)
	}
	want := []string{
		`(version 1)`, `(allow default)`, `(deny file-write*)`,
		`(allow file-write* (literal "/dev/null"))`,
	}
	if pol.Mode == policy.WorkspaceWrite && len(pol.WritableRoots) > 0 {
		var allow []string
		for _, r := range pol.WritableRoots {
			allow = append(allow, fmt.Sprintf("(subpath %q)", r))
		}
		want = append(want, "(allow file-write* "+strings.Join(allow, " ")+")")
		var literals, dirs []string
		for _, pp := range pps {
			root := ""
			for _, r := range pol.WritableRoots {
				if strings.HasPrefix(pp.Path, r+"/") && len(r) > len(root) {
					root = r
				}
			}
			if root == "" {
				continue
			}
			rel := strings.Split(strings.TrimPrefix(pp.Path, root+"/"), "/")
			for i := 1; i < len(rel); i++ {
				d := root + "/" + strings.Join(rel[:i], "/")
				if !slices.Contains(dirs, d) {
					dirs = append(dirs, d)
				}
			}
			switch {
			case pp.Reason == policy.ProtectPolicy:
				literals = append(literals, fmt.Sprintf("(deny file-write* (literal %q))", pp.Path))
			case len(pp.Except) > 0:
				// Writable within each except, whose own name is kept like a
				// directory on the way.
				rule := fmt.Sprintf("(deny file-write* (require-all (subpath %q)", pp.Path)
				for _, e := range pp.Except {
					rule += fmt.Sprintf(" (require-not (subpath %q))", e)
					if !slices.Contains(dirs, e) {
						dirs = append(dirs, e)
					}
				}
				want = append(want, rule+"))")
			default:
				want = append(want, fmt.Sprintf("(deny file-write* (subpath %q))", pp.Path))
			}
		}
		want = append(want, literals...)
		slices.SortFunc(dirs, func(a, b string) int {
			if c := strings.Count(a, "/") - strings.Count(b, "/"); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		for _, d := range dirs {
			want = append(want, fmt.Sprintf("(deny file-write-create file-write-unlink (literal %q))", d))
		}
	}
	if pol.Network == policy.NetworkDeny {
		want = append(want, `(deny network*)`)
	}
	if diff := cmp.Diff(want, forms); diff != "" {
		t.Errorf("profile rules (-want +got):\n%s", diff)
	}
}

// SeatbeltProfile finds the git directories of a real repository: the git rule and the
// per-git-directory entries reach the profile, and a workspace without a repository
// gets no .git rules at all, so "git init" stays possible.
func TestSeatbeltProfileFromRealRepository(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	testutil.MakeTree(t, dir, "dir ws/.git/hooks", "file ws/.git/config [core]", "file ws/.git/HEAD ref: refs/heads/main",
		"dir ws/.git/objects", "dir ws/.git/refs", "dir bare")
	pol := policy.Execution{Mode: policy.WorkspaceWrite, WorkspaceRoot: ws, WritableRoots: []string{ws},
		Protect: policy.DefaultProtect, Network: policy.NetworkAllow}
	got := SeatbeltProfile(pol)
	for _, want := range []string{
		fmt.Sprintf(`(deny file-write* (subpath %q))`, ws+"/.git/hooks"),
		fmt.Sprintf(`(deny file-write* (subpath %q))`, ws+"/.git/config"),
		fmt.Sprintf(`(deny file-write* (subpath %q))`, ws+"/.git/commondir"),
		fmt.Sprintf(`(deny file-write-create file-write-unlink (literal %q))`, ws+"/.git"),
	} {
		if !strings.Contains(got, want) {
			t.Errorf("profile lacks %s:\n%s", want, got)
		}
	}
	bare := filepath.Join(dir, "bare")
	pol.WorkspaceRoot, pol.WritableRoots = bare, []string{bare}
	if got := SeatbeltProfile(pol); strings.Contains(got, ".git") {
		t.Errorf("a workspace without a repository has .git rules (git init would fail):\n%s", got)
	}
}

// A workspace-write policy without roots must not produce "(allow file-write*)" with
// no filter, which would allow every write; neither may an unexpected mode widen.
func TestSeatbeltProfileNeverAllowsUnfiltered(t *testing.T) {
	ro := SeatbeltProfile(policy.Execution{Mode: policy.ReadOnly})
	if want := `(version 1) (allow default) (deny file-write*) (allow file-write* (literal "/dev/null"))`; ro != want {
		t.Fatalf("read-only profile = %s, want %s", ro, want)
	}
	for _, pol := range []policy.Execution{
		{Mode: policy.WorkspaceWrite},
		{Mode: policy.WorkspaceWrite, WritableRoots: []string{}},
		{Mode: policy.DangerFullAccess, WritableRoots: []string{"/Users/u"}},
		{Mode: "", WritableRoots: []string{"/Users/u"}},
	} {
		if got := SeatbeltProfile(pol); got != ro {
			t.Errorf("mode %q roots %q: profile = %s, want the read-only one", pol.Mode, pol.WritableRoots, got)
		}
	}
}

func TestSeatbeltArgv(t *testing.T) {
	pol := policy.Execution{Mode: policy.WorkspaceWrite, WritableRoots: []string{"/Users/u/p"}}
	argv := []string{"-p", "--", "x"}
	got := SeatbeltArgv(pol, argv)
	want := append([]string{"-p", SeatbeltProfile(pol), "--"}, argv...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SeatbeltArgv (-want +got):\n%s", diff)
	}
	got[len(got)-1] = "changed"
	if argv[len(argv)-1] != "x" {
		t.Error("SeatbeltArgv result aliases its argv argument")
	}
}

func FuzzSeatbeltQuote(f *testing.F) {
	for _, s := range []string{"", "/Users/u", `a"b`, `a\b`, `\"`, `"\`, `\\"")`, "new\nline", "x\\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := seatbeltQuote(s)
		forms, err := parseSBPL("(literal " + q + ")")
		if err != nil {
			t.Fatalf("seatbeltQuote(%q) = %s does not parse: %v", s, q, err)
		}
		if want := fmt.Sprintf("(literal %q)", s); !slices.Equal(forms, []string{want}) {
			t.Fatalf("seatbeltQuote(%q) = %s parses as %q, want one string %q", s, q, forms, s)
		}
	})
}

// parseSBPL parses a profile into its top-level forms, each re-rendered with single
// spaces and strings in Go %q quoting, so that tests compare structure, not spelling.
// It reads strings as SBPL's TinyScheme reader does for the escapes seatbeltQuote can
// produce (`\\` and `\"`); any other escape is an error here, so a quoting bug that
// produced one cannot pass.
func parseSBPL(s string) ([]string, error) {
	var forms []string
	var stack [][]string
	i := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '(':
			stack = append(stack, nil)
			i++
		case c == ')':
			if len(stack) == 0 {
				return nil, fmt.Errorf("unbalanced ) at %d", i)
			}
			form := "(" + strings.Join(stack[len(stack)-1], " ") + ")"
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				forms = append(forms, form)
			} else {
				stack[len(stack)-1] = append(stack[len(stack)-1], form)
			}
			i++
		case c == '"':
			var b strings.Builder
			i++
			for {
				if i >= len(s) {
					return nil, fmt.Errorf("unterminated string")
				}
				if s[i] == '"' {
					i++
					break
				}
				if s[i] == '\\' {
					if i+1 >= len(s) || (s[i+1] != '\\' && s[i+1] != '"') {
						return nil, fmt.Errorf("unexpected escape at %d", i)
					}
					i++
				}
				b.WriteByte(s[i])
				i++
			}
			if len(stack) == 0 {
				return nil, fmt.Errorf("string outside a form")
			}
			stack[len(stack)-1] = append(stack[len(stack)-1], fmt.Sprintf("%q", b.String()))
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n()\"", rune(s[j])) {
				j++
			}
			if len(stack) == 0 {
				return nil, fmt.Errorf("atom outside a form at %d", i)
			}
			stack[len(stack)-1] = append(stack[len(stack)-1], s[i:j])
			i = j
		}
	}
	if len(stack) != 0 {
		return nil, fmt.Errorf("unbalanced (")
	}
	return forms, nil
}
