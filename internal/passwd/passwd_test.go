package passwd

import "testing"

func TestParse(t *testing.T) {
	const data = "root:x:0:0:root:/root:/bin/sh\n" +
		"broken:x:1000\n" +
		"alice:x:1000:1000:Alice A:/home/alice:/bin/bash\n" +
		"alias:x:1000:1000::/home/alias:/bin/sh\n" +
		"bob:x:10000:1000::/home/bob:/bin/sh"
	for _, tc := range []struct {
		uid  int
		want Entry
		ok   bool
	}{
		{0, Entry{"root", "/root"}, true},
		{1000, Entry{"alice", "/home/alice"}, true}, // the first complete line
		{10000, Entry{"bob", "/home/bob"}, true},    // no trailing newline
		{100, Entry{}, false},                       // not a prefix match of 1000
	} {
		if got, ok := parse(data, tc.uid); got != tc.want || ok != tc.ok {
			t.Errorf("uid %d: %+v %v, want %+v %v", tc.uid, got, ok, tc.want, tc.ok)
		}
	}
}
