// Package seccomp compiles the sandbox's syscall filter to classic BPF with
// libseccomp, once per distinct configuration. The filter allows by default and
// answers EPERM (never a kill) to the calls a sandboxed program has no business
// making; calls that need a look at what they touch are handed to the engine's
// supervisor (SECCOMP_RET_USER_NOTIF, core/supervise); foreign-architecture
// syscalls (int 0x80, x32) kill the process; syscalls newer than this version of
// sandtrap has reviewed answer ENOSYS.
package seccomp

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	sc "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Denied is the base list answered with EPERM.
var Denied = append([]string{
	// mounts, namespaces, host-wide state (fsopen, fsconfig, fsmount and move_mount:
	// only with the zygote's cookie, see below)
	"mount", "umount2", "pivot_root", "swapon", "swapoff", "reboot", "sethostname",
	"setdomainname", "kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "unshare", "setns", "fspick", "open_tree_attr", "mount_setattr",
	"quotactl", "quotactl_fd", "acct", "syslog", "settimeofday", "clock_settime", "clock_adjtime",
	"adjtimex", "vhangup", "lookup_dcookie", "uselib", "nfsservctl", "lsm_set_self_attr",
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
}, ByPath...)

// ByPath are metadata changes by path, which Landlock does not govern (fd-based
// calls stay: a sandbox's view makes whatever it may only read read-only, EROFS).
var ByPath = []string{"chmod", "fchmodat", "fchmodat2", "chown", "lchown", "fchownat", "utime", "utimes",
	"futimesat", "setxattr", "lsetxattr", "removexattr", "lremovexattr", "setxattrat",
	"removexattrat", "file_setattr"}

// NotSupported are reads by path that Landlock does not govern; they answer
// ENOTSUP, as on a filesystem without extended attributes (tools take that in
// their stride). fgetxattr/flistxattr on an open file stay.
var NotSupported = []string{"getxattr", "lgetxattr", "listxattr", "llistxattr", "getxattrat", "listxattrat"}

// Conditional denials, listed so callers can report and re-allow them by name.
var Conditional = []string{"clone", "clone3", "ioctl", "socket", "personality", "utimensat", "open",
	"openat", "openat2", "creat", "mknod", "mknodat", "mkdir", "mkdirat", "fchmod", "fcntl",
	"sendto", "sendmsg", "sendmmsg", "fallocate", "shmget", "msgget", "fsopen", "fsconfig",
	"fsmount", "move_mount"}

// newer are syscalls libseccomp 2.5 may not know by name. Since Linux 5.1 new
// syscalls have one number on every architecture.
var newer = map[string]int{"lsm_set_self_attr": 460, "setxattrat": 463, "getxattrat": 464,
	"listxattrat": 465, "removexattrat": 466, "open_tree_attr": 467, "file_setattr": 469}

// Reviewed is one past the highest syscall number this version has reviewed (the
// same on every architecture since 5.1): anything from there on answers ENOSYS.
const Reviewed = 470

func syscallNr(name string) (sc.ScmpSyscall, bool) {
	if nr, err := sc.GetSyscallFromName(name); err == nil {
		return nr, true
	}
	if n, ok := newer[name]; ok {
		return sc.ScmpSyscall(n), true
	}
	return 0, false
}

// Trap is a rule whose action is SECCOMP_RET_USER_NOTIF (core/supervise answers):
// the syscall, and when Arg >= 0 the values v that trap when arg & Mask == v, or
// with NonZero any arg that is not 0.
type Trap struct {
	Syscall string
	Arg     int
	Mask    uint64
	Values  []uint64
	NonZero bool
}

// Config selects a filter.
type Config struct {
	NoInet     bool // no AF_INET/AF_INET6 sockets at all
	AllowUDP   bool
	AllowICMP  bool // ICMP echo ("ping") sockets: SOCK_DGRAM, IPPROTO_ICMP/ICMPV6
	AllowUnix  bool // socket(AF_UNIX) (socketpair is always allowed)
	ExtraAllow []string
	ExtraDeny  []string
	// CloneCookie, when set, lets a clone carrying it in its TLS argument create
	// namespaces, and the new mount API carrying it in the (unused) sixth argument
	// mount: the sandbox's zygote uses it to start each run in new namespaces with
	// a /proc of its own; sandboxed code does not know it. A trapped sendmsg carrying
	// it goes on untrapped (the zygote's answers to the engine).
	CloneCookie uint64
	// RestrictConnect: TCP connect is limited by port (Landlock), so no TCP Fast
	// Open (its implicit connect is not seen by Landlock).
	RestrictConnect bool
	// MaxDisk: the run's files are size-limited (RLIMIT_FSIZE), so no fallocate
	// that reserves space beyond the size (FALLOC_FL_KEEP_SIZE).
	MaxDisk bool
	// NoSysVMemory: memory is limited per process (RLIMIT_AS), which SysV shared
	// memory and message queues escape: refuse them.
	NoSysVMemory bool
	// Confine: the filter confine() applies without the full one — what the policy
	// says about sockets, and the calls Landlock does not govern that change, read or
	// create (set-id) files by path; none of the process-wide denials, which would
	// stop the process's own later sandboxes.
	Confine bool
	// NoListen: listen() answers EACCES (confine() without bind ports: there is no
	// supervisor to tell a bound socket from one that listen would autobind).
	NoListen bool
	// NoMetadata: no changes of metadata or locks through a descriptor at all (a
	// sandbox without a read-only view, where the kernel would not answer EROFS).
	NoMetadata bool
	// NoSourceRoute: no IPv4 options or IPv6 routing headers on sockets (a source
	// route sends packets to its first hop, not to the destination the supervisor
	// checked).
	NoSourceRoute bool
	// Traps are handed to the supervisor.
	Traps []Trap
	// RefuseTraps: there is no supervisor (no_supervisor): the calls Traps names
	// are answered EPERM by the filter itself, and nothing is handed on.
	RefuseTraps bool
}

func (c Config) key() string {
	a := append([]string(nil), c.ExtraAllow...)
	d := append([]string(nil), c.ExtraDeny...)
	sort.Strings(a)
	sort.Strings(d)
	return fmt.Sprintf("%v|%v|%v|%v|%s|%s|%x|%v|%v|%v|%v|%v|%v|%v|%v", c.NoInet, c.AllowUDP, c.AllowICMP, c.AllowUnix, strings.Join(a, ","),
		strings.Join(d, ","), c.CloneCookie, c.RestrictConnect, c.MaxDisk, c.NoSysVMemory, c.Confine, c.NoListen, c.NoMetadata, c.NoSourceRoute, c.Traps) + fmt.Sprint(c.RefuseTraps)
}

// Program is a compiled filter.
type Program struct {
	BPF      []byte   // struct sock_filter[]
	Denied   []string // names answered with an error (wholly or for some arguments)
	Notified []string // names handed to the supervisor (wholly or for some arguments)
}

var (
	mu    sync.Mutex
	cache = map[string]*Program{}
)

// Validate reports names this filter cannot address on this architecture.
func Validate(field string, names []string) []string {
	var probs []string
	for _, n := range names {
		if _, ok := syscallNr(n); !ok {
			probs = append(probs, fmt.Sprintf("%s: unknown syscall %q", field, n))
		}
	}
	return probs
}

// Compile returns the (cached) program for c.
func Compile(c Config) (prog *Program, err error) {
	// a condition libseccomp refuses is a bug of this package (cond): an error of
	// the build that asked, never a panic through the C ABI
	defer func() {
		if r := recover(); r != nil {
			prog, err = nil, fmt.Errorf("BUG(seccomp): %v", r)
		}
	}()
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
		unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME
	oTmpfile        = 0o20000000 // __O_TMPFILE (O_TMPFILE also carries O_DIRECTORY)
	fsIocFSSetXattr = 0x401c5820 // FS_IOC_FSSETXATTR: _IOW('X', 32, struct fsxattr)
)

// builder adds rules to one libseccomp filter.
type builder struct {
	f        *sc.ScmpFilter
	allow    map[string]bool
	denied   []string
	notified []string
}

func (b *builder) rule(name string, act sc.ScmpAction, conds ...sc.ScmpCondition) error {
	if b.allow[name] && act != sc.ActNotify { // extra_allow_syscalls never removes a trap
		return nil
	}
	nr, ok := syscallNr(name)
	if !ok {
		return nil // not on this architecture
	}
	var err error
	if len(conds) == 0 {
		err = b.f.AddRuleExact(nr, act)
	} else {
		err = b.f.AddRuleConditionalExact(nr, act, conds)
	}
	if err != nil {
		return fmt.Errorf("seccomp rule %s: %w", name, err)
	}
	list := &b.denied
	if act == sc.ActNotify {
		list = &b.notified
	}
	if len(*list) == 0 || (*list)[len(*list)-1] != name {
		*list = append(*list, name)
	}
	return nil
}

func cond(arg uint, op sc.ScmpCompareOp, a, b uint64) sc.ScmpCondition {
	cd, err := sc.MakeCondition(arg, op, a, b)
	if err != nil {
		panic(fmt.Sprintf("BUG(seccomp): condition: %v", err))
	}
	return cd
}

func errno(e unix.Errno) sc.ScmpAction { return sc.ActErrno.SetReturnCode(int16(e)) }

func newFilter(allow []string) (*builder, error) {
	f, err := sc.NewFilter(sc.ActAllow)
	if err != nil {
		return nil, fmt.Errorf("seccomp_init: %w", err)
	}
	if err := f.SetBadArchAction(sc.ActKillProcess); err != nil {
		f.Release()
		return nil, err
	}
	// The child sets no_new_privs itself; the filter must not try (it may be loaded
	// into a process that is not the one compiling it).
	if err := f.SetNoNewPrivsBit(false); err != nil {
		f.Release()
		return nil, err
	}
	// a binary tree over the syscall numbers: every call of the sandbox pays log(n)
	// comparisons, not a walk past every rule
	if err := f.SetOptimize(2); err != nil {
		f.Release()
		return nil, err
	}
	b := &builder{f: f, allow: map[string]bool{}}
	for _, n := range allow {
		b.allow[n] = true
	}
	return b, nil
}

func compile(c Config) (*Program, error) {
	b, err := newFilter(c.ExtraAllow)
	if err != nil {
		return nil, err
	}
	defer b.f.Release()
	eperm := errno(unix.EPERM)
	if err := socketRules(c, b); err != nil {
		return nil, err
	}
	if c.RestrictConnect {
		// TCP Fast Open connects inside sendto/sendmsg, where Landlock does not look
		for name, arg := range map[string]uint{"sendto": 3, "sendmsg": 2, "sendmmsg": 3} {
			if err := b.rule(name, eperm, cond(arg, sc.CompareMaskedEqual, unix.MSG_FASTOPEN, unix.MSG_FASTOPEN)); err != nil {
				return nil, err
			}
		}
	}
	if c.Confine {
		if err := confineRules(b); err != nil {
			return nil, err
		}
	} else if err := baseRules(c, b); err != nil {
		return nil, err
	}
	if c.NoListen {
		if err := b.rule("listen", errno(unix.EACCES)); err != nil {
			return nil, err
		}
	}
	if c.NoSourceRoute {
		for _, o := range [][2]uint64{{unix.IPPROTO_IP, unix.IP_OPTIONS}, {unix.IPPROTO_IPV6, unix.IPV6_RTHDR},
			{unix.IPPROTO_IPV6, unix.IPV6_2292RTHDR}, {unix.IPPROTO_IPV6, unix.IPV6_2292PKTOPTIONS}} {
			if err := b.rule("setsockopt", eperm, cond(1, sc.CompareMaskedEqual, 0xffffffff, o[0]),
				cond(2, sc.CompareMaskedEqual, 0xffffffff, o[1])); err != nil {
				return nil, err
			}
		}
	}
	notify := sc.ActNotify
	if c.RefuseTraps {
		notify = errno(unix.EPERM)
	}
	for _, t := range c.Traps {
		if t.NonZero {
			if err := b.rule(t.Syscall, notify, cond(uint(t.Arg), sc.CompareNotEqual, 0, 0)); err != nil {
				return nil, err
			}
			continue
		}
		if t.Arg < 0 {
			var conds []sc.ScmpCondition
			if t.Syscall == "sendmsg" && c.CloneCookie != 0 {
				// the zygote answers the engine with sendmsg, the cookie in its unused
				// sixth argument: it must not wait on the supervisor it hands the
				// listener to
				conds = append(conds, cond(5, sc.CompareNotEqual, c.CloneCookie, 0))
			}
			if c.RefuseTraps {
				conds = nil // the zygote's sendmsg is allowed: nothing is trapped
			}
			if err := b.rule(t.Syscall, notify, conds...); err != nil {
				return nil, err
			}
			continue
		}
		for _, v := range t.Values {
			if err := b.rule(t.Syscall, notify, cond(uint(t.Arg), sc.CompareMaskedEqual, t.Mask, v)); err != nil {
				return nil, err
			}
		}
	}
	bpf, err := export(b.f)
	if err != nil {
		return nil, err
	}
	return &Program{BPF: bpf, Denied: b.denied, Notified: b.notified}, nil
}

func baseRules(c Config, b *builder) error {
	eperm := errno(unix.EPERM)
	for _, n := range append(append([]string{}, Denied...), c.ExtraDeny...) {
		if err := b.rule(n, eperm); err != nil {
			return err
		}
	}
	for _, n := range NotSupported {
		if err := b.rule(n, errno(unix.ENOTSUP)); err != nil {
			return err
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
			if err := b.rule("clone", eperm, conds...); err != nil {
				return err
			}
		}
	}
	if err := b.rule("clone3", errno(unix.ENOSYS)); err != nil {
		return err
	}
	// The new mount API: only pid 1 mounting the run's /proc (with the cookie in
	// its unused sixth argument), and what it lays over it (open_tree: num_cpus's
	// /proc/cpuinfo); mount_setattr and the rest: never.
	for _, n := range []string{"fsopen", "fsconfig", "fsmount", "move_mount", "open_tree"} {
		var conds []sc.ScmpCondition
		if c.CloneCookie != 0 {
			conds = append(conds, cond(5, sc.CompareNotEqual, c.CloneCookie, 0))
		}
		if err := b.rule(n, eperm, conds...); err != nil {
			return err
		}
	}
	// openat2 takes its flags and mode in memory the filter cannot read: ENOSYS,
	// and libc and runtimes fall back to openat, which is checked.
	if err := b.rule("openat2", errno(unix.ENOSYS)); err != nil {
		return err
	}
	// Terminal injection. The kernel compares the command as 32 bits.
	for _, req := range []uint64{unix.TIOCSTI, unix.TIOCLINUX} {
		if err := b.rule("ioctl", eperm, cond(1, sc.CompareMaskedEqual, 0xffffffff, req)); err != nil {
			return err
		}
	}
	// Execution-domain flags that weaken memory layout or exec semantics
	// (ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT, READ_IMPLIES_EXEC, …).
	for bit := uint64(0x0040000); bit <= 0x8000000; bit <<= 1 {
		if err := b.rule("personality", eperm, cond(0, sc.CompareMaskedEqual, bit, bit)); err != nil {
			return err
		}
	}
	// utimensat with a path; utimensat(fd, NULL, …) (futimens) stays allowed.
	if err := b.rule("utimensat", eperm, cond(1, sc.CompareNotEqual, 0, 0)); err != nil {
		return err
	}
	// Set-uid and set-gid bits: no call that takes a mode may set them (nothing a
	// sandbox writes may carry them into the host).
	if err := modeRules(b, !c.NoMetadata); err != nil {
		return err
	}
	if c.NoMetadata {
		if err := metadataRules(b); err != nil {
			return err
		}
	}
	// Leases make a host writer wait for the sandbox (lease-break-time).
	if err := b.rule("fcntl", eperm, cond(1, sc.CompareMaskedEqual, 0xffffffff, unix.F_SETLEASE)); err != nil {
		return err
	}
	if c.MaxDisk {
		// space reserved beyond the file size is not seen by RLIMIT_FSIZE
		const keep, punch = unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE
		if err := b.rule("fallocate", errno(unix.EFBIG), cond(1, sc.CompareMaskedEqual, keep|punch, keep)); err != nil {
			return err
		}
	}
	if c.NoSysVMemory {
		for _, n := range []string{"shmget", "msgget"} {
			if err := b.rule(n, eperm); err != nil {
				return err
			}
		}
	}
	return nil
}

// confineRules: metadata changes and xattr reads by path, set-id modes, openat2.
func confineRules(b *builder) error {
	for _, n := range ByPath {
		if err := b.rule(n, errno(unix.EPERM)); err != nil {
			return err
		}
	}
	for _, n := range NotSupported {
		if err := b.rule(n, errno(unix.ENOTSUP)); err != nil {
			return err
		}
	}
	if err := b.rule("utimensat", errno(unix.EPERM), cond(1, sc.CompareNotEqual, 0, 0)); err != nil {
		return err
	}
	if err := b.rule("openat2", errno(unix.ENOSYS)); err != nil {
		return err
	}
	return modeRules(b, true)
}

// modeRules refuses S_ISUID and S_ISGID in every mode a call takes (fchmod's too
// unless metadataRules refuses fchmod altogether).
func modeRules(b *builder, fchmod bool) error {
	eperm := errno(unix.EPERM)
	bits := []uint64{unix.S_ISUID, unix.S_ISGID}
	type modeArg struct {
		name          string
		flags, mode   int // argument indices; flags < 0: the call always creates
		creationFlags []uint64
	}
	creating := []uint64{unix.O_CREAT, oTmpfile}
	for _, m := range []modeArg{
		{"open", 1, 2, creating}, {"openat", 2, 3, creating},
		{"creat", -1, 1, nil}, {"mknod", -1, 1, nil}, {"mknodat", -1, 2, nil},
		{"mkdir", -1, 1, nil}, {"mkdirat", -1, 2, nil}, {"fchmod", -1, 1, nil},
	} {
		if m.name == "fchmod" && !fchmod {
			continue
		}
		for _, bit := range bits {
			mode := cond(uint(m.mode), sc.CompareMaskedEqual, bit, bit)
			if m.flags < 0 {
				if err := b.rule(m.name, eperm, mode); err != nil {
					return err
				}
				continue
			}
			for _, fl := range m.creationFlags {
				if err := b.rule(m.name, eperm, cond(uint(m.flags), sc.CompareMaskedEqual, fl, fl), mode); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// export writes the filter as BPF (libseccomp 2.5 cannot export to memory) with
// the guard for unreviewed syscalls in front.
func export(f *sc.ScmpFilter) ([]byte, error) {
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
	if rerr != nil || len(bpf) == 0 || len(bpf)%8 != 0 {
		return nil, fmt.Errorf("BUG(seccomp): exported %d bytes", len(bpf))
	}
	out := append(guard(), bpf...)
	if len(out)/8 > 4096 {
		return nil, fmt.Errorf("seccomp: the filter has %d instructions (the kernel takes 4096)", len(out)/8)
	}
	return out, nil
}

// auditArch is this architecture's AUDIT_ARCH_*.
func auditArch() uint32 {
	if runtime.GOARCH == "arm64" {
		return 0xc00000b7
	}
	return 0xc000003e
}

// guard is a BPF prologue: on the native architecture, a syscall number at or past
// Reviewed (below the x32 range, which the rest of the program kills) answers
// ENOSYS; everything else goes on to libseccomp's program.
func guard() []byte {
	type insn struct {
		code   uint16
		jt, jf uint8
		k      uint32
	}
	const (
		ldAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
	)
	prog := []insn{
		{ldAbs, 0, 0, 4},                              // 0: arch
		{jeq, 0, 4, auditArch()},                      // 1: foreign: to 6
		{ldAbs, 0, 0, 0},                              // 2: nr
		{jge, 2, 0, 0x40000000},                       // 3: x32: to 6
		{jge, 0, 1, Reviewed},                         // 4: reviewed: to 6
		{ret, 0, 0, 0x00050000 | uint32(unix.ENOSYS)}, // 5: SECCOMP_RET_ERRNO|ENOSYS
	}
	out := make([]byte, 0, 8*len(prog))
	for _, i := range prog {
		out = binary.NativeEndian.AppendUint16(out, i.code)
		out = append(out, i.jt, i.jf)
		out = binary.NativeEndian.AppendUint32(out, i.k)
	}
	return out
}

// socketRules: every address family but AF_UNIX (when allowed), AF_INET and AF_INET6
// is refused; inet sockets only as TCP (protocol 0 or IPPROTO_TCP), or UDP when
// allowed; raw and packet sockets never (unless socket is re-allowed by name).
func socketRules(c Config, b *builder) error {
	eperm := errno(unix.EPERM)
	const typeMask = 0xf // strips SOCK_NONBLOCK | SOCK_CLOEXEC
	families := []uint64{unix.AF_INET, unix.AF_INET6}
	// domain not in {unix?, inet, inet6}: one rule per excluded range is awkward in
	// libseccomp (conditions AND together), so deny domain ranges around the allowed ones.
	allowed := map[uint64]bool{unix.AF_INET: !c.NoInet, unix.AF_INET6: !c.NoInet, unix.AF_UNIX: c.AllowUnix}
	for d := uint64(0); d < unix.AF_MAX+8; d++ {
		if !allowed[d] {
			if err := b.rule("socket", eperm, cond(0, sc.CompareEqual, d, 0)); err != nil {
				return err
			}
		}
	}
	if err := b.rule("socket", eperm, cond(0, sc.CompareGreaterEqual, unix.AF_MAX+8, 0)); err != nil {
		return err
	}
	if c.NoInet {
		return nil
	}
	dgram := c.AllowUDP || c.AllowICMP
	for _, fam := range families {
		// types other than stream (and dgram when UDP or ICMP is allowed)
		for t := uint64(0); t <= typeMask; t++ {
			if t == unix.SOCK_STREAM || (dgram && t == unix.SOCK_DGRAM) {
				continue
			}
			if err := b.rule("socket", eperm, cond(0, sc.CompareEqual, fam, 0), cond(1, sc.CompareMaskedEqual, typeMask, t)); err != nil {
				return err
			}
		}
		// stream: TCP only (no SCTP or MPTCP: Landlock governs TCP ports alone);
		// dgram: UDP and ICMP echo, as allowed (protocol 0 is UDP). libseccomp allows
		// one check per argument, so every other protocol number is refused one by
		// one up to the largest allowed, and as a range above it.
		protos := map[uint64][]uint64{unix.SOCK_STREAM: {unix.IPPROTO_TCP}}
		if c.AllowUDP {
			protos[unix.SOCK_DGRAM] = append(protos[unix.SOCK_DGRAM], unix.IPPROTO_UDP)
		}
		if c.AllowICMP {
			icmp := uint64(unix.IPPROTO_ICMP)
			if fam == unix.AF_INET6 {
				icmp = unix.IPPROTO_ICMPV6
			}
			protos[unix.SOCK_DGRAM] = append(protos[unix.SOCK_DGRAM], icmp)
		}
		if !c.AllowUDP && c.AllowICMP {
			// protocol 0 of a dgram socket is UDP
			if err := b.rule("socket", eperm, cond(0, sc.CompareEqual, fam, 0), cond(1, sc.CompareMaskedEqual, typeMask, unix.SOCK_DGRAM), cond(2, sc.CompareEqual, 0, 0)); err != nil {
				return err
			}
		}
		for t, ok := range protos {
			base := []sc.ScmpCondition{cond(0, sc.CompareEqual, fam, 0), cond(1, sc.CompareMaskedEqual, typeMask, t)}
			top := slices.Max(ok)
			for p := uint64(1); p < top; p++ {
				if slices.Contains(ok, p) {
					continue
				}
				if err := b.rule("socket", eperm, append(base[:2:2], cond(2, sc.CompareEqual, p, 0))...); err != nil {
					return err
				}
			}
			if err := b.rule("socket", eperm, append(base[:2:2], cond(2, sc.CompareGreater, top, 0))...); err != nil {
				return err
			}
		}
	}
	return nil
}

// metadataRules refuses, with EPERM, every change of metadata and every lock
// through a descriptor (fchmod, fchown, futimens, fsetxattr, fremovexattr,
// FS_IOC_SETFLAGS/FSSETXATTR, flock, fcntl locks): what a read-only view would
// answer EROFS (or the supervisor EACCES) to, for processes without one. The
// path-based forms are in Denied; utimensat with a path and F_SETLEASE are
// refused by the base rules.
func metadataRules(b *builder) error {
	eperm := errno(unix.EPERM)
	for _, n := range []string{"fchmod", "fchown", "fsetxattr", "fremovexattr", "flock"} {
		if err := b.rule(n, eperm); err != nil {
			return err
		}
	}
	if err := b.rule("utimensat", eperm, cond(1, sc.CompareEqual, 0, 0)); err != nil { // futimens
		return err
	}
	for _, cmd := range []uint64{unix.F_SETLK, unix.F_SETLKW, unix.F_OFD_SETLK, unix.F_OFD_SETLKW} {
		// compared as the kernel reads it (an int: high bits do not slip past)
		if err := b.rule("fcntl", eperm, cond(1, sc.CompareMaskedEqual, 0xffffffff, cmd)); err != nil {
			return err
		}
	}
	for _, req := range []uint64{unix.FS_IOC_SETFLAGS, fsIocFSSetXattr} {
		if err := b.rule("ioctl", eperm, cond(1, sc.CompareMaskedEqual, 0xffffffff, req)); err != nil {
			return err
		}
	}
	return nil
}

// SessionLayer compiles the layer a COW-fork clone loads right after it made itself
// a session and process group of its own (setsid): setsid and setpgid refused with
// EPERM, so neither the clone nor anything it starts can leave that session or
// group — by which the supervisor attributes its denials and its leftovers are
// killed (core/guest/python/sandtrap_guest/template.py).
func SessionLayer() (*Program, error) {
	const k = "session"
	mu.Lock()
	defer mu.Unlock()
	if p, ok := cache[k]; ok {
		return p, nil
	}
	b, err := newFilter(nil)
	if err != nil {
		return nil, err
	}
	defer b.f.Release()
	for _, n := range []string{"setsid", "setpgid"} {
		if err := b.rule(n, errno(unix.EPERM)); err != nil {
			return nil, err
		}
	}
	bpf, err := export(b.f)
	if err != nil {
		return nil, err
	}
	p := &Program{BPF: bpf, Denied: b.denied}
	cache[k] = p
	return p, nil
}

// LayerConfig is a filter a process adds on top of its sandbox's (a fork of a
// template, which shares the template's mount namespace, IPC namespace and
// supervisor rather than having its own).
type LayerConfig struct {
	// DenySpawn: no new processes (fork, vfork, clone without CLONE_THREAD) and no
	// execve, with EPERM.
	DenySpawn bool
}

// Layer compiles a fork's layer: metadata changes, locks and leases, SysV and
// POSIX IPC, inotify watches — things the template's view, IPC namespace and
// supervisor would judge for the template, not for this fork — refused with
// EPERM; with DenySpawn, process creation too.
func Layer(c LayerConfig) (*Program, error) {
	k := fmt.Sprintf("layer|%v", c.DenySpawn)
	mu.Lock()
	defer mu.Unlock()
	if p, ok := cache[k]; ok {
		return p, nil
	}
	b, err := newFilter(nil)
	if err != nil {
		return nil, err
	}
	defer b.f.Release()
	eperm := errno(unix.EPERM)
	if err := metadataRules(b); err != nil {
		return nil, err
	}
	if err := b.rule("fcntl", eperm, cond(1, sc.CompareMaskedEqual, 0xffffffff, unix.F_SETLEASE)); err != nil {
		return nil, err
	}
	if err := b.rule("utimensat", eperm, cond(1, sc.CompareNotEqual, 0, 0)); err != nil {
		return nil, err
	}
	for _, n := range []string{"shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget",
		"semop", "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
		"mq_getsetattr", "inotify_add_watch"} {
		if err := b.rule(n, eperm); err != nil {
			return nil, err
		}
	}
	if c.DenySpawn {
		for _, n := range []string{"execve", "fork", "vfork"} {
			if err := b.rule(n, eperm); err != nil {
				return nil, err
			}
		}
		if err := b.rule("clone", eperm, cond(0, sc.CompareMaskedEqual, unix.CLONE_THREAD, 0)); err != nil {
			return nil, err
		}
	}
	bpf, err := export(b.f)
	if err != nil {
		return nil, err
	}
	p := &Program{BPF: bpf, Denied: b.denied}
	cache[k] = p
	return p, nil
}
