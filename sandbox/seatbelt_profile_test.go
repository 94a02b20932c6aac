package sandbox

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toh-sandbox/toh/policy"
)

func TestSeatbeltProfileGolden(t *testing.T) {
	macRoots := []string{"/Users/u/proj", "/private/tmp", "/private/var/folders/ab/T"}
	tests := []struct {
		name string
		pol  policy.Execution
	}{
		{"read-only", policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}},
		{"read-only-network-deny", policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkDeny}},
		// Protection in read-only is the blanket (deny file-write*): no extra rules.
		{"read-only-policy-file", policy.Execution{
			Mode: policy.ReadOnly, Network: policy.NetworkAllow,
			Protect: policy.DefaultProtect, PolicyFile: "/Users/u/proj/.toh/toh.json",
		}},
		{"workspace-write", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: macRoots[0], WritableRoots: macRoots,
			Network: policy.NetworkAllow,
		}},
		{"workspace-write-network-deny", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: macRoots[0], WritableRoots: macRoots,
			Network: policy.NetworkDeny,
		}},
		{"workspace-write-protect", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: macRoots[0], WritableRoots: macRoots,
			Protect: policy.DefaultProtect, Network: policy.NetworkDeny,
			PolicyFile: "/Users/u/proj/.toh/toh.json",
		}},
		{"workspace-write-quoting", policy.Execution{
			Mode: policy.WorkspaceWrite, WorkspaceRoot: `/Users/u/we"ird\dir`,
			WritableRoots: []string{`/Users/u/we"ird\dir`, `/Volumes/x") (allow file-write* (subpath "/`},
			Protect:       []string{`hooks"\`},
			Network:       policy.NetworkAllow,
			PolicyFile:    `/Users/u/we"ird\dir/toh.json`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SeatbeltProfile(tt.pol)
			checkSeatbeltInvariants(t, tt.pol, got)
			goldenCompare(t, "seatbelt/"+tt.name+".golden", got+"\n")
		})
	}
}

// checkSeatbeltInvariants parses the profile and checks its rules independently of the
// golden files: the base rules come first, every root is allowed by one subpath
// (whatever its spelling), every protected path is denied after the allow, and nothing
// else is there.
func checkSeatbeltInvariants(t *testing.T, pol policy.Execution, profile string) {
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
		for _, r := range pol.WritableRoots {
			for _, p := range pol.Protect {
				want = append(want, fmt.Sprintf("(deny file-write* (subpath %q))", strings.TrimSuffix(r, "/")+"/"+p))
			}
		}
		if pol.PolicyFile != "" {
			want = append(want,
				fmt.Sprintf("(deny file-write* (literal %q))", pol.PolicyFile),
				fmt.Sprintf("(deny file-write* (literal %q))", pol.PolicyFile+".lock"))
		}
	}
	if pol.Network == policy.NetworkDeny {
		want = append(want, `(deny network*)`)
	}
	if diff := cmp.Diff(want, forms); diff != "" {
		t.Errorf("profile rules (-want +got):\n%s", diff)
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
