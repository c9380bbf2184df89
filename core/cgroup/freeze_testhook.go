//go:build sandtrap_testhook

package cgroup

// SetNoFreezer makes runs started from now on pause by SIGSTOP, as on a host
// without a cgroup v2 freezer (tests of the fallback; only in the tests' library).
func SetNoFreezer(off bool) { testNoFreezer = off }
