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
	char *err = NULL;
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

	/* an invalid policy names every problem at once */
	b = sandtrap_sandbox_builder_new();
	sandtrap_sandbox_builder_fs_readable(b, "relative/path");
	sandtrap_sandbox_builder_fs_readable(b, "/no/such/dir");
	sandtrap_sandbox_builder_extra_deny_syscall(b, "not_a_syscall");
	rc = sandtrap_sandbox_builder_build(b, &sb, &err);
	CHECK(rc == SANDTRAP_E_INVALID_POLICY, "rc=%d (%s)", rc, sandtrap_status_name(rc));
	CHECK(sb == NULL, "sb set on failure");
	CHECK(err && strstr(err, "relative") && strstr(err, "not_a_syscall"), "errmsg: %s", err ? err : "(null)");
	sandtrap_string_free(err);
	sandtrap_sandbox_builder_free(b);

	/* a working policy */
	b = sandtrap_sandbox_builder_new();
	sandtrap_sandbox_builder_fs_readable(b, "/usr");
	sandtrap_sandbox_builder_fs_readable(b, "/lib");
	sandtrap_sandbox_builder_fs_readable(b, "/bin");
	sandtrap_sandbox_builder_max_memory(b, 256u << 20);
	sandtrap_sandbox_builder_max_processes(b, 16);
	sandtrap_sandbox_builder_clean_env(b, 1);
	sandtrap_sandbox_builder_timeout(b, 10);
	rc = sandtrap_sandbox_builder_build(b, &sb, &err);
	sandtrap_sandbox_builder_free(b);
	if (rc != SANDTRAP_OK) {
		fprintf(stderr, "build: %s: %s\n", sandtrap_status_name(rc), err ? err : "");
		sandtrap_string_free(err);
		return 1;
	}
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
