package spawn

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// wire.h is compiled twice: by cgo for the engine and, freestanding, for
// sandtrap-init. The layout cgo saw is asserted, field by field, in a C file that
// the init's compiler builds with the init's flags (Makefile INIT_CFLAGS): a
// mismatch fails that build.
func TestWireLayoutAgrees(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	var b strings.Builder
	b.WriteString("#include <stddef.h>\n#include \"wire.h\"\n")
	lay := wireLayout()
	keys := make([]string, 0, len(lay))
	for k := range lay {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if s, f, ok := strings.Cut(k, "."); ok {
			fmt.Fprintf(&b, "_Static_assert(offsetof(struct %s, %s) == %d, \"%s\");\n", s, f, lay[k], k)
		} else {
			fmt.Fprintf(&b, "_Static_assert(sizeof(struct %s) == %d, \"%s\");\n", k, lay[k], k)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "layout.c")
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	// the flags that matter for layout: sandtrap-init's (freestanding, static, no PIE)
	out, err := exec.Command(cc, "-Os", "-static", "-nostdlib", "-ffreestanding", "-fno-pie", "-Wall", "-Wextra", "-Werror",
		"-fsyntax-only", "-I", wd, src).CombinedOutput()
	if err != nil {
		t.Fatalf("wire.h's layout differs between cgo and sandtrap-init's compiler: %v\n%s", err, out)
	}
	// and the check can fail: a wrong offset is refused
	bad := strings.Replace(b.String(), fmt.Sprintf("offsetof(struct st_reply, step) == %d", lay["st_reply.step"]), "offsetof(struct st_reply, step) == 99", 1)
	os.WriteFile(src, []byte(bad), 0o644)
	if out, err := exec.Command(cc, "-fsyntax-only", "-I", wd, src).CombinedOutput(); err == nil {
		t.Fatalf("a wrong offset was accepted: %s", out)
	}
}
