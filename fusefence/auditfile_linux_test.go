package fusefence

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/internal/testutil"
)

// TestAuditLogNeverTorn: a write of the audit log that the disk cuts short (ENOSPC)
// does not make the log unusable: a first record cut at 4096 bytes made one
// OpenAudit refused on the daemon's restart ("holds no audit records", found by
// review). The torn line stays (cutting it off could remove another writer's
// records, found by the next review), later records start a line of their own,
// and ReadAudit reads it as a denial not recorded whole. Here the log is on a
// tmpfs of 64 KiB with one page free, and the first record is about 40 KB.
// Control: with room again the same file is taken back and records land.
func TestAuditLogNeverTorn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if !testutil.InOwnMountNamespace(t) {
		return
	}
	dir := t.TempDir()
	if err := unix.Mount("toh-test-small", dir, "tmpfs", 0, "size=64k,mode=0755"); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if err := os.WriteFile(dir+"/filler", make([]byte, 60<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	log := dir + "/audit.jsonl"
	a, err := OpenAudit(log)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("deep/", 4000)
	a.Log(Event{Time: time.Now(), Op: "create", Path: long, HostPath: "/w/" + long, Mode: "read-only", Rule: RuleReadOnly})
	if err := a.Sync(); err == nil {
		t.Fatalf("the audit log took a 40 KB record with one page free")
	}
	a.Close()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		t.Fatalf("nothing of the record reached the log: the test needs the write cut short")
	}
	os.Remove(dir + "/filler")
	if a, err = OpenAudit(log); err != nil {
		t.Fatalf("the audit log is not taken back: %v", err)
	}
	a.Log(Event{Time: time.Now(), Op: "unlink", Path: "x", HostPath: "/w/x", Mode: "read-only", Rule: RuleReadOnly})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	err = ReadAudit(f, func(r Record) error {
		got = append(got, fmt.Sprintf("%s/%d", r.Op, r.Dropped))
		return nil
	})
	if want := []string{"/1", "unlink/0"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("records after the restart (op/dropped): %v, %v; want %v", got, err, want)
	}
}

// TestHoldsRecordsIsStrict: only a first line the writer could have written makes a
// file an audit log: encoding/json alone took keys in other cases and a bracket
// after the object (found by review).
func TestHoldsRecordsIsStrict(t *testing.T) {
	dir := t.TempDir()
	for line, want := range map[string]bool{
		`{"time":"2026-12-02T00:00:00Z","pid":1,"uid":0,"op":"create","path":"x","hostPath":"/x","mode":"read-only","rule":"read-only"}`: true,
		`{"dropped":3}`:   true,
		`{"dropped":1}}`:  false,
		`{"DROPPED":1} ]`: false,
		`{"Time":"2024-01-01T00:00:00Z","OP":"x","RULE":"y"}`:         false,
		`{"time":"2026-12-02T00:00:00Z","op":"create"}`:               false,
		`{"mode":"read-only","workspaceRoot":"/srv"}`:                 false,
		`{"time":"2026-12-02T00:00:00Z","op":"x","rule":"y"} {"a":1}`: false,
	} {
		p := dir + "/log"
		if err := os.WriteFile(p, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if got := holdsRecords(p, &st); got != want {
			t.Errorf("holdsRecords of %s = %v, want %v", line, got, want)
		}
	}
}
