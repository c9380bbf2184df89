//go:build sandtrap_testhook

package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandtrap/sandtrap/core/supervise"
	"golang.org/x/sys/unix"
)

// A second thread flips the path execve reads between an allowed and a refused
// program while the host judges it: the program the host refused never runs. With
// the execve merely continued (supervise.NaiveContinue), the same attack runs it.
func TestHandlerExecRace(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok"), []byte("#!/bin/sh\nexit 0\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "no"), []byte("#!/bin/sh\nexit 3\n"), 0o755)
	bin := cProgram(t, dir, "race", execRaceC)
	for _, naive := range []bool{false, true} {
		mode := "held"
		if naive {
			mode = "continued"
		}
		t.Run(mode, func(t *testing.T) {
			supervise.NaiveContinue(naive)
			defer supervise.NaiveContinue(false)
			sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", dir}})
			res := drive(t, sb, map[string]any{"argv": []any{bin, dir, "300"}, "policy_fn": map[string]any{}},
				func(c map[string]any) map[string]any {
					if p, _ := c["path"].(string); c["syscall"] == "execve" && strings.HasSuffix(p, "/no") {
						return map[string]any{"action": "errno", "errno": 13}
					}
					return map[string]any{"action": "continue"}
				})
			ok, no, refused, _, out := raceCounts(t, res)
			t.Logf("%s: %s", mode, out)
			if ok == 0 || refused == 0 {
				t.Fatalf("the race did not happen: %s", out)
			}
			// other: a torn copy ("nk", "oo") the judge let through names no file (ENOENT)
			if !naive && no != 0 {
				t.Fatalf("the refused program ran %d times", no)
			}
			if naive && no == 0 {
				t.Fatalf("a continued execve never lost the race: the test does not attack (%s)", out)
			}
		})
	}
}

const execRaceC = `
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
static char path[4096];
static volatile int stop;
static size_t off;
static void *flip(void *a) {
	(void)a;
	volatile int i;
	volatile char *p = path;
	for (;;) {
		p[off] = 'n'; p[off+1] = 'o';
		for (i = 0; i < 3000; i++) ;
		p[off] = 'o'; p[off+1] = 'k';
		for (i = 0; i < 3000; i++) ;
	}
	return 0;
}
int main(int argc, char **argv) {
	int n = atoi(argv[2]), i, ok = 0, no = 0, refused = 0, other = 0;
	for (i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			pthread_t t;
			char *av[2];
			snprintf(path, sizeof path, "%s/ok", argv[1]);
			off = strlen(path) - 2;
			av[0] = path; av[1] = 0;
			pthread_create(&t, 0, flip, 0);
			usleep(50);
			execve(path, av, environ);
			_exit(errno == EACCES ? 126 : 127);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		int c = WIFEXITED(st) ? WEXITSTATUS(st) : 200;
		if (c == 0) ok++; else if (c == 3) no++; else if (c == 126) refused++; else other++;
	}
	printf("ok=%d no=%d refused=%d other=%d\n", ok, no, refused, other);
	return 0;
}
`

// Through the engine, a judge refusing a tree (path or path2 under /nono/): a C
// program's second thread flips a path between okay/ and nono/ while the first
// stats it (newfstatat) and renames a file to it (rename). Performed, the refused
// file is never stat'ed and nothing lands in nono/; continued
// (supervise.NaiveContinue), the same program reaches both.
func TestHandlerPathCallRace(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"okay", "nono"} {
		os.Mkdir(filepath.Join(dir, d), 0o777)
		os.Chmod(filepath.Join(dir, d), 0o777)
		os.WriteFile(filepath.Join(dir, d, "f"), []byte(d), 0o666)
	}
	bin := cProgram(t, dir, "race", pathRaceC)
	os.Chmod(dir, 0o777)
	for _, naive := range []bool{false, true} {
		mode := "performed"
		if naive {
			mode = "continued"
		}
		t.Run(mode, func(t *testing.T) {
			supervise.NaiveContinue(naive)
			defer supervise.NaiveContinue(false)
			sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin"}, "fs_writable": []any{dir}})
			res := drive(t, sb, map[string]any{"argv": []any{bin, dir, "3000"},
				"handlers": []any{map[string]any{"syscall": "newfstatat", "id": 1}, map[string]any{"syscall": "rename", "id": 2}}},
				func(c map[string]any) map[string]any {
					p, _ := c["path"].(string)
					p2, _ := c["path2"].(string)
					if strings.Contains(p, "/nono/") || strings.Contains(p2, "/nono/") {
						return map[string]any{"action": "errno", "errno": 13}
					}
					return map[string]any{"action": "continue"}
				})
			out := strings.TrimSpace(string(res["stdout"].([]byte)))
			t.Logf("%s: %s", mode, out)
			var sOK, sHit, sRef, rOK, rHit, rRef int
			if _, err := fmt.Sscanf(out, "stat ok=%d hit=%d refused=%d rename ok=%d hit=%d refused=%d", &sOK, &sHit, &sRef, &rOK, &rHit, &rRef); err != nil {
				t.Fatalf("output %q: %v (%v)", out, err, res)
			}
			if sOK == 0 || sRef == 0 || rOK == 0 || rRef == 0 {
				t.Fatalf("the race did not happen: %s", out)
			}
			if !naive && (sHit != 0 || rHit != 0) {
				t.Fatalf("a racing thread reached the refused tree: %s", out)
			}
			if naive && sHit == 0 && rHit == 0 {
				t.Fatalf("continued calls never lost the race: the test does not attack (%s)", out)
			}
		})
	}
}

const pathRaceC = `
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <errno.h>

static char a1[4096], b1[4096], buf1[4096], a2[4096], b2[4096], buf2[4096];
static volatile int stop;

static void *flip(void *x) {
	(void)x;
	for (unsigned long i = 0; !stop; i++) {
		strcpy(buf1, i & 1 ? a1 : b1);
		strcpy(buf2, i & 1 ? a2 : b2);
	}
	return NULL;
}

int main(int argc, char **argv) {
	const char *d = argv[1];
	int n = atoi(argv[2]);
	char src[4096];
	snprintf(a1, sizeof a1, "%s/okay/f", d);
	snprintf(b1, sizeof b1, "%s/nono/f", d);
	snprintf(a2, sizeof a2, "%s/okay/r", d);
	snprintf(b2, sizeof b2, "%s/nono/r", d);
	snprintf(src, sizeof src, "%s/okay/s", d);
	strcpy(buf1, a1);
	strcpy(buf2, a2);
	struct stat sec;
	int fd = open(b1, O_PATH | O_CLOEXEC); /* openat is not judged here */
	if (fd < 0 || fstat(fd, &sec) != 0) { perror("secret"); return 2; }
	close(fd);
	pthread_t t;
	pthread_create(&t, NULL, flip, NULL);
	int sok = 0, shit = 0, sref = 0, rok = 0, rhit = 0, rref = 0;
	for (int i = 0; i < n; i++) {
		struct stat st;
		long r = syscall(SYS_newfstatat, AT_FDCWD, buf1, &st, 0);
		if (r == 0) { sok++; if (st.st_ino == sec.st_ino) shit++; }
		else if (errno == EACCES) sref++;
	}
	for (int i = 0; i < n; i++) {
		int c = open(src, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
		if (c >= 0) close(c);
		long r = syscall(SYS_rename, src, buf2);
		if (r == 0) rok++;
		else if (errno == EACCES) rref++;
		fd = open(b2, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0) { rhit++; close(fd); unlinkat(AT_FDCWD, b2, 0); }
		unlinkat(AT_FDCWD, a2, 0);
	}
	stop = 1;
	pthread_join(t, NULL);
	printf("stat ok=%d hit=%d refused=%d rename ok=%d hit=%d refused=%d\n", sok, shit, sref, rok, rhit, rref);
	return 0;
}
`

// Another process sharing the caller's memory flips the path execve reads between
// an allowed and a refused program while the host judges it: a clone(CLONE_VM)
// child of the caller ("clone"), or a thread of the parent of the caller, a vfork
// child ("vfork"). Neither is a thread of the caller: only the /proc scan finds
// them, which a held execve makes when its run made such a process (hostexec.go).
// Held, the refused program never runs; with the scan skipped
// (supervise.SkipSharerScan), the same attack runs it.
func TestHandlerExecRaceSharedMemory(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok"), []byte("#!/bin/sh\nexit 0\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "no"), []byte("#!/bin/sh\nexit 3\n"), 0o755)
	bin := cProgram(t, dir, "race", execSharedRaceC)
	for _, how := range []string{"clone", "vfork"} {
		for _, skip := range []bool{false, true} {
			mode := how + "/held"
			if skip {
				mode = how + "/unscanned"
			}
			t.Run(mode, func(t *testing.T) {
				supervise.SkipSharerScan(skip)
				defer supervise.SkipSharerScan(false)
				sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", dir}})
				res := drive(t, sb, map[string]any{"argv": []any{bin, dir, "200", how}, "policy_fn": map[string]any{}},
					func(c map[string]any) map[string]any {
						if p, _ := c["path"].(string); c["syscall"] == "execve" && strings.HasSuffix(p, "/no") {
							return map[string]any{"action": "errno", "errno": 13}
						}
						return map[string]any{"action": "continue"}
					})
				ok, no, refused, _, out := raceCounts(t, res)
				t.Logf("%s: %s", mode, out)
				if ok == 0 || refused == 0 {
					t.Fatalf("the race did not happen: %s", out)
				}
				if !skip && no != 0 {
					t.Fatalf("the refused program ran %d times", no)
				}
				if skip && no == 0 {
					t.Fatalf("an unscanned execve never lost the race: the test does not attack (%s)", out)
				}
			})
		}
	}
}

const execSharedRaceC = `
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
static char path[4096];
static size_t off;
static void flips(long n) {
	volatile int i;
	volatile char *p = path;
	while (n-- > 0) {
		p[off] = 'n'; p[off+1] = 'o';
		for (i = 0; i < 3000; i++) ;
		p[off] = 'o'; p[off+1] = 'k';
		for (i = 0; i < 3000; i++) ;
	}
}
/* the clone(CLONE_VM) child: flips for a while (~20 ms: longer than the exec), then ends (it outlives the exec) */
static int flipper(void *a) {
	(void)a;
	flips(5000);
	syscall(SYS_exit, 0);
	return 0;
}
static void *flip_thread(void *a) {
	(void)a;
	flips(1L << 40);
	return 0;
}
int main(int argc, char **argv) {
	int n = atoi(argv[2]), i, ok = 0, no = 0, refused = 0, other = 0;
	int vf = strcmp(argv[3], "vfork") == 0;
	for (i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			char *av[2];
			snprintf(path, sizeof path, "%s/ok", argv[1]);
			off = strlen(path) - 2;
			av[0] = path; av[1] = 0;
			if (!vf) {
				char *stack = malloc(1 << 16);
				if (clone(flipper, stack + (1 << 16), CLONE_VM | SIGCHLD, 0) < 0)
					_exit(125);
				usleep(50);
				execve(path, av, environ);
				_exit(errno == EACCES ? 126 : 127);
			}
			pthread_t t;
			pthread_create(&t, 0, flip_thread, 0);
			usleep(50);
			pid_t v = vfork();
			if (v == 0) {
				execve(path, av, environ);
				_exit(errno == EACCES ? 126 : 127);
			}
			int st = 0;
			waitpid(v, &st, 0);
			_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 200);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		int c = WIFEXITED(st) ? WEXITSTATUS(st) : 200;
		if (c == 0) ok++; else if (c == 3) no++; else if (c == 126) refused++; else other++;
	}
	printf("ok=%d no=%d refused=%d other=%d\n", ok, no, refused, other);
	return 0;
}
`

// A thread rewrites the path execve reads after the host copied it, then ends
// before the host answers: the caller is then its process's only thread, and its
// execve is continued without a ptrace hold (hostexec.go: execAlone), after the
// judged copy is written back. The program the host judged runs, never the one the
// thread left behind; without the write-back (supervise.SkipWriteBack) the
// rewritten path runs.
func TestHandlerExecThreadEndedBeforeTheAnswer(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok"), []byte("#!/bin/sh\nexit 0\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "no"), []byte("#!/bin/sh\nexit 3\n"), 0o755)
	bin := cProgram(t, dir, "ended", execEndedC)
	for _, skip := range []bool{false, true} {
		mode := "written back"
		if skip {
			mode = "not written back"
		}
		t.Run(mode, func(t *testing.T) {
			supervise.SkipWriteBack(skip)
			defer supervise.SkipWriteBack(false)
			sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", dir}})
			res := drive(t, sb, map[string]any{"argv": []any{bin, dir, "10"}, "policy_fn": map[string]any{}},
				func(c map[string]any) map[string]any {
					if c["syscall"] == "execve" {
						p, _ := c["path"].(string)
						if strings.HasSuffix(p, "/no") {
							return map[string]any{"action": "errno", "errno": 13}
						}
						if strings.HasSuffix(p, "/ok") {
							time.Sleep(20 * time.Millisecond) // the thread rewrites the path and ends meanwhile
						}
					}
					return map[string]any{"action": "continue"}
				})
			ok, no, _, _, out := raceCounts(t, res)
			t.Logf("%s: %s", mode, out)
			if !skip && (no != 0 || ok == 0) {
				t.Fatalf("the judged program must run, the rewritten one never: %s", out)
			}
			if skip && no == 0 {
				t.Fatalf("without the write-back the rewritten path never ran: the test does not attack (%s)", out)
			}
		})
	}
}

const execEndedC = `
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
static char path[4096];
static size_t off;
static void *rewrite(void *a) {
	(void)a;
	usleep(2000);
	path[off] = 'n'; path[off+1] = 'o';
	return 0;
}
int main(int argc, char **argv) {
	int n = atoi(argv[2]), i, ok = 0, no = 0, refused = 0, other = 0;
	for (i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			pthread_t t;
			char *av[2];
			snprintf(path, sizeof path, "%s/ok", argv[1]);
			off = strlen(path) - 2;
			av[0] = path; av[1] = 0;
			pthread_create(&t, 0, rewrite, 0);
			pthread_detach(t);
			execve(path, av, environ);
			_exit(errno == EACCES ? 126 : 127);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		int c = WIFEXITED(st) ? WEXITSTATUS(st) : 200;
		if (c == 0) ok++; else if (c == 3) no++; else if (c == 126) refused++; else other++;
	}
	printf("ok=%d no=%d refused=%d other=%d\n", ok, no, refused, other);
	return 0;
}
`

// Linux AIO is refused where execve is judged (a read submitted with io_submit
// completes into the caller's memory after the call returned, past a held execve's
// checks): io_setup answers EPERM and the run's denials say why; in a sandbox
// whose execve is not judged it makes a context.
func TestHandlerAIORefusedWhereExecJudged(t *testing.T) {
	script := fmt.Sprintf(`
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
ctx = ctypes.c_ulong(0)
r = libc.syscall(%d, 8, ctypes.byref(ctx))
print(r, ctypes.get_errno() if r else 0)
`, unix.SYS_IO_SETUP)
	sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", "/etc"}})
	for _, judged := range []bool{true, false} {
		req := map[string]any{"argv": []any{"/usr/bin/python3", "-c", script}}
		if judged {
			req["policy_fn"] = map[string]any{}
		} else {
			req["handlers"] = []any{map[string]any{"syscall": "getppid", "id": 1}}
		}
		res := drive(t, sb, req, func(map[string]any) map[string]any { return map[string]any{"action": "continue"} })
		out := strings.TrimSpace(string(res["stdout"].([]byte)))
		want := "0 0"
		if judged {
			want = fmt.Sprintf("-1 %d", int(unix.EPERM))
		}
		if out != want {
			t.Fatalf("execve judged %v: io_setup said %q, want %q (%v)", judged, out, want, res)
		}
		if judged && !strings.Contains(fmt.Sprint(res["denials"]), "io_setup") {
			t.Fatalf("the refusal is not in the run's denials: %v", res["denials"])
		}
	}
}

// An open the host allows from a process with one thread is continued (the caller's
// own open: supervise pathContinued) once nothing but the kernel can change the
// path: a thread that rewrote the path and ended before the answer is undone by the
// write-back ("thread ended": the judged file is read every time; without the
// write-back, supervise.SkipWriteBack, the rewritten one), and a path in memory
// another process writes (MAP_SHARED, a forked process flipping it) is not
// continued but performed with the copy the host judged ("shared": the refused
// file is never read; continued as a naive supervisor would,
// supervise.NaiveContinue, it is).
func TestHandlerOpenContinuedAlone(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok"), []byte("ok"), 0o644)
	os.WriteFile(filepath.Join(dir, "no"), []byte("no"), 0o644)
	bin := cProgram(t, dir, "open", openAloneC)
	for _, tc := range []struct {
		how     string
		n       string
		skip    bool // the write-back skipped
		naive   bool
		wantRan bool // the refused file's contents read at least once
	}{
		{"ended", "10", false, false, false},
		{"ended", "10", true, false, true},
		{"shared", "200", false, false, false},
		{"shared", "200", false, true, true},
	} {
		mode := tc.how
		switch {
		case tc.skip:
			mode += "/not written back"
		case tc.naive:
			mode += "/continued"
		}
		t.Run(mode, func(t *testing.T) {
			supervise.SkipWriteBack(tc.skip)
			supervise.NaiveContinue(tc.naive)
			defer supervise.SkipWriteBack(false)
			defer supervise.NaiveContinue(false)
			sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", dir}})
			res := drive(t, sb, map[string]any{"argv": []any{bin, dir, tc.n, tc.how}, "policy_fn": map[string]any{}},
				func(c map[string]any) map[string]any {
					p, _ := c["path"].(string)
					if c["syscall"] == "openat" && strings.HasPrefix(p, dir) {
						if strings.HasSuffix(p, "/no") {
							return map[string]any{"action": "errno", "errno": 13}
						}
						if tc.how == "ended" {
							time.Sleep(20 * time.Millisecond) // the thread rewrites the path and ends meanwhile
						}
					}
					return map[string]any{"action": "continue"}
				})
			ok, no, _, _, out := raceCounts(t, res)
			t.Logf("%s: %s", mode, out)
			if !tc.wantRan && no != 0 {
				t.Fatalf("the refused file was read %d times", no)
			}
			if tc.wantRan && no == 0 {
				t.Fatalf("without the protection the refused file was never read: the test does not attack (%s)", out)
			}
			if !tc.wantRan && ok == 0 {
				t.Fatalf("the allowed file was never read: %s", out)
			}
		})
	}
}

const openAloneC = `
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
static char *path;
static size_t off;
static void *rewrite(void *a) {
	(void)a;
	usleep(2000);
	path[off] = 'n'; path[off+1] = 'o';
	return 0;
}
int main(int argc, char **argv) {
	int n = atoi(argv[2]), shared = strcmp(argv[3], "shared") == 0, i;
	int ok = 0, no = 0, refused = 0, other = 0;
	path = mmap(0, 4096, PROT_READ|PROT_WRITE, (shared ? MAP_SHARED : MAP_PRIVATE)|MAP_ANONYMOUS, -1, 0);
	snprintf(path, 4096, "%s/ok", argv[1]);
	off = strlen(path) - 2;
	pid_t flipper = 0;
	if (shared) {
		flipper = fork();
		if (flipper == 0) {
			volatile char *p = path;
			volatile int k;
			for (;;) {
				p[off] = 'n'; p[off+1] = 'o';
				for (k = 0; k < 3000; k++) ;
				p[off] = 'o'; p[off+1] = 'k';
				for (k = 0; k < 3000; k++) ;
			}
		}
	}
	for (i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			if (!shared) {
				pthread_t t;
				path[off] = 'o'; path[off+1] = 'k';
				pthread_create(&t, 0, rewrite, 0);
				pthread_detach(t);
			}
			int fd = open(path, O_RDONLY);
			if (fd < 0) _exit(errno == EACCES ? 126 : 127);
			char b[2] = {0, 0};
			if (read(fd, b, 2) != 2) _exit(125);
			_exit(b[0] == 'o' ? 0 : b[0] == 'n' ? 3 : 124);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		int c = WIFEXITED(st) ? WEXITSTATUS(st) : 200;
		if (c == 0) ok++; else if (c == 3) no++; else if (c == 126) refused++; else other++;
	}
	if (flipper) { kill(flipper, SIGKILL); waitpid(flipper, 0, 0); }
	printf("ok=%d no=%d refused=%d other=%d\n", ok, no, refused, other);
	return 0;
}
`

// The same for a two-path call: a rename allowed from a process with one thread is
// continued as its own once its two judged paths are written back; a thread that
// rewrote the second path (the new name) and ended before the answer is undone —
// the file is renamed to the name the host allowed every time, and without the
// write-back (supervise.SkipWriteBack) to the name it refused.
func TestHandlerRenameContinuedAlone(t *testing.T) {
	dir := t.TempDir()
	bin := cProgram(t, dir, "rename", renameAloneC)
	work := filepath.Join(dir, "w")
	os.Mkdir(work, 0o777)
	os.Chmod(work, 0o777)
	os.Chmod(dir, 0o755)
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprint("skip write-back ", skip), func(t *testing.T) {
			supervise.SkipWriteBack(skip)
			defer supervise.SkipWriteBack(false)
			sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", dir}, "fs_writable": []any{work}})
			res := drive(t, sb, map[string]any{"argv": []any{bin, work, "5"},
				"handlers": []any{map[string]any{"syscall": "rename", "id": 1}}},
				func(c map[string]any) map[string]any {
					p2, _ := c["path2"].(string)
					if strings.HasSuffix(p2, "/no") {
						return map[string]any{"action": "errno", "errno": 13}
					}
					time.Sleep(20 * time.Millisecond) // the thread rewrites the new name and ends meanwhile
					return map[string]any{"action": "continue"}
				})
			out := strings.TrimSpace(string(res["stdout"].([]byte)))
			t.Logf("skip %v: %s", skip, out)
			var ok, no, other int
			if _, err := fmt.Sscanf(out, "ok=%d no=%d other=%d", &ok, &no, &other); err != nil {
				t.Fatalf("output %q: %v (%v)", out, err, res)
			}
			if !skip && (no != 0 || ok == 0) {
				t.Fatalf("renamed to the refused name %d times: %s", no, out)
			}
			if skip && no == 0 {
				t.Fatalf("without the write-back the rewritten name was never used: the test does not attack (%s)", out)
			}
		})
	}
}

const renameAloneC = `
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static char from[4096], to[4096];
static size_t off;
static void *rewrite(void *a) {
	(void)a;
	usleep(2000);
	to[off] = 'n'; to[off+1] = 'o';
	return 0;
}
int main(int argc, char **argv) {
	int n = atoi(argv[2]), i, ok = 0, no = 0, other = 0;
	for (i = 0; i < n; i++) {
		snprintf(from, sizeof from, "%s/src", argv[1]);
		snprintf(to, sizeof to, "%s/ok", argv[1]);
		off = strlen(to) - 2;
		char okp[4096], nop[4096];
		snprintf(okp, sizeof okp, "%s/ok", argv[1]);
		snprintf(nop, sizeof nop, "%s/no", argv[1]);
		unlink(okp); unlink(nop);
		close(open(from, O_CREAT|O_WRONLY, 0644));
		pid_t pid = fork();
		if (pid == 0) {
			pthread_t t;
			pthread_create(&t, 0, rewrite, 0);
			pthread_detach(t);
			_exit(rename(from, to) == 0 ? 0 : 1);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		if (access(nop, F_OK) == 0) no++; else if (access(okp, F_OK) == 0) ok++; else other++;
	}
	printf("ok=%d no=%d other=%d\n", ok, no, other);
	return 0;
}
`

// A process sharing the caller's memory without being its thread (a
// clone(CLONE_VM) child) flips the path of the caller's opens, judged by a handler
// on openat alone (no execve judged): the clone is trapped and marks the run, so
// the opens of its single-threaded caller are performed with the judged copy, not
// continued ("marked": the refused file is never read). With the mark ignored
// (supervise.SkipSharerScan) they are continued as the caller's own, and the
// flipper gets the refused file read.
func TestHandlerOpenRaceSharedMemory(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok"), []byte("ok"), 0o644)
	os.WriteFile(filepath.Join(dir, "no"), []byte("no"), 0o644)
	bin := cProgram(t, dir, "openvm", openSharedVMC)
	for _, skip := range []bool{false, true} {
		mode := "marked"
		if skip {
			mode = "mark ignored"
		}
		t.Run(mode, func(t *testing.T) {
			supervise.SkipSharerScan(skip)
			defer supervise.SkipSharerScan(false)
			sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", dir}})
			res := drive(t, sb, map[string]any{"argv": []any{bin, dir, "3000"},
				"handlers": []any{map[string]any{"syscall": "openat", "id": 1}}},
				func(c map[string]any) map[string]any {
					if p, _ := c["path"].(string); strings.HasPrefix(p, dir) && strings.HasSuffix(p, "/no") {
						return map[string]any{"action": "errno", "errno": 13}
					}
					return map[string]any{"action": "continue"}
				})
			ok, no, refused, _, out := raceCounts(t, res)
			t.Logf("%s: %s", mode, out)
			if ok == 0 || refused == 0 {
				t.Fatalf("the race did not happen: %s", out)
			}
			if !skip && no != 0 {
				t.Fatalf("the refused file was read %d times", no)
			}
			if skip && no == 0 {
				t.Fatalf("continued, the refused file was never read: the test does not attack (%s)", out)
			}
		})
	}
}

const openSharedVMC = `
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static char path[4096];
static size_t off;
static char stack[65536];
static int flip(void *a) {
	(void)a;
	volatile char *p = path;
	volatile int k;
	for (;;) {
		p[off] = 'n'; p[off+1] = 'o';
		for (k = 0; k < 2000; k++) ;
		p[off] = 'o'; p[off+1] = 'k';
		for (k = 0; k < 2000; k++) ;
	}
	return 0;
}
int main(int argc, char **argv) {
	int n = atoi(argv[2]), i, ok = 0, no = 0, refused = 0, other = 0;
	snprintf(path, sizeof path, "%s/ok", argv[1]);
	off = strlen(path) - 2;
	pid_t f = clone(flip, stack + sizeof stack, CLONE_VM | SIGCHLD, 0);
	if (f < 0) { perror("clone"); return 1; }
	for (i = 0; i < n; i++) {
		int fd = open(path, O_RDONLY);
		if (fd < 0) { if (errno == EACCES) refused++; else other++; continue; }
		char b[2] = {0, 0};
		if (read(fd, b, 2) != 2) other++;
		else if (b[0] == 'o') ok++;
		else if (b[0] == 'n') no++;
		else other++;
		close(fd);
	}
	kill(f, SIGKILL);
	waitpid(f, 0, 0);
	printf("ok=%d no=%d refused=%d other=%d\n", ok, no, refused, other);
	return 0;
}
`

// raceCounts parses a race program's "ok=N no=N refused=N other=N" line (out).
func raceCounts(t *testing.T, res map[string]any) (ok, no, refused, other int, out string) {
	t.Helper()
	out = strings.TrimSpace(string(res["stdout"].([]byte)))
	if _, err := fmt.Sscanf(out, "ok=%d no=%d refused=%d other=%d", &ok, &no, &refused, &other); err != nil {
		t.Fatalf("output %q: %v (%v)", out, err, res)
	}
	return
}
