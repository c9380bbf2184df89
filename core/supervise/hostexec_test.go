//go:build linux

package supervise

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tgidOfCaller: a leader's id is its own process, a non-leader thread's is its
// leader's (pidfd_open refuses it, and /proc/<tid>/status says), a gone id errs.
func TestTgidOfCaller(t *testing.T) {
	pid := os.Getpid()
	if g, err := tgidOfCaller(pid); err != nil || g != pid {
		t.Fatalf("leader %d: %d, %v", pid, g, err)
	}
	// two locked threads: at most one is the main thread
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ch := make(chan int)
	go func() {
		runtime.LockOSThread()
		ch <- unix.Gettid()
		<-ch
		runtime.UnlockOSThread()
	}()
	tid := <-ch
	defer close(ch)
	if me := unix.Gettid(); me != pid {
		tid = me // not the main thread: a non-leader too
	}
	if tid == pid {
		t.Fatal("two locked threads have the process's id")
	}
	if g, err := tgidOfCaller(tid); err != nil || g != pid {
		t.Fatalf("thread %d of %d: %d, %v", tid, pid, g, err)
	}
	// a pid that names nothing (pid_max is at most 2^22)
	if g, err := tgidOfCaller(1 << 23); err == nil {
		t.Fatalf("no such task: %d", g)
	}
}

// privatePages reads pagemap once per run of adjacent pages: regions on private
// anonymous pages pass (overlapping, and on two pages with an unmapped one
// between, which is not looked at), a region reaching into a MAP_SHARED page or an
// unmapped one is refused.
func TestPrivatePagesSpans(t *testing.T) {
	const pg = 4096
	// four pages: private, unmapped, private, shared
	base, err := unix.Mmap(-1, 0, 4*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(base)
	a := uint64(uintptr(unsafe.Pointer(&base[0])))
	if err := unix.MunmapPtr(unsafe.Pointer(&base[pg]), pg); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&base[3*pg]), pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS|unix.MAP_FIXED); err != nil {
		t.Fatal(err)
	}
	base[0], base[2*pg], base[3*pg] = 1, 1, 1
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c := &call{}
	c.n.Pid = uint32(unix.Gettid())
	r := func(addr uint64, n int) memRegion { return memRegion{addr, make([]byte, n)} }
	if err := c.privatePages([]memRegion{r(a+2*pg+8, 16), r(a, 10), r(a+5, 100), r(a+2*pg, 8)}); err != nil {
		t.Fatalf("private pages, a gap between: %v", err)
	}
	if err := c.privatePages([]memRegion{r(a, 8), r(a+3*pg-4, 8)}); err == nil || !strings.Contains(err.Error(), "shared") {
		t.Fatalf("a region reaching into a MAP_SHARED page: %v", err)
	}
	if err := c.privatePages([]memRegion{r(a+pg-4, 8)}); err == nil || !strings.Contains(err.Error(), "not present") {
		t.Fatalf("a region reaching into an unmapped page: %v", err)
	}
}
