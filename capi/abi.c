/* abi.c — the public sandtrap_* symbols. Each one refuses to enter Go in a child
 * forked from the host (the Go runtime does not survive fork), then converts and
 * forwards to the Go export of the same name with a "stgo_" prefix. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../include/sandtrap.h"
#include "builder.h"
#include "result.h"
#include "_cgo_export.h"
#include "version.h"

struct sandtrap_sandbox { uintptr_t h; uint64_t id; };

static volatile int forked_child;
static struct rlimit host_nofile;
static int have_host_nofile;

static void on_fork_child(void) { forked_child = 1; }

/* Runs when the library is loaded, before Go's package initialisers raise
 * RLIMIT_NOFILE: remember the host's limit so it can be put back. */
__attribute__((constructor(101))) static void sandtrap_load(void)
{
	struct sigaction sa;
	pthread_atfork(NULL, NULL, on_fork_child);
	if (getrlimit(RLIMIT_NOFILE, &host_nofile) == 0)
		have_host_nofile = 1;
	/* A broken pipe must be an EPIPE, never the death of the host. */
	if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = SIG_IGN;
		sigaction(SIGPIPE, &sa, NULL);
	}
}

int st_host_nofile(uint64_t *cur, uint64_t *max)
{
	if (!have_host_nofile)
		return 0;
	*cur = host_nofile.rlim_cur;
	*max = host_nofile.rlim_max;
	return 1;
}

#define GUARD(ret) do { if (forked_child) return (ret); } while (0)

int sandtrap_abi_version(void) { return SANDTRAP_ABI_VERSION; }

const char *sandtrap_version(void) { return SANDTRAP_VERSION_STRING; }

const char *sandtrap_status_name(int s)
{
	switch (s) {
	case SANDTRAP_OK: return "ok";
	case SANDTRAP_E_INVALID_ARGUMENT: return "invalid_argument";
	case SANDTRAP_E_INVALID_REQUEST: return "invalid_request";
	case SANDTRAP_E_INVALID_POLICY: return "invalid_policy";
	case SANDTRAP_E_ISOLATION_UNAVAILABLE: return "isolation_unavailable";
	case SANDTRAP_E_NOT_FOUND: return "not_found";
	case SANDTRAP_E_SPAWN_FAILED: return "spawn_failed";
	case SANDTRAP_E_FORKED_CHILD: return "forked_child";
	case SANDTRAP_E_CLOSED: return "closed";
	case SANDTRAP_E_INTERNAL: return "internal";
	}
	return "unknown";
}

void sandtrap_string_free(char *s) { free(s); }
void sandtrap_buffer_free(uint8_t *b) { free(b); }

int sandtrap_probe(uint8_t **out, size_t *out_len)
{
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (!out || !out_len)
		return SANDTRAP_E_INVALID_ARGUMENT;
	return stgo_probe(out, out_len);
}

int sandtrap_profile(const uint8_t *req, size_t req_len, uint8_t **out, size_t *out_len)
{
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if ((!req && req_len) || !out || !out_len)
		return SANDTRAP_E_INVALID_ARGUMENT;
	return stgo_profile((uint8_t *)req, req_len, out, out_len);
}

sandtrap_sandbox_builder *sandtrap_sandbox_builder_new(void)
{
	sandtrap_sandbox_builder *b;
	GUARD(NULL);
	b = malloc(sizeof *b);
	if (b)
		b->h = stgo_builder_new();
	return b;
}

void sandtrap_sandbox_builder_free(sandtrap_sandbox_builder *b)
{
	if (!b)
		return;
	if (!forked_child)
		stgo_handle_delete(b->h);
	free(b);
}

/* The typed helpers of the generated setters (builder_gen.c). */

int st_builder_string(sandtrap_sandbox_builder *b, const char *key, const char *v)
{
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (!b || !v)
		return SANDTRAP_E_INVALID_ARGUMENT;
	return stgo_builder_string(b->h, (char *)key, (char *)v);
}

int st_builder_u64(sandtrap_sandbox_builder *b, const char *key, uint64_t v)
{
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (!b)
		return SANDTRAP_E_INVALID_ARGUMENT;
	return stgo_builder_u64(b->h, (char *)key, v);
}

int st_builder_bool(sandtrap_sandbox_builder *b, const char *key, int v)
{
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (!b)
		return SANDTRAP_E_INVALID_ARGUMENT;
	return stgo_builder_bool(b->h, (char *)key, v != 0);
}

int st_builder_ms(sandtrap_sandbox_builder *b, const char *key, uint64_t ms)
{
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (!b)
		return SANDTRAP_E_INVALID_ARGUMENT;
	return stgo_builder_ms(b->h, (char *)key, ms);
}

int st_builder_env(sandtrap_sandbox_builder *b, const char *key, const char *name, const char *value)
{
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (!b || !name || !value)
		return SANDTRAP_E_INVALID_ARGUMENT;
	return stgo_builder_env(b->h, (char *)key, (char *)name, (char *)value);
}

int st_builder_mount(sandtrap_sandbox_builder *b, const char *key, const char *inside, const char *host)
{
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (!b || !inside || !host)
		return SANDTRAP_E_INVALID_ARGUMENT;
	return stgo_builder_mount(b->h, (char *)key, (char *)inside, (char *)host);
}

int st_builder_ids(sandtrap_sandbox_builder *b, uint32_t uid, uint32_t gid)
{
	int rc;
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (!b)
		return SANDTRAP_E_INVALID_ARGUMENT;
	rc = stgo_builder_u64(b->h, (char *)"uid", uid);
	return rc != SANDTRAP_OK ? rc : stgo_builder_u64(b->h, (char *)"gid", gid);
}

/* ---- errors -------------------------------------------------------------- */

void sandtrap_error_free(sandtrap_error *e)
{
	size_t i;
	if (!e)
		return;
	for (i = 0; i < e->nproblems; i++) {
		free(e->fields[i]);
		free(e->messages[i]);
	}
	free(e->fields);
	free(e->messages);
	free(e->kind);
	free(e->message);
	free(e);
}

int sandtrap_error_status(const sandtrap_error *e) { return e ? e->status : SANDTRAP_OK; }
const char *sandtrap_error_kind(const sandtrap_error *e) { return e ? e->kind : NULL; }
const char *sandtrap_error_message(const sandtrap_error *e) { return e ? e->message : NULL; }
size_t sandtrap_error_problem_count(const sandtrap_error *e) { return e ? e->nproblems : 0; }

const char *sandtrap_error_problem_field(const sandtrap_error *e, size_t i)
{
	return e && i < e->nproblems ? e->fields[i] : NULL;
}

const char *sandtrap_error_problem_message(const sandtrap_error *e, size_t i)
{
	return e && i < e->nproblems ? e->messages[i] : NULL;
}

static int wrap_sandbox(int rc, uintptr_t h, sandtrap_sandbox **out)
{
	sandtrap_sandbox *sb;
	if (rc != SANDTRAP_OK)
		return rc;
	sb = malloc(sizeof *sb);
	if (!sb) {
		stgo_sandbox_free(h);
		return SANDTRAP_E_INTERNAL;
	}
	sb->h = h;
	sb->id = stgo_sandbox_id(h);
	*out = sb;
	return SANDTRAP_OK;
}

int sandtrap_sandbox_builder_build(const sandtrap_sandbox_builder *b, sandtrap_sandbox **out, sandtrap_error **err)
{
	uintptr_t h = 0;
	int rc;
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (err)
		*err = NULL;
	if (!b || !out)
		return SANDTRAP_E_INVALID_ARGUMENT;
	*out = NULL;
	rc = stgo_builder_build(b->h, &h, err);
	return wrap_sandbox(rc, h, out);
}

int sandtrap_sandbox_new(const uint8_t *policy, size_t len, sandtrap_sandbox **out, sandtrap_error **err)
{
	uintptr_t h = 0;
	int rc;
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (err)
		*err = NULL;
	if (!out || (!policy && len))
		return SANDTRAP_E_INVALID_ARGUMENT;
	*out = NULL;
	rc = stgo_sandbox_new((uint8_t *)policy, len, &h, err);
	return wrap_sandbox(rc, h, out);
}

void sandtrap_sandbox_free(sandtrap_sandbox *sb)
{
	if (!sb)
		return;
	if (!forked_child)
		stgo_sandbox_free(sb->h);
	free(sb);
}

uint64_t sandtrap_sandbox_id(const sandtrap_sandbox *sb) { return sb ? sb->id : 0; }

int sandtrap_sandbox_exec(sandtrap_sandbox *sb, const uint8_t *req, size_t req_len,
			  uint8_t **resp, size_t *resp_len)
{
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (!sb || !resp || !resp_len || (!req && req_len))
		return SANDTRAP_E_INVALID_ARGUMENT;
	*resp = NULL;
	*resp_len = 0;
	return stgo_sandbox_exec(sb->h, (uint8_t *)req, req_len, resp, resp_len);
}

int sandtrap_sandbox_cancel(sandtrap_sandbox *sb, const char *tag)
{
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (!sb)
		return SANDTRAP_E_INVALID_ARGUMENT;
	return stgo_sandbox_cancel(sb->h, (char *)tag);
}

int sandtrap_confine(const sandtrap_sandbox *sb, int with_seccomp, sandtrap_error **err)
{
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (err)
		*err = NULL;
	if (!sb)
		return SANDTRAP_E_INVALID_ARGUMENT;
	return stgo_confine(sb->h, with_seccomp != 0, err);
}

/* ---- typed runs ---------------------------------------------------------- */

int sandtrap_run_options_init(sandtrap_run_options *opts, unsigned int version)
{
	sandtrap_run_options init = SANDTRAP_RUN_OPTIONS_INIT;
	if (!opts || version != SANDTRAP_RUN_OPTIONS_VERSION)
		return SANDTRAP_E_INVALID_ARGUMENT;
	*opts = init;
	return SANDTRAP_OK;
}

int sandtrap_sandbox_run(sandtrap_sandbox *sb, const char *const *argv,
			 const sandtrap_run_options *opts, sandtrap_result **out)
{
	sandtrap_run_options o = SANDTRAP_RUN_OPTIONS_INIT;
	sandtrap_result *r;
	size_t argc = 0;
	GUARD(SANDTRAP_E_FORKED_CHILD);
	if (!out)
		return SANDTRAP_E_INVALID_ARGUMENT;
	*out = NULL;
	if (opts)
		o = *opts;
	if (!sb || !argv || !argv[0] || !argv[0][0] || o.version != SANDTRAP_RUN_OPTIONS_VERSION ||
	    (!o.stdin_data && o.stdin_len) || o.timeout_ms > 10000000000ull || o.max_output > (uint64_t)INT64_MAX)
		return SANDTRAP_E_INVALID_ARGUMENT;
	while (argv[argc])
		argc++;
	if (argc > 1u << 20)
		return SANDTRAP_E_INVALID_ARGUMENT;
	r = calloc(1, sizeof *r);
	if (!r)
		return SANDTRAP_E_INTERNAL;
	*out = r;
	return stgo_sandbox_run(sb->h, (char **)argv, (int)argc, (uint8_t *)o.stdin_data, o.stdin_len,
				o.timeout_ms, (char *)o.tag, o.max_output, r);
}

void sandtrap_result_free(sandtrap_result *r)
{
	if (!r)
		return;
	free(r->out);
	free(r->err);
	free(r->error_kind);
	free(r->error_message);
	free(r->reason);
	for (size_t i = 0; i < r->ndenials; i++) {
		sandtrap_denial *d = &r->denials[i];
		free((char *)d->syscall);
		free((char *)d->path);
		free((char *)d->address);
		free((char *)d->reason);
		free((char *)d->errno_name);
		free((char *)d->source);
	}
	free(r->denials);
	free(r);
}

size_t sandtrap_result_denials_count(const sandtrap_result *r) { return r ? r->ndenials : 0; }
uint64_t sandtrap_result_denials_dropped(const sandtrap_result *r) { return r ? r->denials_dropped : 0; }

const sandtrap_denial *sandtrap_result_denial(const sandtrap_result *r, size_t i)
{
	return r && i < r->ndenials ? &r->denials[i] : NULL;
}

int sandtrap_result_success(const sandtrap_result *r) { return r ? r->success : 0; }
int sandtrap_result_exit_code(const sandtrap_result *r) { return r ? r->exit_code : -1; }
int sandtrap_result_signal(const sandtrap_result *r) { return r ? r->signal : 0; }
int sandtrap_result_timed_out(const sandtrap_result *r) { return r ? r->timed_out : 0; }
int sandtrap_result_cancelled(const sandtrap_result *r) { return r ? r->cancelled : 0; }
int sandtrap_result_stdout_truncated(const sandtrap_result *r) { return r ? r->stdout_truncated : 0; }
int sandtrap_result_stderr_truncated(const sandtrap_result *r) { return r ? r->stderr_truncated : 0; }
const char *sandtrap_result_error_kind(const sandtrap_result *r) { return r ? r->error_kind : NULL; }
const char *sandtrap_result_reason(const sandtrap_result *r) { return r ? (r->reason ? r->reason : "internal") : NULL; }
const char *sandtrap_result_error_message(const sandtrap_result *r) { return r ? r->error_message : NULL; }

static const uint8_t empty_output[1];

const uint8_t *sandtrap_result_stdout(const sandtrap_result *r, size_t *len)
{
	if (len)
		*len = r && r->out ? r->out_len : 0;
	return r && r->out ? r->out : empty_output;
}

const uint8_t *sandtrap_result_stderr(const sandtrap_result *r, size_t *len)
{
	if (len)
		*len = r && r->err ? r->err_len : 0;
	return r && r->err ? r->err : empty_output;
}
