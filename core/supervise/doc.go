// Package supervise is the seccomp user-notification supervisor of a sandbox: the
// sandbox's filter answers SECCOMP_RET_USER_NOTIF for the calls Traps lists, and
// Start serves them on the listener fd, checking each against the policy and
// answering, or performing it on the child's behalf.
package supervise
