/* keys: the byte encodings of every key and value in meta's column families, in one place.
 * Integers in keys are big-endian so that RocksDB's bytewise order is numeric order and
 * scans of one export's map run in chunk order. Values carry a version byte first so a
 * newer format is detected instead of misread. Pure functions; any thread. */
#ifndef DD_META_KEYS_H
#define DD_META_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedupd/limits.h"

#define META_MAP_KEY_LEN    12                        /* export id (4) + chunk idx (8) */
#define META_CHUNK_KEY_LEN  8                         /* chunk id */
#define META_EXPORT_KEY_LEN 4                         /* export id */
#define META_HASH_KEY_MAX   (1 + DEDUPD_HASH_MAX_LEN) /* hash alg (1) + hash */
#define META_ID_VAL_LEN     8                         /* values that are one chunk id */

void meta_key_map_encode(uint8_t out[META_MAP_KEY_LEN], uint32_t export_id, uint64_t chunk_idx);
int meta_key_map_decode(const void *key, size_t klen, uint32_t *export_id, uint64_t *chunk_idx);
void meta_key_chunk_encode(uint8_t out[META_CHUNK_KEY_LEN], uint64_t chunk_id);
int meta_key_chunk_decode(const void *key, size_t klen, uint64_t *chunk_id);
void meta_key_export_encode(uint8_t out[META_EXPORT_KEY_LEN], uint32_t export_id);
int meta_key_export_decode(const void *key, size_t klen, uint32_t *export_id);
/* Returns the key length (1 + hash_len). */
size_t meta_key_hash_encode(uint8_t out[META_HASH_KEY_MAX], uint8_t hash_alg, const uint8_t *hash,
                            size_t hash_len);

void meta_val_id_encode(uint8_t out[META_ID_VAL_LEN], uint64_t id);
int meta_val_id_decode(const void *val, size_t vlen, uint64_t *id); /* -EBADMSG if malformed */

/* chunk CF value: where a chunk's record lives and who holds it. */
struct meta_chunk_rec {
    uint32_t seg;        /* segment number */
    uint64_t off;        /* record offset in the segment (start of its header) */
    uint32_t raw_len;    /* chunk bytes before compression */
    uint32_t stored_len; /* bytes after the header on disk */
    uint8_t codec;       /* enum store_codec */
    uint8_t hash_alg;    /* enum dedupd_hash_alg; 0 = stored without a hash (dedup off) */
    uint8_t hash_len;
    uint64_t refs; /* map entries (and other holders) naming this chunk */
    uint8_t hash[DEDUPD_HASH_MAX_LEN];
    /* The `hash` entry of this hash was written naming this chunk, in the batch that created
     * it. Nothing sets or reads it any more (freed chunks keep their entry:
     * invariant 2); records that have it keep it, and it still decodes. */
    bool owns_hash;
};
#define META_CHUNK_VAL_MAX 72
size_t meta_chunk_rec_encode(uint8_t out[META_CHUNK_VAL_MAX], const struct meta_chunk_rec *r);
int meta_chunk_rec_decode(const void *val, size_t vlen, struct meta_chunk_rec *r); /* -EBADMSG */

/* export CF value: the export catalogue. */
struct meta_export_rec {
    char name[DEDUPD_EXPORT_NAME_MAX + 1];
    uint64_t size;       /* bytes */
    uint32_t chunk_size; /* power of two, DEDUPD_CHUNK_MIN..MAX, fixed at creation */
    bool dedup;          /* per-export dedup property (inherited by clones) */
    bool read_only;
    uint32_t parent_id; /* export it was cloned from; 0 = none */
    uint64_t created_sec;
};
#define META_EXPORT_VAL_MAX (DEDUPD_EXPORT_NAME_MAX + 64)
size_t meta_export_rec_encode(uint8_t out[META_EXPORT_VAL_MAX], const struct meta_export_rec *r);
int meta_export_rec_decode(const void *val, size_t vlen, struct meta_export_rec *r);

#endif
