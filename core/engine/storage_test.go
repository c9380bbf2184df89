package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// layers lists the layer directories in storage.
func layers(t *testing.T, storage string) []string {
	t.Helper()
	ents, err := os.ReadDir(storage)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// fs_storage: each run's upper layer on disk, storage/layer-<hex>/{upper,work};
// a dry run's (aborted) is removed, a committed one's too; a kept one stays
// until the sandbox's commit or abort, and past the sandbox's close.
func TestFSStorageHoldsTheLayerOnDisk(t *testing.T) {
	wd := cowTree(t)
	storage := t.TempDir()
	before := treeHash(t, wd)
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"fs_storage": storage, "on_exit": "keep", "env": map[string]any{"W": wd, "S": storage}}))
	// a dry run: listed, then removed; the run cannot write to the storage itself
	res := shRun(sb, `cd "$W" && echo new > added && rm gone.txt; echo x > "$S/planted" || echo storage-denied`, true)
	if !res.Success || len(res.Changes) != 2 || !strings.Contains(string(res.Stdout), "storage-denied") {
		t.Fatalf("%+v %v %q %s", res.Error, res.Changes, res.Stdout, res.Stderr)
	}
	if l := layers(t, storage); len(l) != 0 || treeHash(t, wd) != before {
		t.Fatalf("a dry run left %v, or changed the workdir", l)
	}
	// kept: on disk, in the documented layout, until abort
	res = shRun(sb, `cd "$W" && echo new > added`, false)
	if res.Branch != "kept" {
		t.Fatalf("%+v %q", res.Error, res.Branch)
	}
	l := layers(t, storage)
	if len(l) != 1 || !strings.HasPrefix(l[0], "layer-") || len(l[0]) != len("layer-")+16 {
		t.Fatalf("want one layer-<16 hex>: %v", l)
	}
	if b, err := os.ReadFile(filepath.Join(storage, l[0], "upper", "added")); err != nil || string(b) != "new\n" {
		t.Fatalf("the upper layer on disk: %q %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(storage, l[0], "work")); err != nil || !st.IsDir() {
		t.Fatalf("no work/: %v", err)
	}
	if err := sb.Abort(res.BranchID); err != nil {
		t.Fatal(err)
	}
	if l := layers(t, storage); len(l) != 0 || treeHash(t, wd) != before {
		t.Fatalf("abort left %v, or changed the workdir", l)
	}
	// kept, then committed: applied, and removed
	res = shRun(sb, `cd "$W" && echo new > added`, false)
	if cr, err := sb.Commit(res.BranchID); err != nil || cr.Error != nil || len(cr.Committed) != 1 {
		t.Fatalf("%+v %v", cr, err)
	}
	if l := layers(t, storage); len(l) != 0 {
		t.Fatalf("commit left %v", l)
	}
	if b, _ := os.ReadFile(filepath.Join(wd, "added")); string(b) != "new\n" {
		t.Fatalf("not committed: %q", b)
	}
	// kept past the sandbox's close: it stays on disk
	if res = shRun(sb, `cd "$W" && echo later > later`, false); res.Branch != "kept" {
		t.Fatalf("%+v %q", res.Error, res.Branch)
	}
	sb.Close()
	if l := layers(t, storage); len(l) != 1 {
		t.Fatalf("a kept layer did not persist past close: %v", l)
	} else if b, _ := os.ReadFile(filepath.Join(storage, l[0], "upper", "later")); string(b) != "later\n" {
		t.Fatalf("the kept layer: %q", b)
	}
}

func TestFSStorageProblems(t *testing.T) {
	wd := cowTree(t)
	for _, c := range []struct {
		m    map[string]any
		want string
	}{
		{map[string]any{"fs_storage": t.TempDir()}, "fs_storage: it holds the copy-on-write layers of a workdir"},
		{cowPolicy(wd, map[string]any{"fs_storage": filepath.Join(wd, "dir")}), "holds or is inside the workdir"},
		{cowPolicy(wd, map[string]any{"fs_storage": t.TempDir(), "max_disk": "1M"}), "not with max_disk"},
		{cowPolicy(wd, map[string]any{"fs_storage": "/nonexistent-storage"}), "fs_storage: /nonexistent-storage: no such file or directory"},
	} {
		_, err := NewFromMap(c.m)
		if err == nil || err.(*Error).Kind != KindInvalidPolicy || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: want %q, got %v", c.m, c.want, err)
		}
	}
}
