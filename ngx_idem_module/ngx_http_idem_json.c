
/*
 * A call id in a JSON body (idem_call_id_json): the path parsed once at
 * nginx -t, then walked on what jansson parsed.  A pure function of the
 * path and the bytes: no request, no pool but the caller's.
 *
 * jansson's strict parser (json_loadb) takes a buffer of a known length,
 * never reads past it, decodes \uXXXX escapes (surrogate pairs included)
 * into UTF-8 and refuses a truncated document, NUL bytes in strings and,
 * asked to, a key given twice: the id a gateway dedupes on must be the
 * one the application reads, so an ambiguous body has none.
 */


#include "ngx_http_idem_json.h"

#include <jansson.h>


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
    json_t                     *root, *node;
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    json_error_t                error;
    ngx_http_idem_json_step_t  *step;
    u_char                      key[NGX_HTTP_IDEM_JSON_KEY_MAX + 1];

    root = json_loadb((const char *) body, len, JSON_REJECT_DUPLICATES,
                      &error);
    if (root == NULL) {
        *why = "missing: the body is not JSON";
        return NGX_DECLINED;
    }

    rc = NGX_DECLINED;
    *why = "missing: no such field";

    node = root;
    step = steps->elts;

    for (i = 0; i < steps->nelts; i++) {

        if (step[i].index >= 0) {
            node = json_is_array(node)
                   ? json_array_get(node, (size_t) step[i].index) : NULL;

        } else if (json_is_object(node)
                   && step[i].key.len <= NGX_HTTP_IDEM_JSON_KEY_MAX)
        {
            /* jansson's keys are C strings */

            ngx_memcpy(key, step[i].key.data, step[i].key.len);
            key[step[i].key.len] = '\0';
            node = json_object_get(node, (const char *) key);

        } else {
            node = NULL;
        }

        if (node == NULL) {
            goto done;
        }
    }

    if (json_is_string(node)) {
        n = json_string_length(node);

        p = ngx_pnalloc(pool, n ? n : 1);
        if (p == NULL) {
            rc = NGX_ERROR;
            goto done;
        }

        ngx_memcpy(p, json_string_value(node), n);
        value->data = p;
        value->len = n;
        rc = NGX_OK;
        goto done;
    }

    if (json_is_integer(node)) {
        p = ngx_pnalloc(pool, NGX_INT64_LEN);
        if (p == NULL) {
            rc = NGX_ERROR;
            goto done;
        }

        value->data = p;
        value->len = ngx_sprintf(p, "%L", (int64_t) json_integer_value(node))
                     - p;
        rc = NGX_OK;
        goto done;
    }

    *why = json_is_null(node) ? "missing: null"
           : json_is_object(node) ? "missing: an object"
           : json_is_array(node) ? "missing: an array"
           : json_is_real(node) ? "missing: a number that is not an integer"
           : "missing: a boolean";

done:

    json_decref(root);

    return rc;
}
