//go:build !sandtrap_testhook

package plan

import "net/netip"

// testHost is the test hook's name map (testhost_testhook.go); none here.
func testHost(string) ([]netip.Addr, bool) { return nil, false }

// testUpstreamCA is the test hook's CA for upstreams (testhost_testhook.go); none here.
func testUpstreamCA() []byte { return nil }

// gpuDir is where the GPU nodes are (the test hook moves it).
func gpuDir() string { return "/dev" }
