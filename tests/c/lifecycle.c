/* lifecycle.c — a popen'd process through the protocol from C: how it pauses
 * ("freezer" as root with a cgroup v2, else "sigstop" with a note), pause/resume,
 * process_signal to the leader (a trap runs) and its refusals. Exits non-zero on
 * any unexpected outcome. Minimal msgpack by hand, as example.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandtrap.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

struct buf { unsigned char d[4096]; size_t n; };
static void put(struct buf *b, const void *p, size_t n) { memcpy(b->d + b->n, p, n); b->n += n; }
static void map(struct buf *b, int n) { unsigned char c = 0x80 | n; put(b, &c, 1); }
static void arr(struct buf *b, int n) { unsigned char c = 0x90 | n; put(b, &c, 1); }
static void str(struct buf *b, const char *s) {
	size_t n = strlen(s);
	unsigned char h[2] = {0xd9, (unsigned char)n};
	put(b, h, 2); put(b, s, n);
}
static void u32(struct buf *b, unsigned v) { unsigned char h[5] = {0xce, v >> 24, v >> 16, v >> 8, v}; put(b, h, 5); }

static const unsigned char *find(const unsigned char *r, size_t n, const char *key) {
	size_t k = strlen(key), i;
	for (i = 0; i + k + 1 < n; i++)
		if (r[i] == (0xa0 | k) && memcmp(r + i + 1, key, k) == 0)
			return r + i + 1 + k;
	return NULL;
}

/* an unsigned msgpack int at v (fixint, uint8/16/32) */
static long num(const unsigned char *v) {
	if (!v) return -1;
	if (v[0] < 0x80) return v[0];
	if (v[0] == 0xcc) return v[1];
	if (v[0] == 0xcd) return (v[1] << 8) | v[2];
	if (v[0] == 0xce || v[0] == 0xd2) return ((long)v[1] << 24) | (v[2] << 16) | (v[3] << 8) | v[4];
	if (v[0] == 0xcf || v[0] == 0xd3) return ((long)v[5] << 24) | (v[6] << 16) | (v[7] << 8) | v[8];
	if (v[0] == 0xd0) return (signed char)v[1];
	if (v[0] == 0xd1) return (short)((v[1] << 8) | v[2]);
	return -1;
}

static int is_str(const unsigned char *v, const char *s) {
	size_t n = strlen(s);
	return v && v[0] == (0xa0 | n) && memcmp(v + 1, s, n) == 0;
}

static int call(sandtrap_sandbox *sb, const char *op, unsigned proc, const char *k, long val, unsigned char **resp, size_t *len) {
	struct buf b = {{0}, 0};
	map(&b, k ? 3 : 2);
	str(&b, "op"); str(&b, op);
	str(&b, "process"); u32(&b, proc);
	if (k) { str(&b, k); u32(&b, (unsigned)val); }
	return sandtrap_sandbox_exec(sb, b.d, b.n, resp, len);
}

int main(void) {
	sandtrap_sandbox_builder *b = sandtrap_sandbox_builder_new();
	sandtrap_sandbox *sb = NULL;
	sandtrap_error *err = NULL;
	unsigned char *resp = NULL;
	size_t len = 0;
	struct buf req = {{0}, 0};
	unsigned proc;
	int rc, root = geteuid() == 0;

	sandtrap_sandbox_builder_fs_readable(b, "/usr");
	sandtrap_sandbox_builder_fs_readable(b, "/lib");
	sandtrap_sandbox_builder_fs_readable(b, "/bin");
	rc = sandtrap_sandbox_builder_build(b, &sb, &err);
	sandtrap_sandbox_builder_free(b);
	CHECK(rc == SANDTRAP_OK, "build: %s", sandtrap_error_message(err));
	if (rc != SANDTRAP_OK) return 1;

	map(&req, 3);
	str(&req, "op"); str(&req, "popen");
	str(&req, "argv"); arr(&req, 3);
	str(&req, "sh"); str(&req, "-c"); str(&req, "trap 'exit 7' TERM; while :; do sleep 0.02; done");
	str(&req, "stdout"); str(&req, "null");
	rc = sandtrap_sandbox_exec(sb, req.d, req.n, &resp, &len);
	CHECK(rc == SANDTRAP_OK, "popen rc=%d", rc);
	proc = (unsigned)num(find(resp, len, "process"));
	if (root)
		CHECK(is_str(find(resp, len, "pause"), "freezer"), "as root, pause is not by the freezer");
	else
		CHECK(is_str(find(resp, len, "pause"), "freezer") || (is_str(find(resp, len, "pause"), "sigstop") && find(resp, len, "pause_note")),
		      "pause neither freezer nor a reported sigstop");
	sandtrap_buffer_free(resp);

	rc = call(sb, "process_pause", proc, NULL, 0, &resp, &len);
	if (rc != SANDTRAP_OK) fprintf(stderr, "pause: %.*s\n", (int)len, resp);
	CHECK(rc == SANDTRAP_OK && find(resp, len, "paused") && find(resp, len, "paused")[0] == 0xc3, "pause");
	sandtrap_buffer_free(resp);
	rc = call(sb, "process_resume", proc, NULL, 0, &resp, &len);
	CHECK(rc == SANDTRAP_OK, "resume");
	sandtrap_buffer_free(resp);
	usleep(100000);

	rc = call(sb, "process_signal", proc, "signal", 19 /* SIGSTOP */, &resp, &len);
	CHECK(rc == SANDTRAP_E_INVALID_REQUEST, "SIGSTOP not refused: rc=%d", rc);
	sandtrap_buffer_free(resp);
	rc = call(sb, "process_signal", proc, "signal", 15, &resp, &len);
	CHECK(rc == SANDTRAP_OK && num(find(resp, len, "sent")) == 1, "SIGTERM to the leader: rc=%d", rc);
	sandtrap_buffer_free(resp);
	rc = call(sb, "process_wait", proc, NULL, 0, &resp, &len);
	CHECK(rc == SANDTRAP_OK && num(find(resp, len, "exit_code")) == 7, "the trap did not run (exit 7)");
	sandtrap_buffer_free(resp);

	/* an application checkpoint and its restore: the state comes back on fd 3 */
	{
		char dir[] = "/tmp/sandtrap-c-cp.XXXXXX", cpdir[64];
		CHECK(mkdtemp(dir) != NULL, "mkdtemp");
		snprintf(cpdir, sizeof cpdir, "%s/cp", dir);
		req.n = 0;
		map(&req, 3);
		str(&req, "op"); str(&req, "popen");
		str(&req, "argv"); arr(&req, 2); str(&req, "sleep"); str(&req, "30");
		str(&req, "stdout"); str(&req, "null");
		rc = sandtrap_sandbox_exec(sb, req.d, req.n, &resp, &len);
		CHECK(rc == SANDTRAP_OK, "popen sleep rc=%d", rc);
		proc = (unsigned)num(find(resp, len, "process"));
		sandtrap_buffer_free(resp);
		req.n = 0;
		map(&req, 4);
		str(&req, "op"); str(&req, "checkpoint");
		str(&req, "process"); u32(&req, proc);
		str(&req, "dir"); str(&req, cpdir);
		str(&req, "app_state"); { unsigned char h[2] = {0xc4, 5}; put(&req, h, 2); put(&req, "st-42", 5); }
		rc = sandtrap_sandbox_exec(sb, req.d, req.n, &resp, &len);
		CHECK(rc == SANDTRAP_OK && is_str(find(resp, len, "format"), "sandtrap-checkpoint/1"), "checkpoint rc=%d", rc);
		sandtrap_buffer_free(resp);
		rc = call(sb, "process_kill", proc, NULL, 0, &resp, &len);
		sandtrap_buffer_free(resp);
		rc = call(sb, "process_wait", proc, NULL, 0, &resp, &len);
		sandtrap_buffer_free(resp);
		req.n = 0;
		map(&req, 3);
		str(&req, "op"); str(&req, "restore");
		str(&req, "dir"); str(&req, cpdir);
		str(&req, "stdout"); str(&req, "null");
		rc = sandtrap_sandbox_exec(sb, req.d, req.n, &resp, &len);
		/* the state, as bin (checkpoint.json's app_state record is a map of the same key) */
		CHECK(rc == SANDTRAP_OK && memmem(resp, len, "\xc4\x05st-42", 7) != NULL, "restore rc=%d", rc);
		proc = (unsigned)num(find(resp, len, "process"));
		sandtrap_buffer_free(resp);
		rc = call(sb, "process_kill", proc, NULL, 0, &resp, &len);
		sandtrap_buffer_free(resp);
		rc = call(sb, "process_wait", proc, NULL, 0, &resp, &len);
		sandtrap_buffer_free(resp);
		{
			char cmd[128];
			snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
			CHECK(system(cmd) == 0, "rm");
		}
	}

	sandtrap_sandbox_free(sb);
	if (failures) return 1;
	printf("lifecycle: ok\n");
	return 0;
}
