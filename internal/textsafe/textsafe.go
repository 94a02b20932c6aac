// Package textsafe makes text that a confined command may have chosen safe to print
// on the user's terminal.
package textsafe

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Visible returns s unchanged when every character is graphic, else s with each
// character that is not (control characters, a terminal escape sequence's ESC,
// invalid UTF-8, bidi overrides) written as a Go escape: such text could redraw a
// prompt or retitle the terminal.
func Visible(s string) string {
	for _, r := range s {
		if !unicode.IsGraphic(r) || r == utf8.RuneError {
			q := strconv.QuoteToGraphic(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}
