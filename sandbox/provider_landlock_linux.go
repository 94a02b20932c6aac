package sandbox

import (
	"context"
	"errors"
	"slices"

	"github.com/toh-sandbox/toh/policy"
)

// landlockProvider is the second Linux rung. Its argv re-execs toh-exec as the
// launcher stage, which applies the ruleset and execs argv; [Run] applies the same
// ruleset itself on a thread of its own and starts argv from there (see
// landlock_direct_linux.go), unless a fence stage has to run in between.
type landlockProvider struct {
	self string
}

func newLandlockProvider(self string) *landlockProvider { return &landlockProvider{self: self} }

func (l *landlockProvider) Backend() Backend { return BackendLandlock }

func (l *landlockProvider) binary() string { return l.self }

func (l *landlockProvider) Confine(argv []string, pol policy.Execution) (Confined, error) {
	if l.self == "" {
		return Confined{}, errors.New("landlock: the launcher binary is unknown")
	}
	enf, err := LandlockEnforcement(pol, LandlockABI())
	if err != nil {
		return Confined{}, err
	}
	denial, rules := LandlockDialect()
	network := policy.NetworkAllow
	if pol.Network == policy.NetworkDeny {
		network = policy.NetworkDeny
	}
	var fenced []string
	if pol.Fence && pol.Mode == policy.WorkspaceWrite {
		for _, r := range pol.WritableRoots {
			// The host's /tmp stays unfenced: a FUSE mirror cannot carry the Unix
			// sockets and FIFOs other programs keep there (ssh-agent, X11, tmux).
			if r != "/tmp" {
				fenced = append(fenced, r)
			}
		}
	}
	c := Confined{
		FencedRoots:        fenced,
		FenceWritable:      slices.Clone(pol.WritableRoots), // not the caller's slice
		Argv:               withStatusFD(statusLauncher, LandlockArgv(l.self, pol, argv)),
		Backend:            BackendLandlock,
		Enforcement:        enf,
		DenialSignatures:   denial,
		RunnerFailureRules: rules,
		Network:            network,
		status:             statusLauncher,
		command:            argv[0],
	}
	// Run starts the command itself under exactly what the launcher would apply: the
	// flags are parsed back from the launcher's argv, so the two paths cannot drift.
	// An argv the launcher would refuse keeps the launcher path, which refuses it, and
	// so does a host where Run can never hold the command at its exec (Yama's
	// ptrace_scope >= 2: landlockDirectUsable); other refusals fall back in Run.
	if f, err := parseLandlockFlags(c.Argv[2:]); err == nil && landlockDirectUsable() {
		c.landlock = &f
	}
	return c, nil
}

func (l *landlockProvider) Probe(ctx context.Context) error {
	if l.self == "" {
		return errors.New("landlock: the launcher binary is unknown")
	}
	return runProbe(ctx, []string{l.self, "__landlock-run", "--probe"}, "landlock-run: ")
}
