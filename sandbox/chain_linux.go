package sandbox

// platformProviders is SPEC §4.1's Linux chain: bwrap, then Landlock.
func platformProviders(opts Options) []Provider {
	return []Provider{newBwrapProvider(opts.BwrapPath), newLandlockProvider(opts.Self)}
}
