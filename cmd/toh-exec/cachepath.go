package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/toh-sandbox/toh/internal/passwd"
)

// probeCachePath picks where the runner chain's verdict is kept: somewhere confined
// commands cannot normally write, derived from the uid (never from environment
// variables, which the caller of a confined command may control). root uses
// /var/cache/toh; other users their runtime directory /run/user/<uid> when it exists
// and is theirs, else ~/.cache/toh from the password database. The sandbox package
// additionally refuses a cache that lies inside a run's writable roots.
func probeCachePath() string {
	uid := os.Geteuid()
	if uid == 0 {
		return "/var/cache/toh/probe-cache.json"
	}
	run := fmt.Sprintf("/run/user/%d", uid)
	var st syscall.Stat_t
	if err := syscall.Stat(run, &st); err == nil && int(st.Uid) == uid {
		return filepath.Join(run, "toh", "probe-cache.json")
	}
	// Users only in NSS databases other than files get no cache: the chain is then
	// probed on every call, which is slower but correct.
	if e, ok := passwd.Lookup(uid); ok && e.Home != "/" && filepath.IsAbs(e.Home) {
		return filepath.Join(e.Home, ".cache", "toh", "probe-cache.json")
	}
	return ""
}
