package fusefence

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// The swap races: attacker goroutines on the host keep exchanging directories and
// symlinks inside SOURCE (renameat2 RENAME_EXCHANGE) while writers mutate through
// the mount under the swapped names. Whatever interleaving happens, every mutation
// must land inside the writable root and off the protected paths, or fail: the
// canaries (everything outside the roots, and a protected directory) stay
// identical, link counts and ctimes included.
//
// By default each race runs for raceIterations writer operations (at least
// raceMinDuration); TOH_STRESS runs each for a fixed time instead (see
// stressTime; scripts/stress.sh). Each race runs at the default GOMAXPROCS and at 1.

const (
	raceIterations  = 2000
	raceMinDuration = 500 * time.Millisecond
	// A slow machine fails loudly instead of hanging. 20 s was too short for the
	// three-way race at GOMAXPROCS=1 under -race on a slower 2-vCPU host (1,972
	// writer operations in 20 s in CI, 2026-12-01): there the attackers' swaps
	// take most of the one P.
	raceMaxDuration = 60 * time.Second
	stressDuration  = time.Minute
)

// stressTime is how long each stress run lasts: TOH_STRESS=1 means stressDuration,
// a Go duration (TOH_STRESS=10m) means that, and unset means no stress run (0).
func stressTime(t *testing.T) time.Duration {
	switch v := os.Getenv("TOH_STRESS"); v {
	case "", "0":
		return 0
	case "1":
		return stressDuration
	default:
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("TOH_STRESS=%q: want 1 or a duration such as 10m", v)
		}
		return d
	}
}

// swapRace is one race: a tree, the pairs of names its attackers exchange, and
// where the writers aim.
type swapRace struct {
	name string
	tree []string // MakeTree lines relative to base ($BASE stands for base)
	// swaps are exchanged by one attacker each, as (directory, name1, name2)
	// relative to base. The attacker holds a descriptor of the directory, opened
	// once while it was the real one, so its exchanges stay inside SOURCE even when
	// another attacker has moved that directory's name onto a symlink.
	swaps [][3]string
	dir   string // where the writers aim, mount-relative
	// canaries are the trees (relative to base) that must not change.
	canaries []string
}

var swapRaces = []swapRace{
	{
		name: "directory and an absolute link out",
		tree: []string{"dir src/a", "file src/a/f x", "dir outside/t", "file outside/t/f precious",
			"link src/b -> $BASE/outside/t"},
		swaps: [][3]string{{"src", "a", "b"}}, dir: "a",
		canaries: []string{"outside"},
	},
	{
		name: "directory and a relative link out",
		tree: []string{"dir src/a", "file src/a/f x", "dir outside/t", "file outside/t/f precious",
			"link src/b -> ../outside/t"},
		swaps: [][3]string{{"src", "a", "b"}}, dir: "a",
		canaries: []string{"outside"},
	},
	{
		name: "ancestor directory and a link out",
		tree: []string{"dir src/p/a", "file src/p/a/f x", "dir outside/t/a", "file outside/t/a/f precious",
			"link src/q -> $BASE/outside/t"},
		swaps: [][3]string{{"src", "p", "q"}}, dir: "p/a",
		canaries: []string{"outside"},
	},
	{
		name: "file and a link to an outside file",
		tree: []string{"dir src/a", "file src/a/f x", "dir outside/t", "file outside/t/f precious",
			"link src/a/l -> $BASE/outside/t/f"},
		swaps: [][3]string{{"src/a", "f", "l"}}, dir: "a",
		canaries: []string{"outside"},
	},
	{
		name: "directory and a link into a protected directory",
		// Hard-linked (a second name, c, that is never swapped), so that the
		// mirror shows it as the directory it leads to: a link shown as a link
		// (one with a single name into the tree) would make the kernel's entry
		// for "a" a symlink for up to the entry timeout, and the writers would
		// fail (EIO, EACCES) instead of racing the fence.
		tree: []string{"dir src/a", "file src/a/f x", "file src/.git/hooks/f precious",
			"link src/b -> $BASE/src/.git/hooks", "hardlink src/c -> src/b"},
		swaps: [][3]string{{"src", "a", "b"}}, dir: "a",
		canaries: []string{"outside", "src/.git/hooks"},
	},
	{
		name: "directory, ancestor and file at once",
		tree: []string{"dir src/p/a", "file src/p/a/f x", "dir outside/t/a", "file outside/t/a/f precious",
			"link src/q -> $BASE/outside/t", "link src/p/b -> $BASE/outside/t/a", "link src/p/a/l -> $BASE/outside/t/a/f"},
		swaps: [][3]string{{"src", "p", "q"}, {"src/p", "a", "b"}, {"src/p/a", "f", "l"}}, dir: "p/a",
		canaries: []string{"outside"},
	},
}

// raceWriter is one writer goroutine. Its mutations aim at dir (which the
// attackers keep swapping) and use names of its own, so that writers do not undo
// each other and the file the content mutations aim at (dir/f) keeps one link.
type raceWriter struct {
	e   *env
	dir string
	w   int
	i   int // iteration
}

func (r *raceWriter) m(format string, args ...any) string {
	return r.e.m(strings.ReplaceAll(fmt.Sprintf(format, args...), "$D", r.dir))
}

// raceOps are the writers' mutations, in turn.
var raceOps = []struct {
	name string
	run  func(r *raceWriter) error
}{
	{"create", func(r *raceWriter) error {
		return writeAt(r.m("$D/n%d.%d", r.w, r.i), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, "new")
	}},
	{"mkdir", func(r *raceWriter) error { return unix.Mkdir(r.m("$D/d%d", r.w), 0o755) }},
	{"open for write", func(r *raceWriter) error { return writeAt(r.m("$D/f"), unix.O_WRONLY|unix.O_TRUNC, "written") }},
	{"chmod", func(r *raceWriter) error { return unix.Chmod(r.m("$D/f"), uint32(0o600|r.i&0o44)) }},
	{"truncate", func(r *raceWriter) error { return unix.Truncate(r.m("$D/f"), 1) }},
	{"utimes", func(r *raceWriter) error {
		return unix.UtimesNano(r.m("$D/f"), []unix.Timespec{{Sec: 1}, {Sec: int64(r.i)}})
	}},
	{"setxattr", func(r *raceWriter) error {
		return unix.Setxattr(r.m("$D/f"), "user.race", []byte(strconv.Itoa(r.i)), 0)
	}},
	{"symlink", func(r *raceWriter) error { return unix.Symlink("/etc/passwd", r.m("$D/s%d.%d", r.w, r.i)) }},
	{"link into", func(r *raceWriter) error { return unix.Link(r.m("mine%d", r.w), r.m("$D/h%d", r.w)) }},
	{"unlink", func(r *raceWriter) error { return unix.Unlink(r.m("$D/h%d", r.w)) }},
	{"link out of", func(r *raceWriter) error {
		err := unix.Link(r.m("$D/f"), r.m("o%d", r.w))
		if err == nil {
			// Undo at once, or dir/f stays multiply linked (and unwritable).
			if err := unix.Unlink(r.m("o%d", r.w)); err != nil {
				return fmt.Errorf("removing the link just made: %w", err)
			}
		}
		return err
	}},
	{"rename", func(r *raceWriter) error { return unix.Rename(r.m("$D/r%d", r.w), r.m("$D/q%d", r.w)) }},
	{"rename back", func(r *raceWriter) error { return unix.Rename(r.m("$D/q%d", r.w), r.m("$D/r%d", r.w)) }},
	{"rename into", func(r *raceWriter) error { return unix.Rename(r.m("mv%d", r.w), r.m("$D/mv%d", r.w)) }},
	{"rename out of", func(r *raceWriter) error { return unix.Rename(r.m("$D/mv%d", r.w), r.m("mv%d", r.w)) }},
	{"exchange", func(r *raceWriter) error {
		return unix.Renameat2(unix.AT_FDCWD, r.m("$D/r%d", r.w), unix.AT_FDCWD, r.m("ex%d", r.w), unix.RENAME_EXCHANGE)
	}},
	{"rmdir", func(r *raceWriter) error { return unix.Rmdir(r.m("$D/d%d", r.w)) }},
}

const raceWriters = 2

// raceOutcome tallies one mutation kind.
type raceOutcome struct {
	landed, denied atomic.Int64
	mu             sync.Mutex
	other          map[string]int
}

func TestSwapRaces(t *testing.T) {
	stress := stressTime(t)
	for _, r := range swapRaces {
		for _, procs := range []int{0, 1} {
			name := r.name + "/GOMAXPROCS=default"
			if procs == 1 {
				name = r.name + "/GOMAXPROCS=1"
			}
			t.Run(name, func(t *testing.T) {
				if procs != 0 {
					old := runtime.GOMAXPROCS(procs)
					t.Cleanup(func() { runtime.GOMAXPROCS(old) })
				}
				runSwapRace(t, r, stress)
			})
		}
	}
}

func runSwapRace(t *testing.T, r swapRace, stress time.Duration) {
	tree := append([]string{}, r.tree...)
	for w := range raceWriters {
		tree = append(tree, fmt.Sprintf("file src/mine%d mine", w), fmt.Sprintf("file src/mv%d mv", w),
			fmt.Sprintf("file src/ex%d ex", w), fmt.Sprintf("file src/%s/r%d r", r.dir, w))
	}
	e := newEnv(t, policy.WorkspaceWrite, tree...)
	canary := func() map[string]entry {
		all := map[string]entry{}
		for _, c := range r.canaries {
			for p, en := range treeState(t, filepath.Join(e.base, c)) {
				all[filepath.Join(c, p)] = en
			}
		}
		return all
	}
	before := canary()

	var stop atomic.Bool
	var swaps atomic.Int64
	var attackers sync.WaitGroup
	// Every attacker's directory is opened before any attacker starts, while each
	// is still the real one.
	dirFds := make([]int, len(r.swaps))
	for i, s := range r.swaps {
		fd, err := unix.Open(filepath.Join(e.base, s[0]), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		dirFds[i] = fd
	}
	for i, s := range r.swaps {
		dirFd := dirFds[i]
		attackers.Add(1)
		go func() {
			defer attackers.Done()
			defer unix.Close(dirFd)
			for !stop.Load() {
				if err := unix.Renameat2(dirFd, s[1], dirFd, s[2], unix.RENAME_EXCHANGE); err != nil {
					t.Errorf("attacker exchanging %s/{%s,%s}: %v", s[0], s[1], s[2], err)
					return
				}
				swaps.Add(1)
			}
		}()
	}

	tally := make([]raceOutcome, len(raceOps))
	for i := range tally {
		tally[i].other = map[string]int{}
	}
	start := time.Now()
	var iterations atomic.Int64
	done := func() bool {
		el := time.Since(start)
		if stress > 0 {
			return el >= stress
		}
		return el >= raceMaxDuration || (el >= raceMinDuration && iterations.Load() >= raceIterations)
	}
	var writers sync.WaitGroup
	for w := range raceWriters {
		writers.Add(1)
		go func() {
			defer writers.Done()
			rw := &raceWriter{e: e, dir: r.dir, w: w}
			for ; !done(); rw.i++ {
				k := rw.i % len(raceOps)
				err := raceOps[k].run(rw)
				iterations.Add(1)
				o := &tally[k]
				switch {
				case err == nil:
					o.landed.Add(1)
				case errors.Is(err, unix.EACCES):
					o.denied.Add(1)
				default:
					var errno syscall.Errno
					name := err.Error()
					if errors.As(err, &errno) {
						name = unix.ErrnoName(errno)
					}
					o.mu.Lock()
					o.other[name]++
					o.mu.Unlock()
				}
			}
		}()
	}
	writers.Wait()
	stop.Store(true)
	attackers.Wait()

	elapsed := time.Since(start)
	var landed, denied int64
	for k, op := range raceOps {
		o := &tally[k]
		landed += o.landed.Load()
		denied += o.denied.Load()
		t.Logf("%-13s landed %6d, denied %6d, other %v", op.name, o.landed.Load(), o.denied.Load(), o.other)
	}
	t.Logf("%d writer operations and %d swaps in %v", iterations.Load(), swaps.Load(), elapsed.Round(time.Millisecond))

	if d := diff(before, canary()); d != "" {
		t.Fatalf("a mutation through the mount landed on a canary:\n%s", d)
	}
	if iterations.Load() < raceIterations && stress == 0 {
		t.Errorf("only %d writer operations in %v, want %d", iterations.Load(), elapsed, raceIterations)
	}
	// The race must have exercised both sides: mutations that landed inside the
	// root, and mutations the attacker's swaps turned into denials.
	if landed == 0 || denied == 0 || swaps.Load() == 0 {
		t.Errorf("%d landed, %d denied, %d swaps: the race exercised nothing", landed, denied, swaps.Load())
	}
	rules := map[string]int{}
	for _, rec := range e.records() {
		rules[rec.Rule]++
		switch rec.Rule {
		case RuleOutside, RuleProtected, RuleSymlinkRace, RuleMultiplyLinked:
		default:
			t.Errorf("unexpected denial %+v", rec)
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range rules {
			if !yield(k) {
				return
			}
		}
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, rules[k])
	}
	t.Logf("denials by rule:%s", b.String())
}
