/* nbd/context.c: the meta contexts this server offers — base:allocation (the spec's) and
 * x-dedupd:shared (ours: which ranges hold chunks shared with other places) — their ids,
 * query matching for LIST/SET_META_CONTEXT, and the mapping from engine extent flags to
 * each context's status flags. Knows nothing of sockets. */
#include <string.h>

#include "nbd/internal.h"

struct ctx {
    uint32_t id;
    const char *name;
    const char *ns; /* namespace with its colon */
};

static const struct ctx ctxs[] = {
    {NBD_CTX_BASE_ALLOCATION, NBD_CTX_NAME_BASE_ALLOCATION, "base:"},
    {NBD_CTX_DEDUPD_SHARED, NBD_CTX_NAME_DEDUPD_SHARED, "x-dedupd:"},
};

const char *
nbd__ctx_name(uint32_t id)
{
    for (size_t i = 0; i < sizeof(ctxs) / sizeof(ctxs[0]); i++)
        if (ctxs[i].id == id)
            return ctxs[i].name;
    return NULL;
}

unsigned
nbd__ctx_all(void)
{
    unsigned m = 0;
    for (size_t i = 0; i < sizeof(ctxs) / sizeof(ctxs[0]); i++)
        m |= 1u << ctxs[i].id;
    return m;
}

unsigned
nbd__ctx_match(const char *q, size_t len, bool allow_ns)
{
    unsigned m = 0;
    for (size_t i = 0; i < sizeof(ctxs) / sizeof(ctxs[0]); i++) {
        const struct ctx *c = &ctxs[i];
        if (len == strlen(c->name) && memcmp(q, c->name, len) == 0)
            m |= 1u << c->id;
        else if (allow_ns && len == strlen(c->ns) && memcmp(q, c->ns, len) == 0)
            m |= 1u << c->id;
    }
    return m;
}

uint32_t
nbd__ctx_status(uint32_t id, uint32_t f)
{
    switch (id) {
    case NBD_CTX_BASE_ALLOCATION:
        /* An unmapped range stores nothing and reads as zeros. */
        if (f & ENGINE_EXT_HOLE)
            return NBD_STATE_HOLE | NBD_STATE_ZERO;
        return (f & ENGINE_EXT_ZERO) ? NBD_STATE_ZERO : 0;
    case NBD_CTX_DEDUPD_SHARED:
        if (f & (ENGINE_EXT_HOLE | ENGINE_EXT_ZERO))
            return NBD_DEDUPD_STATE_ZERO;
        return (f & ENGINE_EXT_SHARED) ? NBD_DEDUPD_STATE_SHARED : 0;
    default:
        return 0;
    }
}
