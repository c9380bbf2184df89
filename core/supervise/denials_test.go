//go:build linux

package supervise

import (
	"testing"

	"golang.org/x/sys/unix"
)

// selfCall is a call as if this thread had made it (record only needs the tid).
func selfCall(s *Supervisor) *call {
	return &call{s: s, n: seccompNotif{Pid: uint32(unix.Gettid())}, pidfd: -1}
}

// selfPidfd is a pidfd of this process (in the test's pid namespace), closed at the end.
func selfPidfd(t testing.TB) int {
	fd, err := unix.PidfdOpen(unix.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// TestRecordAttributes: a denial goes to the run attached for the caller's pid
// namespace, an undo takes one back, the cap counts the rest, and nothing reaches a
// detached run. (Denials before the attach wait for it: they need a listener to
// check the notification, see the engine's tests.)
func TestRecordAttributes(t *testing.T) {
	s := &Supervisor{pidfds: map[uint32]int{}, nsof: map[uint32]nsEntry{}}
	s.AttributeRuns()
	defer func() { s.dropPidfds(); s.closeRuns() }()
	c := selfCall(s)
	r, err := s.Attach(selfPidfd(t), unix.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	undo := s.record(c, "connect", "a", unix.EACCES, false)
	s.record(c, "connect", "a", unix.EACCES, false)
	undo()
	for i := 0; i < MaxDenials+10; i++ {
		s.record(c, "flock", string(rune('A'+i%26))+string(rune(i)), unix.EACCES, false)
	}
	l := s.Detach(r)
	if l.Entries[0].Detail != "a" || l.Entries[0].Count != 1 {
		t.Errorf("entries %+v", l.Entries[:1])
	}
	if len(l.Entries) != MaxDenials || l.Dropped != 11 {
		t.Errorf("%d entries, %d dropped; want %d, 11", len(l.Entries), l.Dropped, MaxDenials)
	}
	// after Detach: the sandbox's log only (not valid here: closing)
	s.closing.Store(true)
	s.record(c, "connect", "late", unix.EACCES, false)
	if got := r.Snapshot(); len(got.Entries) != MaxDenials {
		t.Errorf("a denial after Detach reached the run: %d", len(got.Entries))
	}
}

// BenchmarkRecord: what the per-run log adds to one denial (compare with the round
// trip of a trapped call, BenchmarkFlock):
//
//	go test -tags sandtrap_testhook -run '^$' -bench 'Record|Flock' -benchtime 20000x ./core/supervise
func BenchmarkRecord(b *testing.B) {
	for _, mode := range []string{"sandbox-log-only", "per-run", "per-run-pidfd-used"} {
		attributed := mode != "sandbox-log-only"
		b.Run(mode, func(b *testing.B) {
			s := &Supervisor{pidfds: map[uint32]int{}, nsof: map[uint32]nsEntry{}}
			defer func() { s.dropPidfds(); s.closeRuns() }()
			if attributed {
				s.AttributeRuns()
				if _, err := s.Attach(selfPidfd(b), unix.Getpid()); err != nil {
					b.Fatal(err)
				}
			}
			c := selfCall(s)
			s.record(c, "connect", "tcp 10.0.0.1:80 (not allowed)", unix.EACCES, false) // caches its pidfd
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// per-run-pidfd-used: the handler's pidfd_getfd showed the pidfd alive
				c.live = mode == "per-run-pidfd-used"
				s.record(c, "connect", "tcp 10.0.0.1:80 (not allowed)", unix.EACCES, false)
			}
		})
	}
}

// BenchmarkAttach: what attributing costs a run that is refused nothing (attach and
// detach; its namespace is never opened), and one that is refused (opened once).
func BenchmarkAttach(b *testing.B) {
	for _, denied := range []bool{false, true} {
		b.Run(map[bool]string{false: "refused-nothing", true: "refused-once"}[denied], func(b *testing.B) {
			s := &Supervisor{pidfds: map[uint32]int{}, nsof: map[uint32]nsEntry{}}
			s.AttributeRuns()
			defer func() { s.dropPidfds(); s.closeRuns() }()
			pidfd := selfPidfd(b)
			for i := 0; i < b.N; i++ {
				r, err := s.Attach(pidfd, unix.Getpid())
				if err != nil {
					b.Fatal(err)
				}
				if denied {
					s.record(selfCall(s), "connect", "x", unix.EACCES, false)
				}
				if l := s.Detach(r); denied && len(l.Entries) != 1 {
					b.Fatalf("%+v", l)
				}
			}
		})
	}
}

// TestStatSession: the session field is found after the last ")" (a command name
// can hold ") " and digits).
func TestStatSession(t *testing.T) {
	for line, want := range map[string]int{
		"42 (python3) S 1 42 42 0 -1":        42,
		"7 (a) 1 2 3 (b) R 5 6 99 0 -1 4194": 99,
	} {
		if got, ok := statSession([]byte(line)); !ok || got != want {
			t.Errorf("%q: %d %v, want %d", line, got, ok, want)
		}
	}
	if _, ok := statSession([]byte("7 (x) S 1")); ok {
		t.Errorf("a short line gave a session")
	}
}
