package profile

import (
	"errors"
	"fmt"
	"os"
	"sort"
)

// The profile request of the C ABI (sandtrap_profile, docs/protocol.md
// "profiles"): the bindings' load_profile / loadProfile and policy_from_dict /
// policyFromDict are thin wrappers around it.

// RequestError is a malformed request (not a profile's problem).
type RequestError struct{ Message string }

func (e *RequestError) Error() string { return "invalid request: " + e.Message }

// NotFoundError is a profile name or file that does not exist.
type NotFoundError struct{ Message string }

func (e *NotFoundError) Error() string { return e.Message }

// Handle answers {"load": NAME_OR_PATH, "config_home": $XDG_CONFIG_HOME, "home":
// $HOME} or {"dict": SECTIONS, "source": S} with {"name", "path", "profile",
// "policy", "argv"}.
func Handle(req map[string]any) (map[string]any, error) {
	var keys []string
	for k := range req {
		if k != "load" && k != "dict" && k != "source" && k != "config_home" && k != "home" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) > 0 {
		return nil, &RequestError{fmt.Sprintf("unknown keys %v (known: load, dict, source, config_home, home)", keys)}
	}
	load, hasLoad := req["load"]
	dict, hasDict := req["dict"]
	var p *Profile
	var err error
	switch {
	case hasLoad == hasDict:
		return nil, &RequestError{"give load (a profile name or path) or dict (sections of keys)"}
	case hasLoad:
		s, ok := load.(string)
		if !ok || s == "" {
			return nil, &RequestError{"load must be a profile name or a path"}
		}
		var env Env
		env.ConfigHome, _ = req["config_home"].(string)
		env.Home, _ = req["home"].(string)
		p, err = env.LoadAny(s)
		if errors.Is(err, os.ErrNotExist) {
			return nil, &NotFoundError{fmt.Sprintf("profile file %s does not exist", s)}
		}
	default:
		m, ok := dict.(map[string]any)
		if !ok {
			return nil, &RequestError{"dict must be a map of sections"}
		}
		src, _ := req["source"].(string)
		if src == "" {
			src = "<dict>"
		}
		p, err = FromDict(src, m)
	}
	if err != nil {
		return nil, err
	}
	var argv any
	if a := p.Argv(); a != nil {
		l := make([]any, len(a))
		for i, s := range a {
			l[i] = s
		}
		argv = l
	}
	return map[string]any{"name": p.Name, "path": p.Path, "profile": p.Doc, "policy": p.Policy, "argv": argv}, nil
}
