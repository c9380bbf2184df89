/* chroot.c — a chroot from C: sandtrap_sandbox_builder_chroot, _fs_mount (read-
 * write, a grant) and _fs_mount_ro (read-only at the mount: EROFS even where
 * fs_writable grants it), cwd inside. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "sandtrap.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* the bytes of needle in hay */
static int has(const uint8_t *hay, size_t n, const char *needle)
{
	size_t i, len = strlen(needle);
	for (i = 0; i + len <= n; i++)
		if (memcmp(hay + i, needle, len) == 0)
			return 1;
	return 0;
}

int main(void)
{
	char top[] = "/tmp/sandtrap-c-chroot-XXXXXX", path[512], root[300], work[300];
	const char *dirs[] = {"usr", "dev", "proc", "work", "ro"};
	const char *argv[] = {"sh", "-c", "pwd; echo new > added; echo x > /ro/added; cat /ro/added", NULL};
	sandtrap_sandbox_builder *b;
	sandtrap_sandbox *sb = NULL;
	sandtrap_error *err = NULL;
	sandtrap_result *r = NULL;
	const uint8_t *out;
	size_t n, i;
	int rc;

	if (!mkdtemp(top)) {
		perror("mkdtemp");
		return 1;
	}
	chmod(top, 0755);
	snprintf(root, sizeof root, "%s/root", top);
	snprintf(work, sizeof work, "%s/work", top);
	mkdir(root, 0755);
	mkdir(work, 0777);
	chmod(work, 0777);
	for (i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
		mkdir(path, 0755);
	}
	for (i = 0; i < 3; i++) {
		const char *links[][2] = {{"bin", "usr/bin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"}};
		snprintf(path, sizeof path, "%s/%s", root, links[i][0]);
		if (symlink(links[i][1], path) != 0)
			perror("symlink");
	}

	b = sandtrap_sandbox_builder_new();
	CHECK(sandtrap_sandbox_builder_chroot(b, root) == SANDTRAP_OK, "chroot setter");
	CHECK(sandtrap_sandbox_builder_fs_mount_ro(b, "/usr", "/usr") == SANDTRAP_OK, "fs_mount_ro setter");
	CHECK(sandtrap_sandbox_builder_fs_mount_ro(b, "/ro", work) == SANDTRAP_OK, "fs_mount_ro setter");
	CHECK(sandtrap_sandbox_builder_fs_mount(b, "/work", work) == SANDTRAP_OK, "fs_mount setter");
	sandtrap_sandbox_builder_fs_writable(b, "/ro");
	sandtrap_sandbox_builder_cwd(b, "/work");
	sandtrap_sandbox_builder_env(b, "PATH", "/bin");
	rc = sandtrap_sandbox_builder_build(b, &sb, &err);
	sandtrap_sandbox_builder_free(b);
	if (rc != SANDTRAP_OK) {
		fprintf(stderr, "build: %s: %s\n", sandtrap_status_name(rc), sandtrap_error_message(err));
		sandtrap_error_free(err);
		return 1;
	}
	rc = sandtrap_sandbox_run(sb, argv, NULL, &r);
	CHECK(rc == SANDTRAP_OK, "run: %s", sandtrap_status_name(rc));
	if (rc == SANDTRAP_OK) {
		out = sandtrap_result_stdout(r, &n);
		CHECK(n == strlen("/work\nnew\n") && memcmp(out, "/work\nnew\n", n) == 0, "stdout %.*s", (int)n, (const char *)out);
		out = sandtrap_result_stderr(r, &n);
		CHECK(has(out, n, "Read-only file system"), "stderr %.*s", (int)n, (const char *)out);
		sandtrap_result_free(r);
	}
	sandtrap_sandbox_free(sb);
	snprintf(path, sizeof path, "%s/added", work);
	CHECK(access(path, F_OK) == 0, "the write to fs_mount did not reach the host");
	snprintf(path, sizeof path, "rm -rf %s", top);
	if (system(path) != 0)
		fprintf(stderr, "cleanup failed\n");
	if (failures)
		return 1;
	printf("chroot: ok\n");
	return 0;
}
