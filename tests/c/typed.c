/* typed.c — sandtrap_sandbox_run and the result accessors: a C caller runs commands
 * and reads exit code, stdout and stderr without any msgpack. Also checks that the
 * typed status of each case equals sandtrap_sandbox_exec's for the same request.
 * Compiled with -std=c99 -pedantic -Wall -Wextra -Werror. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandtrap.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* {"op": "run", "argv": [...]} (plus "timeout": t when t > 0), by hand */
static int exec_status(sandtrap_sandbox *sb, const char *const *argv, double t)
{
	unsigned char req[1024];
	size_t n = 0, i, argc = 0;
	uint8_t *resp = NULL;
	size_t resp_len = 0;
	int rc;
	while (argv[argc])
		argc++;
	req[n++] = (unsigned char)(0x80 | (t > 0 ? 3 : 2));
	memcpy(req + n, "\xa2op\xa3run\xa4" "argv", 12); n += 12;
	req[n++] = (unsigned char)(0x90 | argc);
	for (i = 0; i < argc; i++) {
		size_t l = strlen(argv[i]);
		req[n++] = 0xd9; req[n++] = (unsigned char)l;
		memcpy(req + n, argv[i], l); n += l;
	}
	if (t > 0) {
		union { double d; uint64_t u; } v;
		int k;
		memcpy(req + n, "\xa7timeout\xcb", 9); n += 9;
		v.d = t;
		for (k = 7; k >= 0; k--)
			req[n++] = (unsigned char)(v.u >> (8 * k));
	}
	rc = sandtrap_sandbox_exec(sb, req, n, &resp, &resp_len);
	sandtrap_buffer_free(resp);
	return rc;
}

static int run(sandtrap_sandbox *sb, const char *const *argv, const sandtrap_run_options *o, sandtrap_result **r)
{
	int rc = sandtrap_sandbox_run(sb, argv, o, r);
	int want = exec_status(sb, argv, o ? (double)o->timeout_ms / 1000 : 0);
	CHECK(rc == want, "%s: typed status %d != exec status %d", argv[0], rc, want);
	return rc;
}

static int out_is(const sandtrap_result *r, int err, const char *want)
{
	size_t n;
	const uint8_t *p = err ? sandtrap_result_stderr(r, &n) : sandtrap_result_stdout(r, &n);
	return n == strlen(want) && memcmp(p, want, n) == 0 && p[n] == 0;
}

static int contains(const uint8_t *p, size_t n, const char *needle, size_t m)
{
	size_t i;
	for (i = 0; i + m <= n; i++)
		if (memcmp(p + i, needle, m) == 0)
			return 1;
	return 0;
}

int main(void)
{
	sandtrap_sandbox_builder *b = sandtrap_sandbox_builder_new();
	sandtrap_sandbox *sb = NULL;
	sandtrap_result *r = NULL;
	sandtrap_run_options o;
	sandtrap_error *err = NULL;
	size_t n = 12345;
	int rc;

	sandtrap_sandbox_builder_fs_readable(b, "/usr");
	sandtrap_sandbox_builder_fs_readable(b, "/lib");
	sandtrap_sandbox_builder_fs_readable(b, "/bin");
	sandtrap_sandbox_builder_clean_env(b, 1);
	sandtrap_sandbox_builder_max_output(b, 1 << 20);
	rc = sandtrap_sandbox_builder_build(b, &sb, &err);
	sandtrap_sandbox_builder_free(b);
	if (rc != SANDTRAP_OK) {
		fprintf(stderr, "build: %s: %s\n", sandtrap_status_name(rc), sandtrap_error_message(err));
		sandtrap_error_free(err);
		return 1;
	}

	/* NULL-safety */
	sandtrap_result_free(NULL);
	CHECK(sandtrap_result_exit_code(NULL) == -1 && sandtrap_result_signal(NULL) == 0 &&
	      sandtrap_result_success(NULL) == 0 && sandtrap_result_error_kind(NULL) == NULL &&
	      sandtrap_result_reason(NULL) == NULL, "NULL result");
	CHECK(sandtrap_result_stdout(NULL, &n) != NULL && n == 0, "NULL result stdout");
	CHECK(sandtrap_run_options_init(&o, SANDTRAP_RUN_OPTIONS_VERSION) == SANDTRAP_OK && o.timeout_ms == 0 && !o.stdin_data, "options init");
	CHECK(sandtrap_run_options_init(&o, 99) == SANDTRAP_E_INVALID_ARGUMENT, "options init bad version");
	CHECK(sandtrap_run_options_init(NULL, SANDTRAP_RUN_OPTIONS_VERSION) == SANDTRAP_E_INVALID_ARGUMENT, "options init NULL");
	CHECK(sandtrap_run_options_init(&o, 1) == SANDTRAP_E_INVALID_ARGUMENT, "version 1 (a double timeout) is refused");

	{ /* success, stdout */
		const char *argv[] = {"echo", "hello from C", NULL};
		rc = run(sb, argv, NULL, &r);
		CHECK(rc == SANDTRAP_OK, "echo rc=%d", rc);
		CHECK(sandtrap_result_success(r) == 1 && sandtrap_result_exit_code(r) == 0, "echo success");
		CHECK(out_is(r, 0, "hello from C\n") && out_is(r, 1, ""), "echo output");
		CHECK(sandtrap_result_error_kind(r) == NULL && sandtrap_result_error_message(r) == NULL, "echo no error");
		sandtrap_result_free(r);
	}
	{ /* exit code, stderr */
		const char *argv[] = {"sh", "-c", "echo out; echo oops >&2; exit 3", NULL};
		rc = run(sb, argv, NULL, &r);
		CHECK(rc == SANDTRAP_OK, "exit 3 rc=%d", rc);
		CHECK(sandtrap_result_success(r) == 0 && sandtrap_result_exit_code(r) == 3 && sandtrap_result_signal(r) == 0, "exit 3");
		CHECK(strcmp(sandtrap_result_reason(r), "exited") == 0, "reason exited");
		CHECK(out_is(r, 0, "out\n") && out_is(r, 1, "oops\n"), "exit 3 output");
		CHECK(sandtrap_result_error_kind(r) == NULL, "a non-zero exit is not an error");
		sandtrap_result_free(r);
	}
	{ /* stdin, with bytes that are not text */
		const char *argv[] = {"cat", NULL};
		sandtrap_run_options so = SANDTRAP_RUN_OPTIONS_INIT;
		so.stdin_data = (const uint8_t *)"a\0b";
		so.stdin_len = 3;
		rc = sandtrap_sandbox_run(sb, argv, &so, &r);
		CHECK(rc == SANDTRAP_OK, "cat rc=%d", rc);
		CHECK(sandtrap_result_stdout(r, &n) && n == 3 && memcmp(sandtrap_result_stdout(r, NULL), "a\0b", 3) == 0, "cat stdin");
		sandtrap_result_free(r);
	}
	{ /* killed by a signal */
		const char *argv[] = {"sh", "-c", "kill -KILL $$", NULL};
		rc = run(sb, argv, NULL, &r);
		CHECK(rc == SANDTRAP_OK, "kill rc=%d", rc);
		CHECK(sandtrap_result_exit_code(r) == -1 && sandtrap_result_signal(r) == 9, "signal %d exit %d",
		      sandtrap_result_signal(r), sandtrap_result_exit_code(r));
		sandtrap_result_free(r);
	}
	{ /* timeout: a result, not a call failure */
		const char *argv[] = {"sleep", "10", NULL};
		sandtrap_run_options to = SANDTRAP_RUN_OPTIONS_INIT;
		to.timeout_ms = 300;
		rc = run(sb, argv, &to, &r);
		CHECK(rc == SANDTRAP_OK, "timeout rc=%d", rc);
		CHECK(sandtrap_result_timed_out(r) == 1 && sandtrap_result_success(r) == 0, "timed out");
		CHECK(strcmp(sandtrap_result_reason(r), "timeout") == 0, "reason timeout");
		CHECK(sandtrap_result_error_kind(r) && strcmp(sandtrap_result_error_kind(r), "timeout") == 0, "kind timeout");
		sandtrap_result_free(r);
	}
	{ /* truncation */
		const char *argv[] = {"sh", "-c", "head -c 5000 /dev/zero", NULL};
		sandtrap_run_options mo = SANDTRAP_RUN_OPTIONS_INIT;
		mo.max_output = 100;
		rc = sandtrap_sandbox_run(sb, argv, &mo, &r);
		CHECK(rc == SANDTRAP_OK && sandtrap_result_stdout_truncated(r) == 1, "truncated rc=%d", rc);
		CHECK(sandtrap_result_stdout(r, &n) && n == 100, "kept %zu bytes", n);
		sandtrap_result_free(r);
	}
	{ /* not found: a status, and a result that says why */
		const char *argv[] = {"no-such-program-xyz", NULL};
		rc = run(sb, argv, NULL, &r);
		CHECK(rc == SANDTRAP_E_NOT_FOUND, "not found rc=%d", rc);
		CHECK(r && sandtrap_result_error_kind(r) && strcmp(sandtrap_result_error_kind(r), "not_found") == 0, "kind not_found");
		CHECK(sandtrap_result_error_message(r) && strstr(sandtrap_result_error_message(r), "no-such-program-xyz"), "message names it");
		CHECK(sandtrap_result_exit_code(r) == -1, "no exit code");
		CHECK(strcmp(sandtrap_result_reason(r), "not_found") == 0, "reason not_found");
		sandtrap_result_free(r);
	}
	{ /* what the run was refused: a lock on a read-only file */
		const char *argv[] = {"flock", "/usr/bin", "true", NULL};
		const sandtrap_denial *d;
		rc = sandtrap_sandbox_run(sb, argv, NULL, &r);
		CHECK(rc == SANDTRAP_OK && sandtrap_result_exit_code(r) != 0, "flock rc=%d exit %d", rc, sandtrap_result_exit_code(r));
		CHECK(sandtrap_result_denials_count(r) == 1, "%zu denials", sandtrap_result_denials_count(r));
		d = sandtrap_result_denial(r, 0);
		CHECK(d && strcmp(d->syscall, "flock") == 0 && d->path && strcmp(d->path, "/usr/bin") == 0 && !d->address &&
		      strcmp(d->errno_name, "EACCES") == 0 && d->errno_nr == 13 && d->count == 1 && strcmp(d->source, "supervisor") == 0,
		      "the flock denial: %s %s %s %d", d ? d->syscall : "-", d && d->path ? d->path : "-", d ? d->errno_name : "-", d ? d->errno_nr : 0);
		CHECK(sandtrap_result_denial(r, 1) == NULL && sandtrap_result_denials_dropped(r) == 0, "one denial, none dropped");
		sandtrap_result_free(r);
		CHECK(sandtrap_result_denials_count(NULL) == 0 && sandtrap_result_denial(NULL, 0) == NULL, "NULL result denials");
	}
	{ /* invalid arguments: *out is NULL, nothing ran */
		const char *empty[] = {NULL};
		const char *blank[] = {"", NULL};
		const char *argv[] = {"true", NULL};
		sandtrap_run_options bad = SANDTRAP_RUN_OPTIONS_INIT;
		r = (sandtrap_result *)&n;
		CHECK(sandtrap_sandbox_run(sb, empty, NULL, &r) == SANDTRAP_E_INVALID_ARGUMENT && r == NULL, "empty argv");
		CHECK(sandtrap_sandbox_run(sb, blank, NULL, &r) == SANDTRAP_E_INVALID_ARGUMENT && r == NULL, "argv[0] empty");
		CHECK(sandtrap_sandbox_run(NULL, argv, NULL, &r) == SANDTRAP_E_INVALID_ARGUMENT && r == NULL, "NULL sandbox");
		CHECK(sandtrap_sandbox_run(sb, NULL, NULL, &r) == SANDTRAP_E_INVALID_ARGUMENT, "NULL argv");
		CHECK(sandtrap_sandbox_run(sb, argv, NULL, NULL) == SANDTRAP_E_INVALID_ARGUMENT, "NULL out");
		bad.timeout_ms = 10000000001ull;
		CHECK(sandtrap_sandbox_run(sb, argv, &bad, &r) == SANDTRAP_E_INVALID_ARGUMENT && r == NULL, "timeout beyond 10^7 s");
		bad.timeout_ms = 0;
		bad.stdin_len = 4;
		CHECK(sandtrap_sandbox_run(sb, argv, &bad, &r) == SANDTRAP_E_INVALID_ARGUMENT, "stdin NULL with a length");
		bad.stdin_len = 0;
		bad.version = 7;
		CHECK(sandtrap_sandbox_run(sb, argv, &bad, &r) == SANDTRAP_E_INVALID_ARGUMENT, "unknown options version");
	}
	sandtrap_sandbox_free(sb);
	{ /* the process knobs through the builder: pinned to CPU 0, no huge pages */
		sandtrap_sandbox_builder *kb = sandtrap_sandbox_builder_new();
		sandtrap_sandbox *ksb = NULL;
		const char *argv[] = {"grep", "-E", "^(Cpus_allowed_list|THP_enabled):", "/proc/self/status", NULL};
		sandtrap_sandbox_builder_fs_readable(kb, "/usr");
		sandtrap_sandbox_builder_fs_readable(kb, "/lib");
		sandtrap_sandbox_builder_fs_readable(kb, "/bin");
		sandtrap_sandbox_builder_fs_readable(kb, "/proc");
		sandtrap_sandbox_builder_cpu_core(kb, 0);
		sandtrap_sandbox_builder_no_huge_pages(kb, 1);
		rc = sandtrap_sandbox_builder_build(kb, &ksb, &err);
		sandtrap_sandbox_builder_free(kb);
		CHECK(rc == SANDTRAP_OK, "knobs build: %s", rc == SANDTRAP_OK ? "" : sandtrap_error_message(err));
		if (rc == SANDTRAP_OK) {
			rc = sandtrap_sandbox_run(ksb, argv, NULL, &r);
			CHECK(rc == SANDTRAP_OK && out_is(r, 0, "THP_enabled:\t0\nCpus_allowed_list:\t0\n"), "knobs in the run: %s",
			      (const char *)sandtrap_result_stdout(r, NULL));
			sandtrap_result_free(r);
			sandtrap_sandbox_free(ksb);
		} else {
			sandtrap_error_free(err);
		}
	}
	{ /* determinism through the builder: the same seed twice, the clock at time_start, sorted listings */
		const char *argv[] = {"sh", "-c", "od -An -tx1 -N8 /dev/urandom | tr -d ' \\n'; echo; date -u +%Y; ls -f /usr | head -3 | tr '\\n' ' '", NULL};
		char *outs[2] = {NULL, NULL};
		for (int i = 0; i < 2; i++) {
			sandtrap_sandbox_builder *db = sandtrap_sandbox_builder_new();
			sandtrap_sandbox *dsb = NULL;
			sandtrap_sandbox_builder_fs_readable(db, "/usr");
			sandtrap_sandbox_builder_fs_readable(db, "/lib");
			sandtrap_sandbox_builder_fs_readable(db, "/bin");
			sandtrap_sandbox_builder_fs_readable(db, "/dev");
			sandtrap_sandbox_builder_random_seed(db, 31337);
			sandtrap_sandbox_builder_time_start(db, "2000-06-01T00:00:00Z");
			sandtrap_sandbox_builder_deterministic_dirs(db, 1);
			rc = sandtrap_sandbox_builder_build(db, &dsb, &err);
			sandtrap_sandbox_builder_free(db);
			CHECK(rc == SANDTRAP_OK, "determinism build: %s", rc == SANDTRAP_OK ? "" : sandtrap_error_message(err));
			if (rc != SANDTRAP_OK) {
				sandtrap_error_free(err);
				break;
			}
			rc = sandtrap_sandbox_run(dsb, argv, NULL, &r);
			CHECK(rc == SANDTRAP_OK && sandtrap_result_exit_code(r) == 0, "determinism run rc=%d", rc);
			if (rc == SANDTRAP_OK) {
				size_t len = 0;
				const void *o = sandtrap_result_stdout(r, &len);
				outs[i] = malloc(len + 1);
				if (outs[i]) {
					memcpy(outs[i], o, len);
					outs[i][len] = 0;
				}
			}
			sandtrap_result_free(r);
			sandtrap_sandbox_free(dsb);
		}
		CHECK(outs[0] && outs[1] && strcmp(outs[0], outs[1]) == 0 && strlen(outs[0]) > 16, "the same seed twice: %s / %s",
		      outs[0] ? outs[0] : "-", outs[1] ? outs[1] : "-");
		CHECK(outs[0] && strstr(outs[0], "\n2000\n. .. bin "), "time_start and sorted /usr: %s", outs[0] ? outs[0] : "-");
		free(outs[0]);
		free(outs[1]);
	}
	{ /* a bad time_start is refused by name */
		sandtrap_sandbox_builder *db = sandtrap_sandbox_builder_new();
		sandtrap_sandbox *dsb = NULL;
		sandtrap_sandbox_builder_time_start(db, "yesterday");
		rc = sandtrap_sandbox_builder_build(db, &dsb, &err);
		sandtrap_sandbox_builder_free(db);
		CHECK(rc != SANDTRAP_OK && strstr(sandtrap_error_message(err), "time_start"), "bad time_start: rc=%d", rc);
		if (rc != SANDTRAP_OK)
			sandtrap_error_free(err);
		else
			sandtrap_sandbox_free(dsb);
	}
	{ /* Landlock protections by name: one degraded knowingly, one disabled; a bad name refused */
		sandtrap_sandbox_builder *pb = sandtrap_sandbox_builder_new();
		sandtrap_sandbox *psb = NULL;
		uint8_t *resp = NULL;
		size_t resp_len = 0;
		sandtrap_sandbox_builder_fs_readable(pb, "/usr");
		CHECK(sandtrap_sandbox_builder_allow_degraded_protection(pb, SANDTRAP_PROTECTION_SIGNAL_SCOPE) == SANDTRAP_OK, "degrade setter");
		CHECK(sandtrap_sandbox_builder_disable(pb, SANDTRAP_PROTECTION_FS_IOCTL_DEV) == SANDTRAP_OK, "disable setter");
		rc = sandtrap_sandbox_builder_build(pb, &psb, &err);
		sandtrap_sandbox_builder_free(pb);
		CHECK(rc == SANDTRAP_OK, "protections build: %s", rc == SANDTRAP_OK ? "" : sandtrap_error_message(err));
		if (rc == SANDTRAP_OK) {
			rc = sandtrap_sandbox_exec(psb, (const uint8_t *)"\x81\xa2op\xa9isolation", 14, &resp, &resp_len);
			/* the report's protections map holds "fs_ioctl_dev": "disabled" (msgpack fixstrs) */
			CHECK(rc == SANDTRAP_OK && resp_len > 0 &&
			      contains(resp, resp_len, "\xac" "fs_ioctl_dev" "\xa8" "disabled", 22), "fs_ioctl_dev disabled in the report");
			sandtrap_buffer_free(resp);
			sandtrap_sandbox_free(psb);
		} else {
			sandtrap_error_free(err);
		}
		pb = sandtrap_sandbox_builder_new();
		sandtrap_sandbox_builder_disable(pb, "signal");
		rc = sandtrap_sandbox_builder_build(pb, &psb, &err);
		sandtrap_sandbox_builder_free(pb);
		CHECK(rc == SANDTRAP_E_INVALID_POLICY && strstr(sandtrap_error_message(err), "disable: \"signal\" is not a protection"),
		      "a bad protection name: %d %s", rc, rc == SANDTRAP_OK ? "" : sandtrap_error_message(err));
		if (rc != SANDTRAP_OK)
			sandtrap_error_free(err);
	}
	{ /* placement through the builder: one CPU seen, no supervisor, every GPU (none here) */
		sandtrap_sandbox_builder *pb = sandtrap_sandbox_builder_new();
		sandtrap_sandbox *psb = NULL;
		const char *argv[] = {"nproc", NULL};
		sandtrap_sandbox_builder_fs_readable(pb, "/usr");
		sandtrap_sandbox_builder_fs_readable(pb, "/lib");
		sandtrap_sandbox_builder_fs_readable(pb, "/bin");
		sandtrap_sandbox_builder_num_cpus(pb, 1);
		sandtrap_sandbox_builder_no_supervisor(pb, 1);
		sandtrap_sandbox_builder_gpu_devices_str(pb, "all");
		rc = sandtrap_sandbox_builder_build(pb, &psb, &err);
		sandtrap_sandbox_builder_free(pb);
		CHECK(rc == SANDTRAP_OK, "placement build: %s", rc == SANDTRAP_OK ? "" : sandtrap_error_message(err));
		if (rc == SANDTRAP_OK) {
			rc = sandtrap_sandbox_run(psb, argv, NULL, &r);
			CHECK(rc == SANDTRAP_OK && out_is(r, 0, "1\n"), "num_cpus in the run: %s", (const char *)sandtrap_result_stdout(r, NULL));
			sandtrap_result_free(r);
			sandtrap_sandbox_free(psb);
		} else {
			sandtrap_error_free(err);
		}
		/* a GPU index this host does not have: refused by name */
		pb = sandtrap_sandbox_builder_new();
		sandtrap_sandbox_builder_fs_readable(pb, "/usr");
		sandtrap_sandbox_builder_gpu_device(pb, 200);
		rc = sandtrap_sandbox_builder_build(pb, &psb, &err);
		sandtrap_sandbox_builder_free(pb);
		CHECK(rc == SANDTRAP_E_INVALID_POLICY && strstr(sandtrap_error_message(err), "gpu_devices"), "gpu_device 200: %d", rc);
		if (rc != SANDTRAP_OK)
			sandtrap_error_free(err);
		else
			sandtrap_sandbox_free(psb);
	}
	if (failures) {
		fprintf(stderr, "typed: %d failed\n", failures);
		return 1;
	}
	printf("c typed runs: all checks passed\n");
	return 0;
}
