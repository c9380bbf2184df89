package protocol

import (
	"encoding/binary"
	"fmt"
)

// MaxDepth bounds nesting in requests and policies.
const MaxDepth = 64

// Scan checks that b is exactly one well-formed msgpack value whose declared
// lengths fit in the input and whose nesting stays under MaxDepth, before any
// decoder allocates for it (a 5-byte input may claim a map of 4 billion entries).
func Scan(b []byte) error {
	pending := []int{1} // values still expected at each open level
	i := 0
	for len(pending) > 0 {
		if pending[len(pending)-1] == 0 {
			pending = pending[:len(pending)-1]
			continue
		}
		pending[len(pending)-1]--
		if i >= len(b) {
			return fmt.Errorf("truncated at byte %d", i)
		}
		c := b[i]
		i++
		var skip, items int
		need := func(n int) (uint64, error) {
			if i+n > len(b) {
				return 0, fmt.Errorf("truncated header at byte %d", i)
			}
			var v uint64
			switch n {
			case 1:
				v = uint64(b[i])
			case 2:
				v = uint64(binary.BigEndian.Uint16(b[i:]))
			case 4:
				v = uint64(binary.BigEndian.Uint32(b[i:]))
			}
			i += n
			return v, nil
		}
		var err error
		var n uint64
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			items = 2 * int(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			items = int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = int(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			n, err = need(1)
			skip = int(n)
		case c == 0xc5 || c == 0xda:
			n, err = need(2)
			skip = int(n)
		case c == 0xc6 || c == 0xdb:
			n, err = need(4)
			skip = int(n)
		case c == 0xcc || c == 0xd0:
			skip = 1
		case c == 0xcd || c == 0xd1:
			skip = 2
		case c == 0xca || c == 0xce || c == 0xd2:
			skip = 4
		case c == 0xcb || c == 0xcf || c == 0xd3:
			skip = 8
		case c == 0xdc:
			n, err = need(2)
			items = int(n)
		case c == 0xdd:
			n, err = need(4)
			items = int(n)
		case c == 0xde:
			n, err = need(2)
			items = 2 * int(n)
		case c == 0xdf:
			n, err = need(4)
			items = 2 * int(n)
		case c == 0xd4:
			skip = 2
		case c == 0xd5:
			skip = 3
		case c == 0xd6:
			skip = 5
		case c == 0xd7:
			skip = 9
		case c == 0xd8:
			skip = 17
		case c == 0xc7:
			n, err = need(1)
			skip = int(n) + 1
		case c == 0xc8:
			n, err = need(2)
			skip = int(n) + 1
		case c == 0xc9:
			n, err = need(4)
			skip = int(n) + 1
		default:
			return fmt.Errorf("invalid byte 0x%02x at %d", c, i-1)
		}
		if err != nil {
			return err
		}
		if skip > len(b)-i {
			return fmt.Errorf("a %d-byte value at byte %d overruns the input", skip, i)
		}
		i += skip
		if items > 0 {
			if items > len(b)-i { // every element takes at least one byte
				return fmt.Errorf("a container of %d elements at byte %d overruns the input", items, i)
			}
			if len(pending) >= MaxDepth {
				return fmt.Errorf("nested deeper than %d levels", MaxDepth)
			}
			pending = append(pending, items)
		}
	}
	if i != len(b) {
		return fmt.Errorf("trailing bytes after the msgpack map")
	}
	return nil
}
