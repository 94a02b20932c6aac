package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// specExample is the document of SPEC §2, verbatim.
const specExample = `{
  "version": 1,
  "mode": "read-only",
  "workspaceRoot": "/home/alice/proj",
  "writableRoots": [],
  "protect": [".git/hooks", ".git/config"],
  "network": "allow",
  "approval": "ask",
  "sessions": {
    "s-42": {
      "cwd": "/home/alice/proj",
      "events": [ { "mode": "workspace-write" }, { "mode": "read-only", "source": "delegation" } ],
      "approval": "never"
    }
  }
}`

func specExampleFile() *File {
	return &File{
		Version:       1,
		Mode:          ReadOnly,
		WorkspaceRoot: "/home/alice/proj",
		Protect:       &[]string{".git/hooks", ".git/config"},
		Network:       NetworkAllow,
		Approval:      ApprovalAsk,
		Sessions: map[string]Session{
			"s-42": {
				Cwd:      "/home/alice/proj",
				Events:   []Event{{Mode: WorkspaceWrite}, {Mode: ReadOnly, Source: "delegation"}},
				Approval: ApprovalNever,
			},
		},
	}
}

func TestParseSpecExample(t *testing.T) {
	f, err := Parse([]byte(specExample))
	if err != nil {
		t.Fatalf("Parse(SPEC example): %v", err)
	}
	if diff := cmp.Diff(specExampleFile(), f); diff != "" {
		t.Fatalf("Parse(SPEC example) mismatch (-want +got):\n%s", diff)
	}
	out, err := f.Marshal()
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	g, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse(Marshal(SPEC example)): %v\n%s", err, out)
	}
	if diff := cmp.Diff(f, g); diff != "" {
		t.Fatalf("round trip mismatch (-first +second):\n%s", diff)
	}
	if f.Sessions["s-42"].EffectiveMode() != ReadOnly {
		t.Errorf("EffectiveMode = %q, want read-only (the last event)", f.Sessions["s-42"].EffectiveMode())
	}
}

func TestParseMinimalAndEmptyContainers(t *testing.T) {
	f, err := Parse([]byte(`{"version":1,"writableRoots":[],"sessions":{},"protect":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &File{Version: 1, Protect: &[]string{}}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Fatalf("mismatch (-want +got):\n%s", diff)
	}
	// An explicit empty protect list means "protect nothing" and must survive a write.
	out, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"protect": []`) {
		t.Fatalf("Marshal dropped the empty protect list:\n%s", out)
	}
}

// Escaped text is accepted where it decodes exactly: a surrogate pair is one
// character (the control for the unpaired-surrogate errors below).
func TestParseEscapedCharacters(t *testing.T) {
	f, err := Parse([]byte(`{"version":1,"workspaceRoot":"/a\ud83d\ude00b\u00e9\\u"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "/a\U0001F600bé\\u"; f.WorkspaceRoot != want {
		t.Fatalf("workspaceRoot %q, want %q", f.WorkspaceRoot, want)
	}
}

func TestParseErrors(t *testing.T) {
	const mode = `(want read-only, workspace-write or danger-full-access)`
	tests := []struct {
		name, in, want string
	}{
		// Document shape.
		{"empty", ``, `policy: empty document (want a JSON object with "version": 1)`},
		{"whitespace only", " \n\t", `policy: empty document (want a JSON object with "version": 1)`},
		{"array document", `[]`, `policy: document must be a JSON object, found an array`},
		{"string document", `"x"`, `policy: document must be a JSON object, found a string`},
		{"trailing object", `{"version":1} {}`, `policy: trailing data after the document at offset 13`},
		{"trailing garbage", `{"version":1}x`, `policy: trailing data after the document at offset 13`},
		{"trailing comma", `{"version":1},`, `policy: trailing data after the document at offset 13`},
		{"invalid utf8", "{\"version\":1,\"workspaceRoot\":\"/a\xff\"}", `policy: document is not valid UTF-8`},
		{"lone high surrogate", `{"version":1,"workspaceRoot":"/var/tmp/\ud800"}`, `policy: unpaired UTF-16 surrogate escape at offset 39`},
		{"lone low surrogate", `{"version":1,"workspaceRoot":"/a\uDC00b"}`, `policy: unpaired UTF-16 surrogate escape at offset 32`},
		{"reversed pair", `{"version":1,"workspaceRoot":"/a\udc00\ud800"}`, `policy: unpaired UTF-16 surrogate escape at offset 32`},
		{"high then plain", `{"version":1,"workspaceRoot":"/a\ud800\u0041"}`, `policy: unpaired UTF-16 surrogate escape at offset 32`},
		{"bom", "\ufeff{\"version\":1}", `policy: malformed JSON at offset 0: invalid character 'ï' looking for beginning of value`},
		// Malformed JSON names where the walk was.
		{"truncated", `{"version":1,"sessions":{"s":{"cwd":"/a"`, `policy: sessions["s"]: malformed JSON: unexpected end of input`},
		{"missing colon", `{"version" 1}`, `policy: version: malformed JSON at offset 11: invalid character '1' after object key`},
		{"bad literal in session", `{"version":1,"sessions":{"s":{"cwd":tru}}}`, `policy: sessions["s"].cwd: malformed JSON at offset 36: invalid character '}' in literal true (expecting 'e')`},
		{"missing comma", `{"version":1 "mode":"read-only"}`, `policy: malformed JSON at offset 13: invalid character '"' after object key:value pair`},
		{"too deep", `{"version":1,"writableRoots":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, `policy: writableRoots` + strings.Repeat("[0]", 15) + `: nested more than 16 levels deep`},
		// Version.
		{"missing version", `{"mode":"read-only"}`, `policy: version: missing (want 1)`},
		{"future version", `{"version":2,"mode":"read-only"}`, `policy: version: unsupported version 2 (this toh reads version 1 only)`},
		{"future version alone", `{"version":2}`, `policy: version: unsupported version 2 (this toh reads version 1 only)`},
		{"future version with new keys", `{"future":{"x":[1]},"mode":{"new":"shape"},"version":3}`, `policy: version: unsupported version 3 (this toh reads version 1 only)`},
		{"future version, broken document", `{"version":3,"future":}`, `policy: unknown field "future" (want version, mode, workspaceRoot, writableRoots, protect, network, approval, fence or sessions)`},
		{"version zero", `{"version":0}`, `policy: version: unsupported version 0 (this toh reads version 1 only)`},
		{"version string", `{"version":"1"}`, `policy: version: expected an integer, found string`},
		{"version float", `{"version":1.5}`, `policy: version: expected an integer, found number 1.5`},
		// Unknown keys, at every level, including case variants encoding/json would accept.
		{"unknown top", `{"version":1,"modes":"read-only"}`, `policy: unknown field "modes" (want version, mode, workspaceRoot, writableRoots, protect, network, approval, fence or sessions)`},
		{"case variant top", `{"version":1,"mode":"read-only","Mode":"danger-full-access"}`, `policy: unknown field "Mode" (want version, mode, workspaceRoot, writableRoots, protect, network, approval, fence or sessions)`},
		{"unknown in session", `{"version":1,"sessions":{"s-42":{"cwd":"/a","root":"/"}}}`, `policy: sessions["s-42"]: unknown field "root" (want cwd, events or approval)`},
		{"case variant in session", `{"version":1,"sessions":{"s-42":{"cwd":"/a","CWD":"/"}}}`, `policy: sessions["s-42"]: unknown field "CWD" (want cwd, events or approval)`},
		{"unknown in event", `{"version":1,"sessions":{"s-42":{"cwd":"/a","events":[{"mode":"read-only"},{"mode":"read-only","by":"x"}]}}}`, `policy: sessions["s-42"].events[1]: unknown field "by" (want mode or source)`},
		// Duplicate keys.
		{"duplicate top", `{"version":1,"mode":"read-only","mode":"danger-full-access"}`, `policy: duplicate key "mode"`},
		{"duplicate session", `{"version":1,"sessions":{"s":{"cwd":"/a"},"s":{"cwd":"/"}}}`, `policy: sessions: duplicate key "s"`},
		{"duplicate in session", `{"version":1,"sessions":{"s":{"cwd":"/a","cwd":"/"}}}`, `policy: sessions["s"]: duplicate key "cwd"`},
		{"duplicate in event", `{"version":1,"sessions":{"s":{"cwd":"/a","events":[{"mode":"read-only","mode":"danger-full-access"}]}}}`, `policy: sessions["s"].events[0]: duplicate key "mode"`},
		{"duplicate escaped", `{"version":1,"mode":"read-only","m\u006fde":"danger-full-access"}`, `policy: duplicate key "mode"`},
		// Null.
		{"null protect", `{"version":1,"protect":null}`, `policy: protect: null is not allowed (omit the key instead)`},
		{"null event mode", `{"version":1,"sessions":{"s":{"cwd":"/a","events":[{"mode":null}]}}}`, `policy: sessions["s"].events[0].mode: null is not allowed (omit the key instead)`},
		// Modes and the other vocabularies, anywhere.
		{"bad top mode", `{"version":1,"mode":"rw"}`, `policy: mode: unknown mode "rw" ` + mode},
		{"empty top mode", `{"version":1,"mode":""}`, `policy: mode: unknown mode "" ` + mode},
		{"case top mode", `{"version":1,"mode":"Read-Only"}`, `policy: mode: unknown mode "Read-Only" ` + mode},
		{"number mode", `{"version":1,"mode":1}`, `policy: mode: expected a string, found number`},
		{"bad event mode", `{"version":1,"sessions":{"s-42":{"cwd":"/a","events":[{"mode":"read-only"},{"mode":"rw"}]}}}`, `policy: sessions["s-42"].events[1].mode: unknown mode "rw" ` + mode},
		{"missing event mode", `{"version":1,"sessions":{"s-42":{"cwd":"/a","events":[{"source":"x"}]}}}`, `policy: sessions["s-42"].events[0].mode: missing (every event names a mode)`},
		{"bad network", `{"version":1,"network":"none"}`, `policy: network: unknown network "none" (want allow or deny)`},
		{"bad approval", `{"version":1,"approval":"always"}`, `policy: approval: unknown approval "always" (want ask or never)`},
		{"bad session approval", `{"version":1,"sessions":{"s":{"cwd":"/a","approval":"yes"}}}`, `policy: sessions["s"].approval: unknown approval "yes" (want ask or never)`},
		// Paths.
		{"relative workspaceRoot", `{"version":1,"workspaceRoot":"proj"}`, `policy: workspaceRoot: "proj" is not an absolute path`},
		{"relative writable root", `{"version":1,"writableRoots":["/ok","rel/x"]}`, `policy: writableRoots[1]: "rel/x" is not an absolute path`},
		{"empty writable root", `{"version":1,"writableRoots":[""]}`, `policy: writableRoots[0]: "" is not an absolute path`},
		{"nul in root", `{"version":1,"workspaceRoot":"/a\u0000b"}`, `policy: workspaceRoot: "/a\x00b" contains a NUL byte`},
		{"writable root not string", `{"version":1,"writableRoots":[1]}`, `policy: writableRoots: expected a string, found number`},
		{"relative cwd", `{"version":1,"sessions":{"s-42":{"cwd":"home/alice"}}}`, `policy: sessions["s-42"].cwd: "home/alice" is not an absolute path`},
		{"missing cwd", `{"version":1,"sessions":{"s-42":{"events":[]}}}`, `policy: sessions["s-42"].cwd: missing (want the session's absolute working directory)`},
		{"empty cwd", `{"version":1,"sessions":{"s-42":{"cwd":""}}}`, `policy: sessions["s-42"].cwd: missing (want the session's absolute working directory)`},
		{"empty session id", `{"version":1,"sessions":{"":{"cwd":"/a"}}}`, `policy: sessions[""]: session ID must not be empty ("" means "no session")`},
		{"session not object", `{"version":1,"sessions":{"s":[]}}`, `policy: sessions["s"]: expected an object, found array`},
		{"events not array", `{"version":1,"sessions":{"s":{"cwd":"/a","events":{}}}}`, `policy: sessions["s"].events: expected an array, found object`},
		{"event not object", `{"version":1,"sessions":{"s":{"cwd":"/a","events":["read-only"]}}}`, `policy: sessions["s"].events[0]: expected an object, found string`},
		{"sessions not object", `{"version":1,"sessions":[]}`, `policy: sessions: expected an object, found array`},
		{"protect absolute", `{"version":1,"protect":["/etc"]}`, `policy: protect[0]: "/etc" is absolute (want a path relative to each writable root)`},
		{"protect dotdot", `{"version":1,"protect":[".git/hooks","../x"]}`, `policy: protect[1]: "../x" must not contain ".."`},
		{"protect inner dotdot", `{"version":1,"protect":["a/../b"]}`, `policy: protect[0]: "a/../b" must not contain ".."`},
		{"protect unclean", `{"version":1,"protect":["a//b"]}`, `policy: protect[0]: "a//b" is not clean (want "a/b")`},
		{"protect trailing slash", `{"version":1,"protect":[".git/"]}`, `policy: protect[0]: ".git/" is not clean (want ".git")`},
		{"protect dot", `{"version":1,"protect":["."]}`, `policy: protect[0]: "." would protect the whole root (want a path below it)`},
		{"protect empty", `{"version":1,"protect":[""]}`, `policy: protect[0]: empty path (want a path relative to each writable root, like ".git/hooks")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want error %q", tt.in, f, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Parse(%q) error\n got: %s\nwant: %s", tt.in, err, tt.want)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error %T is not a *FieldError", err)
			}
		})
	}
}

func TestParseModeVocabulary(t *testing.T) {
	for _, m := range Modes {
		if got, err := ParseMode(string(m)); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
	for _, bad := range []string{"", "rw", "READ-ONLY", "read-only ", "workspace_write", "full"} {
		_, err := ParseMode(bad)
		want := `unknown mode "` + bad + `" (want read-only, workspace-write or danger-full-access)`
		if err == nil || err.Error() != want {
			t.Errorf("ParseMode(%q) error = %v, want %q", bad, err, want)
		}
	}
	if _, err := ParseNetwork("deny"); err != nil {
		t.Error(err)
	}
	if _, err := ParseApproval("never"); err != nil {
		t.Error(err)
	}
	var m Mode
	if err := m.UnmarshalText([]byte("danger-full-access")); err != nil || m != DangerFullAccess {
		t.Errorf("UnmarshalText = %q, %v", m, err)
	}
	if err := m.UnmarshalText([]byte("x")); err == nil || m != DangerFullAccess {
		t.Errorf("UnmarshalText(x) = %v and changed the value to %q", err, m)
	}
}

// A File built in code is held to the parser's rules.
func TestValidateProgrammatic(t *testing.T) {
	tests := []struct {
		name string
		f    *File
		want string
	}{
		{"nil", nil, "policy: nil policy"},
		{"zero", &File{}, "policy: version: missing (want 1)"},
		{"version 3", &File{Version: 3}, "policy: version: unsupported version 3 (this toh reads version 1 only)"},
		{"bad mode", &File{Version: 1, Mode: "rw"}, `policy: mode: unknown mode "rw" (want read-only, workspace-write or danger-full-access)`},
		{"event without mode", &File{Version: 1, Sessions: map[string]Session{"a": {Cwd: "/", Events: []Event{{}}}}}, `policy: sessions["a"].events[0].mode: missing (every event names a mode)`},
		{"sessions sorted", &File{Version: 1, Sessions: map[string]Session{"b": {}, "a": {Cwd: "x"}}}, `policy: sessions["a"].cwd: "x" is not an absolute path`},
		{"protect nil slice ok", &File{Version: 1, Protect: new([]string)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.f.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()

	f, found, err := Load(filepath.Join(dir, "missing.json"))
	if err != nil || found {
		t.Fatalf("Load(missing) = found %v, err %v; want not found, nil", found, err)
	}
	if diff := cmp.Diff(Default(), f); diff != "" {
		t.Errorf("Load(missing) is not Default() (-want +got):\n%s", diff)
	}

	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(specExample), 0o644); err != nil {
		t.Fatal(err)
	}
	f, found, err = Load(good)
	if err != nil || !found {
		t.Fatalf("Load(good) = found %v, err %v", found, err)
	}
	if diff := cmp.Diff(specExampleFile(), f); diff != "" {
		t.Errorf("Load(good) mismatch (-want +got):\n%s", diff)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version":1,"mode":"rw"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, found, err = Load(bad); err == nil || !found || !strings.Contains(err.Error(), `mode: unknown mode "rw"`) {
		t.Errorf("Load(malformed) = found %v, err %v; want a field error", found, err)
	}

	// A path through a regular file is ENOTDIR, not "missing": it must not fall back.
	if _, _, err = Load(filepath.Join(good, "x")); err == nil {
		t.Errorf("Load(path through a file) succeeded; want an error, not the default")
	}
	// Present but not a regular file: an error, and a FIFO must not block the reader.
	if _, _, err = Load(dir); err == nil {
		t.Errorf("Load(directory) succeeded; want an error")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, found, err := Load(fifo); err == nil || !found || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Load(fifo) = found %v, %v; want a not-a-regular-file error", found, err)
	}

	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, make([]byte, maxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than 64 MiB") {
		t.Errorf("Load(too big) = %v", err)
	}
}
