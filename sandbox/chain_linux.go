package sandbox

// platformProviders is SPEC §4.1's Linux chain: bwrap, then Landlock.
func platformProviders(opts Options) []Provider {
	var guarded []string
	if opts.Cache != nil && opts.Cache.Path != "" {
		guarded = append(guarded, opts.Cache.Path)
	}
	return []Provider{newBwrapProvider(opts.BwrapPath, guarded), newLandlockProvider(opts.Self)}
}
