// Package passwd reads a user's entry from /etc/passwd.
//
// os/user would do the same through cgo, and cgo alone costs about a millisecond at
// every toh-exec start (dynamic linking; measured in bench/). Users only in NSS
// databases other than files are not found: callers fall back to what works without
// the entry.
package passwd

import (
	"os"
	"strconv"
	"strings"
)

// Entry is the part of a passwd line toh uses.
type Entry struct {
	Name string
	Home string
}

// Lookup returns uid's first entry in /etc/passwd.
func Lookup(uid int) (Entry, bool) {
	data, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return Entry{}, false
	}
	return parse(string(data), uid)
}

func parse(data string, uid int) (Entry, bool) {
	want := strconv.Itoa(uid)
	for line := range strings.SplitSeq(data, "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 7 && f[2] == want {
			return Entry{Name: f[0], Home: f[5]}, true
		}
	}
	return Entry{}, false
}
