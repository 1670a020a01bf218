/* json: a small streaming JSON writer for dedupd-ctl --json. Strings are escaped per
 * RFC 8259 (quotes, backslash, control characters as \u00XX); bytes that are not valid
 * UTF-8 become U+FFFD so that the output is always valid JSON. Numbers: unsigned 64-bit
 * integers exactly, doubles with up to 6 significant digits (never NaN/Inf: written 0). */
#ifndef DD_CLIENT_JSON_H
#define DD_CLIENT_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

struct json {
    FILE *f;
    int depth;
    bool has_items[JSON_MAX_DEPTH];
};

/* key is NULL inside arrays and at the top level. */
void json_init(struct json *j, FILE *f);
void json_obj_begin(struct json *j, const char *key);
void json_obj_end(struct json *j); /* at depth 0 also writes the final newline */
void json_arr_begin(struct json *j, const char *key);
void json_arr_end(struct json *j);
void json_str(struct json *j, const char *key, const char *v);
void json_u64(struct json *j, const char *key, uint64_t v);
void json_i64(struct json *j, const char *key, int64_t v);
void json_bool(struct json *j, const char *key, bool v);
void json_double(struct json *j, const char *key, double v);
/* Writes s as a quoted, escaped JSON string. */
void json_write_string(FILE *f, const char *s);

#endif
