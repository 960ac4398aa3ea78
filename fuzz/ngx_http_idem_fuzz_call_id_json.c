
/*
 * Fuzz target: a call id from a JSON body (idem_call_id_json): the path
 * parsed as nginx -t does, the body kept as the request body filter keeps
 * it, arriving in pieces of any size, and the id extracted from it.
 * Beyond the sanitizers (and LeakSanitizer: json-c's trees are freed):
 * the bytes kept are the body's first bytes, whatever the pieces (the
 * room for them growing as they come); a body longer than max= is never
 * parsed; what the extraction finds is the same from the pieces as from
 * the whole body, never longer than it; a refusal says why.
 *
 * Input: a line, the path; a byte, max= (times 16, at least 2); then
 * pieces, each a byte of its length (0: the rest), the body's bytes.
 */


#include "ngx_http_idem_call_id_source.c"
#include "ngx_http_idem_json.c"
#include "ngx_http_idem_util.c"

#include "ngx_http_idem_fuzz.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char                         *err, *why, *why2;
    size_t                        max, n, len;
    u_char                       *body;
    ngx_int_t                     rc, rc2;
    ngx_str_t                     path, value, value2;
    ngx_buf_t                     piece;
    ngx_chain_t                   cl;
    ngx_array_t                  *steps;
    ngx_http_idem_ctx_t           ctx;
    ngx_http_idem_fuzz_t          fz;
    ngx_http_idem_fuzz_input_t    input;

    if (ngx_http_idem_fuzz_init(&fz, data, size, &input) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    ngx_http_idem_fuzz_line(&input, &path);

    rc = ngx_http_idem_json_path_parse(fz.pool, &path, &steps, &err);

    ngx_http_idem_fuzz_assert(rc == NGX_OK || rc == NGX_DECLINED);

    if (rc == NGX_DECLINED) {
        ngx_http_idem_fuzz_assert(err != NULL);
        ngx_http_idem_fuzz_done(&fz);
        return 0;
    }

    ngx_http_idem_fuzz_assert(steps->nelts > 0);

    max = ngx_max(ngx_http_idem_fuzz_byte(&input) * 16, 2);

    /* the body as the request body filter sees it: in pieces */

    ngx_memzero(&ctx, sizeof(ngx_http_idem_ctx_t));

    ctx.source.max = max;

    /* little room at first, as for a chunked body: it grows to max= */

    ctx.source.capture = ngx_create_temp_buf(fz.pool, ngx_min(max, 16));
    if (ctx.source.capture == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    body = input.pos;
    len = 0;

    while (input.pos < input.last) {
        n = ngx_http_idem_fuzz_byte(&input);

        if (n == 0 || n > (size_t) (input.last - input.pos)) {
            n = input.last - input.pos;
        }

        /* a copy of its own size: a read past it is ASan's to see */

        ngx_memzero(&piece, sizeof(ngx_buf_t));
        piece.pos = ngx_pnalloc(fz.pool, n ? n : 1);
        if (piece.pos == NULL) {
            ngx_http_idem_fuzz_abort("no memory");
        }

        ngx_memcpy(piece.pos, input.pos, n);
        piece.last = piece.pos + n;
        piece.memory = 1;

        /* the body's bytes, one after the other, kept apart */

        ngx_memmove(body + len, input.pos, n);
        len += n;
        input.pos += n;

        cl.buf = &piece;
        cl.next = NULL;

        ngx_http_idem_source_body_filter(fz.request, &ctx, &cl);
    }

    ngx_http_idem_fuzz_assert(ctx.source.over == (len > max));

    if (ctx.source.over) {
        ngx_http_idem_fuzz_done(&fz);
        return 0;
    }

    ngx_http_idem_fuzz_assert((size_t) (ctx.source.capture->last
                                        - ctx.source.capture->pos) == len);
    ngx_http_idem_fuzz_assert(len == 0
                              || ngx_memcmp(ctx.source.capture->pos, body,
                                            len) == 0);

    /* from what was kept, and again from the body itself */

    why = NULL;
    rc = ngx_http_idem_json_extract(fz.pool, ctx.source.capture->pos, len,
                                    steps, &value, &why);

    why2 = NULL;
    rc2 = ngx_http_idem_json_extract(fz.pool, body, len, steps, &value2,
                                     &why2);

    ngx_http_idem_fuzz_assert(rc == rc2);
    ngx_http_idem_fuzz_assert(rc == NGX_OK || rc == NGX_DECLINED);

    if (rc == NGX_DECLINED) {
        ngx_http_idem_fuzz_assert(why != NULL && why == why2);
        ngx_http_idem_fuzz_assert(ngx_strncmp(why, "missing: ", 9) == 0);
        ngx_http_idem_fuzz_done(&fz);
        return 0;
    }

    ngx_http_idem_fuzz_assert(value.len == value2.len
                              && (value.len == 0
                                  || ngx_memcmp(value.data, value2.data,
                                                value.len) == 0));

    /* a value comes from the body: never longer than it */

    ngx_http_idem_fuzz_assert(value.len <= len);

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}
