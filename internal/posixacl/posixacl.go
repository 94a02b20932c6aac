// Package posixacl reads and writes the extended-attribute form of a POSIX ACL
// (system.posix_acl_access, system.posix_acl_default; linux/posix_acl_xattr.h): a
// little-endian header with the version, then one 8-byte entry per tag. The fence
// decides searches by it (fusefence), and toh-exec puts back ACLs a bwrap run
// widened (sandbox); neither links the other.
package posixacl

import "encoding/binary"

// Entry tags.
const (
	UserObj  = 0x01
	User     = 0x02
	GroupObj = 0x04
	Group    = 0x08
	Mask     = 0x10
	Other    = 0x20
)

// Permission bits of an entry.
const (
	Read  = 4
	Write = 2
	Exec  = 1
)

const (
	version  = 2
	entryLen = 8
)

// Entry is one entry of an ACL. ID is a user or group ID for User and Group
// entries, and is not used by the others.
type Entry struct {
	Tag, Perm uint16
	ID        uint32
}

// Parse decodes the xattr form of an ACL; false when b is not one (wrong version,
// a torn entry, no entry at all).
func Parse(b []byte) ([]Entry, bool) {
	if len(b) < 4 || binary.LittleEndian.Uint32(b) != version || (len(b)-4)%entryLen != 0 {
		return nil, false
	}
	var acl []Entry
	for b = b[4:]; len(b) > 0; b = b[entryLen:] {
		acl = append(acl, Entry{
			Tag:  binary.LittleEndian.Uint16(b),
			Perm: binary.LittleEndian.Uint16(b[2:]),
			ID:   binary.LittleEndian.Uint32(b[4:]),
		})
	}
	if len(acl) == 0 {
		return nil, false
	}
	return acl, true
}

// Encode is the xattr form of acl.
func Encode(acl ...Entry) []byte {
	b := binary.LittleEndian.AppendUint32(nil, version)
	for _, e := range acl {
		b = binary.LittleEndian.AppendUint16(b, e.Tag)
		b = binary.LittleEndian.AppendUint16(b, e.Perm)
		b = binary.LittleEndian.AppendUint32(b, e.ID)
	}
	return b
}

// Size is the length of the xattr form of an ACL of n entries.
func Size(n int) int { return 4 + n*entryLen }
