/* hash: identifiers of the chunk hash algorithms, shared by server, client and disk format.
 * The numbers are stored in segment records and keys: never renumber. */
#ifndef DEDUPD_HASH_H
#define DEDUPD_HASH_H

enum dedupd_hash_alg {
    DEDUPD_HASH_NONE = 0,     /* chunk stored without a hash: dedup was off */
    DEDUPD_HASH_SHA256 = 1,   /* 32 bytes, cryptographic: sharing on match is safe */
    DEDUPD_HASH_XXH3_128 = 2, /* 16 bytes, fast, NOT cryptographic: verify is mandatory */
};

#endif
