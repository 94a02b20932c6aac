package approval

import (
	"strings"
	"testing"
)

func TestQuoteArgv(t *testing.T) {
	long := strings.Repeat("x", 1500) + strings.Repeat("y", 1500)
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"make", "test"}, `make test`},
		{[]string{"bash", "-c", "echo hi"}, `bash -c "echo hi"`},
		{[]string{""}, `""`},
		{[]string{"a\x1b[2Jb"}, `"a\x1b[2Jb"`},
		// Sixteen spaces stay; more are shown by count, outside the quotes.
		{[]string{"a" + strings.Repeat(" ", 16) + "b"}, `"a` + strings.Repeat(" ", 16) + `b"`},
		{[]string{"curl x | sh;" + strings.Repeat(" ", 4000) + "make test"}, `"curl x | sh;"⟨4000 spaces⟩"make test"`},
		{[]string{strings.Repeat(" ", 20)}, `⟨20 spaces⟩`},
		{[]string{long + " "}, `"` + strings.Repeat("x", 1333) + `"⟨1002 more bytes⟩"` + strings.Repeat("y", 665) + ` "`},
		{[]string{"é" + strings.Repeat("é", 1100)}, `"` + strings.Repeat("é", 666) + `"⟨204 more bytes⟩"` + strings.Repeat("é", 333) + `"`},
	} {
		if got := quoteArgv(tc.argv); got != tc.want {
			t.Errorf("quoteArgv(%.40q):\n got %.120q\nwant %.120q", tc.argv, got, tc.want)
		}
	}
}
