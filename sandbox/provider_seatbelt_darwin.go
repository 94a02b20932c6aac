package sandbox

import (
	"context"

	"github.com/toh-sandbox/toh/policy"
)

// seatbeltPath is fixed: sandbox-exec ships with macOS at this path.
const seatbeltPath = "/usr/bin/sandbox-exec"

type seatbeltProvider struct{}

func newSeatbeltProvider() *seatbeltProvider { return &seatbeltProvider{} }

func (seatbeltProvider) Backend() Backend { return BackendSeatbelt }

func (seatbeltProvider) Confine(argv []string, pol policy.Execution) (Confined, error) {
	denial, rules := SeatbeltDialect()
	network := policy.NetworkAllow
	if pol.Network == policy.NetworkDeny {
		network = policy.NetworkDeny
	}
	return Confined{
		Argv:               append([]string{seatbeltPath}, SeatbeltArgv(pol, argv)...),
		Backend:            BackendSeatbelt,
		Enforcement:        EnforcementFull,
		DenialSignatures:   denial,
		RunnerFailureRules: rules,
		Network:            network,
	}, nil
}

func (seatbeltProvider) Probe(ctx context.Context) error {
	pol := policy.Execution{Mode: policy.ReadOnly, Network: policy.NetworkAllow}
	return runProbe(ctx, append([]string{seatbeltPath}, SeatbeltArgv(pol, []string{"/usr/bin/true"})...), "sandbox-exec: ")
}
