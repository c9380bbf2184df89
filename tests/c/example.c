/* example.c — builds a policy through the public header and runs commands. Exits
 * non-zero on any unexpected outcome. Minimal msgpack encoding/decoding by hand:
 * the header is all a C caller needs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandtrap.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* --- a tiny msgpack writer --- */
struct buf { unsigned char d[4096]; size_t n; };
static void put(struct buf *b, const void *p, size_t n) { memcpy(b->d + b->n, p, n); b->n += n; }
static void map(struct buf *b, int n) { unsigned char c = 0x80 | n; put(b, &c, 1); }
static void arr(struct buf *b, int n) { unsigned char c = 0x90 | n; put(b, &c, 1); }
static void str(struct buf *b, const char *s) {
	size_t n = strlen(s);
	unsigned char h[2] = {0xd9, (unsigned char)n};
	put(b, h, 2); put(b, s, n);
}

/* Finds the value following key in a response and returns a pointer to it. Keys in
 * our responses are fixstr/str8; this scan is enough for a test. */
static const unsigned char *find(const unsigned char *r, size_t n, const char *key) {
	size_t k = strlen(key), i;
	for (i = 0; i + k + 1 < n; i++) {
		if (r[i] == (0xa0 | k) && memcmp(r + i + 1, key, k) == 0)
			return r + i + 1 + k;
	}
	return NULL;
}

static int run(sandtrap_sandbox *sb, const char **argv, int argc, unsigned char **resp, size_t *len) {
	struct buf b = {{0}, 0};
	int i;
	map(&b, 2);
	str(&b, "op"); str(&b, "run");
	str(&b, "argv"); arr(&b, argc);
	for (i = 0; i < argc; i++) str(&b, argv[i]);
	return sandtrap_sandbox_exec(sb, b.d, b.n, resp, len);
}

int main(void) {
	sandtrap_sandbox_builder *b;
	sandtrap_sandbox *sb = NULL;
	sandtrap_error *err = NULL;
	unsigned char *resp = NULL;
	size_t len = 0;
	const unsigned char *v;
	int rc;

	CHECK(sandtrap_abi_version() == SANDTRAP_ABI_VERSION, "abi %d", sandtrap_abi_version());
	CHECK(strlen(sandtrap_version()) > 0, "version");
	sandtrap_sandbox_free(NULL);
	sandtrap_sandbox_builder_free(NULL);
	sandtrap_string_free(NULL);
	sandtrap_buffer_free(NULL);
	sandtrap_error_free(NULL);
	CHECK(sandtrap_error_problem_count(NULL) == 0 && sandtrap_error_kind(NULL) == NULL &&
	      sandtrap_error_status(NULL) == SANDTRAP_OK, "NULL error");

	/* an invalid policy names every problem at once */
	b = sandtrap_sandbox_builder_new();
	sandtrap_sandbox_builder_fs_readable(b, ""); /* (a relative path resolves against the working directory) */
	sandtrap_sandbox_builder_fs_readable(b, "/no/such/dir");
	sandtrap_sandbox_builder_extra_deny_syscall(b, "not_a_syscall");
	sandtrap_sandbox_builder_max_open_files(b, 0); /* (max_processes 0 means no limit) */
	rc = sandtrap_sandbox_builder_build(b, &sb, &err);
	CHECK(rc == SANDTRAP_E_INVALID_POLICY, "rc=%d (%s)", rc, sandtrap_status_name(rc));
	CHECK(sb == NULL, "sb set on failure");
	CHECK(sandtrap_error_status(err) == rc && strcmp(sandtrap_error_kind(err), "invalid_policy") == 0, "error status and kind");
	CHECK(strstr(sandtrap_error_message(err), "invalid policy (4 problems)"), "message: %s", sandtrap_error_message(err));
	CHECK(sandtrap_error_problem_count(err) == 4, "%zu problems", sandtrap_error_problem_count(err));
	{
		/* every problem: (field, message); the decoder's (in field order), then the checks against this machine */
		static const char *const want[][2] = {
			{"fs_readable", "empty path"},
			{"max_open_files", "0 must be positive"},
			{"fs_readable", "/no/such/dir: no such file or directory"},
			{"extra_deny_syscalls", "unknown syscall \"not_a_syscall\""},
		};
		size_t i;
		for (i = 0; i < 4; i++) {
			const char *f = sandtrap_error_problem_field(err, i), *m = sandtrap_error_problem_message(err, i);
			CHECK(f && m && strcmp(f, want[i][0]) == 0 && strcmp(m, want[i][1]) == 0, "problem %zu: %s: %s", i, f, m);
		}
		CHECK(sandtrap_error_problem_field(err, 4) == NULL && sandtrap_error_problem_message(err, 99) == NULL, "out of range");
	}
	sandtrap_error_free(err);
	sandtrap_sandbox_builder_free(b);

	/* a misspelled field (msgpack policy): the same (field, message) as in every binding */
	{
		struct buf p = {{0}, 0};
		map(&p, 1);
		str(&p, "fs_readble"); arr(&p, 1); str(&p, "/usr");
		rc = sandtrap_sandbox_new(p.d, p.n, &sb, &err);
		CHECK(rc == SANDTRAP_E_INVALID_POLICY && sb == NULL, "misspelled rc=%d", rc);
		CHECK(sandtrap_error_problem_count(err) == 1 && strcmp(sandtrap_error_problem_field(err, 0), "fs_readble") == 0 &&
		      strcmp(sandtrap_error_problem_message(err, 0), "unknown field; did you mean fs_readable?") == 0,
		      "misspelled: %s", sandtrap_error_message(err));
		sandtrap_error_free(err);
		err = NULL;
		/* not msgpack at all: one problem about the whole input */
		rc = sandtrap_sandbox_new((const uint8_t *)"\xc1", 1, &sb, &err);
		CHECK(rc == SANDTRAP_E_INVALID_POLICY && sandtrap_error_problem_count(err) == 1 &&
		      strcmp(sandtrap_error_problem_field(err, 0), "") == 0, "undecodable: %s", sandtrap_error_message(err));
		sandtrap_error_free(err);
		err = NULL;
	}

	/* a working policy */
	b = sandtrap_sandbox_builder_new();
	sandtrap_sandbox_builder_fs_readable(b, "/usr");
	sandtrap_sandbox_builder_fs_readable(b, "/lib");
	sandtrap_sandbox_builder_fs_readable(b, "/bin");
	sandtrap_sandbox_builder_max_memory(b, 256u << 20);
	sandtrap_sandbox_builder_max_processes(b, 16);
	sandtrap_sandbox_builder_clean_env(b, 1);
	sandtrap_sandbox_builder_timeout_ms(b, 10000);
	/* sizes cross as integers, exactly: 2^55 + 511 bytes is 2^46 blocks of 512 (a
	 * double would have rounded it up to 2^46 + 1 blocks) */
	sandtrap_sandbox_builder_max_disk(b, ((uint64_t)1 << 55) + 511);
	rc = sandtrap_sandbox_builder_build(b, &sb, &err);
	sandtrap_sandbox_builder_free(b);
	if (rc != SANDTRAP_OK) {
		fprintf(stderr, "build: %s: %s\n", sandtrap_status_name(rc), sandtrap_error_message(err));
		sandtrap_error_free(err);
		return 1;
	}
	CHECK(err == NULL, "no error on success");
	CHECK(sandtrap_sandbox_id(sb) > 0, "id");

	{
		const char *argv[] = {"echo", "hello from C"};
		rc = run(sb, argv, 2, &resp, &len);
		CHECK(rc == SANDTRAP_OK, "run rc=%d", rc);
		v = find(resp, len, "stdout");
		CHECK(v && memmem(v, len - (v - resp), "hello from C", 12), "stdout");
		v = find(resp, len, "success");
		CHECK(v && *v == 0xc3, "success true");
		sandtrap_buffer_free(resp);
	}
	{
		const char *argv[] = {"sh", "-c", "ulimit -f"};
		rc = run(sb, argv, 3, &resp, &len);
		CHECK(rc == SANDTRAP_OK, "ulimit rc=%d", rc);
		v = find(resp, len, "stdout");
		CHECK(v && memmem(v, len - (v - resp), "70368744177664\n", 15), "max_disk is exact");
		sandtrap_buffer_free(resp);
	}
	{
		const char *argv[] = {"cat", "/etc/hostname"};
		rc = run(sb, argv, 2, &resp, &len);
		CHECK(rc == SANDTRAP_OK, "run rc=%d", rc);
		v = find(resp, len, "stderr");
		CHECK(v && memmem(v, len - (v - resp), "Permission denied", 17), "cat outside fs_readable is denied");
		v = find(resp, len, "exit_code");
		CHECK(v && *v == 1, "exit code 1");
		sandtrap_buffer_free(resp);
	}
	{
		const char *argv[] = {"no-such-program-xyz"};
		rc = run(sb, argv, 1, &resp, &len);
		CHECK(rc == SANDTRAP_E_NOT_FOUND, "not found rc=%d", rc);
		v = find(resp, len, "kind");
		CHECK(v && memmem(v, 16, "not_found", 9), "error kind not_found");
		sandtrap_buffer_free(resp);
	}
	/* malformed request: a clear error, never a crash */
	rc = sandtrap_sandbox_exec(sb, (const uint8_t *)"\xc1\xff", 2, &resp, &len);
	CHECK(rc == SANDTRAP_E_INVALID_REQUEST, "malformed rc=%d", rc);
	CHECK(resp && find(resp, len, "message"), "malformed has a message");
	sandtrap_buffer_free(resp);
	rc = sandtrap_sandbox_exec(NULL, NULL, 0, &resp, &len);
	CHECK(rc == SANDTRAP_E_INVALID_ARGUMENT, "NULL sandbox rc=%d", rc);
	CHECK(sandtrap_sandbox_cancel(sb, "nothing-running") == 0, "cancel none");

	/* after fork, the child must not enter the library */
	{
		pid_t pid = fork();
		if (pid == 0) {
			const char *argv[] = {"true"};
			_exit(run(sb, argv, 1, &resp, &len) == SANDTRAP_E_FORKED_CHILD ? 0 : 1);
		} else {
			int st;
			waitpid(pid, &st, 0);
			CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "forked child guard");
		}
	}
	sandtrap_sandbox_free(sb);
	if (failures) {
		fprintf(stderr, "%d failed\n", failures);
		return 1;
	}
	printf("c example: all checks passed\n");
	return 0;
}
