//go:build !linux

package sandbox

import "errors"

// standIns exist on Linux only, where the bwrap rung is.
type standIns struct{}

func (p *standInPlan) prepare(func() bool) (*standIns, error) {
	return nil, errors.New("stand-ins for missing protected paths are implemented on Linux only")
}

func (s *standIns) release() {}

func (s *standIns) restoreHeads() []string { return nil }
