//go:build !sandtrap_testhook

package kernel

// testDisabled: the shipped library has no test hook (see testhook.go).
func testDisabled() map[string]bool { return nil }

// TestFailInit: the shipped library has no test hook (see testhook.go).
func TestFailInit() uint32 { return 0 }

// testLandlockABI: the shipped library has no test hook (see testhook.go).
func testLandlockABI() int { return 0 }
