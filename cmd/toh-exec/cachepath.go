package main

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
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
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.HomeDir != "" && u.HomeDir != "/" {
		return filepath.Join(u.HomeDir, ".cache", "toh", "probe-cache.json")
	}
	return ""
}
