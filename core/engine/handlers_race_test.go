//go:build sandtrap_testhook

package engine

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandtrap/sandtrap/core/supervise"
)

// A second thread flips the path execve reads between an allowed and a refused
// program while the host judges it: the program the host refused never runs. With
// the execve merely continued (supervise.NaiveContinue), the same attack runs it.
func TestHandlerExecRace(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok"), []byte("#!/bin/sh\nexit 0\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "no"), []byte("#!/bin/sh\nexit 3\n"), 0o755)
	src := filepath.Join(dir, "race.c")
	os.WriteFile(src, []byte(execRaceC), 0o644)
	bin := filepath.Join(dir, "race")
	if out, err := exec.Command("gcc", "-O2", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Skipf("gcc: %v %s", err, out)
	}
	os.Chmod(dir, 0o755)
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
			out := strings.TrimSpace(string(res["stdout"].([]byte)))
			t.Logf("%s: %s", mode, out)
			var ok, no, refused, other int
			if _, err := fmt.Sscanf(out, "ok=%d no=%d refused=%d other=%d", &ok, &no, &refused, &other); err != nil {
				t.Fatalf("output %q: %v (%v)", out, err, res)
			}
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
