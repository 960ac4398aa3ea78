
/*
 * Fuzz target: a resolution's body (POST to the status endpoint, idem_status
 * resolve=on), ngx_http_idem_resolution_parse().  Beyond the sanitizers:
 * what it accepts is what resolve.lua and a record field can hold (an
 * outcome of the two, "receipt" and "by" of a call id's characters, never
 * a space), pointing into the body; "force" set only by a member of that
 * name whose value is the literal true; what it refuses says why.
 *
 * The same bytes as the page's form, ngx_http_idem_resolution_parse_form()
 * (percent-decoded in place, in a copy): the same rules for what it
 * accepts; "force" only where the body says force=true.
 *
 * Input: the body, as the client sent it.
 */


#include "ngx_http_idem_resolution.c"

#include "ngx_http_idem_fuzz.h"


static ngx_uint_t ngx_http_idem_fuzz_within(ngx_str_t *s, ngx_str_t *body);
static ngx_uint_t ngx_http_idem_fuzz_plain(ngx_str_t *s);
static ngx_uint_t ngx_http_idem_fuzz_has(ngx_str_t *body, char *text);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char                       err[128];
    ngx_int_t                    rc;
    ngx_str_t                    body, form;
    ngx_http_idem_fuzz_t         fz;
    ngx_http_idem_fuzz_input_t   input;
    ngx_http_idem_resolution_t   res;

    if (ngx_http_idem_fuzz_init(&fz, data, size, &input) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    /* a copy of its own size: a read past it is ASan's to see */

    body.len = input.last - input.pos;
    body.data = ngx_pnalloc(fz.pool, body.len ? body.len : 1);
    if (body.data == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    ngx_memcpy(body.data, input.pos, body.len);

    /* as a form: decoded in place, so in a copy of its own */

    form.len = body.len;
    form.data = ngx_pnalloc(fz.pool, form.len ? form.len : 1);
    if (form.data == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    ngx_memcpy(form.data, body.data, body.len);

    err[0] = '\0';

    rc = ngx_http_idem_resolution_parse_form(&form, &res, err, sizeof(err));

    ngx_http_idem_fuzz_assert(rc == NGX_OK || rc == NGX_DECLINED);

    if (rc == NGX_DECLINED) {
        ngx_http_idem_fuzz_assert(err[0] != '\0');

    } else {
        ngx_http_idem_fuzz_assert(
            (res.applied && res.outcome.len == 7
             && ngx_strncmp(res.outcome.data, "applied", 7) == 0)
            || (!res.applied && res.outcome.len == 11
                && ngx_strncmp(res.outcome.data, "not_applied", 11) == 0));
        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_plain(&res.receipt));
        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_plain(&res.by));
        ngx_http_idem_fuzz_assert(
            (res.receipt.len == 1 && res.receipt.data[0] == '-')
            || ngx_http_idem_fuzz_within(&res.receipt, &form));
        ngx_http_idem_fuzz_assert(
            (res.by.len == 1 && res.by.data[0] == '-')
            || ngx_http_idem_fuzz_within(&res.by, &form));
        ngx_http_idem_fuzz_assert(res.force == 0
                                  || ngx_http_idem_fuzz_has(&body, "force="));
    }

    err[0] = '\0';

    rc = ngx_http_idem_resolution_parse(&body, &res, err, sizeof(err));

    ngx_http_idem_fuzz_assert(rc == NGX_OK || rc == NGX_DECLINED);

    if (rc == NGX_DECLINED) {
        ngx_http_idem_fuzz_assert(err[0] != '\0');
        ngx_http_idem_fuzz_done(&fz);
        return 0;
    }

    ngx_http_idem_fuzz_assert(
        (res.applied && res.outcome.len == 7
         && ngx_strncmp(res.outcome.data, "applied", 7) == 0)
        || (!res.applied && res.outcome.len == 11
            && ngx_strncmp(res.outcome.data, "not_applied", 11) == 0));

    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_within(&res.outcome, &body));

    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_plain(&res.receipt));
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_plain(&res.by));

    /* "-" is the absent one's, a literal; else inside the body */

    ngx_http_idem_fuzz_assert(
        (res.receipt.len == 1 && res.receipt.data[0] == '-')
        || ngx_http_idem_fuzz_within(&res.receipt, &body));
    ngx_http_idem_fuzz_assert(
        (res.by.len == 1 && res.by.data[0] == '-')
        || ngx_http_idem_fuzz_within(&res.by, &body));

    /* a body made of the three members is all it takes: no more bytes */

    ngx_http_idem_fuzz_assert(body.len >= sizeof("{\"outcome\":\"applied\"}")
                                           - 1);

    /*
     * forced: an operator's override, never set by accident: the body
     * names it and says true (false, a string, a number are refused), and
     * is long enough for both members
     */

    ngx_http_idem_fuzz_assert(res.force == 0 || res.force == 1);

    if (res.force) {
        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_has(&body, "\"force\""));
        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_has(&body, "true"));
        ngx_http_idem_fuzz_assert(
            body.len >= sizeof("{\"outcome\":\"applied\",\"force\":true}")
                        - 1);
    }

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}


static ngx_uint_t
ngx_http_idem_fuzz_within(ngx_str_t *s, ngx_str_t *body)
{
    return s->data >= body->data
           && s->data + s->len <= body->data + body->len;
}


/* whether text's bytes occur in the body (which may hold NULs) */

static ngx_uint_t
ngx_http_idem_fuzz_has(ngx_str_t *body, char *text)
{
    size_t  i, len;

    len = ngx_strlen(text);

    for (i = 0; i + len <= body->len; i++) {
        if (ngx_memcmp(body->data + i, text, len) == 0) {
            return 1;
        }
    }

    return 0;
}


/*
 * 1 to 128 of A-Z a-z 0-9 - . _ ~ : (no space: a record field's part),
 * told by a list of the bytes, not by ranges as the parser does
 */

static ngx_uint_t
ngx_http_idem_fuzz_plain(ngx_str_t *s)
{
    static u_char  allowed[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "abcdefghijklmnopqrstuvwxyz"
                               "0123456789-._~:";
    ngx_uint_t     i;

    if (s->len == 0 || s->len > 128) {
        return 0;
    }

    for (i = 0; i < s->len; i++) {
        if (ngx_strlchr(allowed, allowed + sizeof(allowed) - 1, s->data[i])
            == NULL)
        {
            return 0;
        }
    }

    return 1;
}
