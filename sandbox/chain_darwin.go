package sandbox

// platformProviders is SPEC §4.1's macOS chain: Seatbelt alone.
func platformProviders(opts Options) []Provider {
	return []Provider{newSeatbeltProvider()}
}
