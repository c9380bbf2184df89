//go:build !sandtrap_testhook

package kernel

// testDisabled: the shipped library has no test hook (see testhook.go).
func testDisabled() map[string]bool { return nil }
