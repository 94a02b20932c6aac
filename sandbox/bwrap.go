package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/toh-sandbox/toh/policy"
)

// bwrapLocations are the only places bwrap is looked for unless the operator names a
// path: PATH belongs to the caller's environment, and the environment never decides
// which runner confines a command.
var bwrapLocations = []string{"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"}

// probeEnv is the fixed environment of every probe.
var probeEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

type bwrapProvider struct {
	path string
	// guarded are files kept read-only like the policy file (the probe cache).
	guarded []string
}

func newBwrapProvider(explicit string, guarded []string) *bwrapProvider {
	if explicit != "" {
		return &bwrapProvider{path: explicit, guarded: guarded}
	}
	for _, p := range bwrapLocations {
		if _, err := os.Stat(p); err == nil {
			return &bwrapProvider{path: p, guarded: guarded}
		}
	}
	// Not installed: Confine still returns an argv naming the first location, so a
	// sole-candidate run fails at spawn time with ENOENT for exactly the runner (the
	// fail-closed end), and a probe reports it.
	return &bwrapProvider{path: bwrapLocations[0], guarded: guarded}
}

func (b *bwrapProvider) Backend() Backend { return BackendBwrap }

func (b *bwrapProvider) binary() string { return b.path }

func (b *bwrapProvider) Confine(argv []string, pol policy.Execution) (Confined, error) {
	denial, rules := BwrapDialect()
	network := policy.NetworkAllow
	if pol.Network == policy.NetworkDeny {
		network = policy.NetworkDeny
	}
	// The hides keep the working directory where it really is ($PWD may spell it
	// through a link).
	cwd, _ := os.Getwd()
	if real, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = real
	}
	hides := deputyHides(pol, os.Getenv, cwd)
	var hidden []string
	for _, h := range hides {
		if h.dir {
			hidden = append(hidden, h.path)
		}
	}
	args, standIns, fenced, hostWritable := bwrapArgvHiding(pol, argv, b.guarded, hides)
	return Confined{
		FencedRoots:        fenced,
		FenceWritable:      hostWritable,
		Argv:               withStatusFD(statusBwrap, append([]string{b.path}, args...)),
		Backend:            BackendBwrap,
		Enforcement:        EnforcementFull,
		DenialSignatures:   denial,
		RunnerFailureRules: rules,
		Network:            network,
		SignalAsStatus:     true,
		standIns:           standIns,
		hidden:             hidden,
		command:            argv[0],
		netFilter:          network == policy.NetworkDeny,
		status:             statusBwrap,
	}, nil
}

func (b *bwrapProvider) Probe(ctx context.Context) error {
	pol := policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}
	argv := append([]string{b.path}, BwrapArgv(pol, []string{"true"})...)
	// A probe that met the host's mounts moving (bwrapMountRace) would otherwise
	// leave the chain, and its cached verdict, on a weaker rung until the cache is
	// invalidated.
	err := runProbe(ctx, argv, "bwrap: ")
	for try := 1; try < bwrapTries && err != nil && bwrapMountRace(err.Error()); try++ {
		select {
		case <-ctx.Done():
			return fmt.Errorf("probe timed out: %w", ctx.Err())
		case <-time.After(bwrapRetryPause * time.Duration(try)):
		}
		err = runProbe(ctx, argv, "bwrap: ")
	}
	return err
}

// runProbe runs a probe argv and turns a failure into an error carrying the runner's
// own line (or the tail of its stderr).
func runProbe(ctx context.Context, argv []string, marker string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = probeEnv
	cmd.Dir = "/"
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("probe timed out: %w", ctx.Err())
	}
	if err == nil {
		return nil
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, marker) {
			return fmt.Errorf("%s", strings.TrimSpace(line))
		}
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		return fmt.Errorf("%w: %s", err, s)
	}
	return err
}
