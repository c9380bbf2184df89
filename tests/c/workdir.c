/* workdir.c — the copy-on-write workdir from C: the builder's workdir and on_exit
 * setters, a dry run through sandtrap_sandbox_exec (op "dry_run") that lists the
 * change and leaves the workdir as it was, then a typed run whose change is
 * committed (on_exit's default). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "sandtrap.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* the bytes of needle in hay */
static int has(const uint8_t *hay, size_t n, const char *needle, size_t len)
{
	size_t i;
	for (i = 0; i + len <= n; i++)
		if (memcmp(hay + i, needle, len) == 0)
			return 1;
	return 0;
}

int main(void)
{
	char dir[] = "/tmp/sandtrap-c-workdir-XXXXXX", file[256], script[512];
	sandtrap_sandbox_builder *b = sandtrap_sandbox_builder_new();
	sandtrap_sandbox *sb = NULL;
	sandtrap_error *err = NULL;
	sandtrap_result *r = NULL;
	uint8_t req[1024], *resp = NULL;
	size_t n = 0, resp_len = 0, l;
	struct stat st;
	int rc;
	const char *argv[4];

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(file, sizeof file, "%s/new", dir);
	snprintf(script, sizeof script, "echo x > %s", file);
	sandtrap_sandbox_builder_fs_readable(b, "/usr");
	sandtrap_sandbox_builder_fs_readable(b, "/lib");
	sandtrap_sandbox_builder_fs_readable(b, "/bin");
	sandtrap_sandbox_builder_fs_writable(b, dir);
	CHECK(sandtrap_sandbox_builder_workdir(b, dir) == SANDTRAP_OK, "workdir setter");
	CHECK(sandtrap_sandbox_builder_on_exit(b, "commit") == SANDTRAP_OK, "on_exit setter");
	rc = sandtrap_sandbox_builder_build(b, &sb, &err);
	sandtrap_sandbox_builder_free(b);
	if (rc != SANDTRAP_OK) {
		fprintf(stderr, "build: %s: %s\n", sandtrap_status_name(rc), sandtrap_error_message(err));
		sandtrap_error_free(err);
		return 1;
	}

	/* {"op": "dry_run", "argv": ["/bin/sh", "-c", script]}, by hand */
	req[n++] = 0x82;
	{
		static const char head[] = "\xa2op\xa7" "dry_run\xa4" "argv\x93\xa7/bin/sh\xa2-c";
		memcpy(req + n, head, sizeof head - 1);
		n += sizeof head - 1;
	}
	l = strlen(script);
	req[n++] = 0xd9;
	req[n++] = (uint8_t)l;
	memcpy(req + n, script, l);
	n += l;
	rc = sandtrap_sandbox_exec(sb, req, n, &resp, &resp_len);
	CHECK(rc == SANDTRAP_OK, "dry_run: %s: %.*s", sandtrap_status_name(rc), (int)resp_len, (const char *)resp);
	CHECK(has(resp, resp_len, "\xa7" "changes\x91", 9) && has(resp, resp_len, "\xa4kind\xa1" "A\xa4path\xa3new", 16),
	      "dry_run lists the change");
	CHECK(has(resp, resp_len, "\xa6" "branch\xa7" "aborted", 15), "dry_run aborts");
	CHECK(stat(file, &st) != 0, "the dry run wrote the workdir");
	sandtrap_buffer_free(resp);

	argv[0] = "/bin/sh";
	argv[1] = "-c";
	argv[2] = script;
	argv[3] = NULL;
	rc = sandtrap_sandbox_run(sb, argv, NULL, &r);
	CHECK(rc == SANDTRAP_OK && sandtrap_result_success(r), "run: %s", sandtrap_status_name(rc));
	CHECK(stat(file, &st) == 0 && st.st_size == 2, "the run's change was not committed");
	sandtrap_result_free(r);
	sandtrap_sandbox_free(sb);
	unlink(file);
	rmdir(dir);
	if (failures) {
		fprintf(stderr, "workdir.c: %d failures\n", failures);
		return 1;
	}
	printf("workdir.c: ok\n");
	return 0;
}
