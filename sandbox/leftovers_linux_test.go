package sandbox

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestChildrenByScanAgreesWithChildrenFiles: the fallback for kernels without
// /proc/PID/task/TID/children finds the same children as those files, for this
// process and for a child of its children, and neither lists a process that is not
// one (the positive control: both see the two started here).
func TestChildrenByScanAgreesWithChildrenFiles(t *testing.T) {
	var started []int
	for range 2 {
		cmd := exec.Command("/bin/sh", "-c", "sleep 60 & wait")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		started = append(started, cmd.Process.Pid)
	}
	for _, pid := range []string{"self", strconv.Itoa(started[0])} {
		var files, scan []int
		waitUntil(t, "the sleeps to start", func() bool {
			var err error
			if files, err = childrenOf(pid); err != nil {
				t.Fatal(err)
			}
			if scan, err = childrenByScan(pid); err != nil {
				t.Fatal(err)
			}
			return len(files) > 0
		})
		slices.Sort(files)
		slices.Sort(scan)
		if !slices.Equal(files, scan) {
			t.Fatalf("children of %s: files say %v, the scan %v", pid, files, scan)
		}
		if pid == "self" {
			for _, p := range started {
				if !slices.Contains(files, p) {
					t.Fatalf("child %d not listed: %v", p, files)
				}
			}
		}
	}
	if kids, _ := childrenOf(strconv.Itoa(os.Getpid() + 1<<22)); kids != nil {
		t.Fatalf("a process that does not exist has children %v", kids)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
