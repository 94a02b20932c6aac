package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toh-sandbox/toh/policy"
)

// DefaultProbeTimeout bounds one functional probe.
const DefaultProbeTimeout = 5 * time.Second

// Provider is one rung of the runner chain.
type Provider interface {
	Backend() Backend
	// Confine returns argv enforcing pol, or an error when this provider cannot
	// enforce it (for example network deny on a kernel without the mechanism).
	Confine(argv []string, pol policy.Execution) (Confined, error)
	// Probe runs the real read-only profile around `true` and reports why it failed.
	Probe(ctx context.Context) error
}

// Options configure the runner chain. They come from the operator's flags, never
// from the environment of the process.
type Options struct {
	// Runner, when set, makes that backend the sole candidate (no probe).
	Runner Backend
	// BwrapPath overrides the fixed system locations searched for bwrap.
	BwrapPath string
	// Self is the absolute path of the toh-exec binary (the Landlock launcher stage).
	Self string
	// ProbeTimeout bounds each probe; 0 is rejected (it would mean "no timeout").
	ProbeTimeout time.Duration
}

// Chain is the ordered list of candidate providers for this platform.
type Chain struct {
	Candidates   []Provider
	ProbeTimeout time.Duration
}

// NewChain builds the platform's chain (SPEC §4.1), or the sole candidate that
// opts.Runner names.
func NewChain(opts Options) (*Chain, error) {
	if opts.ProbeTimeout <= 0 {
		return nil, fmt.Errorf("probe timeout must be positive, got %v", opts.ProbeTimeout)
	}
	all := platformProviders(opts)
	c := &Chain{ProbeTimeout: opts.ProbeTimeout}
	if opts.Runner == "" {
		c.Candidates = all
		return c, nil
	}
	for _, p := range all {
		if p.Backend() == opts.Runner {
			c.Candidates = []Provider{p}
			return c, nil
		}
	}
	return nil, fmt.Errorf("runner %q is not available on this platform", opts.Runner)
}

// ProbeResult is the outcome of probing one candidate.
type ProbeResult struct {
	Backend Backend
	Err     error
}

// Select returns the provider that confines on this host: the sole candidate without
// a probe, else the first candidate whose probe passes. With no usable candidate it
// returns nil and the probe results, in chain order.
func (c *Chain) Select(ctx context.Context) (Provider, []ProbeResult) {
	if len(c.Candidates) == 1 {
		return c.Candidates[0], nil
	}
	var results []ProbeResult
	for _, p := range c.Candidates {
		pctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
		err := p.Probe(pctx)
		cancel()
		results = append(results, ProbeResult{Backend: p.Backend(), Err: err})
		if err == nil {
			return p, results
		}
	}
	return nil, results
}

// Confine picks the provider and confines argv with it. Every failure is an
// *UnavailableError: the caller must not run argv.
func (c *Chain) Confine(ctx context.Context, argv []string, pol policy.Execution) (Confined, error) {
	if pol.Mode == policy.DangerFullAccess {
		return Confined{}, errors.New("danger-full-access never reaches a provider")
	}
	if _, err := policy.ParseMode(string(pol.Mode)); err != nil {
		return Confined{}, err
	}
	p, results := c.Select(ctx)
	if p == nil {
		return Confined{}, &UnavailableError{Mode: pol.Mode, Cause: probeErrors(results)}
	}
	conf, err := p.Confine(argv, pol)
	if err != nil {
		return Confined{}, &UnavailableError{Mode: pol.Mode, Cause: err}
	}
	return conf, nil
}

func probeErrors(results []ProbeResult) error {
	if len(results) == 0 {
		return errors.New("no sandbox backend on this platform")
	}
	var errs []error
	for _, r := range results {
		errs = append(errs, fmt.Errorf("%s probe: %w", r.Backend, r.Err))
	}
	return errors.Join(errs...)
}
