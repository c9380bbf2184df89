//go:build linux && sandtrap_testhook

package supervise

// NaiveContinue (tests: the sandtrap_testhook build) makes every call the host
// allows continued, as a naive supervisor would, to show an attack test's race is
// real.
func NaiveContinue(on bool) { naiveContinue = on }
