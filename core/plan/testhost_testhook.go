//go:build sandtrap_testhook

package plan

import (
	"net/netip"
	"os"
	"strings"
)

// testHost reads SANDTRAP_TEST_HOSTS ("api.openai.com=127.0.0.1,b.test=::1"), a
// test hook that makes the policy's resolution (net_allow host names, the HTTP
// proxy's upstreams) answer those addresses for those names, so that tests stand
// local servers in for named hosts without touching /etc/hosts. It exists only in
// builds with the sandtrap_testhook tag, as the kernel package's hooks.
func testHost(host string) ([]netip.Addr, bool) {
	for _, kv := range strings.Split(os.Getenv("SANDTRAP_TEST_HOSTS"), ",") {
		name, ip, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || !strings.EqualFold(name, host) {
			continue
		}
		if a, err := netip.ParseAddr(ip); err == nil {
			return []netip.Addr{a}, true
		}
	}
	return nil, false
}

// testUpstreamCA reads SANDTRAP_TEST_UPSTREAM_CA (a PEM file), a test hook that
// adds a test CA to the trust store the HTTP proxy verifies upstreams against
// (the host's), so that tests stand local HTTPS servers in for named hosts.
func testUpstreamCA() []byte {
	f := os.Getenv("SANDTRAP_TEST_UPSTREAM_CA")
	if f == "" {
		return nil
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return nil
	}
	return b
}

// gpuDir reads SANDTRAP_TEST_GPU_DIR, a test hook that makes gpu_devices look for
// NVIDIA's nodes in a directory of stand-ins instead of /dev (test-hook builds only).
func gpuDir() string {
	if d := os.Getenv("SANDTRAP_TEST_GPU_DIR"); d != "" {
		return d
	}
	return "/dev"
}
