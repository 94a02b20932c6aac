package sandbox

import (
	"path"
	"strings"

	"github.com/toh-sandbox/toh/policy"
)

// SeatbeltProfile translates an execution policy into the SBPL profile of SPEC §4.2.
// It is pure text, so it builds and is tested on every platform.
//
// The read-only profile is exactly
//
//	(version 1) (allow default) (deny file-write*) (allow file-write* (literal "/dev/null"))
//
// and workspace-write appends, in this order:
//
//   - ` (allow file-write* (subpath "<root>") ...)`: one form holding one subpath per
//     writable root, in pol.WritableRoots order;
//   - ` (deny file-write* (subpath "<root>/<p>"))` for every writable root and every
//     pol.Protect entry p, then ` (deny file-write* (literal "<policy file>"))` and the
//     same for "<policy file>.lock" when pol.PolicyFile is set. They come after the
//     allow because in SBPL the last matching rule wins. Unlike bwrap's rebinds they
//     need no existing file: Seatbelt matches path strings, so they also stop creation.
//
// Network deny appends ` (deny network*)` in every mode (SPEC §7).
//
// Seatbelt matches the kernel's resolved paths, so the roots must be canonical as macOS
// spells them: /tmp is /private/tmp there, and a root spelled "/tmp" would match
// nothing. policy.Execution's roots are canonical on the host that resolved them.
//
// Any mode other than workspace-write gets the read-only profile (danger-full-access
// never reaches a provider). A workspace-write policy without writable roots also gets
// no allow form: "(allow file-write*)" with no filter would allow every write.
func SeatbeltProfile(pol policy.Execution) string {
	var b strings.Builder
	b.WriteString(`(version 1) (allow default) (deny file-write*) (allow file-write* (literal "/dev/null"))`)

	if pol.Mode == policy.WorkspaceWrite && len(pol.WritableRoots) > 0 {
		b.WriteString(" (allow file-write*")
		for _, r := range pol.WritableRoots {
			b.WriteString(" (subpath " + seatbeltQuote(r) + ")")
		}
		b.WriteString(")")

		for _, r := range pol.WritableRoots {
			for _, p := range pol.Protect {
				// path.Join cleans: SBPL compares strings, so "/ws/./.git" would match
				// nothing. A p that escapes the root only widens the denial.
				b.WriteString(" (deny file-write* (subpath " + seatbeltQuote(path.Join(r, p)) + "))")
			}
		}
		if pol.PolicyFile != "" {
			for _, f := range []string{pol.PolicyFile, pol.PolicyFile + ".lock"} {
				b.WriteString(" (deny file-write* (literal " + seatbeltQuote(f) + "))")
			}
		}
	}

	if pol.Network == policy.NetworkDeny {
		b.WriteString(" (deny network*)")
	}
	return b.String()
}

// SeatbeltArgv returns sandbox-exec's arguments for running argv under pol:
// "-p", the profile, "--", argv. The caller prepends the sandbox-exec path it resolved.
// The profile is one argv element, so no shell quoting is involved.
func SeatbeltArgv(pol policy.Execution, argv []string) []string {
	out := make([]string, 0, 3+len(argv))
	out = append(out, "-p", SeatbeltProfile(pol), "--")
	return append(out, argv...)
}

// seatbeltQuote returns s as an SBPL string literal. Only `\` and `"` are special
// inside one; with every `\` doubled, no other escape sequence can be formed, and with
// every `"` escaped, a root cannot close the string and inject rules.
func seatbeltQuote(s string) string {
	return `"` + seatbeltEscaper.Replace(s) + `"`
}

var seatbeltEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)
