package posixacl

import (
	"bytes"
	"testing"
)

// FuzzParse: any bytes parse or are refused without a panic, and what parses
// encodes back to the same bytes.
func FuzzParse(f *testing.F) {
	f.Add(Encode(Entry{UserObj, 7, ^uint32(0)}, Entry{GroupObj, 5, ^uint32(0)}, Entry{Other, 5, ^uint32(0)}))
	f.Add([]byte{2, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		acl, ok := Parse(b)
		if !ok {
			return
		}
		if got := Encode(acl...); !bytes.Equal(got, b) {
			t.Fatalf("Parse(%x) = %v, which encodes as %x", b, acl, got)
		}
	})
}

func TestParseRefuses(t *testing.T) {
	for _, b := range [][]byte{nil, {2, 0, 0, 0}, {1, 0, 0, 0, 1, 0, 7, 0, 0, 0, 0, 0}, Encode(Entry{UserObj, 7, 0})[:11]} {
		if acl, ok := Parse(b); ok {
			t.Errorf("Parse(%x) = %v, want refused", b, acl)
		}
	}
}
