package policy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse: Parse never panics, and whatever it accepts survives Marshal -> Parse
// unchanged, with Marshal a fixed point after one round.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		specExample,
		`{"version":1}`,
		`{"version":1,"protect":[]}`,
		`{"version":1,"writableRoots":[],"sessions":{}}`,
		`{"version":1,"mode":"read-only","mode":"danger-full-access"}`,
		`{"version":1,"Mode":"danger-full-access"}`,
		`{"version":1,"sessions":{"s":{"cwd":"/a","events":[{"mode":"rw"}]}}}`,
		`{"version":1,"sessions":{"s":{"cwd":"/a","events":[{}]}}}`,
		`{"version":2}`,
		`{"version":1} x`,
		`{"version":1,"protect":null}`,
		`{"version":1,"workspaceRoot":"/a\u0000b","protect":["a/../b"]}`,
		`{"version":1,"sessions":{"\u2028<&>":{"cwd":"/\ud800"}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if p != nil {
				t.Fatalf("Parse returned both a File and an error: %v", err)
			}
			return
		}
		out, err := p.Marshal()
		if err != nil {
			t.Fatalf("Marshal of an accepted document failed: %v\ninput: %q", err, data)
		}
		q, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(x)) failed: %v\ninput: %q\nmarshaled: %s", err, data, out)
		}
		if diff := cmp.Diff(p, q); diff != "" {
			t.Fatalf("round trip changed the document (-first +second):\n%s\ninput: %q", diff, data)
		}
		again, err := q.Marshal()
		if err != nil || !bytes.Equal(out, again) {
			t.Fatalf("Marshal is not a fixed point: %v\n%s\n%s", err, out, again)
		}
	})
}

// FuzzConfigLookup: any text is read without a panic, and a text that parses and
// ends a line (not continued) is read to its end: a core.worktree appended after it
// is the value (the last one wins, as in git).
func FuzzConfigLookup(f *testing.F) {
	for _, seed := range []string{
		"[core]\n\tworktree = ../../../x\n",
		"[core] worktree = \"a # b\" ; c\n",
		"[core]\nworktree = cont\\\ninued\n",
		"[core \"sub\"]\nworktree = x\n",
		"[core]\nworktree = \"unterminated\n",
		"[core\n",
		"\\",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _, parsed := configLookup(s, "core", "worktree")
		if !parsed || !strings.HasSuffix(s, "\n") || strings.HasSuffix(s, "\\\n") || strings.HasSuffix(s, "\\\r\n") {
			return // a last line continued is continued by what follows
		}
		v, found, parsed := configLookup(s+"[core]\nworktree = z\n", "core", "worktree")
		if !found || !parsed || v != "z" {
			t.Fatalf("%q then a core.worktree: %q found %v parsed %v", s, v, found, parsed)
		}
	})
}
