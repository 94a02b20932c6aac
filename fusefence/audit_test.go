package fusefence

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAuditLogRoundTrip(t *testing.T) {
	path := filepath.Join(auditDir(t), "audit.jsonl")
	a, err := OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	a.Log(Event{Time: t0, PID: 7, UID: 8, Op: "create", Path: "a/b", HostPath: "/w/a/b", Mode: "read-only", Rule: RuleReadOnly})
	a.Log(Event{Time: t0.Add(time.Second), Op: "unlink", Path: "c", HostPath: "/w/c", Mode: "workspace-write", Rule: RuleProtected})
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	a.dropped.Add(3) // as if the queue had overflowed
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a.Log(Event{Op: "after-close"}) // must neither panic nor block

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	want0 := `{"time":"2025-01-02T03:04:05.000000006Z","pid":7,"uid":8,"op":"create","path":"a/b","hostPath":"/w/a/b","mode":"read-only","rule":"read-only"}`
	if len(lines) != 3 || lines[0] != want0 || lines[2] != `{"dropped":3}` {
		t.Fatalf("log:\n%s\nwant first line %s and a dropped note last", data, want0)
	}

	var got []string
	f, _ := os.Open(path)
	defer f.Close()
	err = ReadAudit(f, func(r Record) error {
		if (Filter{Since: t0.Add(time.Second)}).Match(r) {
			got = append(got, r.Op+"/"+r.Rule)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "unlink/protected /" {
		t.Errorf("since-filtered records: %q, want the unlink and the dropped note", got)
	}
	if !(Filter{Rule: RuleReadOnly}).Match(Record{Event: Event{Rule: RuleReadOnly}}) ||
		(Filter{Op: "x"}).Match(Record{Dropped: 1}) {
		t.Error("Filter: rule match or dropped-note exclusion is wrong")
	}
}

// Names are bytes, JSON strings UTF-8: two names that differ only in invalid bytes
// must not read back as the same record.
func TestAuditLogNonUTF8Names(t *testing.T) {
	path := filepath.Join(auditDir(t), "audit.jsonl")
	a, err := OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a\xffb", "a\xfeb", "a\uFFFDb", "plain"}
	for _, n := range names {
		a.Log(Event{Op: "create", Path: n, HostPath: "/w/" + n, Rule: RuleReadOnly})
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	// The control: "path" alone reads the same for the first three names.
	for i, line := range strings.SplitN(string(data), "\n", 4)[:3] {
		var only struct{ Path string }
		if err := json.Unmarshal([]byte(line), &only); err != nil || only.Path != "a\uFFFDb" {
			t.Errorf("line %d: path %q (%v), want the replacement character", i+1, only.Path, err)
		}
	}
	if n := strings.Count(string(data), `"pathBytes"`); n != 2 {
		t.Errorf("%d lines carry pathBytes, want the 2 with invalid UTF-8:\n%s", n, data)
	}
	var got []string
	f, _ := os.Open(path)
	defer f.Close()
	if err := ReadAudit(f, func(r Record) error {
		if r.HostPath != "/w/"+r.Path {
			t.Errorf("record %q: hostPath %q", r.Path, r.HostPath)
		}
		got = append(got, r.Path)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != strings.Join(names, "|") {
		t.Errorf("read back %q, want %q", got, names)
	}
}

func TestReadAuditTornAndBadLines(t *testing.T) {
	ok := `{"time":"2025-01-02T03:04:05Z","pid":1,"uid":0,"op":"mkdir","path":"x","hostPath":"/x","mode":"read-only","rule":"read-only"}` + "\n"
	n := 0
	count := func(Record) error { n++; return nil }
	if err := ReadAudit(strings.NewReader(ok+`{"time":"2025`), count); err != nil || n != 1 {
		t.Errorf("torn last line: %d records, %v; want 1 record and no error", n, err)
	}
	if err := ReadAudit(strings.NewReader(ok+"garbage\n"+ok), count); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: %v, want an error naming line 2", err)
	}
	if err := ReadAudit(strings.NewReader(`{"bogus":1}`+"\n"), count); err == nil {
		t.Error("unknown key: want an error")
	}
}

func TestAuditLogNeverBlocks(t *testing.T) {
	path := filepath.Join(auditDir(t), "audit.jsonl")
	a, err := OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	start := time.Now()
	for range 10 * auditQueue {
		a.Log(Event{Op: "create", Rule: RuleReadOnly})
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("logging %d events took %v", 10*auditQueue, d)
	}
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	var events, dropped uint64
	f, _ := os.Open(path)
	defer f.Close()
	err = ReadAudit(f, func(r Record) error {
		if r.Dropped > 0 {
			dropped += r.Dropped
		} else {
			events++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if events+dropped != 10*auditQueue {
		t.Errorf("%d written + %d dropped != %d logged", events, dropped, 10*auditQueue)
	}
}

// TestAuditLogIsBounded: past its bound the log counts denials instead of writing
// them, and every denial is accounted for (written, or in a dropped note). Control:
// below the bound every event is written.
func TestAuditLogIsBounded(t *testing.T) {
	for _, c := range []struct {
		max     int64
		bounded bool
	}{{1 << 20, false}, {4096, true}} {
		path := filepath.Join(auditDir(t), "audit.jsonl")
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		a, err := startAudit(f, path, c.max)
		if err != nil {
			t.Fatal(err)
		}
		const n = 1000
		long := strings.Repeat("\xff", 200) // invalid UTF-8: one U+FFFD in the text, the bytes in base64
		for i := range n {
			a.Log(Event{Op: "ioctl", Path: long, HostPath: "/w/" + long, Rule: RuleReadOnly})
			if i%100 == 0 {
				a.Sync()
			}
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(path)
		var events, dropped uint64
		r, _ := os.Open(path)
		err = ReadAudit(r, func(rec Record) error {
			if rec.Dropped > 0 {
				dropped += rec.Dropped
			} else {
				events++
				if rec.Path != long {
					t.Errorf("path read back as %q", rec.Path)
				}
			}
			return nil
		})
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if events+dropped != n {
			t.Errorf("max %d: %d written + %d dropped, want %d", c.max, events, dropped, n)
		}
		if c.bounded && (fi.Size() > c.max+auditNoteRoom || dropped == 0 || fi.Size() > c.max+64*10) {
			t.Errorf("max %d: size %d with %d dropped, want the bound kept", c.max, fi.Size(), dropped)
		}
		if !c.bounded && dropped != 0 {
			t.Errorf("control: %d dropped below the bound", dropped)
		}
	}
}

// auditDir is a directory for an audit log that OpenAudit accepts: t.TempDir made
// private. The package's tests serve mounts in this process, and serving sets the
// umask to 0 (see Mount), after which t.TempDir's directories are 0777, which
// OpenAudit refuses (anyone could replace the log in them).
func auditDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if err := os.Chmod(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}
