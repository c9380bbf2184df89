package run

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	"golang.org/x/sys/unix"
)

// Checkpoints of a sandbox's process are application checkpoints (docs/protocol.md,
// "checkpoints"): the program's own state, as bytes its owner's save_fn returned,
// persisted beside what the program was started with and an inventory of what
// was NOT captured — every process image, every open fd. A restore starts the
// program again, under a sandbox of the same policy only, and hands it the state
// on fd 3. Nothing of the kernel's state of the process is saved or recreated
// (no CRIU): that is the list's first entry, and nothing pretends otherwise.

// CheckpointFormat names the directory format (checkpoint.json's "format").
const CheckpointFormat = "sandtrap-checkpoint/1"

// CheckpointStateFD is the fd on which a restored program finds its state.
const CheckpointStateFD = 3

// Checkpoint is checkpoint.json.
type Checkpoint struct {
	Format      string            `json:"format"`
	Name        string            `json:"name"`
	Created     string            `json:"created"` // RFC 3339, UTC
	Policy      string            `json:"policy_sha256"`
	Process     CheckpointProcess `json:"process"`
	AppState    *CheckpointBlob   `json:"app_state"` // nil: no save_fn state
	NotCaptured []NotCaptured     `json:"not_captured"`
}

// CheckpointProcess is what the program was started with, and its tree then.
type CheckpointProcess struct {
	Argv   []string          `json:"argv"`
	Cwd    string            `json:"cwd,omitempty"`
	Env    map[string]string `json:"env,omitempty"` // the run's own (the policy's env is the policy's)
	Paused bool              `json:"paused"`        // it was paused by its owner when checkpointed
	Tree   []CheckpointProc  `json:"tree"`
}

// CheckpointProc is one process of the tree (pid 1, sandtrap-init, left out).
type CheckpointProc struct {
	Pid  int            `json:"pid"` // in the host's pid namespace, then
	Argv []string       `json:"argv"`
	FDs  []CheckpointFD `json:"fds"`
}

// CheckpointFD is one open fd: kind file, pipe, socket, anon_inode or other.
type CheckpointFD struct {
	FD     int    `json:"fd"`
	Kind   string `json:"kind"`
	Target string `json:"target"`
}

// CheckpointBlob is a file of the checkpoint, with its size and digest.
type CheckpointBlob struct {
	File   string `json:"file"`
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
}

// NotCaptured is one thing a restore does not bring back.
type NotCaptured struct {
	What   string `json:"what"`
	Detail string `json:"detail"`
}

// PolicySum is the digest of a policy a checkpoint records: a restore needs a
// sandbox whose policy has the same.
func PolicySum(p *policy.Policy) string {
	b, _ := json.Marshal(p)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Checkpoint writes the checkpoint of p to dir (which must not exist: it is made
// whole or not at all). The run is paused while its tree is inventoried (its own
// pause is kept); a run that cannot pause (no pid namespace) is refused, as is one
// that ended.
func (p *Process) Checkpoint(dir, name, policySum string, appState []byte) (*Checkpoint, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, protocol.InvalidRequest("dir", "want an absolute path (the checkpoint's directory, which must not exist)")
	}
	if _, err := os.Lstat(dir); err == nil {
		return nil, protocol.InvalidRequest("dir", "%s exists: a checkpoint is never written over another", dir)
	}
	if p.Done() {
		return nil, protocol.Errorf(protocol.KindInvalidRequest, "the process ended: nothing to checkpoint")
	}
	wasPaused := p.Paused()
	if !wasPaused {
		if err := p.Pause(); err != nil {
			return nil, err
		}
		defer p.Resume()
	}
	if p.Done() {
		return nil, protocol.Errorf(protocol.KindInvalidRequest, "the process ended: nothing to checkpoint")
	}
	cp := &Checkpoint{
		Format:  CheckpointFormat,
		Name:    name,
		Created: time.Now().UTC().Format(time.RFC3339),
		Policy:  policySum,
		Process: CheckpointProcess{Argv: p.Argv, Cwd: p.Cwd, Env: p.Env, Paused: wasPaused},
	}
	kinds := map[string]int{}
	for _, pid := range treePids(p.ctl.proc.Pid) {
		if pid == p.ctl.proc.Pid {
			continue
		}
		m := CheckpointProc{Pid: pid, Argv: cmdline(pid), FDs: []CheckpointFD{}}
		ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		for _, e := range ents {
			n, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			t, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + e.Name())
			k := fdKind(t)
			kinds[k]++
			m.FDs = append(m.FDs, CheckpointFD{FD: n, Kind: k, Target: t})
		}
		sort.Slice(m.FDs, func(i, j int) bool { return m.FDs[i].FD < m.FDs[j].FD })
		cp.Process.Tree = append(cp.Process.Tree, m)
	}
	cp.NotCaptured = notCaptured(len(cp.Process.Tree), kinds)
	if appState != nil {
		s := sha256.Sum256(appState)
		cp.AppState = &CheckpointBlob{File: "app_state.bin", Size: len(appState), SHA256: hex.EncodeToString(s[:])}
	}
	if err := writeCheckpoint(dir, cp, appState); err != nil {
		return nil, protocol.Errorf(protocol.KindInternal, "checkpoint: %v", err)
	}
	return cp, nil
}

func notCaptured(procs int, kinds map[string]int) []NotCaptured {
	out := []NotCaptured{
		{"process images", fmt.Sprintf("the memory, registers, threads and signal state of the %d process(es) of the tree: a restore starts argv again, with app_state on fd %d", procs, CheckpointStateFD)},
		{"child processes", "every process but the program is gone after a restore (the program starts them again if it needs them)"},
		{"files", "files the program wrote are not copied: they stay where they are (a workdir's changes follow its on_exit, not the checkpoint)"},
	}
	for _, k := range []string{"socket", "pipe", "anon_inode", "file", "other"} {
		if n := kinds[k]; n > 0 {
			d := map[string]string{
				"socket":     "open sockets (connections, listeners) are not recreated",
				"pipe":       "pipes (the popen streams among them) are not recreated: a restore has its own stdio",
				"anon_inode": "eventfds, epoll, timerfds, signalfds, memfds… are not recreated",
				"file":       "open files are not reopened, nor their offsets kept",
				"other":      "fds of other kinds are not recreated",
			}[k]
			out = append(out, NotCaptured{fmt.Sprintf("%d %s fd(s)", n, k), d})
		}
	}
	return out
}

func fdKind(target string) string {
	switch {
	case strings.HasPrefix(target, "socket:"):
		return "socket"
	case strings.HasPrefix(target, "pipe:"):
		return "pipe"
	case strings.HasPrefix(target, "anon_inode:"), strings.HasPrefix(target, "/memfd:"):
		return "anon_inode"
	case strings.HasPrefix(target, "/"):
		return "file"
	}
	return "other"
}

func cmdline(pid int) []string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	s := strings.TrimRight(string(b), "\x00")
	if s == "" {
		return []string{}
	}
	return strings.Split(s, "\x00")
}

// writeCheckpoint makes dir whole or not at all: a sibling temporary directory,
// renamed once every file is in.
func writeCheckpoint(dir string, cp *Checkpoint, appState []byte) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if cp.AppState != nil {
		if err := writeSync(filepath.Join(tmp, cp.AppState.File), appState); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	if err := writeSync(filepath.Join(tmp, "checkpoint.json"), append(b, '\n')); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o700); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE); err != nil {
		return err
	}
	ok = true
	return nil
}

func writeSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// LoadCheckpoint reads and checks a checkpoint directory: its format, and its
// app_state's size and digest. Anything else is an error (fail closed: a
// checkpoint that does not check out is never restored).
func LoadCheckpoint(dir string) (*Checkpoint, []byte, error) {
	bad := func(format string, a ...any) (*Checkpoint, []byte, error) {
		return nil, nil, protocol.InvalidRequest("dir", "%s: "+format, append([]any{dir}, a...)...)
	}
	b, err := os.ReadFile(filepath.Join(dir, "checkpoint.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, protocol.Errorf(protocol.KindNotFound, "no checkpoint in %s (no checkpoint.json)", dir)
		}
		return bad("%v", err)
	}
	var cp Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return bad("checkpoint.json: %v", err)
	}
	if cp.Format != CheckpointFormat {
		return bad("format %q is not %q", cp.Format, CheckpointFormat)
	}
	if len(cp.Process.Argv) == 0 {
		return bad("checkpoint.json has no argv")
	}
	if cp.AppState == nil {
		return &cp, nil, nil
	}
	if cp.AppState.File != "app_state.bin" {
		return bad("app_state's file %q is not app_state.bin", cp.AppState.File)
	}
	st, err := os.ReadFile(filepath.Join(dir, cp.AppState.File))
	if err != nil {
		return bad("%v", err)
	}
	sum := sha256.Sum256(st)
	if len(st) != cp.AppState.Size || hex.EncodeToString(sum[:]) != cp.AppState.SHA256 {
		return bad("app_state.bin does not match its size and sha256 (changed or truncated)")
	}
	return &cp, st, nil
}

// StateFD is a sealed, read-only memfd holding state, at offset 0 (the restored
// program's fd 3).
func StateFD(state []byte) (int, error) {
	fd, err := unix.MemfdCreate("sandtrap-checkpoint", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, err
	}
	for off := 0; off < len(state); {
		n, err := unix.Write(fd, state[off:])
		if err != nil {
			unix.Close(fd)
			return -1, err
		}
		off += n
	}
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		unix.Close(fd)
		return -1, err
	}
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL)
	// read-only for the program: reopen through /proc (the seal already forbids writes)
	ro, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	unix.Close(fd)
	if err != nil {
		return -1, err
	}
	return ro, nil
}
