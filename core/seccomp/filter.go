// Package seccomp compiles the sandbox's syscall filter to classic BPF with
// libseccomp, once per distinct configuration. The filter allows by default and
// answers EPERM (never a kill) to the calls a sandboxed program has no business
// making; foreign-architecture syscalls (int 0x80, x32) kill the process.
package seccomp

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"

	sc "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Denied is the base list answered with EPERM.
var Denied = []string{
	// mounts, namespaces, host-wide state
	"mount", "umount2", "pivot_root", "swapon", "swapoff", "reboot", "sethostname",
	"setdomainname", "kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "unshare", "setns", "fsopen", "fsconfig", "fsmount", "fspick",
	"move_mount", "open_tree", "mount_setattr", "quotactl", "quotactl_fd", "acct",
	"syslog", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup",
	"lookup_dcookie", "uselib", "nfsservctl",
	// kernel attack surface
	"perf_event_open", "bpf", "userfaultfd", "keyctl", "add_key", "request_key",
	"io_uring_setup", "io_uring_enter", "io_uring_register", "fanotify_init",
	"ioperm", "iopl",
	// other processes
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"process_madvise", "move_pages", "migrate_pages",
	// handles that bypass path checks
	"open_by_handle_at", "name_to_handle_at",
	// code that Landlock cannot see executed
	"memfd_create", "memfd_secret", "execveat",
	// metadata changes Landlock does not govern (path-based; the fd-based calls stay)
	"chmod", "fchmodat", "fchmodat2", "chown", "lchown", "fchownat", "utime", "utimes",
	"futimesat", "setxattr", "lsetxattr", "removexattr", "lremovexattr", "setxattrat",
	"removexattrat",
}

// Conditional denials, listed so callers can report and re-allow them by name.
var Conditional = []string{"clone", "clone3", "ioctl", "socket", "personality", "utimensat"}

// Config selects a filter.
type Config struct {
	NoInet     bool // no AF_INET/AF_INET6 sockets at all
	AllowUDP   bool
	AllowUnix  bool // socket(AF_UNIX) (socketpair is always allowed)
	ExtraAllow []string
	ExtraDeny  []string
	// CloneCookie, when set, lets a clone carrying it in its TLS argument create
	// namespaces: the sandbox's zygote uses it to start each run in a new pid
	// namespace; sandboxed code does not know it.
	CloneCookie uint64
}

func (c Config) key() string {
	a := append([]string(nil), c.ExtraAllow...)
	d := append([]string(nil), c.ExtraDeny...)
	sort.Strings(a)
	sort.Strings(d)
	return fmt.Sprintf("%v|%v|%v|%s|%s|%x", c.NoInet, c.AllowUDP, c.AllowUnix, strings.Join(a, ","), strings.Join(d, ","), c.CloneCookie)
}

// Program is a compiled filter.
type Program struct {
	BPF    []byte   // struct sock_filter[]
	Denied []string // names answered with EPERM (wholly or for some arguments)
}

var (
	mu    sync.Mutex
	cache = map[string]*Program{}
)

// Validate reports names libseccomp does not know on this architecture.
func Validate(field string, names []string) []string {
	var probs []string
	for _, n := range names {
		if _, err := sc.GetSyscallFromName(n); err != nil {
			probs = append(probs, fmt.Sprintf("%s: unknown syscall %q", field, n))
		}
	}
	return probs
}

// Compile returns the (cached) program for c.
func Compile(c Config) (*Program, error) {
	k := c.key()
	mu.Lock()
	defer mu.Unlock()
	if p, ok := cache[k]; ok {
		return p, nil
	}
	p, err := compile(c)
	if err != nil {
		return nil, err
	}
	cache[k] = p
	return p, nil
}

const (
	cloneNSFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
		unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP
)

func compile(c Config) (*Program, error) {
	eperm := sc.ActErrno.SetReturnCode(int16(unix.EPERM))
	f, err := sc.NewFilter(sc.ActAllow)
	if err != nil {
		return nil, fmt.Errorf("seccomp_init: %w", err)
	}
	defer f.Release()
	if err := f.SetBadArchAction(sc.ActKillProcess); err != nil {
		return nil, err
	}
	// The child sets no_new_privs itself; the filter must not try (it may be loaded
	// into a process that is not the one compiling it).
	if err := f.SetNoNewPrivsBit(false); err != nil {
		return nil, err
	}
	allow := map[string]bool{}
	for _, n := range c.ExtraAllow {
		allow[n] = true
	}
	var denied []string
	rule := func(name string, act sc.ScmpAction, conds ...sc.ScmpCondition) error {
		if allow[name] {
			return nil
		}
		nr, err := sc.GetSyscallFromName(name)
		if err != nil {
			return nil // not on this architecture
		}
		if len(conds) == 0 {
			err = f.AddRuleExact(nr, act)
		} else {
			err = f.AddRuleConditionalExact(nr, act, conds)
		}
		if err != nil {
			return fmt.Errorf("seccomp rule %s: %w", name, err)
		}
		if len(denied) == 0 || denied[len(denied)-1] != name {
			denied = append(denied, name)
		}
		return nil
	}
	cond := func(arg uint, op sc.ScmpCompareOp, a, b uint64) sc.ScmpCondition {
		cd, err := sc.MakeCondition(arg, op, a, b)
		if err != nil {
			panic(fmt.Sprintf("BUG(seccomp): condition: %v", err))
		}
		return cd
	}
	for _, n := range append(append([]string{}, Denied...), c.ExtraDeny...) {
		if err := rule(n, eperm); err != nil {
			return nil, err
		}
	}
	// clone with any namespace flag; clone3 passes flags in memory the filter cannot
	// read, so it answers ENOSYS and libc falls back to clone.
	tlsArg := uint(4) // clone(flags, stack, ptid, ctid, tls) on x86_64
	if runtime.GOARCH == "arm64" {
		tlsArg = 3 // clone(flags, stack, ptid, tls, ctid)
	}
	for bit := uint64(1); bit != 0; bit <<= 1 {
		if cloneNSFlags&bit != 0 {
			conds := []sc.ScmpCondition{cond(0, sc.CompareMaskedEqual, bit, bit)}
			if c.CloneCookie != 0 {
				conds = append(conds, cond(tlsArg, sc.CompareNotEqual, c.CloneCookie, 0))
			}
			if err := rule("clone", eperm, conds...); err != nil {
				return nil, err
			}
		}
	}
	if err := rule("clone3", sc.ActErrno.SetReturnCode(int16(unix.ENOSYS))); err != nil {
		return nil, err
	}
	// Terminal injection. The kernel compares the command as 32 bits.
	for _, req := range []uint64{unix.TIOCSTI, unix.TIOCLINUX} {
		if err := rule("ioctl", eperm, cond(1, sc.CompareMaskedEqual, 0xffffffff, req)); err != nil {
			return nil, err
		}
	}
	// Execution-domain flags that weaken memory layout or exec semantics
	// (ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT, READ_IMPLIES_EXEC, …).
	for bit := uint64(0x0040000); bit <= 0x8000000; bit <<= 1 {
		if err := rule("personality", eperm, cond(0, sc.CompareMaskedEqual, bit, bit)); err != nil {
			return nil, err
		}
	}
	// utimensat with a path; utimensat(fd, NULL, …) (futimens) stays allowed.
	if err := rule("utimensat", eperm, cond(1, sc.CompareNotEqual, 0, 0)); err != nil {
		return nil, err
	}
	if err := socketRules(c, rule, cond, eperm); err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	errc := make(chan error, 1)
	go func() {
		errc <- f.ExportBPF(w)
		w.Close()
	}()
	bpf, rerr := io.ReadAll(r)
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("seccomp export: %w", err)
	}
	if rerr != nil || len(bpf) == 0 || len(bpf)%8 != 0 || len(bpf)/8 > 0xffff {
		return nil, fmt.Errorf("BUG(seccomp): exported %d bytes", len(bpf))
	}
	return &Program{BPF: bpf, Denied: denied}, nil
}

// socketRules: every address family but AF_UNIX (when allowed), AF_INET and AF_INET6
// is refused; inet sockets only as TCP (protocol 0 or IPPROTO_TCP), or UDP when
// allowed; raw and packet sockets never (unless socket is re-allowed by name).
func socketRules(c Config, rule func(string, sc.ScmpAction, ...sc.ScmpCondition) error,
	cond func(uint, sc.ScmpCompareOp, uint64, uint64) sc.ScmpCondition, eperm sc.ScmpAction) error {
	const typeMask = 0xf // strips SOCK_NONBLOCK | SOCK_CLOEXEC
	families := []uint64{unix.AF_INET, unix.AF_INET6}
	// domain not in {unix?, inet, inet6}: one rule per excluded range is awkward in
	// libseccomp (conditions AND together), so deny domain ranges around the allowed ones.
	allowed := map[uint64]bool{unix.AF_INET: !c.NoInet, unix.AF_INET6: !c.NoInet, unix.AF_UNIX: c.AllowUnix}
	for d := uint64(0); d < unix.AF_MAX+8; d++ {
		if !allowed[d] {
			if err := rule("socket", eperm, cond(0, sc.CompareEqual, d, 0)); err != nil {
				return err
			}
		}
	}
	if err := rule("socket", eperm, cond(0, sc.CompareGreaterEqual, unix.AF_MAX+8, 0)); err != nil {
		return err
	}
	if c.NoInet {
		return nil
	}
	for _, fam := range families {
		// types other than stream (and dgram when UDP is allowed)
		for t := uint64(0); t <= typeMask; t++ {
			if t == unix.SOCK_STREAM || (c.AllowUDP && t == unix.SOCK_DGRAM) {
				continue
			}
			if err := rule("socket", eperm, cond(0, sc.CompareEqual, fam, 0), cond(1, sc.CompareMaskedEqual, typeMask, t)); err != nil {
				return err
			}
		}
		// stream: TCP only (no SCTP or MPTCP: Landlock governs TCP ports alone);
		// dgram: UDP only. libseccomp allows one check per argument, so the other
		// protocol numbers are refused as 1..ok-1 and > ok.
		protos := map[uint64]uint64{unix.SOCK_STREAM: unix.IPPROTO_TCP}
		if c.AllowUDP {
			protos[unix.SOCK_DGRAM] = unix.IPPROTO_UDP
		}
		for t, ok := range protos {
			base := []sc.ScmpCondition{cond(0, sc.CompareEqual, fam, 0), cond(1, sc.CompareMaskedEqual, typeMask, t)}
			for p := uint64(1); p < ok; p++ {
				if err := rule("socket", eperm, append(base[:2:2], cond(2, sc.CompareEqual, p, 0))...); err != nil {
					return err
				}
			}
			if err := rule("socket", eperm, append(base[:2:2], cond(2, sc.CompareGreater, ok, 0))...); err != nil {
				return err
			}
		}
	}
	return nil
}
