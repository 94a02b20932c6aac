package textsafe

import "testing"

func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, é and 漢字":         "plain text, é and 漢字",
		"\x1b]0;TITLE\x07\x1b[2Jafter": `\x1b]0;TITLE\a\x1b[2Jafter`,
		"two\nlines":                   `two\nlines`,
		"bad \xff byte":                `bad \xff byte`,
		"bidi \u202e override":         `bidi \u202e override`,
	} {
		if got := Visible(in); got != want {
			t.Errorf("Visible(%q) = %q, want %q", in, got, want)
		}
	}
}
