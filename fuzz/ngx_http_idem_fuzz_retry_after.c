
/*
 * Fuzz target: what an upstream asks the retry logic to wait: Retry-After
 * (seconds, or an HTTP date) on a 429 or 503, or a gRPC Trailers-Only
 * answer (grpc-status UNAVAILABLE or RESOURCE_EXHAUSTED) with its
 * grpc-retry-pushback-ms; the backoff that follows.
 *
 * Input: a flags byte (bits 0-1: the status, 503 429 502 200; bit 2:
 * http_429 in idem_retry on=; bit 3: the call has a budget; bits 4-6: the
 * attempt that failed; bit 7: a gRPC answer, status 200), two bytes of
 * budget left in 10 ms, then the upstream's headers, one a line: the
 * first byte picks the name, the rest is the value.
 */


#include "ngx_http_idem_upstream.c"
#include "ngx_http_idem_grpc.c"
#include "ngx_http_idem_util.c"

#include "ngx_http_idem_fuzz.h"


#define NGX_HTTP_IDEM_FUZZ_NAMES  16


static ngx_int_t ngx_http_idem_fuzz_expected(ngx_http_idem_fuzz_t *fz,
    ngx_msec_t left, ngx_msec_int_t delay);
static ngx_int_t ngx_http_idem_fuzz_digits(ngx_str_t *v);


static ngx_uint_t ngx_http_idem_fuzz_status[] = { 503, 429, 502, 200 };

static char  *ngx_http_idem_fuzz_names_in[NGX_HTTP_IDEM_FUZZ_NAMES] = {
    "Retry-After", "retry-after", "RETRY-AFTER", "Retry-After ",
    "Retry-Afte", "Content-Type", "Date", "X-Other",
    "grpc-status", "Grpc-Status", "grpc-retry-pushback-ms",
    "GRPC-RETRY-PUSHBACK-MS", "grpc-message", "grpc-status ",
    "grpc-retry-pushback", "grpc-statu"
};


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ngx_int_t                    code, expect;
    ngx_str_t                    line, value, *ra, *gs, *pb;
    ngx_uint_t                   flags, i, status, asked, grpc, mask;
    ngx_msec_t                   left, delay;
    ngx_msec_int_t               pushback;
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
           != NGX_OK
        || ngx_list_init(&u->headers_in.trailers, fz.pool, 2,
                         sizeof(ngx_table_elt_t))
           != NGX_OK)
    {
        ngx_http_idem_fuzz_abort("no memory");
    }

    u->conf = ngx_pcalloc(fz.pool, sizeof(ngx_http_upstream_conf_t));
    if (u->conf == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    /* grpc_next_upstream as a gRPC route that retries would have it */

    u->conf->next_upstream = NGX_HTTP_UPSTREAM_FT_HTTP_503
                             |NGX_HTTP_UPSTREAM_FT_HTTP_429;

    fz.request->upstream = u;

    flags = ngx_http_idem_fuzz_byte(&input);
    left = ngx_http_idem_fuzz_byte(&input) << 8;
    left = (left | ngx_http_idem_fuzz_byte(&input)) * 10;

    grpc = flags & 128;
    status = grpc ? NGX_HTTP_OK : ngx_http_idem_fuzz_status[flags & 3];
    u->headers_in.status_n = status;
    u->peer.tries = 5;

    if (flags & 4) {
        fz.ilcf->retry_on |= NGX_HTTP_UPSTREAM_FT_HTTP_429;
    }

    if (flags & 8) {
        fz.ctx->deadline.set = 1;
        fz.ctx->deadline.at = ngx_current_msec + left;
    }

    fz.ctx->upstream.attempt = 2 + ((flags >> 4) & 7);

    /* the first of each name counts, as the module looks them up */

    ra = NULL;
    gs = NULL;
    pb = NULL;

    while (input.pos < input.last) {
        ngx_http_idem_fuzz_line(&input, &line);

        i = line.len ? line.data[0] % NGX_HTTP_IDEM_FUZZ_NAMES : 7;

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

        } else if ((i == 8 || i == 9) && gs == NULL) {
            gs = &((ngx_table_elt_t *) u->headers_in.headers.last->elts)
                 [u->headers_in.headers.last->nelts - 1].value;

        } else if ((i == 10 || i == 11) && pb == NULL) {
            pb = &((ngx_table_elt_t *) u->headers_in.headers.last->elts)
                 [u->headers_in.headers.last->nelts - 1].value;
        }
    }

    /* the upstream's grpc-status, for records: -1, or 0..16 */

    code = ngx_http_idem_grpc_upstream_status(u);

    if (gs == NULL) {
        ngx_http_idem_fuzz_assert(code == -1);

    } else {
        expect = ngx_http_idem_fuzz_digits(gs);
        ngx_http_idem_fuzz_assert(code == ((expect < 0 || expect > 16)
                                           ? NGX_HTTP_IDEM_GRPC_UNKNOWN
                                           : expect));
    }

    if (grpc) {

        /* UNAVAILABLE is http_503, RESOURCE_EXHAUSTED http_429 */

        code = gs ? ngx_http_idem_fuzz_digits(gs) : -1;
        mask = (code == 14) ? NGX_HTTP_UPSTREAM_FT_HTTP_503
               : (code == 8) ? NGX_HTTP_UPSTREAM_FT_HTTP_429 : 0;

        pushback = -1;

        if (pb != NULL) {
            pushback = ngx_http_idem_fuzz_digits(pb);

            if (pushback == -1) {
                mask = 0;    /* malformed or negative: do not retry */

            } else if (pushback > NGX_MAX_INT32_VALUE) {
                pushback = NGX_MAX_INT32_VALUE;
            }
        }

        asked = mask && (fz.ilcf->retry_on & mask);

        ngx_http_idem_grpc_retry(fz.request, fz.ctx);

        if (!asked) {
            ngx_http_idem_fuzz_assert(u->headers_in.status_n == NGX_HTTP_OK);
            ngx_http_idem_fuzz_assert(fz.ctx->grpc.retry_status == 0);
            ngx_http_idem_fuzz_assert(fz.ctx->upstream.retry_after == 0);
            ngx_http_idem_fuzz_assert(u->peer.tries == 5);

        } else if (ngx_http_idem_fuzz_expected(&fz, left, pushback)) {
            ngx_http_idem_fuzz_assert(u->headers_in.status_n
                                      == (mask == NGX_HTTP_UPSTREAM_FT_HTTP_503
                                          ? 503 : 429));
            ngx_http_idem_fuzz_assert(fz.ctx->grpc.retry_status
                                      == u->headers_in.status_n);
            ngx_http_idem_fuzz_assert(u->peer.tries == 5);
            ngx_http_idem_fuzz_assert(fz.ctx->upstream.retry_after
                                      == (ngx_msec_t) ngx_max(pushback, 0));

        } else {

            /* no further attempt: the client gets the gRPC answer as is */

            ngx_http_idem_fuzz_assert(u->headers_in.status_n == NGX_HTTP_OK);
            ngx_http_idem_fuzz_assert(fz.ctx->grpc.retry_status == 0);
            ngx_http_idem_fuzz_assert(u->peer.tries == 1);
            ngx_http_idem_fuzz_assert(fz.ctx->upstream.retry_after == 0);
        }

    } else {
        ngx_http_idem_retry_after(fz.request, fz.ctx);

        asked = ra != NULL
                && ((status == 503
                     && (fz.ilcf->retry_on & NGX_HTTP_UPSTREAM_FT_HTTP_503))
                    || (status == 429
                        && (fz.ilcf->retry_on
                            & NGX_HTTP_UPSTREAM_FT_HTTP_429)));

        /*
         * Only a 429 or a 503 the route retries on sets a wait; a wait
         * fits in the budget, or in the cap of a call without one, or
         * there is no further attempt; a few seconds are waited as asked.
         */

        if (!asked) {
            ngx_http_idem_fuzz_assert(fz.ctx->upstream.retry_after == 0);
            ngx_http_idem_fuzz_assert(u->peer.tries == 5);
        }

        if (asked && ngx_http_idem_fuzz_digits(ra) >= 0) {
            pushback = ngx_http_idem_fuzz_digits(ra);
            pushback = (pushback > NGX_MAX_INT32_VALUE / 1000)
                       ? NGX_MAX_INT32_VALUE : pushback * 1000;

            ngx_http_idem_fuzz_assert(
                ngx_http_idem_fuzz_expected(&fz, left, pushback)
                ? fz.ctx->upstream.retry_after == (ngx_msec_t) pushback
                  && u->peer.tries == 5
                : fz.ctx->upstream.retry_after == 0 && u->peer.tries == 1);
        }

        if (u->peer.tries != 5) {
            ngx_http_idem_fuzz_assert(u->peer.tries == 1 && asked);
        }
    }

    ngx_http_idem_fuzz_assert(fz.ctx->upstream.retry_after
                              <= NGX_MAX_INT32_VALUE);

    if (fz.ctx->upstream.retry_after) {
        if (fz.ctx->deadline.set) {
            ngx_http_idem_fuzz_assert(
                (ngx_msec_int_t) fz.ctx->upstream.retry_after
                < ngx_http_idem_remaining(fz.ctx));

        } else {
            ngx_http_idem_fuzz_assert(
                fz.ctx->upstream.retry_after
                <= ngx_max(fz.ilcf->retry_max_backoff,
                           NGX_HTTP_IDEM_RETRY_AFTER_MAX));
        }
    }

    /* the backoff before the next attempt */

    delay = ngx_http_idem_backoff(fz.ctx);

    ngx_http_idem_fuzz_assert(fz.ctx->upstream.retry_after == 0);
    ngx_http_idem_fuzz_assert(delay <= NGX_MAX_INT32_VALUE);

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}


/* whether a wait of "delay" ms (-1: none asked) leaves a further attempt */

static ngx_int_t
ngx_http_idem_fuzz_expected(ngx_http_idem_fuzz_t *fz, ngx_msec_t left,
    ngx_msec_int_t delay)
{
    if (delay < 0) {
        return 1;
    }

    if (fz->ctx->deadline.set) {
        return delay < (ngx_msec_int_t) left;
    }

    return (ngx_msec_t) delay <= ngx_max(fz->ilcf->retry_max_backoff,
                                         NGX_HTTP_IDEM_RETRY_AFTER_MAX);
}


/* 1*DIGIT, as a number (saturated), or -1 */

static ngx_int_t
ngx_http_idem_fuzz_digits(ngx_str_t *v)
{
    size_t     i;
    ngx_int_t  n;

    if (v->len == 0) {
        return -1;
    }

    n = 0;

    for (i = 0; i < v->len; i++) {
        if (v->data[i] < '0' || v->data[i] > '9') {
            return -1;
        }

        /* ngx_atoi() refuses an overflow */

        if (n > NGX_MAX_INT_T_VALUE / 10
            || (n == NGX_MAX_INT_T_VALUE / 10
                && v->data[i] - '0' > NGX_MAX_INT_T_VALUE % 10))
        {
            return -1;
        }

        n = n * 10 + (v->data[i] - '0');
    }

    return n;
}
