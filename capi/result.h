/* result.h — the layout behind the opaque sandtrap_result and sandtrap_error
 * handles (include/sandtrap.h). Private to the library: main.go allocates and fills
 * them in, abi.c frees them. */
#ifndef SANDTRAP_CAPI_RESULT_H
#define SANDTRAP_CAPI_RESULT_H

#include <stddef.h>
#include <stdint.h>
#include "../include/sandtrap.h"

struct sandtrap_result {
	int success;
	int exit_code;        /* -1: the program did not exit (signal, never started) */
	int signal;           /* 0: none */
	int stdout_truncated;
	int stderr_truncated;
	int timed_out;
	int cancelled;
	uint8_t *out;         /* malloc'd, NUL-terminated; never NULL once filled */
	size_t out_len;
	uint8_t *err;
	size_t err_len;
	char *error_kind;     /* NULL: no error */
	char *error_message;
	char *reason;         /* why it ended (docs/protocol.md, "reason"); NULL only before it is filled */
	size_t ndenials;
	struct sandtrap_denial *denials; /* ndenials entries, every string malloc'd or NULL */
	uint64_t denials_dropped;
};

/* An error: every string malloc'd, never NULL (fields[i] is "" when the problem is
 * about the input as a whole). */
struct sandtrap_error {
	int status;
	char *kind;
	char *message;
	size_t nproblems;
	char **fields;        /* nproblems entries */
	char **messages;
};

#endif
