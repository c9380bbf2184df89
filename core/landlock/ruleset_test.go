package landlock

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestExpandCarvesOutDenied(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/x", "a/secret/deep", "b"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "a/file"), nil, 0o644)
	os.Symlink("/etc", filepath.Join(root, "a/link"))
	rules, skipped := expand(root, []string{filepath.Join(root, "a/secret")})
	want := []string{filepath.Join(root, "a/file"), filepath.Join(root, "a/x"), filepath.Join(root, "b")}
	if !reflect.DeepEqual(rules, want) {
		t.Fatalf("rules %v, want %v", rules, want)
	}
	if !reflect.DeepEqual(skipped, []string{filepath.Join(root, "a/link")}) {
		t.Fatalf("skipped %v", skipped)
	}
	if r, _ := expand(filepath.Join(root, "a/secret/deep"), []string{filepath.Join(root, "a/secret")}); r != nil {
		t.Fatalf("a root inside a denied tree must get nothing, got %v", r)
	}
	if r, _ := expand(root, nil); !reflect.DeepEqual(r, []string{root}) {
		t.Fatalf("no denial: %v", r)
	}
}
