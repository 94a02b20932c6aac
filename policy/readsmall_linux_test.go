package policy

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReadSmallNeverWaitsOnAFIFO: a racer exchanging a git file with a FIFO cannot
// make readSmall wait for a writer (which hung a fence's every mutation). Control:
// the regular file is read whenever it is the one found.
func TestReadSmallNeverWaitsOnAFIFO(t *testing.T) {
	dir := t.TempDir()
	file, fifo := filepath.Join(dir, "commondir"), filepath.Join(dir, "ff")
	if err := os.WriteFile(file, []byte("../..\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	raced := make(chan struct{})
	go func() {
		defer close(raced)
		for !stop.Load() {
			unix.Renameat2(unix.AT_FDCWD, file, unix.AT_FDCWD, fifo, unix.RENAME_EXCHANGE)
		}
	}()
	done := make(chan int)
	go func() {
		read := 0
		for range 20000 {
			if b, ok := readSmall(file); ok {
				if string(b) != "../..\n" {
					t.Errorf("read %q", b)
				}
				read++
			}
		}
		done <- read
	}()
	select {
	case read := <-done:
		stop.Store(true)
		<-raced
		if read == 0 {
			t.Fatal("control: the regular file was never read")
		}
	case <-time.After(30 * time.Second):
		stop.Store(true)
		<-raced
		// Release the blocked open before failing, so the test binary can end.
		for _, p := range []string{file, fifo} {
			if fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
		}
		t.Fatal("readSmall waited on a FIFO swapped in for the file")
	}
}
