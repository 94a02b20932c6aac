// Command execargv prints, as shell assignments for bench/exec.sh, the exact command
// lines the toh-exec speed benchmark compares: the bwrap argv that toh-exec itself
// would spawn for "true" in the current directory, the Landlock launcher argv (what
// the probe and a fenced run start; a plain run applies the same plan in-process and
// starts "true" itself), and the landlock-restrict flags that grant the same file
// access.
//
// The argvs come from the sandbox package's own runner chain (sandbox.NewChain with
// the runner forced, then Chain.Confine), fed by the policy resolved the way toh-exec
// resolves it (default policy file, working directory, $TMPDIR), so the raw-bwrap
// baseline is byte-identical to what toh-exec spawns; exec.sh double-checks that with
// strace when it is installed.
//
// Usage:
//
//	execargv -toh-exec PATH -probe-cache FILE [-mode read-only|workspace-write] [-bwrap PATH]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/toh-sandbox/toh/policy"
	"github.com/toh-sandbox/toh/sandbox"
)

func main() {
	self := flag.String("toh-exec", "", "absolute path of the toh-exec binary under test (the Landlock launcher)")
	cache := flag.String("probe-cache", "", "the --probe-cache FILE the benchmark passes to toh-exec")
	mode := flag.String("mode", "read-only", "read-only or workspace-write")
	bwrap := flag.String("bwrap", "", "bwrap binary (default: toh-exec's own search)")
	flag.Parse()
	if err := run(*self, *cache, *mode, *bwrap); err != nil {
		fmt.Fprintf(os.Stderr, "execargv: %v\n", err)
		os.Exit(1)
	}
}

func run(self, cache, mode, bwrap string) error {
	if !filepath.IsAbs(self) || !filepath.IsAbs(cache) {
		return fmt.Errorf("-toh-exec and -probe-cache must be absolute paths")
	}
	m, err := policy.ParseMode(mode)
	if err != nil {
		return err
	}
	pol, err := resolve(m)
	if err != nil {
		return err
	}
	target := []string{"true"}
	bw, err := confine(sandbox.BackendBwrap, self, cache, bwrap, pol, target)
	if err != nil {
		return err
	}
	ll, err := confine(sandbox.BackendLandlock, self, cache, bwrap, pol, target)
	if err != nil {
		return err
	}
	// sandbox.Run adds where the command starts (bwrap's --chdir): toh-exec's is its
	// working directory, which bench/exec.sh shares with this program.
	if cwd, err := os.Getwd(); err == nil {
		bw.Argv = append([]string{bw.Argv[0], "--chdir", cwd}, bw.Argv[1:]...)
	}
	assign("BWRAP_CMD", hyperfineCommand(bw.Argv))
	assign("BWRAP_STRACE", straceArgv(bw.Argv))
	assign("LAUNCHER_CMD", hyperfineCommand(ll.Argv))
	assign("LLR_FLAGS", hyperfineCommand(landlockRestrictFlags(pol)))
	assign("WRITABLE_ROOTS", strings.Join(pol.WritableRoots, " "))
	assign("BWRAP_ENFORCEMENT", string(bw.Enforcement))
	assign("LANDLOCK_ENFORCEMENT", string(ll.Enforcement))
	assign("LANDLOCK_ABI", fmt.Sprint(sandbox.LandlockABI()))
	return nil
}

// resolve is toh-exec's resolvePolicy for a call without --policy, --session or an
// escalation.
func resolve(mode policy.Mode) (policy.Execution, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return policy.Execution{}, fmt.Errorf("locating the default policy file: %w", err)
	}
	path := filepath.Join(dir, "toh", "policy.json")
	f, found, err := policy.Load(path)
	if err != nil {
		return policy.Execution{}, err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return policy.Execution{}, err
	}
	req := policy.Request{DeploymentMode: mode, Cwd: cwd, TmpDir: os.Getenv("TMPDIR")}
	if found {
		req.PolicyFile = path
	}
	return policy.Resolve(f, req)
}

// confine asks the sandbox package for the argv toh-exec --runner NAME would spawn;
// the probe cache path matters because the bwrap rung keeps it read-only when it lies
// within a writable root.
func confine(b sandbox.Backend, self, cache, bwrap string, pol policy.Execution, argv []string) (sandbox.Confined, error) {
	chain, err := sandbox.NewChain(sandbox.Options{
		Runner:       b,
		BwrapPath:    bwrap,
		Self:         self,
		ProbeTimeout: sandbox.DefaultProbeTimeout,
		Cache:        &sandbox.ProbeCache{Path: cache},
	})
	if err != nil {
		return sandbox.Confined{}, err
	}
	return chain.Confine(context.Background(), argv, pol)
}

// landlockRestrictFlags grants go-landlock's landlock-restrict the file access of our
// profile: read and execute everywhere, read and write on /dev/null, and for
// workspace-write full access (refer included) beneath every writable root. Ours also
// handles resolve_unix on ABI >= 9, scopes signals on ABI >= 6 and, in read-only mode,
// installs a seccomp filter for metadata syscalls; landlock-restrict does none of these.
func landlockRestrictFlags(pol policy.Execution) []string {
	out := []string{"-ro", "/", "-rwfiles", "/dev/null"}
	if pol.Mode == policy.WorkspaceWrite && len(pol.WritableRoots) > 0 {
		out = append(out, "-rw", "+refer")
		out = append(out, pol.WritableRoots...)
	}
	return out
}

func assign(name, value string) {
	fmt.Printf("%s=%s\n", name, shellQuote(value))
}

var plain = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

func shellQuote(s string) string {
	if plain.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// straceArgv renders argv the way `strace -xx` prints an execve argument vector, so
// exec.sh can check byte for byte that toh-exec spawned exactly this argv.
func straceArgv(argv []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, a := range argv {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('"')
		for j := 0; j < len(a); j++ {
			fmt.Fprintf(&b, "\\x%02x", a[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte(']')
	return b.String()
}

// hyperfineCommand renders argv as one command string for hyperfine -N, which splits
// it with POSIX shell-word rules.
func hyperfineCommand(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}
