//go:build linux

package supervise

import (
	"os"
	"testing"
)

// The /proc scan of a held execve (kcmp against every process).
func BenchmarkSharingProcesses(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := sharingProcesses(os.Getpid(), os.Getpid()); err != nil {
			b.Fatal(err)
		}
	}
}
