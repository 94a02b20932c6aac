package fusefence

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toh-sandbox/toh/policy"
)

// TestDifferential applies one random sequence of allowed operations (workspace-
// write, everything inside the root) through the mount and to a native twin
// directory, and checks after each one that both answered alike (the same errno)
// and, every few operations and at the end, that SOURCE, the mount's view of it
// and the twin are identical trees: names, types, modes, owners, sizes, link
// counts, contents, symlink targets and xattrs.
//
// The one intended difference: a content or metadata change of a file with more
// than one link, or a new link to it, is denied by the fence (rule
// multiply-linked); such an operation must fail with EACCES through the mount and
// is not applied to the twin.
//
// TOH_DIFF_SEED=N replays one sequence; the seed is printed on failure.
// TOH_STRESS (see stressTime) runs new seeds of 5000 operations for that long.
func TestDifferential(t *testing.T) {
	seeds := []uint64{uint64(time.Now().UnixNano())}
	ops := 1500
	if s := os.Getenv("TOH_DIFF_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TOH_DIFF_SEED=%q: %v", s, err)
		}
		seeds = []uint64{n}
	}
	stress := stressTime(t)
	if stress > 0 {
		ops = 5000
	}
	start := time.Now()
	for i := 0; i < len(seeds) || time.Since(start) < stress; i++ {
		if i >= len(seeds) {
			seeds = append(seeds, uint64(time.Now().UnixNano()))
		}
		seed := seeds[i]
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runDifferential(t, seed, ops) })
		if t.Failed() {
			return
		}
	}
}

// dent is one entry of the twin, as the generator sees it.
type dent struct {
	rel  string
	mode uint32 // lstat's type bits
}

// diffOp is one generated operation, applied to a root (the mount's or the twin's).
type diffOp struct {
	desc string
	do   func(root string) error
	// onto is the path whose content or metadata the operation changes ("" for
	// namespace operations): the fence denies it when that file has several links.
	onto string
}

var (
	diffNames     = []string{"a", "b", "c", "d", "e", "f"}
	diffFileModes = []uint32{0o600, 0o640, 0o644, 0o755}
	diffDirModes  = []uint32{0o700, 0o750, 0o755}
)

func runDifferential(t *testing.T, seed uint64, n int) {
	e := newEnv(t, policy.WorkspaceWrite, "dir src/w", "dir twin")
	mnt, twin := e.m("w"), filepath.Join(e.base, "twin")
	canaries := treeState(t, e.outside)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (replay with TOH_DIFF_SEED=%d): %s", seed, seed, fmt.Sprintf(format, args...))
	}

	denials := 0
	var hist []string
	for i := range n {
		op := genDiffOp(r, twin, twinEntries(t, twin))
		hist = append(hist, op.desc)
		if len(hist) > 12 {
			hist = hist[1:]
		}
		var st unix.Stat_t
		shared := op.onto != "" && unix.Stat(filepath.Join(twin, op.onto), &st) == nil &&
			st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1
		errM := op.do(mnt)
		if shared {
			if !errors.Is(errM, unix.EACCES) {
				fail("op %d %s on a file with %d links: %v through the mount, want EACCES (multiply-linked)", i, op.desc, st.Nlink, errM)
			}
			denials++
			continue
		}
		errN := op.do(twin)
		if errnoOf(errM) != errnoOf(errN) {
			fail("op %d %s: %v through the mount, %v natively\nlast operations:\n  %s", i, op.desc, errM, errN, strings.Join(hist, "\n  "))
		}
		if i%50 == 49 || i == n-1 {
			if d := compareTrees(t, twin, map[string]string{"SOURCE": e.s("w"), "the mount": mnt}); d != "" {
				fail("after op %d %s the trees differ:\n%s\nlast operations:\n  %s", i, op.desc, d, strings.Join(hist, "\n  "))
			}
		}
	}
	if d := diff(canaries, treeState(t, e.outside)); d != "" {
		fail("the canaries outside changed:\n%s", d)
	}
	recs := e.records()
	for _, rec := range recs {
		if rec.Rule != RuleMultiplyLinked {
			fail("unexpected denial %+v", rec)
		}
	}
	if len(recs) != denials {
		fail("%d audit records for %d expected denials", len(recs), denials)
	}
	t.Logf("seed %d: %d operations, %d of them denied on multiply-linked files; %d entries at the end",
		seed, n, denials, len(twinEntries(t, twin)))
}

// errnoOf is the errno an error carries, or -1 for one without.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return ^syscall.Errno(0)
}

func twinEntries(t *testing.T, root string) []dent {
	var out []dent
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		out = append(out, dent{rel, st.Mode & unix.S_IFMT})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// genDiffOp draws one operation on the twin's current entries. Names come from a
// small pool so that collisions (EEXIST, rename over, ENOTEMPTY) are common.
// Symlink texts never climb (".."), so a link means the same at any depth and is
// always shown as a link; only regular files are hard-linked, and content
// operations never open a FIFO (they would block).
func genDiffOp(r *rand.Rand, twin string, ents []dent) diffOp {
	dirs := []string{""}
	var files, any []string
	types := map[string]uint32{}
	for _, en := range ents {
		types[en.rel] = en.mode
		any = append(any, en.rel)
		switch en.mode {
		case unix.S_IFDIR:
			if strings.Count(en.rel, "/") < 3 {
				dirs = append(dirs, en.rel)
			}
		case unix.S_IFREG:
			files = append(files, en.rel)
		}
	}
	pick := func(s []string) string { return pickOf(r, s) }
	name := func() string { return path.Join(pick(dirs), pick(diffNames)) }
	entry := func() string {
		if len(any) == 0 || r.IntN(8) == 0 {
			return name() // sometimes a name that may not exist
		}
		return pick(any)
	}
	// writable is an entry for a content operation: anything but a FIFO, through
	// whatever symlinks lead to it. (Every open for writing is O_NONBLOCK as well,
	// so a FIFO that slipped through fails with ENXIO instead of hanging.)
	writable := func() string {
		p := entry()
		for range 64 {
			var st unix.Stat_t
			if unix.Stat(filepath.Join(twin, p), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
				break
			}
			p = entry()
		}
		return p
	}
	data := func() []byte {
		b := make([]byte, r.IntN(48))
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return b
	}
	j := func(root, rel string) string { return filepath.Join(root, rel) }

	// Keep the tree small enough that every entry is visited often.
	k := r.IntN(19)
	if len(ents) > 60 && r.IntN(2) == 0 {
		k = []int{6, 7}[r.IntN(2)] // rmdir, unlink
	}
	switch k {
	case 0:
		p, m, b := name(), pickOf(r, diffFileModes), data()
		return diffOp{desc: fmt.Sprintf("create %s %o %q", p, m, b), do: func(root string) error {
			fd, err := unix.Open(j(root, p), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, m)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			_, err = unix.Write(fd, b)
			return err
		}}
	case 1:
		p, off, b := writable(), int64(r.IntN(64)), data()
		return diffOp{desc: fmt.Sprintf("pwrite %s @%d %q", p, off, b), onto: p, do: func(root string) error {
			fd, err := unix.Open(j(root, p), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			_, err = unix.Pwrite(fd, b, off)
			return err
		}}
	case 2:
		p, b := writable(), data()
		return diffOp{desc: fmt.Sprintf("append %s %q", p, b), onto: p, do: func(root string) error {
			return writeAt(j(root, p), unix.O_WRONLY|unix.O_APPEND|unix.O_NONBLOCK, string(b))
		}}
	case 3:
		p, size := writable(), int64(r.IntN(80))
		return diffOp{desc: fmt.Sprintf("truncate %s %d", p, size), onto: p, do: func(root string) error {
			return unix.Truncate(j(root, p), size)
		}}
	case 4:
		p, b := writable(), data()
		return diffOp{desc: fmt.Sprintf("open O_TRUNC %s %q", p, b), onto: p, do: func(root string) error {
			return writeAt(j(root, p), unix.O_WRONLY|unix.O_TRUNC|unix.O_NONBLOCK, string(b))
		}}
	case 5:
		p, m := name(), pickOf(r, diffDirModes)
		return diffOp{desc: fmt.Sprintf("mkdir %s %o", p, m), do: func(root string) error { return unix.Mkdir(j(root, p), m) }}
	case 6:
		p := entry()
		return diffOp{desc: "rmdir " + p, do: func(root string) error { return unix.Rmdir(j(root, p)) }}
	case 7:
		p := entry()
		return diffOp{desc: "unlink " + p, do: func(root string) error { return unix.Unlink(j(root, p)) }}
	case 8, 9:
		from, to := entry(), entry()
		if r.IntN(2) == 0 {
			to = name()
		}
		flags := []uint{0, 0, unix.RENAME_NOREPLACE, unix.RENAME_EXCHANGE}[r.IntN(4)]
		return diffOp{desc: fmt.Sprintf("rename %s %s flags %d", from, to, flags), do: func(root string) error {
			return unix.Renameat2(unix.AT_FDCWD, j(root, from), unix.AT_FDCWD, j(root, to), flags)
		}}
	case 10:
		if len(files) == 0 {
			return genDiffOp(r, twin, ents)
		}
		from, to := pick(files), name()
		// A source with other names is refused too (its link count is no one's to
		// change through the mount), unless the new name exists: the kernel
		// answers EEXIST before the fence is asked.
		onto := from
		if _, err := os.Lstat(j(twin, to)); err == nil {
			onto = ""
		}
		return diffOp{desc: fmt.Sprintf("link %s %s", from, to), onto: onto, do: func(root string) error {
			return unix.Link(j(root, from), j(root, to))
		}}
	case 11:
		p := name()
		text := pick(diffNames)
		if r.IntN(3) == 0 {
			text += "/" + pick(diffNames)
		}
		return diffOp{desc: fmt.Sprintf("symlink %s -> %s", p, text), do: func(root string) error {
			return unix.Symlink(text, j(root, p))
		}}
	case 12:
		p := entry()
		m := pickOf(r, diffFileModes)
		if types[p] == unix.S_IFDIR {
			m = pickOf(r, diffDirModes)
		}
		if types[p] == unix.S_IFLNK {
			return genDiffOp(r, twin, ents) // chmod follows it, maybe to a directory
		}
		return diffOp{desc: fmt.Sprintf("chmod %s %o", p, m), onto: p, do: func(root string) error { return unix.Chmod(j(root, p), m) }}
	case 13:
		p, a, v := entry(), "user."+pick(diffNames), data()
		return diffOp{desc: fmt.Sprintf("setxattr %s %s %q", p, a, v), onto: p, do: func(root string) error {
			return unix.Setxattr(j(root, p), a, v, 0)
		}}
	case 14:
		p, a := entry(), "user."+pick(diffNames)
		return diffOp{desc: fmt.Sprintf("removexattr %s %s", p, a), onto: p, do: func(root string) error {
			return unix.Removexattr(j(root, p), a)
		}}
	case 15:
		p := name()
		return diffOp{desc: "mkfifo " + p, do: func(root string) error { return unix.Mknod(j(root, p), unix.S_IFIFO|0o640, 0) }}
	case 16:
		p, off, n := writable(), int64(r.IntN(64)), int64(1+r.IntN(64))
		return diffOp{desc: fmt.Sprintf("fallocate %s @%d +%d", p, off, n), onto: p, do: func(root string) error {
			fd, err := unix.Open(j(root, p), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Fallocate(fd, 0, off, n)
		}}
	case 17:
		if len(files) == 0 {
			return genDiffOp(r, twin, ents)
		}
		from, to := pick(files), writable()
		offIn, offOut, n := int64(r.IntN(16)), int64(r.IntN(32)), 1+r.IntN(32)
		return diffOp{desc: fmt.Sprintf("copy_file_range %s@%d %s@%d %d", from, offIn, to, offOut, n), onto: to, do: func(root string) error {
			in, err := unix.Open(j(root, from), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(in)
			out, err := unix.Open(j(root, to), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(out)
			oi, oo := offIn, offOut
			_, err = unix.CopyFileRange(in, &oi, out, &oo, n, 0)
			return err
		}}
	default:
		p := writable()
		return diffOp{desc: "utimes " + p, onto: p, do: func(root string) error {
			return unix.UtimesNano(j(root, p), []unix.Timespec{{Sec: 1}, {Sec: 2}})
		}}
	}
}

func pickOf[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

// compareTrees describes how each of others differs from want, "" if none does.
func compareTrees(t *testing.T, want string, others map[string]string) string {
	w := describeTree(t, want)
	var b strings.Builder
	for _, label := range slices.Sorted(func(yield func(string) bool) {
		for k := range others {
			if !yield(k) {
				return
			}
		}
	}) {
		got := describeTree(t, others[label])
		for _, p := range slices.Sorted(func(yield func(string) bool) {
			seen := map[string]bool{}
			for k := range w {
				seen[k] = true
			}
			for k := range got {
				seen[k] = true
			}
			for k := range seen {
				if !yield(k) {
					return
				}
			}
		}) {
			if w[p] != got[p] {
				fmt.Fprintf(&b, "  %s %s: %s; the twin: %s\n", label, p, orNone(got[p]), orNone(w[p]))
			}
		}
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

// describeTree records what the differential test compares of every entry.
func describeTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		s := fmt.Sprintf("mode %o owner %d:%d nlink %d", st.Mode, st.Uid, st.Gid, st.Nlink)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s += fmt.Sprintf(" size %d %q", st.Size, b)
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			s += " -> " + l
		}
		buf := make([]byte, 4096)
		if n, err := unix.Llistxattr(p, buf); err == nil && n > 0 {
			names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
			slices.Sort(names)
			for _, a := range names {
				v := make([]byte, 256)
				m, err := unix.Lgetxattr(p, a, v)
				if err != nil {
					return err
				}
				s += fmt.Sprintf(" %s=%q", a, v[:m])
			}
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
