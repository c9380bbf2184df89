package plan

import (
	"fmt"
	"net/netip"
	"os"
	"sort"

	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/httpproxy"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/supervise"
)

// HTTP rules (http_allow, http_deny, http_ports): the sandbox's TCP connects to the
// HTTP ports go to a proxy of its own (core/httpproxy), started with the sandbox
// and stopped when it closes; the supervisor performs those connects toward the
// proxy (core/supervise/httpredirect.go), so connect is always supervised.

// HTTPReport is the HTTP part of the isolation report (isolation.net.http).
type HTTPReport struct {
	Ports []uint16 `msgpack:"ports"` // connects to these go to the proxy
	Allow []string `msgpack:"allow"`
	Deny  []string `msgpack:"deny"`
	Proxy string   `msgpack:"proxy"` // its listener (what http_proxy says in the environment)
	// HTTPS: how TLS is judged: "sni" (by server name and the proxy's own
	// resolution of it; method and path not checked) or "intercepted" (TLS
	// terminated with the sandbox's CA, every request checked, sent on over TLS
	// verified against the host's trust store)
	HTTPS string `msgpack:"https"`
	// CA: the interception CA ("ephemeral" or the http_ca file), its subject and
	// end of validity; InjectCA: the bundles the run sees with it appended
	CA       string   `msgpack:"ca,omitempty"`
	CAExpiry string   `msgpack:"ca_expiry,omitempty"`
	InjectCA []string `msgpack:"inject_ca,omitempty"`
	// Auth: the http_auth rules (never a credential's value)
	Auth  []string `msgpack:"auth,omitempty"`
	Notes []string `msgpack:"notes,omitempty"`
}

// httpPlan is the proxy of a sandbox with HTTP rules.
type httpPlan struct {
	cfg   httpproxy.Config
	proxy *httpproxy.Proxy
	// interception: the bundles laid over in the view (host file, then the
	// sandbox's own copy with the CA appended, in dir), and http_ca_out
	overlays []fsview.Overlay
	dir      string
	caOut    string
}

// planHTTP reads the policy's HTTP rules into np; true when there are any.
func planHTTP(p *policy.Policy, np *NetPlan, probs *policy.Problems) bool {
	if !p.HTTPRules() {
		return false
	}
	ports := append([]uint16(nil), p.HTTPPortsOrDefault()...)
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	np.http = &httpPlan{cfg: httpproxy.Config{
		Rules:   httpproxy.Rules{Allow: p.HTTPAllow, Deny: p.HTTPDeny},
		Ports:   ports,
		Resolve: lookupHost,
	}}
	rep := &HTTPReport{Ports: ports, Allow: []string{}, Deny: []string{}, HTTPS: "sni"}
	for _, r := range p.HTTPAllow {
		rep.Allow = append(rep.Allow, r.Text)
	}
	for _, r := range p.HTTPDeny {
		rep.Deny = append(rep.Deny, r.Text)
	}
	if p.Intercepts() {
		planIntercept(p, np.http, rep, probs)
	} else {
		rep.Notes = append(rep.Notes,
			"https is not intercepted: TLS is allowed by its server name (SNI) to a host the rules name, dialed as the proxy resolves that name; its method and path are not checked")
	}
	rep.Notes = append(rep.Notes,
		"plain HTTP is checked request by request (method, Host, path without the query); the upstream is the proxy's resolution of the Host, never the address the sandbox connected to",
		"HTTP/2 (prior knowledge in cleartext; ALPN h2 when https is intercepted) is checked stream by stream as HTTP/1.1 requests are (method, :authority's host, path) and sent upstream as HTTP/1.1; a Host header other than :authority resets the stream; CONNECT over HTTP/2 is refused; \"Upgrade: h2c\" is ignored (answered as HTTP/1.1)")
	planAuth(p, np.http, rep, probs)
	np.report.HTTP = rep
	np.wanted = true
	return true
}

// startHTTP starts the sandbox's proxy (Prepare, once the policy is valid).
func (np *NetPlan) startHTTP() error {
	if np.http == nil {
		return nil
	}
	if np.http.caOut != "" {
		if err := os.WriteFile(np.http.caOut, np.http.cfg.CA.PEM(), 0o644); err != nil {
			return fmt.Errorf("http_ca_out: %w", err)
		}
	}
	px, err := httpproxy.Start(np.http.cfg)
	if err != nil {
		return err
	}
	np.http.proxy = px
	np.report.HTTP.Proxy = px.Addr4().String()
	return nil
}

// redirect is the supervisor's part (nil without HTTP rules).
func (np NetPlan) redirect() *supervise.HTTPRedirect {
	if np.http == nil || np.http.proxy == nil {
		return nil
	}
	px := np.http.proxy
	h := &supervise.HTTPRedirect{Ports: map[uint16]bool{}, Proxy4: px.Addr4(), Proxy6: px.Addr6(),
		Expect: func(src, dst netip.AddrPort, who supervise.Caller) { px.Expect(src, dst, who) }}
	for _, p := range np.http.cfg.Ports {
		h.Ports[p] = true
	}
	return h
}

// CloseHTTP stops the sandbox's proxy, if it has one (the sandbox closes).
func (np NetPlan) CloseHTTP() {
	if np.http != nil && np.http.proxy != nil {
		np.http.proxy.Close()
	}
	if np.http != nil && np.http.dir != "" {
		os.RemoveAll(np.http.dir)
	}
}

// Overlays are the files the view lays over host files (http_inject_ca).
func (np NetPlan) Overlays() []fsview.Overlay {
	if np.http == nil {
		return nil
	}
	return np.http.overlays
}

// ProxyEnv adds the proxy variables (http_proxy, https_proxy and their upper-case
// forms) to env, unless the policy's env sets one: programs that honour them ask
// the proxy by name (no name look-up of their own, which the sandbox may not be
// able to make); programs that do not are redirected all the same.
func (np NetPlan) ProxyEnv(env []string, p *policy.Policy) []string {
	env = withoutCredentials(env, p)
	if np.http == nil || np.http.proxy == nil {
		return env
	}
	names := []string{"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"}
	for _, n := range names {
		if _, ok := p.Env[n]; ok {
			return env
		}
	}
	url := "http://" + np.http.proxy.Addr4().String()
	out := env[:0:0]
	for _, kv := range env {
		drop := false
		for _, n := range names {
			if len(kv) > len(n) && kv[:len(n)+1] == n+"=" {
				drop = true
			}
		}
		if !drop {
			out = append(out, kv)
		}
	}
	for _, n := range names {
		out = append(out, n+"="+url)
	}
	sort.Strings(out)
	return out
}
