package seccomp

import (
	"encoding/binary"
	"fmt"

	sc "github.com/seccomp/libseccomp-golang"
)

// Eval runs a compiled filter (Program.BPF) on one call as the kernel would and
// returns its SECCOMP_RET_* value: the supervisor asks the sandbox's filter without
// the host's traps what it would have answered (built-in rules first, see
// core/supervise host.go). Only the classic BPF a seccomp filter may hold is run;
// anything else is an error (the caller refuses the call).
func Eval(bpf []byte, nr int32, arch uint32, ip uint64, args [6]uint64) (uint32, error) {
	var data [64]byte
	le := binary.LittleEndian
	le.PutUint32(data[0:], uint32(nr))
	le.PutUint32(data[4:], arch)
	le.PutUint64(data[8:], ip)
	for i, a := range args {
		le.PutUint64(data[16+8*i:], a)
	}
	n := len(bpf) / 8
	var a, x uint32
	var mem [16]uint32
	for pc, steps := 0, 0; pc < n; pc, steps = pc+1, steps+1 {
		if steps > 4096 {
			return 0, fmt.Errorf("seccomp eval: too many steps")
		}
		ins := bpf[pc*8:]
		code := le.Uint16(ins[0:])
		jt, jf := int(ins[2]), int(ins[3])
		k := le.Uint32(ins[4:])
		switch code {
		case 0x20: // ld [k]
			if k > 60 || k%4 != 0 {
				return 0, fmt.Errorf("seccomp eval: load at %d", k)
			}
			a = le.Uint32(data[k:])
		case 0x00: // ld #k
			a = k
		case 0x01: // ldx #k
			x = k
		case 0x60: // ld M[k]
			a = mem[k&15]
		case 0x61: // ldx M[k]
			x = mem[k&15]
		case 0x02: // st M[k]
			mem[k&15] = a
		case 0x03: // stx M[k]
			mem[k&15] = x
		case 0x07: // tax
			x = a
		case 0x87: // txa
			a = x
		case 0x54: // and #k
			a &= k
		case 0x44: // or #k
			a |= k
		case 0x04: // add #k
			a += k
		case 0x14: // sub #k
			a -= k
		case 0x05: // ja
			pc += int(k)
		case 0x15, 0x25, 0x35, 0x45: // jeq, jgt, jge, jset #k
			var t bool
			switch code {
			case 0x15:
				t = a == k
			case 0x25:
				t = a > k
			case 0x35:
				t = a >= k
			default:
				t = a&k != 0
			}
			if t {
				pc += jt
			} else {
				pc += jf
			}
		case 0x1d, 0x2d, 0x3d, 0x4d: // the same against x
			var t bool
			switch code {
			case 0x1d:
				t = a == x
			case 0x2d:
				t = a > x
			case 0x3d:
				t = a >= x
			default:
				t = a&x != 0
			}
			if t {
				pc += jt
			} else {
				pc += jf
			}
		case 0x06: // ret #k
			return k, nil
		case 0x16: // ret a
			return a, nil
		default:
			return 0, fmt.Errorf("seccomp eval: instruction %#x", code)
		}
	}
	return 0, fmt.Errorf("seccomp eval: ran off the program")
}

// Action values of SECCOMP_RET_* (the upper 16 bits; the lower are the data).
const (
	RetKillProcess = 0x80000000
	RetKillThread  = 0x00000000
	RetTrap        = 0x00030000
	RetErrno       = 0x00050000
	RetUserNotif   = 0x7fc00000
	RetTrace       = 0x7ff00000
	RetLog         = 0x7ffc0000
	RetAllow       = 0x7fff0000
	RetActionFull  = 0xffff0000
	RetData        = 0x0000ffff
)

// Nr is the number of a syscall name on this architecture (false: unknown).
func Nr(name string) (int32, bool) {
	nr, ok := syscallNr(name)
	return int32(nr), ok
}

// Name is the name of a syscall number on this architecture ("" when unknown).
func Name(nr int32) string {
	n, err := scName(nr)
	if err != nil {
		return ""
	}
	return n
}

func scName(nr int32) (string, error) {
	for name, n := range newer {
		if int32(n) == nr {
			return name, nil
		}
	}
	return sc.ScmpSyscall(nr).GetName()
}
