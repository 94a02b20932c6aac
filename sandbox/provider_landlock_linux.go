package sandbox

import (
	"context"
	"errors"

	"github.com/toh-sandbox/toh/policy"
)

// landlockProvider is the second Linux rung: toh-exec re-execs itself as the launcher
// stage, which applies the ruleset and execs argv.
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
	return Confined{
		FencedRoots:        fenced,
		Argv:               LandlockArgv(l.self, pol, argv),
		Backend:            BackendLandlock,
		Enforcement:        enf,
		DenialSignatures:   denial,
		RunnerFailureRules: rules,
		Network:            network,
	}, nil
}

func (l *landlockProvider) Probe(ctx context.Context) error {
	if l.self == "" {
		return errors.New("landlock: the launcher binary is unknown")
	}
	return runProbe(ctx, []string{l.self, "__landlock-run", "--probe"}, "landlock-run: ")
}
