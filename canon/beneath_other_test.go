//go:build !linux

package canon

import "testing"

type beneathImpl struct {
	name string
	open openFunc
}

// beneathImpls: off Linux the walk is the only implementation.
func beneathImpls(t *testing.T) []beneathImpl {
	return []beneathImpl{{"walk", openWalk}}
}

var platformBeneathCases []beneathCase
