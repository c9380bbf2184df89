package policy

import (
	"reflect"
	"testing"
)

// gpu_devices: "all" (alone or in a list), or indices and ranges; num_cpus a
// positive count; no_supervisor a boolean.
func TestPlacementFields(t *testing.T) {
	for _, c := range []struct {
		v    any
		want *GPUs
	}{
		{"all", &GPUs{All: true}},
		{[]any{"all"}, &GPUs{All: true}},
		{[]any{int64(2), "0-1", int64(1)}, &GPUs{Indices: []int{0, 1, 2}}},
		{"3", &GPUs{Indices: []int{3}}},
		{[]any{}, &GPUs{Indices: []int{}}},
	} {
		p, probs := Decode(map[string]any{"gpu_devices": c.v})
		if len(probs) != 0 || !reflect.DeepEqual(p.GPUDevices, c.want) {
			t.Errorf("gpu_devices %#v: got %#v, %v", c.v, p.GPUDevices, probs)
		}
	}
	_, probs := Decode(map[string]any{"gpu_devices": []any{"all", int64(1), "x", int64(256), "3-1", 1.5}, "num_cpus": int64(0), "no_supervisor": "yes"})
	want := Problems{
		{"no_supervisor", "want true or false, got a string"},
		{"num_cpus", "0 must be positive"},
		{"gpu_devices", `"all" stands alone: give it or indices, not both`},
	}
	if !reflect.DeepEqual(probs, want) {
		t.Errorf("got %#v", probs)
	}
	_, probs = Decode(map[string]any{"gpu_devices": []any{"x", int64(256), "3-1", 1.5, true}})
	want = Problems{
		{"gpu_devices", `"x" is not a GPU index or range`},
		{"gpu_devices", "256 is not a GPU index or range (0 to 255)"},
		{"gpu_devices", `"3-1" is not a GPU index or range (0 to 255)`},
		{"gpu_devices", "want GPU index numbers or \"lo-hi\" ranges, got a float"},
		{"gpu_devices", "want GPU index numbers or \"lo-hi\" ranges, got a boolean"},
	}
	if !reflect.DeepEqual(probs, want) {
		t.Errorf("got %#v", probs)
	}
	p, probs := Decode(map[string]any{"num_cpus": int64(2), "no_supervisor": true})
	if len(probs) != 0 || p.NumCPUs != 2 || !p.NoSupervisor || p.GPUDevices != nil {
		t.Errorf("got %+v, %v", p, probs)
	}
}
