// Package guest embeds the cooperative Python sandbox's guest runtime
// (python/sandtrap_guest) so that every caller of the engine — C, Node, Python —
// runs the same code in its workers. Dir writes it out once per content version.
package guest

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

//go:embed python/sandtrap_guest/*.py
var files embed.FS

var (
	once   sync.Once
	dir    string
	dirErr error
)

// Dir returns a directory holding sandtrap_guest/ (put it on PYTHONPATH). It lives in
// the user's cache (or the temp dir), is owned by this user and not writable by
// others, and its files are checked against the embedded ones.
func Dir() (string, error) {
	once.Do(func() { dir, dirErr = materialize() })
	return dir, dirErr
}

func materialize() (string, error) {
	h := sha256.New()
	var names []string
	fs.WalkDir(files, "python/sandtrap_guest", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
			b, _ := files.ReadFile(p)
			fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
			h.Write(b)
		}
		return nil
	})
	version := hex.EncodeToString(h.Sum(nil))[:16]
	bases := []string{}
	if c, err := os.UserCacheDir(); err == nil {
		bases = append(bases, filepath.Join(c, "sandtrap"))
	}
	bases = append(bases, filepath.Join(os.TempDir(), fmt.Sprintf("sandtrap-%d", os.Geteuid())))
	var lastErr error
	for _, base := range bases {
		root := filepath.Join(base, "guest-"+version)
		if err := write(root, names); err != nil {
			lastErr = err
			continue
		}
		return root, nil
	}
	return "", fmt.Errorf("cannot write the guest runtime: %w", lastErr)
}

func write(root string, names []string) error {
	pkg := filepath.Join(root, "sandtrap_guest")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		return err
	}
	for _, d := range []string{filepath.Dir(root), root, pkg} {
		st, err := os.Lstat(d)
		if err != nil {
			return err
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !st.IsDir() || !ok || int(sys.Uid) != os.Geteuid() || st.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%s is not a private directory of this user", d)
		}
	}
	for _, name := range names {
		want, _ := files.ReadFile(name)
		dst := filepath.Join(pkg, filepath.Base(name))
		if got, err := os.ReadFile(dst); err == nil && bytes.Equal(got, want) {
			continue
		}
		tmp := fmt.Sprintf("%s.%d.tmp", dst, os.Getpid())
		if err := os.WriteFile(tmp, want, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, dst); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	return nil
}
