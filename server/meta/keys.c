/* keys: big-endian key codecs and versioned value codecs for meta's column families.
 * Pure byte shuffling; knows nothing of RocksDB. Every decoder checks lengths and the
 * version byte, because these bytes come from disk. */
#include "meta/keys.h"

#include <errno.h>
#include <string.h>

#define CHUNK_VAL_VERSION  2
#define EXPORT_VAL_VERSION 1

static void
put_be32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24;
    p[1] = v >> 16;
    p[2] = v >> 8;
    p[3] = v;
}

static void
put_be64(uint8_t *p, uint64_t v)
{
    put_be32(p, v >> 32);
    put_be32(p + 4, (uint32_t) v);
}

static uint32_t
get_be32(const uint8_t *p)
{
    return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8 | p[3];
}

static uint64_t
get_be64(const uint8_t *p)
{
    return (uint64_t) get_be32(p) << 32 | get_be32(p + 4);
}

void
meta_key_map_encode(uint8_t out[META_MAP_KEY_LEN], uint32_t export_id, uint64_t chunk_idx)
{
    put_be32(out, export_id);
    put_be64(out + 4, chunk_idx);
}

int
meta_key_map_decode(const void *key, size_t klen, uint32_t *export_id, uint64_t *chunk_idx)
{
    if (klen != META_MAP_KEY_LEN)
        return -EBADMSG;
    *export_id = get_be32(key);
    *chunk_idx = get_be64((const uint8_t *) key + 4);
    return 0;
}

void
meta_key_chunk_encode(uint8_t out[META_CHUNK_KEY_LEN], uint64_t chunk_id)
{
    put_be64(out, chunk_id);
}

int
meta_key_chunk_decode(const void *key, size_t klen, uint64_t *chunk_id)
{
    if (klen != META_CHUNK_KEY_LEN)
        return -EBADMSG;
    *chunk_id = get_be64(key);
    return 0;
}

void
meta_key_export_encode(uint8_t out[META_EXPORT_KEY_LEN], uint32_t export_id)
{
    put_be32(out, export_id);
}

int
meta_key_export_decode(const void *key, size_t klen, uint32_t *export_id)
{
    if (klen != META_EXPORT_KEY_LEN)
        return -EBADMSG;
    *export_id = get_be32(key);
    return 0;
}

size_t
meta_key_hash_encode(uint8_t out[META_HASH_KEY_MAX], uint8_t hash_alg, const uint8_t *hash,
                     size_t hash_len)
{
    if (hash_len > DEDUPD_HASH_MAX_LEN)
        hash_len = DEDUPD_HASH_MAX_LEN;
    out[0] = hash_alg;
    memcpy(out + 1, hash, hash_len);
    return 1 + hash_len;
}

void
meta_val_id_encode(uint8_t out[META_ID_VAL_LEN], uint64_t id)
{
    put_be64(out, id);
}

int
meta_val_id_decode(const void *val, size_t vlen, uint64_t *id)
{
    if (vlen != META_ID_VAL_LEN)
        return -EBADMSG;
    *id = get_be64(val);
    return 0;
}

/* chunk value, version 2 (fixed layout; 33 + hash_len bytes):
 *   version u8 | seg be32 | off be64 | raw_len be32 | stored_len be32 | codec u8 |
 *   hash_alg u8 | hash_len u8 | refs be64 | flags u8 (1: owns_hash) | hash[hash_len]
 * Version 1 (data format 1) had no flags byte; it is still read (owns_hash false). */
#define CHUNK_VAL_FIXED_V1 (1 + 4 + 8 + 4 + 4 + 1 + 1 + 1 + 8)
#define CHUNK_VAL_FIXED    (CHUNK_VAL_FIXED_V1 + 1)
#define CHUNK_FLAG_OWNS    1

size_t
meta_chunk_rec_encode(uint8_t out[META_CHUNK_VAL_MAX], const struct meta_chunk_rec *r)
{
    uint8_t hl = r->hash_len > DEDUPD_HASH_MAX_LEN ? DEDUPD_HASH_MAX_LEN : r->hash_len;
    uint8_t *p = out;
    *p++ = CHUNK_VAL_VERSION;
    put_be32(p, r->seg), p += 4;
    put_be64(p, r->off), p += 8;
    put_be32(p, r->raw_len), p += 4;
    put_be32(p, r->stored_len), p += 4;
    *p++ = r->codec;
    *p++ = r->hash_alg;
    *p++ = hl;
    put_be64(p, r->refs), p += 8;
    *p++ = r->owns_hash ? CHUNK_FLAG_OWNS : 0;
    memcpy(p, r->hash, hl);
    p += hl;
    return (size_t) (p - out);
}

int
meta_chunk_rec_decode(const void *val, size_t vlen, struct meta_chunk_rec *r)
{
    const uint8_t *p = val;
    if (vlen < CHUNK_VAL_FIXED_V1 || (p[0] != 1 && p[0] != CHUNK_VAL_VERSION))
        return -EBADMSG;
    bool v1 = p[0] == 1;
    size_t fixed = v1 ? CHUNK_VAL_FIXED_V1 : CHUNK_VAL_FIXED;
    p++;
    memset(r, 0, sizeof(*r));
    r->seg = get_be32(p), p += 4;
    r->off = get_be64(p), p += 8;
    r->raw_len = get_be32(p), p += 4;
    r->stored_len = get_be32(p), p += 4;
    r->codec = *p++;
    r->hash_alg = *p++;
    r->hash_len = *p++;
    r->refs = get_be64(p), p += 8;
    if (r->hash_len > DEDUPD_HASH_MAX_LEN || vlen != fixed + (size_t) r->hash_len)
        return -EBADMSG;
    if (!v1) {
        if (*p & ~CHUNK_FLAG_OWNS)
            return -EBADMSG; /* a flag this version does not know */
        r->owns_hash = *p++ & CHUNK_FLAG_OWNS;
    }
    memcpy(r->hash, p, r->hash_len);
    return 0;
}

/* export value, version 1:
 *   version u8 | size be64 | chunk_size be32 | flags u8 (1 dedup, 2 read_only) |
 *   parent_id be32 | created_sec be64 | name_len u8 | name[name_len] */
#define EXPORT_VAL_FIXED (1 + 8 + 4 + 1 + 4 + 8 + 1)

size_t
meta_export_rec_encode(uint8_t out[META_EXPORT_VAL_MAX], const struct meta_export_rec *r)
{
    size_t nl = strnlen(r->name, DEDUPD_EXPORT_NAME_MAX);
    uint8_t *p = out;
    *p++ = EXPORT_VAL_VERSION;
    put_be64(p, r->size), p += 8;
    put_be32(p, r->chunk_size), p += 4;
    *p++ = (r->dedup ? 1 : 0) | (r->read_only ? 2 : 0);
    put_be32(p, r->parent_id), p += 4;
    put_be64(p, r->created_sec), p += 8;
    *p++ = (uint8_t) nl;
    memcpy(p, r->name, nl);
    p += nl;
    return (size_t) (p - out);
}

int
meta_export_rec_decode(const void *val, size_t vlen, struct meta_export_rec *r)
{
    const uint8_t *p = val;
    if (vlen < EXPORT_VAL_FIXED || p[0] != EXPORT_VAL_VERSION)
        return -EBADMSG;
    p++;
    memset(r, 0, sizeof(*r));
    r->size = get_be64(p), p += 8;
    r->chunk_size = get_be32(p), p += 4;
    uint8_t flags = *p++;
    if (flags & ~3u)
        return -EBADMSG;
    r->dedup = flags & 1;
    r->read_only = (flags & 2) != 0;
    r->parent_id = get_be32(p), p += 4;
    r->created_sec = get_be64(p), p += 8;
    size_t nl = *p++;
    if (vlen != EXPORT_VAL_FIXED + nl || memchr(p, 0, nl))
        return -EBADMSG;
    memcpy(r->name, p, nl);
    r->name[nl] = 0;
    return 0;
}
