package canon

import (
	"os"
	"testing"

	"github.com/toh-sandbox/toh/internal/testutil"
	"golang.org/x/sys/unix"
)

// A bind mount is an alias no spelling reveals; only the identity fallback sees it.
func TestWithinBindMountAlias(t *testing.T) {
	testutil.RequireRoot(t)
	base := canonTree(t)
	if err := os.Mkdir(base+"/bind", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(base+"/real/ws", base+"/bind", "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount unavailable (no CAP_SYS_ADMIN here?): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(base+"/bind", unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting the bind alias: %v", err)
		}
	})
	// Negative control: the spellings alone do not say "inside".
	if LexicallyWithin(Canonical(base+"/bind/sub"), Canonical(base+"/ws")) {
		t.Fatal("bind alias is lexically inside; the identity fallback is not being tested")
	}
	runWithin(t, base, []withinCase{
		{"bind", "ws", true},
		{"bind/sub", "ws", true},
		{"bind/sub", "real/ws", true},
		{"bind/missing/x", "ws", true},
		{"real/ws/sub", "bind", true},
		{"bind/f", "ws", true},
		{"bind/f/x", "ws", false},
		{"bind/..", "ws", false},
		{"bind/out/x", "ws", false},
		{"outside", "bind", false},
	})
}
