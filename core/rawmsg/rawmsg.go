// Package rawmsg reads msgpack without decoding it into Go values: Check proves that
// bytes hold exactly one well-formed value (declared lengths within the input,
// nesting bounded, every string valid UTF-8, map keys scalar, no extension types),
// and Value reads scalars and splits arrays and maps while their elements stay raw
// bytes, to be forwarded unchanged. The engine handles this way what an untrusted
// program sends (a cooperative worker, a fork template: a frame that fails Check
// ends that program) and request values it only passes on (namespaces, host
// functions' arguments and results), which may use keys Go maps cannot hold.
package rawmsg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// Kind is the msgpack family of a value.
type Kind int

// The kinds of value.
const (
	Invalid Kind = iota
	Nil
	Bool
	Int
	Float
	Str
	Bin
	Array
	Map
	Ext
)

var kindNames = [...]string{"invalid", "nil", "bool", "int", "float", "str", "bin", "array", "map", "ext"}

func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "invalid"
	}
	return kindNames[k]
}

// Value is one msgpack value, as its bytes. Its methods assume the bytes passed
// Check (Split and Fields only return such values).
type Value []byte

// head reads the header at b[0]: the kind, the header's length, the payload's
// length (str, bin, ext: bytes; array: items; map: pairs).
func head(b []byte) (k Kind, hlen int, n uint64, err error) {
	if len(b) == 0 {
		return Invalid, 0, 0, errors.New("truncated")
	}
	c := b[0]
	be := func(size int) (uint64, error) {
		if len(b) < 1+size {
			return 0, errors.New("truncated header")
		}
		switch size {
		case 1:
			return uint64(b[1]), nil
		case 2:
			return uint64(binary.BigEndian.Uint16(b[1:])), nil
		case 4:
			return uint64(binary.BigEndian.Uint32(b[1:])), nil
		}
		return binary.BigEndian.Uint64(b[1:]), nil
	}
	switch {
	case c <= 0x7f, c >= 0xe0:
		return Int, 1, 0, nil
	case c <= 0x8f:
		return Map, 1, uint64(c & 0x0f), nil
	case c <= 0x9f:
		return Array, 1, uint64(c & 0x0f), nil
	case c <= 0xbf:
		return Str, 1, uint64(c & 0x1f), nil
	}
	switch c {
	case 0xc0:
		return Nil, 1, 0, nil
	case 0xc2, 0xc3:
		return Bool, 1, 0, nil
	case 0xc4, 0xc5, 0xc6:
		size := 1 << (c - 0xc4)
		n, err = be(size)
		return Bin, 1 + size, n, err
	case 0xc7, 0xc8, 0xc9: // ext 8/16/32: length, type byte
		size := 1 << (c - 0xc7)
		n, err = be(size)
		return Ext, 2 + size, n, err
	case 0xca:
		return Float, 5, 0, nil
	case 0xcb:
		return Float, 9, 0, nil
	case 0xcc, 0xd0:
		return Int, 2, 0, nil
	case 0xcd, 0xd1:
		return Int, 3, 0, nil
	case 0xce, 0xd2:
		return Int, 5, 0, nil
	case 0xcf, 0xd3:
		return Int, 9, 0, nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1..16
		return Ext, 2, uint64(1) << (c - 0xd4), nil
	case 0xd9, 0xda, 0xdb:
		size := 1 << (c - 0xd9)
		n, err = be(size)
		return Str, 1 + size, n, err
	case 0xdc, 0xdd:
		size := 2 << (c - 0xdc)
		n, err = be(size)
		return Array, 1 + size, n, err
	case 0xde, 0xdf:
		size := 2 << (c - 0xde)
		n, err = be(size)
		return Map, 1 + size, n, err
	}
	return Invalid, 0, 0, fmt.Errorf("byte 0x%02x is not a msgpack type", c)
}

// skip returns the length of the value at the start of b, checking it all.
func skip(b []byte, depth, maxDepth int) (int, error) {
	k, hl, n, err := head(b)
	if err != nil {
		return 0, err
	}
	if hl > len(b) {
		return 0, errors.New("truncated header")
	}
	switch k {
	case Str, Bin:
		if n > uint64(len(b)-hl) {
			return 0, fmt.Errorf("a %s of %d bytes is longer than the input", k, n)
		}
		end := hl + int(n)
		if k == Str && !utf8.Valid(b[hl:end]) {
			return 0, errors.New("a string is not valid UTF-8")
		}
		return end, nil
	case Ext:
		return 0, errors.New("msgpack extension types are not accepted")
	case Array, Map:
		if depth >= maxDepth {
			return 0, fmt.Errorf("nested deeper than %d", maxDepth)
		}
		items := n
		if k == Map {
			items = 2 * n
		}
		// every item takes at least one byte: a short input cannot claim billions
		if items > uint64(len(b)-hl) {
			return 0, fmt.Errorf("an %s of %d items is longer than the input", k, n)
		}
		i := hl
		for j := uint64(0); j < items; j++ {
			if k == Map && j%2 == 0 {
				if kk, _, _, _ := head(b[i:]); kk == Array || kk == Map {
					return 0, errors.New("a map key is an array or a map")
				}
			}
			m, err := skip(b[i:], depth+1, maxDepth)
			if err != nil {
				return 0, err
			}
			i += m
		}
		return i, nil
	}
	return hl, nil
}

// Check verifies that b is exactly one value nested at most maxDepth deep.
func Check(b []byte, maxDepth int) error {
	n, err := skip(b, 0, maxDepth)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("%d bytes after the value", len(b)-n)
	}
	return nil
}

// Kind is v's kind.
func (v Value) Kind() Kind {
	k, _, _, _ := head(v)
	return k
}

// IsNil is true for msgpack nil (and for an absent value).
func (v Value) IsNil() bool { return len(v) == 0 || v[0] == 0xc0 }

// Str is v's string.
func (v Value) Str() (string, bool) {
	k, hl, n, err := head(v)
	if err != nil || k != Str || uint64(len(v)) < uint64(hl)+n {
		return "", false
	}
	return string(v[hl : hl+int(n)]), true
}

// Bin is v's bytes (a bin).
func (v Value) Bin() ([]byte, bool) {
	k, hl, n, err := head(v)
	if err != nil || k != Bin || uint64(len(v)) < uint64(hl)+n {
		return nil, false
	}
	return v[hl : hl+int(n)], true
}

// Bool is v's boolean.
func (v Value) Bool() (bool, bool) {
	if len(v) == 1 && (v[0] == 0xc2 || v[0] == 0xc3) {
		return v[0] == 0xc3, true
	}
	return false, false
}

// Int is v's integer (false for a uint64 beyond int64's range).
func (v Value) Int() (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	c := v[0]
	switch {
	case c <= 0x7f:
		return int64(c), true
	case c >= 0xe0:
		return int64(int8(c)), true
	}
	k, hl, _, err := head(v)
	if err != nil || k != Int || len(v) < hl {
		return 0, false
	}
	p := v[1:hl]
	switch c {
	case 0xcc:
		return int64(p[0]), true
	case 0xcd:
		return int64(binary.BigEndian.Uint16(p)), true
	case 0xce:
		return int64(binary.BigEndian.Uint32(p)), true
	case 0xcf:
		u := binary.BigEndian.Uint64(p)
		if u > math.MaxInt64 {
			return 0, false
		}
		return int64(u), true
	case 0xd0:
		return int64(int8(p[0])), true
	case 0xd1:
		return int64(int16(binary.BigEndian.Uint16(p))), true
	case 0xd2:
		return int64(int32(binary.BigEndian.Uint32(p))), true
	case 0xd3:
		return int64(binary.BigEndian.Uint64(p)), true
	}
	return 0, false
}

// Number is v as a float (an int or a float).
func (v Value) Number() (float64, bool) {
	if i, ok := v.Int(); ok {
		return float64(i), true
	}
	if len(v) == 5 && v[0] == 0xca {
		return float64(math.Float32frombits(binary.BigEndian.Uint32(v[1:]))), true
	}
	if len(v) == 9 && v[0] == 0xcb {
		return math.Float64frombits(binary.BigEndian.Uint64(v[1:])), true
	}
	return 0, false
}

// Items splits an array into its elements.
func (v Value) Items() ([]Value, bool) {
	k, hl, n, err := head(v)
	if err != nil || k != Array {
		return nil, false
	}
	out := make([]Value, 0, min(n, 1024))
	i := hl
	for j := uint64(0); j < n; j++ {
		m, err := skip(v[i:], 0, math.MaxInt)
		if err != nil {
			return nil, false
		}
		out = append(out, v[i:i+m])
		i += m
	}
	return out, true
}

// Fields splits a map whose keys are all strings (false otherwise, or when a key
// repeats).
func (v Value) Fields() (map[string]Value, bool) {
	k, hl, n, err := head(v)
	if err != nil || k != Map {
		return nil, false
	}
	out := make(map[string]Value, min(n, 64))
	i := hl
	for j := uint64(0); j < n; j++ {
		m, err := skip(v[i:], 0, math.MaxInt)
		if err != nil {
			return nil, false
		}
		key, ok := Value(v[i : i+m]).Str()
		if !ok {
			return nil, false
		}
		i += m
		if m, err = skip(v[i:], 0, math.MaxInt); err != nil {
			return nil, false
		}
		if _, dup := out[key]; dup {
			return nil, false
		}
		out[key] = v[i : i+m]
		i += m
	}
	return out, true
}

// Len is the number of elements of an array or pairs of a map (0 for others).
func (v Value) Len() int {
	k, _, n, err := head(v)
	if err != nil || (k != Array && k != Map) {
		return 0
	}
	return int(n)
}

// Peek returns the string value of key in the map b, or "" when b is not a
// well-formed map or has no such string entry. It reads only the top level (for
// dispatching a request before decoding it).
func Peek(b []byte, key string) string {
	k, hl, n, err := head(b)
	if err != nil || k != Map || hl > len(b) {
		return ""
	}
	i := hl
	for j := uint64(0); j < n; j++ {
		km, err := skip(b[i:], 0, 1024)
		if err != nil {
			return ""
		}
		ks, isStr := Value(b[i : i+km]).Str()
		i += km
		vm, err := skip(b[i:], 0, 1024)
		if err != nil {
			return ""
		}
		if isStr && ks == key {
			s, _ := Value(b[i : i+vm]).Str()
			return s
		}
		i += vm
	}
	return ""
}
