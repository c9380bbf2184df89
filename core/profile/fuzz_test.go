package profile

import (
	"errors"
	"testing"
)

// Any input is a profile or a list of problems, each with a line inside the file;
// never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(bad))
	f.Add([]byte("[limits]\nmax_memory = \n"))
	f.Add([]byte("a.b.c = 1\n[[x]]\n[program.env]\nA = 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("f.toml", data)
		var pe *Error
		switch {
		case err == nil && p == nil:
			t.Fatal("no profile and no error")
		case err != nil && !errors.As(err, &pe):
			t.Fatalf("not a profile error: %v", err)
		case err != nil:
			lines := 1
			for _, c := range data {
				if c == '\n' {
					lines++
				}
			}
			for _, pr := range pe.Problems {
				if pr.Line < 0 || pr.Line > lines || pr.File != "f.toml" || pr.Message == "" {
					t.Fatalf("problem %+v of a %d-line file", pr, lines)
				}
			}
		}
	})
}
