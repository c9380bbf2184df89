/* builder.h — the builder and error handles behind include/sandtrap.h's opaque
 * types, and the typed helpers the generated setters (builder_gen.c) call.
 * Private to the library: these symbols are hidden by sandtrap.map. */
#ifndef SANDTRAP_CAPI_BUILDER_H
#define SANDTRAP_CAPI_BUILDER_H

#include <stddef.h>
#include <stdint.h>

#include "../include/sandtrap.h"

struct sandtrap_sandbox_builder { uintptr_t h; };

/* Each records one value of the field with msgpack key `key` (core/policy.Schema):
 * appended for a list field, set for the others. */
int st_builder_string(sandtrap_sandbox_builder *b, const char *key, const char *s);
int st_builder_u64(sandtrap_sandbox_builder *b, const char *key, uint64_t v);
int st_builder_bool(sandtrap_sandbox_builder *b, const char *key, int v);
int st_builder_ms(sandtrap_sandbox_builder *b, const char *key, uint64_t ms);
int st_builder_env(sandtrap_sandbox_builder *b, const char *key, const char *name, const char *value);
int st_builder_mount(sandtrap_sandbox_builder *b, const char *key, const char *inside, const char *host);
int st_builder_ids(sandtrap_sandbox_builder *b, uint32_t uid, uint32_t gid);

#endif
