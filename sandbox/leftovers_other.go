//go:build !linux

package sandbox

// Without a child subreaper (macOS has none) a command's leftover processes live on
// after the run, as they did everywhere before; see leftovers_linux.go.
func becomeSubreaper() error                { return nil }
func ownChildren() (map[int]bool, error)    { return nil, nil }
func endLeftovers(keep map[int]bool) error  { return nil }
func killLeftovers(keep map[int]bool) error { return nil }
