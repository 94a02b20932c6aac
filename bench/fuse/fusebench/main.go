//go:build linux

// Command fusebench times file-system workloads on a native directory and on FUSE
// mirrors of it, all in one run, and reports medians and ratios (bench/fuse.sh runs
// it; see bench/README.md).
//
//	fusebench -source SOURCE -tar TREE.tar -target NAME=MOUNTPOINT=COMMAND... [flags]
//	fusebench smallfiles -dir DIR -writers 4 -files 2500 -size 4096
//	fusebench getxattr -n 50000 FILE
//
// SOURCE holds tree/ (a git work tree that no workload changes) and scratch/ (where
// the mutating workloads work, each run under a fresh name that is removed natively
// afterwards, so no mount ever sees a name reused). Each -target is mounted by
// running COMMAND in the foreground (it must mirror SOURCE at MOUNTPOINT) and
// unmounted with SIGTERM to that process; the target "native" has no command and
// works on SOURCE itself. Workloads run interleaved: every repetition runs each
// workload on every target, in an order that rotates, so drift in the machine does
// not favour one target.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

type target struct {
	name, mnt string
	argv      []string // nil for native
	cmd       *exec.Cmd
	exited    chan struct{}
	log       *os.File
}

func (t *target) dir() string { return t.mnt }

type workload struct {
	name string
	// cold: the target is unmounted, caches dropped, and mounted again before the run.
	cold bool
	// prepare runs untimed before the command; cleanup untimed after it. Both get the
	// target's directory and a fresh run name.
	prepare func(b *bench, t *target, run string) error
	// warmup runs untimed after prepare and the sync that follows it, right before
	// the command: a sync after an earlier workload's writes can take seconds, long
	// enough for what warmup cached to expire.
	warmup  func(b *bench, t *target, run string) error
	command func(b *bench, t *target, run string) []string
	cleanup func(b *bench, t *target, run string) error
}

type bench struct {
	source, tar, self string
	logDir            string
	seqMiB            int
	smallFiles        int
	targets           []*target
	results           map[string]map[string][]float64 // workload -> target -> seconds
	runN              int
	deferred          []string // scratch names removed only at the end
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "smallfiles" {
		if err := smallFiles(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "fusebench smallfiles:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "getxattr" {
		if err := getXattrs(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "fusebench getxattr:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fusebench:", err)
		os.Exit(1)
	}
}

type targetFlags []string

func (f *targetFlags) String() string     { return strings.Join(*f, " ") }
func (f *targetFlags) Set(s string) error { *f = append(*f, s); return nil }

func run() error {
	b := &bench{results: map[string]map[string][]float64{}}
	var targets targetFlags
	flag.StringVar(&b.source, "source", "", "SOURCE: holds tree/ and scratch/")
	flag.StringVar(&b.tar, "tar", "", "tarball of tree/ (untar and rm -rf workloads)")
	flag.StringVar(&b.logDir, "logs", "", "directory for the daemons' stderr")
	flag.IntVar(&b.seqMiB, "seq-mib", 1024, "size of the sequential write and read, MiB")
	flag.IntVar(&b.smallFiles, "small-files", 2500, "files per writer in the parallel small-file workload")
	reps := flag.Int("reps", 5, "repetitions of every workload on every target")
	only := flag.String("workloads", "", "comma-separated workloads to run (default: all)")
	jsonOut := flag.String("json", "", "write the raw times here")
	flag.Var(&targets, "target", "NAME=MOUNTPOINT=COMMAND (repeatable; NAME native has no command)")
	flag.Parse()
	if b.source == "" || b.tar == "" || len(targets) == 0 {
		return errors.New("need -source, -tar and at least one -target")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b.self = self
	for _, spec := range targets {
		name, rest, _ := strings.Cut(spec, "=")
		if name == "native" {
			b.targets = append(b.targets, &target{name: name, mnt: b.source})
			continue
		}
		mnt, command, ok := strings.Cut(rest, "=")
		if !ok || command == "" {
			return fmt.Errorf("-target %q: want NAME=MOUNTPOINT=COMMAND", spec)
		}
		b.targets = append(b.targets, &target{name: name, mnt: mnt, argv: strings.Fields(command)})
	}
	defer b.unmountAll()
	for _, t := range b.targets {
		if err := b.mount(t); err != nil {
			return err
		}
	}

	wls := workloads()
	if *only != "" {
		want := strings.Split(*only, ",")
		wls = slices.DeleteFunc(wls, func(w workload) bool { return !slices.Contains(want, w.name) })
	}
	start := time.Now()
	for rep := 0; rep < *reps; rep++ {
		for wi, w := range wls {
			order := rotate(b.targets, rep+wi)
			for _, t := range order {
				sec, err := b.once(w, t)
				if err != nil {
					return fmt.Errorf("%s on %s: %w", w.name, t.name, err)
				}
				if b.results[w.name] == nil {
					b.results[w.name] = map[string][]float64{}
				}
				b.results[w.name][t.name] = append(b.results[w.name][t.name], sec)
				fmt.Fprintf(os.Stderr, "rep %d %-12s %-10s %8.3fs\n", rep+1, w.name, t.name, sec)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "measured in %v\n", time.Since(start).Round(time.Second))
	for _, d := range b.deferred {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	if *jsonOut != "" {
		raw, _ := json.MarshalIndent(b.results, "", "  ")
		if err := os.WriteFile(*jsonOut, raw, 0o644); err != nil {
			return err
		}
	}
	b.report(os.Stdout, wls)
	fmt.Println()
	b.goals(os.Stdout, wls)
	return nil
}

func rotate(ts []*target, k int) []*target {
	out := make([]*target, len(ts))
	for i := range ts {
		out[i] = ts[(i+k)%len(ts)]
	}
	return out
}

func (b *bench) once(w workload, t *target) (float64, error) {
	b.runN++
	run := fmt.Sprintf("%s-%s-%d", w.name, t.name, b.runN)
	if w.cold {
		if err := b.coldStart(t); err != nil {
			return 0, err
		}
	}
	if w.prepare != nil {
		if err := w.prepare(b, t, run); err != nil {
			return 0, fmt.Errorf("prepare: %w", err)
		}
	}
	// Start every run with nothing dirty: writeback of an earlier run's data (or the
	// discards of its removal) would otherwise land on whichever run comes next.
	syscall.Sync()
	if w.warmup != nil {
		if err := w.warmup(b, t, run); err != nil {
			return 0, fmt.Errorf("warmup: %w", err)
		}
	}
	argv := w.command(b, t, run)
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	sec := time.Since(start).Seconds()
	if err != nil {
		return 0, fmt.Errorf("%q: %v: %s", argv, err, strings.TrimSpace(stderr.String()))
	}
	if w.cleanup != nil {
		if err := w.cleanup(b, t, run); err != nil {
			return 0, fmt.Errorf("cleanup: %w", err)
		}
	}
	return sec, nil
}

func sh(args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%q: %v: %s", args, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func dropCaches() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200)
}

func (b *bench) scratch(run string) string { return filepath.Join(b.source, "scratch", run) }

// warmPause outlasts every mirror's 1 s entry and attribute timeouts.
const warmPause = 1200 * time.Millisecond

func workloads() []workload {
	removeNative := func(b *bench, t *target, run string) error { return os.RemoveAll(b.scratch(run)) }
	find := func(b *bench, t *target, run string) []string {
		return []string{"find", filepath.Join(t.dir(), "tree"), "-ls"}
	}
	gitStatus := func(b *bench, t *target, run string) []string {
		return []string{"git", "-C", filepath.Join(t.dir(), "tree"), "status", "--porcelain"}
	}
	// A warm run follows, at once, untimed runs that looked every name up
	// afresh. The mirrors cache names and attributes for 1 s; without the pause,
	// names the previous workload looked up less than 1 s earlier were still
	// cached during the untimed runs, so they did not refresh them, and they
	// expired during the timed one. Which target that hit depended on its place
	// in the rotation: in one two-target run the first took 0.07 s and the
	// second 0.14-0.20 s, whichever build it was. (They are a warmup, run after
	// the sync, for the same reason.)
	warm := func(cmd func(*bench, *target, string) []string) func(*bench, *target, string) error {
		return func(b *bench, t *target, run string) error {
			time.Sleep(warmPause)
			// Twice: on a mount that has never listed the tree, the run after the
			// first still takes twice as long (0.14 against 0.07 s for find, toh and
			// lbsame alike); from the third on it is steady.
			if err := sh(cmd(b, t, run)...); err != nil {
				return err
			}
			return sh(cmd(b, t, run)...)
		}
	}
	return []workload{
		{
			name: "untar",
			command: func(b *bench, t *target, run string) []string {
				d := filepath.Join(t.dir(), "scratch", run)
				return []string{"sh", "-c", `mkdir "$1" && exec tar -xf "$2" -C "$1"`, "untar", d, b.tar}
			},
			cleanup: removeNative,
		},
		{name: "find-cold", cold: true, command: find},
		{name: "find-warm", warmup: warm(find), command: find},
		{name: "git-cold", cold: true, command: gitStatus},
		{name: "git-warm", warmup: warm(gitStatus), command: gitStatus},
		{
			name: "seq-write",
			command: func(b *bench, t *target, run string) []string {
				return []string{"dd", "if=/dev/zero", "of=" + filepath.Join(t.dir(), "scratch", run), "bs=1M",
					fmt.Sprintf("count=%d", b.seqMiB), "conv=fsync", "status=none"}
			},
			// Removing a GiB makes the disk discard it (the root file system here
			// is mounted with discard), which slowed the next runs by up to 3x: the
			// files go at the end of the whole run.
			cleanup: func(b *bench, t *target, run string) error {
				b.deferred = append(b.deferred, b.scratch(run))
				return nil
			},
		},
		{
			name:    "seq-read",
			prepare: func(b *bench, t *target, run string) error { return dropCaches() },
			command: func(b *bench, t *target, run string) []string {
				return []string{"dd", "if=" + filepath.Join(t.dir(), "scratch", "seq-read"), "of=/dev/null", "bs=1M", "status=none"}
			},
		},
		{
			name: "rm-rf",
			prepare: func(b *bench, t *target, run string) error {
				d := b.scratch(run)
				if err := os.Mkdir(d, 0o755); err != nil {
					return err
				}
				return sh("tar", "-xf", b.tar, "-C", d)
			},
			command: func(b *bench, t *target, run string) []string {
				return []string{"rm", "-rf", filepath.Join(t.dir(), "scratch", run)}
			},
		},
		{
			name: "smallfiles",
			command: func(b *bench, t *target, run string) []string {
				return []string{b.self, "smallfiles", "-dir", filepath.Join(t.dir(), "scratch", run),
					"-writers", "4", "-files", fmt.Sprint(b.smallFiles), "-size", "4096"}
			},
			cleanup: removeNative,
		},
	}
}

// mount starts t's daemon and waits until its mount shows in mountinfo.
func (b *bench) mount(t *target) error {
	if t.argv == nil {
		return nil
	}
	if mounted(t.mnt) {
		return fmt.Errorf("%s: %s is already a mount point", t.name, t.mnt)
	}
	cmd := exec.Command(t.argv[0], t.argv[1:]...)
	if b.logDir != "" {
		f, err := os.OpenFile(filepath.Join(b.logDir, t.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		t.log = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", t.name, err)
	}
	t.cmd = cmd
	t.exited = make(chan struct{})
	go func() { cmd.Wait(); close(t.exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for !mounted(t.mnt) {
		select {
		case <-t.exited:
			return fmt.Errorf("%s exited before mounting (%v)", t.name, cmd.ProcessState)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not mount %s within 10s", t.name, t.mnt)
		}
	}
	return nil
}

// unmount stops t's daemon by its PID and waits for the mount to go.
func (b *bench) unmount(t *target) error {
	if t.cmd == nil {
		return nil
	}
	t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-t.exited:
	case <-time.After(20 * time.Second):
		t.cmd.Process.Kill()
		<-t.exited
	}
	t.cmd = nil
	if t.log != nil {
		t.log.Close()
		t.log = nil
	}
	if mounted(t.mnt) {
		// A daemon that died without unmounting leaves a dead mount: detach it.
		if err := syscall.Unmount(t.mnt, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("%s: %s still mounted: %w", t.name, t.mnt, err)
		}
	}
	return nil
}

func (b *bench) unmountAll() {
	for _, t := range b.targets {
		if err := b.unmount(t); err != nil {
			fmt.Fprintln(os.Stderr, "fusebench:", err)
		}
	}
}

func (b *bench) coldStart(t *target) error {
	if err := b.unmount(t); err != nil {
		return err
	}
	if err := dropCaches(); err != nil {
		return err
	}
	return b.mount(t)
}

// mounted reports whether dir is a FUSE mount point, by /proc/self/mountinfo.
func mounted(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// mountinfo: ID parent major:minor root mountpoint options ... - fstype source superopts
		if len(fields) < 5 || unescape(fields[4]) != dir {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && strings.HasPrefix(fields[i+1], "fuse") {
				return true
			}
		}
	}
	return false
}

func unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// getXattrs asks for FILE's security.capability n times, as the kernel does before
// every write(2) to a file: one GETXATTR round trip each through a FUSE mount.
// Only ENODATA (no capability) or success counts.
func getXattrs(args []string) error {
	fs := flag.NewFlagSet("getxattr", flag.ContinueOnError)
	n := fs.Int("n", 50000, "calls")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("want one FILE")
	}
	buf := make([]byte, 64)
	for i := 0; i < *n; i++ {
		if _, err := syscall.Getxattr(fs.Arg(0), "security.capability", buf); err != nil && err != syscall.ENODATA {
			return err
		}
	}
	return nil
}

// smallFiles creates writers×files files of size bytes under dir, one
// subdirectory per writer, the writers running in parallel.
func smallFiles(args []string) error {
	fs := flag.NewFlagSet("smallfiles", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory to create (must not exist)")
	writers := fs.Int("writers", 4, "parallel writers")
	files := fs.Int("files", 2500, "files per writer")
	size := fs.Int("size", 4096, "bytes per file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.Mkdir(*dir, 0o755); err != nil {
		return err
	}
	data := make([]byte, *size)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	var wg sync.WaitGroup
	errs := make(chan error, *writers)
	for w := 0; w < *writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := filepath.Join(*dir, fmt.Sprintf("w%d", w))
			if err := os.Mkdir(sub, 0o755); err != nil {
				errs <- err
				return
			}
			for i := 0; i < *files; i++ {
				f, err := os.OpenFile(filepath.Join(sub, fmt.Sprintf("f%05d.txt", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err == nil {
					_, err = f.Write(data)
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// report prints the medians, their spread, and the ratios the goals are stated in
// (medians of per-repetition ratios).
func (b *bench) report(w io.Writer, wls []workload) {
	names := make([]string, len(b.targets))
	for i, t := range b.targets {
		names[i] = t.name
	}
	fmt.Fprintf(w, "| workload |")
	for _, n := range names {
		fmt.Fprintf(w, " %s |", n)
	}
	ratios := [][2]string{{"toh", "native"}, {"loopback", "native"}, {"bindfs", "native"},
		{"toh", "lbsame"}, {"toh", "loopback"}, {"toh", "bindfs"}}
	ratios = slices.DeleteFunc(ratios, func(r [2]string) bool {
		return !slices.Contains(names, r[0]) || !slices.Contains(names, r[1])
	})
	for _, r := range ratios {
		fmt.Fprintf(w, " %s/%s |", r[0], r[1])
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "|---|")
	for range len(names) + len(ratios) {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, wl := range wls {
		res := b.results[wl.name]
		if res == nil {
			continue
		}
		fmt.Fprintf(w, "| %s |", wl.name)
		for _, n := range names {
			xs := res[n]
			m := median(xs)
			fmt.Fprintf(w, " %.3f ±%.0f%% |", m, 100*spread(xs)/m)
		}
		for _, r := range ratios {
			fmt.Fprintf(w, " %.2f× |", pairedRatio(res[r[0]], res[r[1]]))
		}
		fmt.Fprintln(w)
	}
}

// goals prints each of issue 4's speed goals with the measured ratio.
func (b *bench) goals(w io.Writer, wls []workload) {
	ratio := func(wl, num, den string) (float64, bool) {
		res := b.results[wl]
		if res == nil || res[num] == nil || res[den] == nil {
			return 0, false
		}
		return pairedRatio(res[num], res[den]), true
	}
	limits := map[string]float64{"find-warm": 3, "git-warm": 3, "untar": 8, "seq-write": 1.2, "seq-read": 1.2}
	fmt.Fprintln(w, "| goal | workload | ratio | met |")
	fmt.Fprintln(w, "|---|---|---:|:---:|")
	line := func(goal, wl string, r, limit float64, strict bool) {
		met := r <= limit
		if strict {
			met = r < limit
		}
		mark := "yes"
		if !met {
			mark = "**no**"
		}
		fmt.Fprintf(w, "| %s | %s | %.2f× | %s |\n", goal, wl, r, mark)
	}
	for _, wl := range wls {
		if r, ok := ratio(wl.name, "toh", "lbsame"); ok {
			line("fence cost: toh/lbsame ≤ 1.05", wl.name, r, 1.05, false)
		}
	}
	for _, wl := range wls {
		if r, ok := ratio(wl.name, "toh", "loopback"); ok {
			line("toh beats loopback: toh/loopback < 1", wl.name, r, 1, true)
		}
	}
	for _, wl := range wls {
		if r, ok := ratio(wl.name, "toh", "bindfs"); ok {
			line("toh beats bindfs: toh/bindfs < 1", wl.name, r, 1, true)
		}
	}
	for _, wl := range wls {
		if lim, ok := limits[wl.name]; ok {
			if r, ok := ratio(wl.name, "toh", "native"); ok {
				line(fmt.Sprintf("toh/native ≤ %g", lim), wl.name, r, lim, false)
			}
		}
	}
}

// pairedRatio is the median of the per-repetition ratios num[i]/den[i]: the runs of
// one repetition are minutes apart at most, so slow drift of the machine cancels.
func pairedRatio(num, den []float64) float64 {
	n := min(len(num), len(den))
	rs := make([]float64, n)
	for i := range n {
		rs[i] = num[i] / den[i]
	}
	return median(rs)
}

// spread is half the interquartile range (or half the range for fewer than 4 samples).
func spread(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n < 2 {
		return 0
	}
	if n < 4 {
		return (s[n-1] - s[0]) / 2
	}
	return (s[(3*n)/4] - s[n/4]) / 2
}
