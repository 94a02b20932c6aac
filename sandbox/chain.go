package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/toh-sandbox/toh/canon"
	"github.com/toh-sandbox/toh/internal/textsafe"
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
	// Cache, when set, keeps the chain's verdict across invocations.
	Cache *ProbeCache
	// RefreshProbe ignores a cached verdict, probes again and stores the new one.
	RefreshProbe bool
}

// Chain is the ordered list of candidate providers for this platform.
type Chain struct {
	Candidates   []Provider
	ProbeTimeout time.Duration
	cache        *ProbeCache
	refresh      bool
	// keyFiles are the binaries whose identity the cached verdict depends on.
	keyFiles []string
}

// binaryProvider is implemented by providers that run a program of their own.
type binaryProvider interface {
	binary() string
}

// NewChain builds the platform's chain (SPEC §4.1), or the sole candidate that
// opts.Runner names.
func NewChain(opts Options) (*Chain, error) {
	if opts.ProbeTimeout <= 0 {
		return nil, fmt.Errorf("probe timeout must be positive, got %v", opts.ProbeTimeout)
	}
	if opts.Cache != nil && opts.Cache.Path != "" {
		// One spelling for the cache everywhere: the checks against the writable
		// roots, bwrap's rebind and the drop are lexical ($W/cache/../cache/f or a
		// trailing slash slipped past all three).
		cache := *opts.Cache
		cache.Path = filepath.Clean(cache.Path)
		opts.Cache = &cache
	}
	all := platformProviders(opts)
	c := &Chain{ProbeTimeout: opts.ProbeTimeout, cache: opts.Cache, refresh: opts.RefreshProbe}
	for _, p := range all {
		if bp, ok := p.(binaryProvider); ok {
			c.keyFiles = append(c.keyFiles, bp.binary())
		}
	}
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
// a probe, else the cached verdict, else the first candidate whose probe passes (and
// the verdict is cached). With no usable candidate it returns nil and the probe
// results, in chain order. useCache=false neither reads nor writes the cache.
func (c *Chain) Select(ctx context.Context, useCache bool) (Provider, []ProbeResult) {
	if len(c.Candidates) == 1 {
		return c.Candidates[0], nil
	}
	if !useCache || c.cache == nil {
		return c.probe(ctx)
	}
	key := cacheKey(c.keyFiles)
	if !c.refresh {
		if f, ok := c.cache.load(key); ok {
			var results []ProbeResult
			for _, p := range f.Probes {
				var err error
				if p.Error != "" {
					// Printed to the user's terminal: a file a command may once have
					// written must not carry escape sequences there (found by review).
					err = fmt.Errorf("%s (cached verdict; --refresh-probe probes again)", textsafe.Visible(p.Error))
				}
				results = append(results, ProbeResult{Backend: p.Backend, Err: err})
			}
			for _, p := range c.Candidates {
				if f.Backend != "" && p.Backend() == f.Backend {
					return p, results
				}
			}
			if f.Backend == "" {
				return nil, results
			}
			// A verdict naming a backend this chain lacks is damage: probe.
		}
	}
	p, results := c.probe(ctx)
	f := cacheFile{Version: 1, Key: key}
	if p != nil {
		f.Backend = p.Backend()
	}
	for _, r := range results {
		cp := cacheProbe{Backend: r.Backend}
		if r.Err != nil {
			cp.Error = r.Err.Error()
		}
		f.Probes = append(f.Probes, cp)
	}
	if !timedOut(results) {
		_ = c.cache.store(f)
	}
	return p, results
}

// timedOut reports whether a probe hit its timeout: a slow moment is no verdict
// worth keeping.
func timedOut(results []ProbeResult) bool {
	for _, r := range results {
		if r.Err != nil && errors.Is(r.Err, context.DeadlineExceeded) {
			return true
		}
	}
	return false
}

// DropCache forgets the cached verdict; toh-exec calls it after a runner failure so
// the next invocation probes again.
func (c *Chain) DropCache() { _ = c.cache.Drop() }

func (c *Chain) probe(ctx context.Context) (Provider, []ProbeResult) {
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
	p, results := c.Select(ctx, c.cacheOutside(pol))
	if p == nil {
		return Confined{}, &UnavailableError{Mode: pol.Mode, Cause: probeErrors(results)}
	}
	conf, err := p.Confine(argv, pol)
	if err != nil {
		// The verdict may be stale (a cached "landlock" whose kernel support went away
		// in a way the key cannot see): the next call probes again.
		c.DropCache()
		return Confined{}, &UnavailableError{Mode: pol.Mode, Cause: err}
	}
	return conf, nil
}

// ForgetIfWritable drops the cached verdict when the cache lies inside a writable root
// of pol: call it after a run under pol, whose command could have written it. The
// error says the cache could not be removed. A read-only run writes nothing, and
// costs nothing here.
func (c *Chain) ForgetIfWritable(pol policy.Execution) error {
	if pol.Mode != policy.WorkspaceWrite {
		return nil
	}
	if c.cache != nil && c.cache.Path != "" && !c.cacheOutside(pol) {
		return c.cache.Drop()
	}
	return nil
}

// cacheOutside reports whether the cache lies outside every writable root of pol: a
// cache the confined command could write is neither trusted nor refreshed by its run.
func (c *Chain) cacheOutside(pol policy.Execution) bool {
	if c.cache == nil || c.cache.Path == "" {
		return false
	}
	for _, r := range pol.WritableRoots {
		if canon.Within(c.cache.Path, r) {
			return false
		}
	}
	return true
}

func probeErrors(results []ProbeResult) error {
	if len(results) == 0 {
		return errors.New("no sandbox backend on this platform")
	}
	var errs []error
	for _, r := range results {
		if r.Err == nil {
			// Only a damaged or planted cache says so: no candidate passed, none failed.
			errs = append(errs, fmt.Errorf("%s probe: no failure recorded", r.Backend))
			continue
		}
		errs = append(errs, fmt.Errorf("%s probe: %w", r.Backend, r.Err))
	}
	return errors.Join(errs...)
}
