package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// RSS is the resident set size of process pid (0: this process), or 0 once it is
// gone. Tests use it to stop a run away daemon before it takes the machine with it.
func RSS(pid int) int64 {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
