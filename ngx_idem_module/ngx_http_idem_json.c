
/*
 * JSON, both ways.  A string the module writes into JSON (a status
 * answer, the list, a problem, a span): escaped as JSON needs, and always
 * valid UTF-8, whatever bytes a client or a record gave it.
 *
 * A call id in a JSON body (idem_call_id_json): the path parsed once at
 * nginx -t, then walked on what json-c parsed.  A pure function of the
 * path and the bytes: no request, no pool but the caller's.
 *
 * json-c's tokener, strict and checking UTF-8, takes a buffer of a known
 * length and never reads past it; \uXXXX escapes (surrogate pairs too)
 * come out as UTF-8; a truncated document, or anything but whitespace
 * after it, is no document.  A key given twice is read as JavaScript,
 * Python and Go read it: the last one.
 */


#include "ngx_http_idem_json.h"

#include <json-c/json.h>


/* deeper documents are not read (json-c's default is 32) */
#define NGX_HTTP_IDEM_JSON_DEPTH         64


static size_t ngx_http_idem_json_write(u_char *dst, u_char *src,
    size_t size);
static size_t ngx_http_idem_json_utf8(u_char *p, u_char *last,
    ngx_uint_t *valid);
static ngx_uint_t ngx_http_idem_json_only_space(u_char *p, u_char *last);


/* the short escapes JSON has for control bytes; 0: \u00XX */

static u_char  ngx_http_idem_json_short[32] = {
    0, 0, 0, 0, 0, 0, 0, 0, 'b', 't', 'n', 0, 'f', 'r', 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
};

static u_char  ngx_http_idem_json_hex[] = "0123456789abcdef";

/* U+FFFD REPLACEMENT CHARACTER */
static u_char  ngx_http_idem_json_fffd[] = { 0xef, 0xbf, 0xbd };


/*
 * A string's bytes as the inside of a JSON string: what
 * ngx_http_idem_json_escape() writes for them, to the byte.  At most 6
 * bytes a byte (a control byte's \u00XX).
 */

size_t
ngx_http_idem_json_escape_len(u_char *src, size_t size)
{
    return ngx_http_idem_json_write(NULL, src, size);
}


/*
 * '"', '\\' and control bytes escaped (RFC 8259); valid UTF-8 copied as
 * it is; anything else (a stray byte, an overlong form, a surrogate, past
 * U+10FFFF, a cut sequence) becomes U+FFFD, one for each maximal
 * subpart, as Unicode and WHATWG decoders count them.  A strict reader
 * (a collector, a script) takes the whole document, where one raw 0xE9
 * would have it refused.  Returns the end of what was written.
 */

u_char *
ngx_http_idem_json_escape(u_char *dst, u_char *src, size_t size)
{
    return dst + ngx_http_idem_json_write(dst, src, size);
}


/*
 * Both at once, so that a length never differs from what is written:
 * each piece of the source is turned into "out", "n" bytes, then copied
 * (dst not NULL) and counted.
 */

static size_t
ngx_http_idem_json_write(u_char *dst, u_char *src, size_t size)
{
    u_char      c, *last, *out, esc[6];
    size_t      len, n;
    ngx_uint_t  valid;

    if (size == 0) {
        return 0;                               /* src may be NULL */
    }

    len = 0;
    last = src + size;

    while (src < last) {
        c = *src;
        out = src;
        n = 1;

        if (c >= 0x80) {
            n = ngx_http_idem_json_utf8(src, last, &valid);
            src += n;

            if (!valid) {
                out = ngx_http_idem_json_fffd;
                n = sizeof(ngx_http_idem_json_fffd);
            }

        } else if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = c;
            out = esc;
            n = 2;
            src++;

        } else if (c < 0x20) {
            esc[0] = '\\';

            if (ngx_http_idem_json_short[c]) {
                esc[1] = ngx_http_idem_json_short[c];
                n = 2;

            } else {
                esc[1] = 'u';
                esc[2] = '0';
                esc[3] = '0';
                esc[4] = ngx_http_idem_json_hex[c >> 4];
                esc[5] = ngx_http_idem_json_hex[c & 0xf];
                n = 6;
            }

            out = esc;
            src++;

        } else {
            src++;
        }

        if (dst != NULL) {
            dst = ngx_cpymem(dst, out, n);
        }

        len += n;
    }

    return len;
}


/*
 * The UTF-8 sequence at p (its first byte 0x80 or more), by the table of
 * well-formed sequences (Unicode 15, table 3-7): its length, "valid" set;
 * else the length of its maximal subpart (1 at least), "valid" 0.
 */

static size_t
ngx_http_idem_json_utf8(u_char *p, u_char *last, ngx_uint_t *valid)
{
    u_char  c, lo, hi;
    size_t  i, n;

    *valid = 0;

    c = *p;
    lo = 0x80;
    hi = 0xbf;

    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;

    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;

        if (c == 0xe0) {
            lo = 0xa0;                          /* overlong */

        } else if (c == 0xed) {
            hi = 0x9f;                          /* surrogates */
        }

    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;

        if (c == 0xf0) {
            lo = 0x90;                          /* overlong */

        } else if (c == 0xf4) {
            hi = 0x8f;                          /* past U+10FFFF */
        }

    } else {
        return 1;                               /* 80-C1, F5-FF */
    }

    for (i = 1; i < n; i++) {
        if (p + i == last || p[i] < lo || p[i] > hi) {
            return i;
        }

        lo = 0x80;
        hi = 0xbf;
    }

    *valid = 1;

    return n;
}


/*
 * "a.b[0].c", "Records[0].messageId", "[2].id": keys separated by dots,
 * each followed by any number of [index]; a key is any bytes but ".",
 * "[" and "]".  NGX_DECLINED with "err" set when it is not one.
 */

ngx_int_t
ngx_http_idem_json_path_parse(ngx_pool_t *pool, ngx_str_t *path,
    ngx_array_t **steps, char **err)
{
    u_char                     *p, *last, *start;
    ngx_int_t                   n;
    ngx_http_idem_json_step_t  *step;

    *steps = ngx_array_create(pool, 4, sizeof(ngx_http_idem_json_step_t));
    if (*steps == NULL) {
        return NGX_ERROR;
    }

    p = path->data;
    last = p + path->len;

    if (p == last) {
        *err = "an empty path";
        return NGX_DECLINED;
    }

    for ( ;; ) {

        /* a key, unless the segment starts with an index */

        start = p;

        while (p < last && *p != '.' && *p != '[' && *p != ']') {
            p++;
        }

        if (p > start) {
            step = ngx_array_push(*steps);
            if (step == NULL) {
                return NGX_ERROR;
            }

            step->key.data = start;
            step->key.len = p - start;
            step->index = -1;

        } else if (p == last || *p != '[') {
            *err = "an empty key";
            return NGX_DECLINED;
        }

        while (p < last && *p == '[') {
            start = ++p;

            while (p < last && *p >= '0' && *p <= '9') {
                p++;
            }

            if (p == last || *p != ']' || p == start || p - start > 9) {
                *err = "an index that is not [digits]";
                return NGX_DECLINED;
            }

            n = ngx_atoi(start, p - start);
            if (n == NGX_ERROR) {
                *err = "an index that is not [digits]";
                return NGX_DECLINED;
            }

            step = ngx_array_push(*steps);
            if (step == NULL) {
                return NGX_ERROR;
            }

            ngx_str_null(&step->key);
            step->index = n;
            p++;
        }

        if (p == last) {
            return NGX_OK;
        }

        if (*p != '.' || ++p == last) {
            *err = "a path that is not keys and [indexes] joined by dots";
            return NGX_DECLINED;
        }
    }
}


/*
 * The value at "steps" in the "len" bytes of "body": a string (UTF-8, its
 * escapes decoded) or an integer (its decimal text), copied into "pool".
 * NGX_DECLINED, with "why" set, for anything else: not JSON, the path
 * missing, or a value of another type.
 */

ngx_int_t
ngx_http_idem_json_extract(ngx_pool_t *pool, u_char *body, size_t len,
    ngx_array_t *steps, ngx_str_t *value, char **why)
{
    u_char                     *p;
    size_t                      n;
    const char                 *s;
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    json_object                *root, *node;
    json_tokener               *tok;
    ngx_http_idem_json_step_t  *step;
    u_char                      key[NGX_HTTP_IDEM_JSON_KEY_MAX + 1];

    *why = "missing: the body is not JSON";

    if (len > NGX_MAX_INT32_VALUE) {
        return NGX_DECLINED;
    }

    tok = json_tokener_new_ex(NGX_HTTP_IDEM_JSON_DEPTH);
    if (tok == NULL) {
        return NGX_ERROR;
    }

    json_tokener_set_flags(tok, JSON_TOKENER_STRICT
                                |JSON_TOKENER_ALLOW_TRAILING_CHARS
                                |JSON_TOKENER_VALIDATE_UTF8);

    root = json_tokener_parse_ex(tok, (const char *) body, (int) len);

    /* whitespace only after the document: else it is not one */

    if (root != NULL
        && !ngx_http_idem_json_only_space(body
                                          + json_tokener_get_parse_end(tok),
                                          body + len))
    {
        json_object_put(root);
        root = NULL;
    }

    json_tokener_free(tok);

    if (root == NULL) {
        return NGX_DECLINED;
    }

    rc = NGX_DECLINED;
    *why = "missing: no such field";

    node = root;
    step = steps->elts;

    /* json-c's null is a NULL object: a member that is null is found */

    for (i = 0; i < steps->nelts; i++) {

        if (step[i].index >= 0) {
            if (!json_object_is_type(node, json_type_array)
                || (size_t) step[i].index >= json_object_array_length(node))
            {
                goto done;
            }

            node = json_object_array_get_idx(node, (size_t) step[i].index);
            continue;
        }

        if (!json_object_is_type(node, json_type_object)
            || step[i].key.len > NGX_HTTP_IDEM_JSON_KEY_MAX)
        {
            goto done;
        }

        /* json-c's keys are C strings */

        ngx_memcpy(key, step[i].key.data, step[i].key.len);
        key[step[i].key.len] = '\0';

        if (!json_object_object_get_ex(node, (const char *) key, &node)) {
            goto done;
        }
    }

    /*
     * json-c clamps an integer past 64 bits to the bound it crossed: a
     * bound is no id, it may stand for another number
     */

    if (json_object_is_type(node, json_type_int)
        && (json_object_get_uint64(node) == UINT64_MAX
            || json_object_get_int64(node) == INT64_MIN))
    {
        *why = "missing: an integer at or past a 64-bit bound";
        goto done;
    }

    switch (json_object_get_type(node)) {

    case json_type_string:
    case json_type_int:

        /* an integer as json-c writes it: its decimal text, int64 or uint64 */

        if (json_object_is_type(node, json_type_string)) {
            s = json_object_get_string(node);
            n = (size_t) json_object_get_string_len(node);

        } else {
            s = json_object_to_json_string_ext(node, JSON_C_TO_STRING_PLAIN);
            n = (s != NULL) ? ngx_strlen(s) : 0;
        }

        if (s == NULL) {
            rc = NGX_ERROR;
            goto done;
        }

        p = ngx_pnalloc(pool, n ? n : 1);
        if (p == NULL) {
            rc = NGX_ERROR;
            goto done;
        }

        ngx_memcpy(p, s, n);
        value->data = p;
        value->len = n;
        rc = NGX_OK;
        break;

    case json_type_null:
        *why = "missing: null";
        break;

    case json_type_object:
        *why = "missing: an object";
        break;

    case json_type_array:
        *why = "missing: an array";
        break;

    case json_type_double:
        *why = "missing: a number that is not an integer";
        break;

    default: /* json_type_boolean */
        *why = "missing: a boolean";
    }

done:

    json_object_put(root);

    return rc;
}


static ngx_uint_t
ngx_http_idem_json_only_space(u_char *p, u_char *last)
{
    for ( /* void */ ; p < last; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            return 0;
        }
    }

    return 1;
}
