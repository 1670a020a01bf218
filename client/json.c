/* json: see json.h. Knows nothing of dedupd's messages. */
#include "json.h"

#include <inttypes.h>
#include <math.h>

void
json_init(struct json *j, FILE *f)
{
    j->f = f;
    j->depth = 0;
    j->has_items[0] = false;
}

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if it is not one. */
static int
utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    int n;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, min = 0x10000;
    else
        return 0;
    unsigned cp = c & (0xff >> (n + 1));
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0; /* also stops at the terminating NUL */
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0; /* overlong, out of range, or a surrogate */
    return n;
}

void
json_write_string(FILE *f, const char *str)
{
    const unsigned char *s = (const unsigned char *) (str ? str : "");
    fputc('"', f);
    while (*s) {
        unsigned c = *s;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int) c, f);
            s++;
        } else if (c < 0x20 || c == 0x7f) {
            switch (c) {
            case '\n':
                fputs("\\n", f);
                break;
            case '\r':
                fputs("\\r", f);
                break;
            case '\t':
                fputs("\\t", f);
                break;
            default:
                fprintf(f, "\\u%04x", c);
                break;
            }
            s++;
        } else if (c < 0x80) {
            fputc((int) c, f);
            s++;
        } else {
            int n = utf8_len(s);
            if (n == 0) {
                fputs("\\ufffd", f);
                s++;
            } else {
                fwrite(s, 1, (size_t) n, f);
                s += n;
            }
        }
    }
    fputc('"', f);
}

static void
indent(struct json *j)
{
    fputc('\n', j->f);
    for (int i = 0; i < j->depth; i++)
        fputs("  ", j->f);
}

/* Separator, indentation and "key": before a value. */
static void
item(struct json *j, const char *key)
{
    if (j->depth > 0) {
        if (j->has_items[j->depth])
            fputc(',', j->f);
        j->has_items[j->depth] = true;
        indent(j);
    }
    if (key) {
        json_write_string(j->f, key);
        fputs(": ", j->f);
    }
}

static void
open_(struct json *j, const char *key, char c)
{
    item(j, key);
    fputc(c, j->f);
    if (j->depth + 1 < JSON_MAX_DEPTH)
        j->depth++;
    j->has_items[j->depth] = false;
}

static void
close_(struct json *j, char c)
{
    bool had = j->has_items[j->depth];
    if (j->depth > 0)
        j->depth--;
    if (had)
        indent(j);
    fputc(c, j->f);
    if (j->depth == 0)
        fputc('\n', j->f);
}

void
json_obj_begin(struct json *j, const char *key)
{
    open_(j, key, '{');
}

void
json_obj_end(struct json *j)
{
    close_(j, '}');
}

void
json_arr_begin(struct json *j, const char *key)
{
    open_(j, key, '[');
}

void
json_arr_end(struct json *j)
{
    close_(j, ']');
}

void
json_str(struct json *j, const char *key, const char *v)
{
    item(j, key);
    json_write_string(j->f, v);
}

void
json_u64(struct json *j, const char *key, uint64_t v)
{
    item(j, key);
    fprintf(j->f, "%" PRIu64, v);
}

void
json_i64(struct json *j, const char *key, int64_t v)
{
    item(j, key);
    fprintf(j->f, "%" PRId64, v);
}

void
json_bool(struct json *j, const char *key, bool v)
{
    item(j, key);
    fputs(v ? "true" : "false", j->f);
}

void
json_double(struct json *j, const char *key, double v)
{
    item(j, key);
    if (!isfinite(v))
        v = 0;
    fprintf(j->f, "%.6g", v);
}
