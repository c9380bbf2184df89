package rawmsg

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func pack(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCheck(t *testing.T) {
	deep := append(bytes.Repeat([]byte{0x91}, 200), 0xc0)
	cases := []struct {
		name string
		b    []byte
		want string // "" ok, else part of the error
	}{
		{"map", pack(t, map[string]any{"a": []any{1, "x", nil, true, 2.5, []byte("b")}}), ""},
		{"non-string keys", []byte{0x83, 0x01, 0xa1, 'a', 0xc0, 0x03, 0xc4, 0x01, 'k', 0x05}, ""},
		{"deep", deep, "nested deeper"},
		{"garbage", []byte{0xc1}, "not a msgpack type"},
		{"trailing", append(pack(t, map[string]any{"a": 1}), 0), "bytes after"},
		{"bad utf8", []byte{0x81, 0xa2, 'o', 'p', 0xa2, 0xff, 0xfe}, "UTF-8"},
		{"ext", []byte{0xd4, 0x01, 0x00}, "extension"},
		{"array key", []byte{0x81, 0x91, 0x01, 0x02}, "map key"},
		{"truncated str", []byte{0xa5, 'a'}, "longer than the input"},
		{"huge array", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, "longer than the input"},
		{"empty", nil, "truncated"},
		{"truncated header", []byte{0xcd, 0x01}, "truncated"},
	}
	for _, c := range cases {
		err := Check(c.b, 64)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

func TestValues(t *testing.T) {
	b := pack(t, map[string]any{"s": "str", "i": -5, "u": uint64(1 << 40), "big": uint64(math.MaxUint64), "f": 1.5,
		"t": true, "n": nil, "l": []any{1, "2"}, "bin": []byte{1, 2}})
	m, ok := Value(b).Fields()
	if !ok {
		t.Fatal("fields")
	}
	if s, _ := m["s"].Str(); s != "str" {
		t.Error("str")
	}
	if i, _ := m["i"].Int(); i != -5 {
		t.Error("int")
	}
	if u, _ := m["u"].Int(); u != 1<<40 {
		t.Error("uint")
	}
	if _, ok := m["big"].Int(); ok {
		t.Error("uint64 beyond int64 read as an int")
	}
	if f, _ := m["f"].Number(); f != 1.5 {
		t.Error("float")
	}
	if f, _ := m["i"].Number(); f != -5 {
		t.Error("int as a number")
	}
	if v, ok := m["t"].Bool(); !ok || !v {
		t.Error("bool")
	}
	if _, ok := m["t"].Int(); ok {
		t.Error("a bool read as an int")
	}
	if !m["n"].IsNil() || !m["absent"].IsNil() {
		t.Error("nil")
	}
	items, ok := m["l"].Items()
	if !ok || len(items) != 2 || m["l"].Len() != 2 {
		t.Fatal("items")
	}
	if s, _ := items[1].Str(); s != "2" {
		t.Error("item")
	}
	if bb, _ := m["bin"].Bin(); !bytes.Equal(bb, []byte{1, 2}) {
		t.Error("bin")
	}
	if _, ok := Value([]byte{0x81, 0x01, 0x02}).Fields(); ok {
		t.Error("Fields accepted an int key")
	}
	if _, ok := Value([]byte{0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02}).Fields(); ok {
		t.Error("Fields accepted a repeated key")
	}
}

func TestPeek(t *testing.T) {
	if op := Peek(pack(t, map[string]any{"argv": []any{"x"}, "op": "coop_exec"}), "op"); op != "coop_exec" {
		t.Errorf("peek: %q", op)
	}
	for _, b := range [][]byte{nil, {0xc1}, pack(t, []any{"op"}), pack(t, map[string]any{"op": 1}), {0x81, 0xa2, 'o', 'p'}} {
		if op := Peek(b, "op"); op != "" {
			t.Errorf("peek %x: %q", b, op)
		}
	}
}
