package fusefence

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// TestStalenessBound: changes made to SOURCE from outside show through the mount
// within DefaultTimeout, even where the kernel cached a negative entry, attributes
// and pages.
func TestStalenessBound(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "file src/f v1")
	if _, err := os.Stat(e.m("ext")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat of a missing file: %v", err)
	}
	if b, err := os.ReadFile(e.m("f")); err != nil || string(b) != "v1" {
		t.Fatalf("read: %q, %v", b, err)
	}
	changed := time.Now()
	if err := os.WriteFile(e.s("ext"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.s("f"), []byte("version 2"), 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		_, errExt := os.Stat(e.m("ext"))
		b, errF := os.ReadFile(e.m("f"))
		if errExt == nil && errF == nil && string(b) == "version 2" {
			break
		}
		if time.Since(changed) > DefaultTimeout+500*time.Millisecond {
			t.Fatalf("%v after the host changed, the mount shows: ext %v, f %q (%v)", time.Since(changed), errExt, b, errF)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("outside changes visible after %v (bound %v)", time.Since(changed), DefaultTimeout)
}

// TestAliasInvalidation: a file created through a link shown as its target is
// visible at once under its own name, though the kernel had cached its absence.
func TestAliasInvalidation(t *testing.T) {
	e := newEnv(t, policy.WorkspaceWrite, "dir src/d", "link src/dangle-in -> $BASE/src/d/made")
	if _, err := os.Stat(e.m("d/made")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat before: %v", err)
	}
	if err := writeAt(e.m("dangle-in"), unix.O_CREAT|unix.O_WRONLY, "x"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := os.Stat(e.m("d/made"))
		if err == nil {
			break
		}
		if time.Since(start) > DefaultTimeout/4 {
			t.Fatalf("d/made still %v %v after it was created through dangle-in", err, time.Since(start))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
