// Package trustedpath fixes where toh's programs look up the helpers they run
// without a sandbox.
//
// go-fuse mounts and unmounts for a user other than root through fusermount3,
// found through $PATH. toh-mount, and the fence host toh-exec starts, inherit the
// caller's $PATH, which may hold a directory a confined command can write (a
// virtualenv's bin, node_modules/.bin, a project's bin): a fusermount3 planted
// there ran unconfined, as the caller, at the next fenced run (found by review).
// So they look helpers up in the system directories only, and pass the caller's
// own environment on to the command they run.
package trustedpath

import "os"

// Dirs is the search list for helpers: root-owned system directories only.
const Dirs = "/usr/bin:/bin:/usr/sbin:/sbin"

// Set makes this process look helpers up in Dirs and returns the environment it
// had before, for the commands it runs on the caller's behalf.
func Set() []string {
	env := os.Environ()
	os.Setenv("PATH", Dirs)
	return env
}
