package sandbox

import (
	"testing"

	"github.com/toh-sandbox/toh/internal/posixacl"
)

// An ACL counts as widened when it lets someone write whom it did not before:
// narrowing its mask (what chmod does to a directory with an ACL) is kept.
func TestACLWidened(t *testing.T) {
	all := ^uint32(0)
	acl := func(userPerm, mask, other uint16) []byte {
		return posixacl.Encode(posixacl.Entry{Tag: posixacl.UserObj, Perm: 7, ID: all}, posixacl.Entry{Tag: posixacl.User, Perm: userPerm, ID: 1001},
			posixacl.Entry{Tag: posixacl.GroupObj, Perm: 5, ID: all}, posixacl.Entry{Tag: posixacl.Mask, Perm: mask, ID: all},
			posixacl.Entry{Tag: posixacl.Other, Perm: other, ID: all})
	}
	for _, tc := range []struct {
		name        string
		before, now []byte
		want        bool
	}{
		{"added", nil, acl(7, 7, 5), true},
		{"removed", acl(7, 7, 5), nil, false},
		{"unchanged", acl(7, 7, 5), acl(7, 7, 5), false},
		{"mask narrowed", acl(7, 7, 5), acl(7, 5, 5), false},
		{"mask widened", acl(7, 5, 5), acl(7, 7, 5), true},
		{"named user given write", acl(5, 7, 5), acl(7, 7, 5), true},
		{"others given write", acl(7, 7, 5), acl(7, 7, 7), true},
		{"no ACL now", acl(7, 7, 5), []byte{1, 2, 3}, true},
	} {
		if got := aclWidened(tc.before, tc.now); got != tc.want {
			t.Errorf("%s: aclWidened = %v, want %v", tc.name, got, tc.want)
		}
	}
}
