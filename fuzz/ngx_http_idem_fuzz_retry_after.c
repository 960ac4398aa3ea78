
/*
 * Fuzz target: an upstream's Retry-After (seconds, or an HTTP date) on a
 * 429 or 503, as the retry logic reads it, and the backoff that follows.
 *
 * Input: a flags byte (bits 0-1: the status, 503 429 502 200; bit 2:
 * http_429 in idem_retry on=; bit 3: the call has a budget; bits 4-6: the
 * attempt that failed), two bytes of budget left in 10 ms, then the
 * upstream's headers, one a line: the first byte picks the name, the rest
 * is the value.
 */


#include "ngx_http_idem_upstream.c"

#include "ngx_http_idem_fuzz.h"


static ngx_uint_t ngx_http_idem_fuzz_status[] = { 503, 429, 502, 200 };

static char  *ngx_http_idem_fuzz_names_in[] = {
    "Retry-After", "retry-after", "RETRY-AFTER", "Retry-After ",
    "Retry-Afte", "Content-Type", "Date", "X-Other"
};


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ngx_str_t                    line, value, *ra;
    ngx_uint_t                   flags, i, status, asked;
    ngx_msec_t                   left, delay;
    ngx_http_upstream_t         *u;
    ngx_http_idem_fuzz_t         fz;
    ngx_http_idem_fuzz_input_t   input;

    if (ngx_http_idem_fuzz_init(&fz, data, size, &input) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    u = ngx_pcalloc(fz.pool, sizeof(ngx_http_upstream_t));
    if (u == NULL
        || ngx_list_init(&u->headers_in.headers, fz.pool, 2,
                         sizeof(ngx_table_elt_t))
           != NGX_OK)
    {
        ngx_http_idem_fuzz_abort("no memory");
    }

    fz.request->upstream = u;

    flags = ngx_http_idem_fuzz_byte(&input);
    left = ngx_http_idem_fuzz_byte(&input) << 8;
    left = (left | ngx_http_idem_fuzz_byte(&input)) * 10;

    status = ngx_http_idem_fuzz_status[flags & 3];
    u->headers_in.status_n = status;
    u->peer.tries = 5;

    if (flags & 4) {
        fz.ilcf->retry_on |= NGX_HTTP_UPSTREAM_FT_HTTP_429;
    }

    if (flags & 8) {
        fz.ctx->has_deadline = 1;
        fz.ctx->deadline = ngx_current_msec + left;
    }

    fz.ctx->attempt = 2 + ((flags >> 4) & 7);

    ra = NULL;

    while (input.pos < input.last) {
        ngx_http_idem_fuzz_line(&input, &line);

        i = line.len ? line.data[0] & 7 : 7;

        value.data = line.len ? line.data + 1 : line.data;
        value.len = line.len ? line.len - 1 : 0;

        if (ngx_http_idem_fuzz_header(&fz, &u->headers_in.headers,
                                      ngx_http_idem_fuzz_names_in[i], &value)
            != NGX_OK)
        {
            ngx_http_idem_fuzz_abort("no memory");
        }

        if (i < 3 && ra == NULL) {
            ra = &((ngx_table_elt_t *) u->headers_in.headers.last->elts)
                 [u->headers_in.headers.last->nelts - 1].value;
        }
    }

    ngx_http_idem_retry_after(fz.request, fz.ctx);

    asked = ra != NULL
            && ((status == 503
                 && (fz.ilcf->retry_on & NGX_HTTP_UPSTREAM_FT_HTTP_503))
                || (status == 429
                    && (fz.ilcf->retry_on & NGX_HTTP_UPSTREAM_FT_HTTP_429)));

    /*
     * What holds whatever cap issue 9 puts on Retry-After: only a 429 or a
     * 503 the route retries on sets a wait; a wait fits in the budget or
     * there is no further attempt; a few seconds are waited as asked.
     */

    if (!asked) {
        ngx_http_idem_fuzz_assert(fz.ctx->retry_after == 0);
        ngx_http_idem_fuzz_assert(u->peer.tries == 5);
    }

    ngx_http_idem_fuzz_assert(fz.ctx->retry_after <= NGX_MAX_INT32_VALUE);

    if (fz.ctx->retry_after && fz.ctx->has_deadline) {
        ngx_http_idem_fuzz_assert((ngx_msec_int_t) fz.ctx->retry_after
                                  < ngx_http_idem_remaining(fz.ctx));
    }

    if (u->peer.tries != 5) {
        ngx_http_idem_fuzz_assert(u->peer.tries == 1 && asked);
    }

    if (asked && ra->len == 1 && ra->data[0] == '1'
        && !(fz.ctx->has_deadline && left <= 1000))
    {
        ngx_http_idem_fuzz_assert(fz.ctx->retry_after == 1000);
    }

    /* the backoff before the next attempt */

    delay = ngx_http_idem_backoff(fz.ctx);

    ngx_http_idem_fuzz_assert(fz.ctx->retry_after == 0);
    ngx_http_idem_fuzz_assert(delay <= NGX_MAX_INT32_VALUE);

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}
