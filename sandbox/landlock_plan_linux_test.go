package sandbox

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toh-sandbox/toh/policy"
	"golang.org/x/sys/unix"
)

// -update rewrites golden files; looked up rather than owned, since other test files of
// this package may define it first.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files under testdata/")
	}
}

func landlockGolden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", "landlock", name)
	if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-golden +got), run with -update if intended:\n%s", p, diff)
	}
}

// The rule sets are pure functions of the flags, the ABI and the errata: one golden
// file shows what every interesting combination enforces.
func TestLandlockPlanGolden(t *testing.T) {
	ro := landlockFlags{mode: policy.ReadOnly, argv: []string{"true"}}
	roDeny := ro
	roDeny.netDeny = true
	ww := landlockFlags{mode: policy.WorkspaceWrite, rw: []string{"/home/a/proj", "/tmp"}, argv: []string{"true"}}
	wwDeny := ww
	wwDeny.netDeny = true
	roCapped := ro
	roCapped.maxABI = 3
	const fixed = landlockErratumSignalScope
	cases := []struct {
		name    string
		f       landlockFlags
		abi     int
		errata  uint64
		seccomp bool
	}{
		{"read-only", ro, 7, fixed, true},
		{"read-only ABI 1", ro, 1, 0, true},
		{"read-only ABI 2", ro, 2, 0, true},
		{"read-only ABI 3", ro, 3, 0, true},
		{"read-only ABI 4", ro, 4, 0, true},
		{"read-only ABI 5", ro, 5, 0, true},
		{"read-only ABI 6 signal erratum unfixed", ro, 6, 0, true},
		{"read-only ABI 9", ro, 9, fixed, true},
		{"read-only future ABI", ro, 40, fixed, true},
		{"read-only capped at ABI 3", roCapped, 7, fixed, true},
		{"read-only without seccomp", ro, 7, fixed, false},
		{"read-only network deny ABI 4", roDeny, 4, 0, true},
		{"read-only network deny", roDeny, 7, fixed, true},
		{"read-only network deny ABI 10", roDeny, 10, fixed, true},
		{"read-only network deny ABI 3", roDeny, 3, 0, true},
		{"read-only network deny without seccomp", roDeny, 7, fixed, false},
		{"workspace-write", ww, 7, fixed, true},
		{"workspace-write ABI 1", ww, 1, 0, true},
		{"workspace-write network deny", wwDeny, 7, fixed, true},
		{"no landlock", ro, 0, 0, true},
	}
	var b strings.Builder
	for _, tc := range cases {
		p, err := newLandlockPlan(tc.f, tc.abi, tc.errata, tc.seccomp)
		fmt.Fprintf(&b, "# %s\n", tc.name)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n\n", err)
			continue
		}
		fmt.Fprintf(&b, "%s\n\n", strings.ReplaceAll(p.String(), "; ", ";\n  "))
	}
	landlockGolden(t, "plans.golden", b.String())
}

// The rule sets are written against the uapi bit values; make sure the names and
// tables agree with golang.org/x/sys.
func TestLandlockRightsTable(t *testing.T) {
	want := map[string]uint64{
		"execute": unix.LANDLOCK_ACCESS_FS_EXECUTE, "write_file": unix.LANDLOCK_ACCESS_FS_WRITE_FILE,
		"read_file": unix.LANDLOCK_ACCESS_FS_READ_FILE, "read_dir": unix.LANDLOCK_ACCESS_FS_READ_DIR,
		"remove_dir": unix.LANDLOCK_ACCESS_FS_REMOVE_DIR, "remove_file": unix.LANDLOCK_ACCESS_FS_REMOVE_FILE,
		"make_char": unix.LANDLOCK_ACCESS_FS_MAKE_CHAR, "make_dir": unix.LANDLOCK_ACCESS_FS_MAKE_DIR,
		"make_reg": unix.LANDLOCK_ACCESS_FS_MAKE_REG, "make_sock": unix.LANDLOCK_ACCESS_FS_MAKE_SOCK,
		"make_fifo": unix.LANDLOCK_ACCESS_FS_MAKE_FIFO, "make_block": unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK,
		"make_sym": unix.LANDLOCK_ACCESS_FS_MAKE_SYM, "refer": unix.LANDLOCK_ACCESS_FS_REFER,
		"truncate": unix.LANDLOCK_ACCESS_FS_TRUNCATE, "ioctl_dev": unix.LANDLOCK_ACCESS_FS_IOCTL_DEV,
		"resolve_unix": unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX,
	}
	for i, n := range landlockFSNames {
		if want[n] != 1<<i {
			t.Errorf("landlockFSNames[%d] = %s, but %s is %#x", i, n, n, want[n])
		}
	}
	if len(landlockFSNames) != len(want) {
		t.Errorf("%d names for %d rights", len(landlockFSNames), len(want))
	}
	introduced := map[int]uint64{2: unix.LANDLOCK_ACCESS_FS_REFER, 3: unix.LANDLOCK_ACCESS_FS_TRUNCATE,
		5: unix.LANDLOCK_ACCESS_FS_IOCTL_DEV, 9: unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX}
	for v := 2; v <= landlockMaxABI; v++ {
		if got := landlockFSRights[v] &^ landlockFSRights[v-1]; got != introduced[v] {
			t.Errorf("ABI %d adds %#x, want %#x", v, got, introduced[v])
		}
	}
	for i, n := range landlockNetNames {
		w := []uint64{unix.LANDLOCK_ACCESS_NET_BIND_TCP, unix.LANDLOCK_ACCESS_NET_CONNECT_TCP,
			unix.LANDLOCK_ACCESS_NET_BIND_UDP, unix.LANDLOCK_ACCESS_NET_CONNECT_SEND_UDP}[i]
		if w != 1<<i {
			t.Errorf("landlockNetNames[%d] = %s is %#x", i, n, w)
		}
	}
	if unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET != 1 || unix.LANDLOCK_SCOPE_SIGNAL != 2 {
		t.Errorf("scope bits moved")
	}
}

// runSeccompBPF interprets the subset of classic BPF the filter uses, over a
// struct seccomp_data.
func runSeccompBPF(t *testing.T, prog []unix.SockFilter, arch, nr uint32, args ...uint64) uint32 {
	t.Helper()
	ret, _, err := interpretSeccomp(prog, seccompData(arch, nr, args...), false)
	if err != nil {
		t.Fatal(err)
	}
	return ret
}

func seccompData(arch, nr uint32, args ...uint64) []byte {
	data := make([]byte, 64)
	binary.NativeEndian.PutUint32(data[0:], nr)
	binary.NativeEndian.PutUint32(data[4:], arch)
	for i, a := range args {
		binary.NativeEndian.PutUint64(data[16+8*i:], a)
	}
	return data
}

// interpretSeccomp runs prog over data: the action it returns and the instructions
// it ran. With stopAtArgs it stops, with no action, at the first load of an
// argument, as the kernel's action cache does when it tries the filter on a number.
func interpretSeccomp(prog []unix.SockFilter, data []byte, stopAtArgs bool) (ret uint32, steps int, err error) {
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		steps++
		ins := prog[pc]
		switch ins.Code {
		case bpfLoadWord:
			if ins.K%4 != 0 || ins.K+4 > uint32(len(data)) {
				return 0, steps, fmt.Errorf("pc %d: load at %d", pc, ins.K)
			}
			if stopAtArgs && ins.K >= seccompDataArgsLow {
				return 0, steps, nil
			}
			acc = binary.NativeEndian.Uint32(data[ins.K:])
		case bpfJEq, bpfJSet, bpfJGe:
			taken := acc == ins.K
			switch ins.Code {
			case bpfJSet:
				taken = acc&ins.K != 0
			case bpfJGe:
				taken = acc >= ins.K
			}
			if taken {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		case bpfRet:
			return ins.K, steps, nil
		default:
			return 0, steps, fmt.Errorf("pc %d: unexpected opcode %#x", pc, ins.Code)
		}
	}
	return 0, steps, fmt.Errorf("program ran off its end")
}

func TestLandlockSeccompFilter(t *testing.T) {
	a := landlockSeccompArch
	if !a.supported() {
		t.Skip("no seccomp filter on this architecture (read-only is partial here)")
	}
	eacces := seccompErrno(unix.EACCES)
	enosys := seccompErrno(unix.ENOSYS)
	for _, s := range []seccompPlan{{metadata: true}, {net: true}, {metadata: true, net: true}} {
		prog := buildSeccompFilter(a, s)
		if len(prog) > 4096 {
			t.Fatalf("filter too long: %d", len(prog))
		}
		run := func(nr uint32, args ...uint64) uint32 { return runSeccompBPF(t, prog, a.auditArch, nr, args...) }
		expect := func(what string, got, want uint32) {
			t.Helper()
			if got != want {
				t.Errorf("%v: %s = %#x, want %#x", s, what, got, want)
			}
		}
		expect("foreign arch", runSeccompBPF(t, prog, unix.AUDIT_ARCH_I386, unix.SYS_READ), seccompKill)
		if a.x32Bit != 0 {
			expect("x32 read", run(a.x32Bit|unix.SYS_READ), seccompKill)
		}
		for _, nr := range []uint32{unix.SYS_READ, unix.SYS_WRITE, unix.SYS_OPENAT, unix.SYS_EXECVE, unix.SYS_RENAMEAT2} {
			expect(fmt.Sprintf("syscall %d", nr), run(nr), seccompAllow)
		}
		for _, nr := range a.ioUring {
			expect(fmt.Sprintf("io_uring syscall %d", nr), run(nr), enosys)
		}
		for _, nr := range a.metadata {
			want := uint32(seccompAllow)
			if s.metadata {
				want = eacces
			}
			expect(fmt.Sprintf("metadata syscall %d", nr), run(nr), want)
		}
		for _, cmd := range seccompDeniedIoctls {
			want := uint32(seccompAllow)
			if s.metadata {
				want = eacces
			}
			expect(fmt.Sprintf("ioctl %#x", cmd), run(a.ioctl, 3, uint64(cmd)), want)
			// The kernel truncates cmd to 32 bits; so must the filter.
			expect(fmt.Sprintf("ioctl %#x with high bits", cmd), run(a.ioctl, 3, 0xdead_0000_0000|uint64(cmd)), want)
		}
		expect("ioctl FS_IOC_SETFLAGS is the uapi value", seccompDeniedIoctls[0], unix.FS_IOC_SETFLAGS)
		expect("ioctl TCGETS", run(a.ioctl, 0, unix.TCGETS), seccompAllow)
		expect("ioctl FS_IOC_GETFLAGS", run(a.ioctl, 3, unix.FS_IOC_GETFLAGS), seccompAllow)
		for _, af := range []uint64{unix.AF_INET, unix.AF_INET6, unix.AF_PACKET, unix.AF_NETLINK, unix.AF_VSOCK, 1<<32 | unix.AF_INET} {
			want := uint32(seccompAllow)
			if s.net {
				want = eacces
			}
			expect(fmt.Sprintf("socket(%#x)", af), run(a.socket, af, unix.SOCK_STREAM, 0), want)
		}
		// prlimit64(pid, resource, new, old): another process's limits may be read, not set.
		const newLimit, oldLimit = 0x7fff_1000, 0x7fff_2000
		eperm := seccompErrno(unix.EPERM)
		expect("prlimit64 of itself", run(a.prlimit, 0, unix.RLIMIT_AS, newLimit, oldLimit), seccompAllow)
		expect("prlimit64 of itself, pid with high bits", run(a.prlimit, 1<<32, unix.RLIMIT_AS, newLimit, 0), seccompAllow)
		expect("prlimit64 reading another's", run(a.prlimit, 1234, unix.RLIMIT_AS, 0, oldLimit), seccompAllow)
		expect("prlimit64 setting another's", run(a.prlimit, 1234, unix.RLIMIT_AS, newLimit, 0), eperm)
		expect("prlimit64 setting another's, new limit above 4 GiB", run(a.prlimit, 1234, unix.RLIMIT_AS, 1<<40, 0), eperm)
		expect("socket(AF_UNIX)", run(a.socket, unix.AF_UNIX, unix.SOCK_STREAM, 0), seccompAllow)
		expect("socket(AF_UNIX) with high bits", run(a.socket, 7<<32|unix.AF_UNIX, unix.SOCK_STREAM, 0), seccompAllow)
	}
}

// linearSeccompFilter is the filter as it was before the search (buildSeccompFilter):
// one comparison per number, in a row. It is the reference the search must agree
// with.
func linearSeccompFilter(a seccompArch, s seccompPlan) []unix.SockFilter {
	prog := []unix.SockFilter{
		bpfStmt(bpfLoadWord, seccompDataArch),
		bpfJump(bpfJEq, a.auditArch, 1, 0),
		bpfStmt(bpfRet, seccompKill),
		bpfStmt(bpfLoadWord, seccompDataNr),
	}
	if a.x32Bit != 0 {
		prog = append(prog, bpfJump(bpfJSet, a.x32Bit, 0, 1), bpfStmt(bpfRet, seccompKill))
	}
	deny := func(nr uint32, e unix.Errno) {
		prog = append(prog, bpfJump(bpfJEq, nr, 0, 1), bpfStmt(bpfRet, seccompErrno(e)))
	}
	block := func(nr uint32, body []unix.SockFilter) {
		prog = append(prog, bpfJump(bpfJEq, nr, 0, uint8(len(body))))
		prog = append(prog, body...)
	}
	for _, nr := range a.ioUring {
		deny(nr, unix.ENOSYS)
	}
	if s.vsockOnly {
		block(a.socket, []unix.SockFilter{
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*0),
			bpfJump(bpfJEq, unix.AF_VSOCK, 0, 1),
			bpfStmt(bpfRet, seccompErrno(unix.EACCES)),
			bpfStmt(bpfRet, seccompAllow),
		})
		return append(prog, bpfStmt(bpfRet, seccompAllow))
	}
	if a.prlimit != 0 {
		block(a.prlimit, []unix.SockFilter{
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*0),
			bpfJump(bpfJEq, 0, 4, 0),
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*2),
			bpfJump(bpfJEq, 0, 0, 3),
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*2+4),
			bpfJump(bpfJEq, 0, 0, 1),
			bpfStmt(bpfRet, seccompAllow),
			bpfStmt(bpfRet, seccompErrno(unix.EPERM)),
		})
	}
	if s.metadata {
		for _, nr := range a.metadata {
			deny(nr, unix.EACCES)
		}
		body := []unix.SockFilter{bpfStmt(bpfLoadWord, seccompDataArgsLow+8*1)}
		for _, cmd := range seccompDeniedIoctls {
			body = append(body, bpfJump(bpfJEq, cmd, 0, 1), bpfStmt(bpfRet, seccompErrno(unix.EACCES)))
		}
		body = append(body, bpfStmt(bpfRet, seccompAllow))
		block(a.ioctl, body)
	}
	if s.net {
		block(a.socket, []unix.SockFilter{
			bpfStmt(bpfLoadWord, seccompDataArgsLow+8*0),
			bpfJump(bpfJEq, unix.AF_UNIX, 0, 1),
			bpfStmt(bpfRet, seccompAllow),
			bpfStmt(bpfRet, seccompErrno(unix.EACCES)),
		})
	}
	return append(prog, bpfStmt(bpfRet, seccompAllow))
}

// The search decides as the row did, for every plan, every syscall number below 1100
// (both ABIs of the audit arch and a foreign one) and arguments that reach every
// branch of every block; and an allowed number passes few instructions, which is
// what makes the kernel's installation cheap.
func TestSeccompFilterMatchesReference(t *testing.T) {
	a := landlockSeccompArch
	if !a.supported() {
		t.Skip("no seccomp filter on this architecture")
	}
	var argSets [][]uint64
	for _, first := range []uint64{0, 1234, 1 << 32, unix.AF_UNIX, unix.AF_INET, unix.AF_VSOCK, 7<<32 | unix.AF_UNIX} {
		for _, second := range append([]uint64{0, unix.TCGETS, 0xdead_0000_0000 | uint64(seccompDeniedIoctls[0])}, uint64Of(seccompDeniedIoctls)...) {
			for _, third := range []uint64{0, 0x7fff_1000, 1 << 40} {
				argSets = append(argSets, []uint64{first, second, third, 0})
			}
		}
	}
	plans := []seccompPlan{{}, {metadata: true}, {net: true}, {metadata: true, net: true}, {vsockOnly: true}}
	for _, s := range plans {
		search, row := buildSeccompFilter(a, s), linearSeccompFilter(a, s)
		arches := []uint32{a.auditArch, unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_AARCH64}
		if a.auditArch == unix.AUDIT_ARCH_AARCH64 {
			arches[2] = unix.AUDIT_ARCH_X86_64
		}
		// Every argument set for the numbers with a rule, every seventh for the rest
		// (a search that led one into a block would still show).
		ruled := map[uint32]bool{}
		for _, r := range seccompRules(a, s) {
			ruled[r.nr] = true
		}
		var sparse [][]uint64
		for i := 0; i < len(argSets); i += 7 {
			sparse = append(sparse, argSets[i])
		}
		longest := 0
		for _, arch := range arches {
			for nr := uint32(0); nr < 1100; nr++ {
				for _, x := range []uint32{0, a.x32Bit} {
					sets := argSets
					if !ruled[nr] {
						sets = sparse
					}
					for _, args := range sets {
						got, want := runSeccompBPF(t, search, arch, nr|x, args...), runSeccompBPF(t, row, arch, nr|x, args...)
						if got != want {
							t.Fatalf("%+v: arch %#x nr %d args %#x: search %#x, row %#x", s, arch, nr|x, args, got, want)
						}
					}
				}
				if arch == a.auditArch {
					_, steps, err := interpretSeccomp(search, seccompData(arch, nr), true)
					if err != nil {
						t.Fatal(err)
					}
					longest = max(longest, steps)
				}
			}
		}
		if longest > 16 {
			t.Errorf("%+v: an allowed number passes %d instructions of %d", s, longest, len(search))
		}
		t.Logf("%+v: %d instructions (row: %d); an allowed number passes at most %d", s, len(search), len(row), longest)
	}
}

func uint64Of(v []uint32) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = uint64(x)
	}
	return out
}
