//go:build linux && sandtrap_testhook

package supervise

// NaiveContinue (tests: the sandtrap_testhook build) makes every call the host
// allows continued, as a naive supervisor would, to show an attack test's race is
// real.
func NaiveContinue(on bool) { naiveContinue = on }

// SkipSharerScan (tests) makes every held execve skip its /proc scan, as if no
// process could share the caller's memory: the attack tests show what it misses.
func SkipSharerScan(on bool) { skipSharerScan = on }

// SkipWriteBack (tests) makes a call continued without a hold (an execve, a path
// call: alone) skip writing the judged copy back over the caller's memory: the
// attack tests show what a thread that wrote it and ended since then gets.
func SkipWriteBack(on bool) { skipWriteBack = on }
