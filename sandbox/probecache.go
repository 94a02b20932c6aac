package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// ProbeCache stores the runner chain's verdict across toh-exec invocations so that the
// hot path runs no probe (SPEC §4.1).
//
// # Key
//
// A verdict is valid only for the exact state it was measured on: the kernel release
// and version, the effective uid, the sysctls that decide whether unprivileged user
// namespaces work, the identity (dev, ino, size, mtime, ctime) of every runner binary
// in the chain and of the toh-exec binary itself. Any difference is a miss.
//
// # Threat model
//
// The cache must live where confined commands cannot write: the caller picks a path
// outside the usual workspaces (/var/cache/toh for root, /run/user/<uid>/toh else),
// [Chain.Confine] ignores (neither reads nor writes) a cache that lies inside one of
// the run's writable roots, and the bwrap rung rebinds an existing cache file
// read-only like the policy file. Were it poisoned anyway, a verdict only ever chooses
// among providers that confine, or says "unavailable": it can deny service or pick
// Landlock over bwrap (which then reports its own enforcement honestly), never run a
// command unconfined. A runner failure at run time drops the cache.
type ProbeCache struct {
	Path string
}

type cacheFile struct {
	Version int          `json:"version"`
	Key     string       `json:"key"`
	Backend Backend      `json:"backend"` // "" means no candidate passed
	Probes  []cacheProbe `json:"probes"`
}

type cacheProbe struct {
	Backend Backend `json:"backend"`
	Error   string  `json:"error,omitempty"`
}

// load returns the cached verdict for key, ok=false on any miss or damage.
func (c *ProbeCache) load(key string) (cacheFile, bool) {
	if c == nil || c.Path == "" {
		return cacheFile{}, false
	}
	b, err := os.ReadFile(c.Path)
	if err != nil {
		return cacheFile{}, false
	}
	var f cacheFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if dec.Decode(&f) != nil || f.Version != 1 || f.Key != key {
		return cacheFile{}, false
	}
	return f, true
}

// store writes the verdict atomically. Failing to store is not an error of the run:
// the next invocation probes again.
func (c *ProbeCache) store(f cacheFile) error {
	if c == nil || c.Path == "" {
		return nil
	}
	dir := filepath.Dir(c.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating probe cache dir: %w", err)
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".probe-cache-*")
	if err != nil {
		return fmt.Errorf("writing probe cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("writing probe cache: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing probe cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), c.Path)
}

// Drop removes the cache so that the next invocation probes again.
func (c *ProbeCache) Drop() {
	if c != nil && c.Path != "" {
		os.Remove(c.Path)
	}
}
