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
	rules, skipped := (*View)(nil).expand(root, []string{filepath.Join(root, "a/secret")})
	want := []string{filepath.Join(root, "a/file"), filepath.Join(root, "a/x"), filepath.Join(root, "b")}
	if !reflect.DeepEqual(rules, want) {
		t.Fatalf("rules %v, want %v", rules, want)
	}
	if !reflect.DeepEqual(skipped, []string{filepath.Join(root, "a/link")}) {
		t.Fatalf("skipped %v", skipped)
	}
	if r, _ := (*View)(nil).expand(filepath.Join(root, "a/secret/deep"), []string{filepath.Join(root, "a/secret")}); r != nil {
		t.Fatalf("a root inside a denied tree must get nothing, got %v", r)
	}
	if r, _ := (*View)(nil).expand(root, nil); !reflect.DeepEqual(r, []string{root}) {
		t.Fatalf("no denial: %v", r)
	}
}

// The expansion follows the view's mounts: a denied file under a mount is
// carved out of the tree above the mount point (the root's rule would cover
// it, Landlock's walk crossing the mount), a nested mount is carved out of the
// mount that holds it, and a denied file is carved out wherever the view shows
// it (here also through a second mount of the same source). Mount points get no
// rule, nor do the trees of the sandbox's own filesystems (/dev).
func TestExpandFollowsTheView(t *testing.T) {
	root, src, other := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{root + "/work", root + "/again", root + "/dev", root + "/etc", src + "/nest", src + "/d"} {
		os.MkdirAll(d, 0o755)
	}
	for _, f := range []string{src + "/secret", src + "/pub", src + "/d/f", other + "/secret", other + "/pub"} {
		os.WriteFile(f, nil, 0o644)
	}
	v := &View{Mounts: []ViewMount{{"/", root}, {"/work", src}, {"/work/nest", other}, {"/again", src}, {"/dev", ""}}}
	if got := v.seenAt(src + "/secret"); !reflect.DeepEqual(got, []string{"/work/secret", "/again/secret"}) {
		t.Fatalf("seenAt %v", got)
	}
	if got := v.seenAt(src + "/nest"); !reflect.DeepEqual(got, []string{"/again/nest"}) {
		t.Fatalf("a mount point is hidden: %v", got)
	}
	denied := v.seenAt(other + "/secret")
	rules, _ := v.expand("/", denied)
	// (/again is src too, whose rule would cover /work/nest/secret: split)
	want := []string{src + "/d", src + "/nest", src + "/pub", src + "/secret", root + "/etc", src + "/d", other + "/pub", src + "/pub", src + "/secret"}
	if !reflect.DeepEqual(rules, want) {
		t.Fatalf("rules %v, want %v", rules, want)
	}
	// src's secret, seen at /work/secret and /again/secret: no rule may cover it
	denied = v.seenAt(src + "/secret")
	rules, _ = v.expand("/", denied)
	want = []string{src + "/d", src + "/nest", src + "/pub", root + "/etc", src + "/d", other, src + "/pub"}
	if !reflect.DeepEqual(rules, want) {
		t.Fatalf("rules %v, want %v", rules, want)
	}
	// a tree inside a denied one gets nothing, wherever it is granted from
	if r, _ := v.expand("/again/secret", denied); r != nil {
		t.Fatalf("%v", r)
	}
}
