package fsview

import (
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func modes(pl *Plan) map[string]string {
	m := map[string]string{}
	for _, x := range pl.Mounts {
		m[x.Path] = x.Mode
	}
	return m
}

func TestBuild(t *testing.T) {
	for _, c := range []struct {
		name   string
		spec   Spec
		modes  map[string]string
		proc   bool
		rootRW bool
	}{
		{"read-only everywhere, /proc hidden", Spec{Readable: []string{"/usr"}},
			map[string]string{"/proc": "hidden"}, false, false},
		{"a writable tree, a readable one inside it, a device",
			Spec{Readable: []string{"/usr", "/tmp/w/ro"}, Writable: []string{"/tmp/w"}, Devices: []string{"/dev/null"}},
			map[string]string{"/tmp/w": "rw", "/tmp/w/ro": "ro", "/dev/null": "dev", "/proc": "hidden"}, false, false},
		{"/proc granted: each run's own", Spec{Readable: []string{"/usr", "/proc"}},
			map[string]string{"/proc": "own"}, true, false},
		{"/ readable: /proc is the run's own", Spec{Readable: []string{"/"}},
			map[string]string{"/proc": "own"}, true, false},
		{"/ writable: /proc and /sys read-only again", Spec{Writable: []string{"/"}},
			map[string]string{"/": "rw", "/sys": "ro", "/proc": "own"}, true, true},
	} {
		pl, err := Build(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := modes(pl); !reflect.DeepEqual(got, c.modes) {
			t.Errorf("%s: mounts %v, want %v", c.name, got, c.modes)
		}
		if pl.ProcOwn != c.proc {
			t.Errorf("%s: ProcOwn %v", c.name, pl.ProcOwn)
		}
		// the order that makes it hold: private first, writable copies taken before
		// everything is sealed, every copy attached after
		if pl.Ops[0].Kind != Private {
			t.Errorf("%s: first op %+v", c.name, pl.Ops[0])
		}
		sealAt := -1
		for i, op := range pl.Ops {
			if op.Kind == SetAttr && op.Path == "/" && op.Slot < 0 {
				sealAt = i
				wantSet := uint64(sealed)
				if c.rootRW {
					wantSet = rwTree
				}
				if op.Set != wantSet || op.Clr != 0 || !op.Recursive {
					t.Errorf("%s: the seal of / is %+v", c.name, op)
				}
			}
		}
		for i, op := range pl.Ops {
			if op.Kind == Move && i < sealAt {
				t.Errorf("%s: %s attached before the seal", c.name, op.Path)
			}
			if op.Clr&unix.MOUNT_ATTR_RDONLY != 0 {
				t.Errorf("%s: op %+v clears read-only (a flag the host may have locked)", c.name, op)
			}
		}
		for _, w := range c.spec.Writable {
			if w == "/" {
				continue
			}
			clone := -1
			for i, op := range pl.Ops {
				if op.Kind == Clone && op.Path == w {
					clone = i
				}
			}
			if clone < 0 || clone > sealAt {
				t.Errorf("%s: writable %s copied at %d, sealed at %d (must be copied before)", c.name, w, clone, sealAt)
			}
		}
	}
}

func TestPathsInsideProcAreRefused(t *testing.T) {
	if _, err := Build(Spec{Readable: []string{"/usr", "/proc/cpuinfo"}}); err == nil || !strings.Contains(err.Error(), "grant /proc") {
		t.Fatalf("a path inside /proc: %v", err)
	}
}

func TestTooManyCopies(t *testing.T) {
	var w []string
	for i := 0; i <= MaxSlots; i++ {
		w = append(w, "/tmp/w"+strings.Repeat("x", i))
	}
	if _, err := Build(Spec{Writable: w}); err == nil {
		t.Fatal("more writable trees than slots were planned")
	}
}
