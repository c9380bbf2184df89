package engine

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/sandtrap/sandtrap/core/policy"
)

// TestProblemVectors: tests/vectors/problems.json, the invalid policies every
// binding must refuse with the same {field, message} list, through the engine.
func TestProblemVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(vectorsDir(), "problems.json"))
	if err != nil {
		t.Fatal(err)
	}
	var data struct {
		Cases []struct {
			Name     string           `json:"name"`
			Policy   map[string]any   `json:"policy"`
			Problems []policy.Problem `json:"problems"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	if len(data.Cases) == 0 {
		t.Fatal("no cases")
	}
	sortProblems := func(p []policy.Problem) {
		sort.Slice(p, func(i, j int) bool { return p[i].String() < p[j].String() })
	}
	for _, c := range data.Cases {
		m := jsonToMsgpack(c.Policy).(map[string]any)
		_, err := NewFromMap(m)
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindInvalidPolicy {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		want := append([]policy.Problem(nil), c.Problems...)
		for i := range want { // {key}: the msgpack key here
			want[i].Message = strings.NewReplacer("{", "", "}", "").Replace(want[i].Message)
		}
		got := append([]policy.Problem(nil), e.Problems...)
		sortProblems(want)
		sortProblems(got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", c.Name, got, want)
		}
	}
}

// jsonToMsgpack turns JSON numbers into the integers and floats msgpack decodes.
func jsonToMsgpack(v any) any {
	switch t := v.(type) {
	case float64:
		if t == float64(int64(t)) {
			return int64(t)
		}
		return t
	case []any:
		for i := range t {
			t[i] = jsonToMsgpack(t[i])
		}
		return t
	case map[string]any:
		for k := range t {
			t[k] = jsonToMsgpack(t[k])
		}
		return t
	}
	return v
}
