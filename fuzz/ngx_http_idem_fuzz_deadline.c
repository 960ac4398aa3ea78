
/*
 * Fuzz target: the budget a client sends (X-Deadline-Ms, grpc-timeout),
 * from the walk over the request headers to the call's deadline, and the
 * 400 problem+json a bad value gets; and the grpc-timeout the module
 * sends upstream for what is left (it must read back as at most that).
 *
 * Input: three bytes of the route's idem_deadline in ms (0: off), then
 * request headers, one a line: the line's first byte picks the name, the
 * rest is the value.
 */


#include "ngx_http_idem_deadline.c"
#include "ngx_http_idem_headers.c"
#include "ngx_http_idem_call_id_source.c"
#include "ngx_http_idem_json.c"
#include "ngx_http_idem_util.c"
#include "ngx_http_idem_problem.c"

#include "ngx_http_idem_fuzz.h"


static ngx_int_t ngx_http_idem_fuzz_ms(ngx_str_t *v, ngx_msec_t *ms);
static ngx_int_t ngx_http_idem_fuzz_grpc(ngx_str_t *v, ngx_msec_t *ms);
static void ngx_http_idem_fuzz_outbound(ngx_msec_t ms);


static char  *ngx_http_idem_fuzz_names_in[] = {
    "X-Deadline-Ms", "grpc-timeout", "x-deadline-ms", "Grpc-Timeout",
    "X-Call-Id", "X-Deadline", "traceparent", "X-Other"
};


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ngx_int_t                    rc, ok;
    ngx_str_t                    line, value, *dv, *gv;
    ngx_uint_t                   i, nd, ng;
    ngx_msec_t                   budget, ms;
    ngx_time_t                  *tp;
    ngx_http_idem_fuzz_t         fz;
    ngx_http_idem_problem_t      problem;
    ngx_http_idem_inbound_t      in;
    ngx_http_idem_fuzz_input_t   input;

    if (ngx_http_idem_fuzz_init(&fz, data, size, &input) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    ngx_http_idem_fuzz_names(&fz);

    /* the request arrived now: no time has passed */

    tp = ngx_timeofday();
    fz.request->start_sec = tp->sec;
    fz.request->start_msec = tp->msec;

    fz.ilcf->deadline = ngx_http_idem_fuzz_byte(&input) << 16;
    fz.ilcf->deadline |= ngx_http_idem_fuzz_byte(&input) << 8;
    fz.ilcf->deadline |= ngx_http_idem_fuzz_byte(&input);

    nd = 0;
    ng = 0;
    dv = NULL;
    gv = NULL;

    while (input.pos < input.last) {
        ngx_http_idem_fuzz_line(&input, &line);

        i = line.len ? line.data[0] & 7 : 7;

        value.data = line.len ? line.data + 1 : line.data;
        value.len = line.len ? line.len - 1 : 0;

        if (ngx_http_idem_fuzz_header(&fz, &fz.request->headers_in.headers,
                                      ngx_http_idem_fuzz_names_in[i], &value)
            != NGX_OK)
        {
            ngx_http_idem_fuzz_abort("no memory");
        }

        if (i == 0 || i == 2) {
            nd++;
            dv = ngx_http_idem_fuzz_last_value(&fz);

        } else if (i == 1 || i == 3) {
            ng++;
            gv = ngx_http_idem_fuzz_last_value(&fz);
        }
    }

    ngx_http_idem_scan_request(fz.request, fz.ilcf, &in);

    ngx_http_idem_fuzz_assert(in.deadline_count == nd);
    ngx_http_idem_fuzz_assert(in.grpc_timeout_count == ng);

    /* what SPEC says: the smallest of the three, any bad value is a 400 */

    ok = NGX_OK;
    budget = fz.ilcf->deadline ? fz.ilcf->deadline : NGX_MAX_INT32_VALUE;

    if (nd) {
        if (nd > 1 || ngx_http_idem_fuzz_ms(dv, &ms) != NGX_OK) {
            ok = NGX_DECLINED;

        } else {
            budget = ngx_min(budget, ms);
        }
    }

    if (ng && ok == NGX_OK) {
        if (ng > 1 || ngx_http_idem_fuzz_grpc(gv, &ms) != NGX_OK) {
            ok = NGX_DECLINED;

        } else {
            budget = ngx_min(budget, ms);
        }
    }

    ngx_memzero(&problem, sizeof(ngx_http_idem_problem_t));

    rc = ngx_http_idem_deadline_init(fz.request, fz.ilcf, &in, fz.ctx,
                                     &problem);

    ngx_http_idem_fuzz_assert(rc == ok);

    if (rc == NGX_OK) {
        ngx_http_idem_fuzz_assert(fz.ctx->deadline.set
                                  == (fz.ilcf->deadline || nd || ng));

        if (fz.ctx->deadline.set) {
            ngx_http_idem_fuzz_assert(fz.ctx->deadline.at
                                      == ngx_current_msec + budget);
            ngx_http_idem_fuzz_assert(ngx_http_idem_remaining(fz.ctx)
                                      == (ngx_msec_int_t) budget);
        }
    }

    /* each parser alone, against SPEC's rule */

    if (dv != NULL) {
        ngx_http_idem_fuzz_assert(
            (ngx_http_idem_parse_deadline(dv, &ms) == NGX_OK)
            == (ngx_http_idem_fuzz_ms(dv, &budget) == NGX_OK));
    }

    if (gv != NULL) {
        ok = ngx_http_idem_fuzz_grpc(gv, &budget);

        ngx_http_idem_fuzz_assert(
            (ngx_http_idem_parse_grpc_timeout(gv, &ms) == NGX_OK)
            == (ok == NGX_OK));
        ngx_http_idem_fuzz_assert(ok != NGX_OK || ms == budget);
    }

    /* outbound: what is left, in gRPC's form, never more, at most 9 bytes */

    ngx_http_idem_fuzz_outbound(budget);
    ngx_http_idem_fuzz_outbound(fz.ilcf->deadline << 8);

    /* a refused budget: 400, problem+json that parses */

    if (rc == NGX_DECLINED) {
        ngx_http_idem_fuzz_assert(problem.status == NGX_HTTP_BAD_REQUEST);

        rc = ngx_http_idem_send_problem(fz.request, &problem,
                                        &fz.ctx->ids.call_id);

        ngx_http_idem_fuzz_problem_sent(rc);
    }

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}


/*
 * SPEC: digits only, 0 to 2147483647 ms; and, as the module reads it, at
 * most 10 digits (a value padded with more zeros is refused)
 */

static ngx_int_t
ngx_http_idem_fuzz_ms(ngx_str_t *v, ngx_msec_t *ms)
{
    size_t    i;
    uint64_t  n;

    if (v->len == 0 || v->len > 10) {
        return NGX_ERROR;
    }

    n = 0;

    for (i = 0; i < v->len; i++) {
        if (v->data[i] < '0' || v->data[i] > '9') {
            return NGX_ERROR;
        }

        n = n * 10 + (v->data[i] - '0');

        if (n > NGX_MAX_INT32_VALUE) {
            return NGX_ERROR;
        }
    }

    *ms = (ngx_msec_t) n;

    return NGX_OK;
}


/*
 * gRPC over HTTP/2: "grpc-timeout" is 1 to 8 ASCII digits and a unit,
 * H M S m u n; here in ms, at most 2147483647 (the longest budget).
 */

static ngx_int_t
ngx_http_idem_fuzz_grpc(ngx_str_t *v, ngx_msec_t *ms)
{
    size_t    i;
    uint64_t  n;

    if (v->len < 2 || v->len > 9) {
        return NGX_ERROR;
    }

    n = 0;

    for (i = 0; i < v->len - 1; i++) {
        if (v->data[i] < '0' || v->data[i] > '9') {
            return NGX_ERROR;
        }

        n = n * 10 + (v->data[i] - '0');
    }

    switch (v->data[v->len - 1]) {
    case 'H':
        n *= 3600 * 1000;
        break;
    case 'M':
        n *= 60 * 1000;
        break;
    case 'S':
        n *= 1000;
        break;
    case 'm':
        break;
    case 'u':
        n /= 1000;
        break;
    case 'n':
        n /= 1000 * 1000;
        break;
    default:
        return NGX_ERROR;
    }

    *ms = (ngx_msec_t) ngx_min(n, (uint64_t) NGX_MAX_INT32_VALUE);

    return NGX_OK;
}


/*
 * The outbound grpc-timeout for "ms" left: it reads back, by the module's
 * parser and this file's, as at most "ms", and less by under one unit
 */

static void
ngx_http_idem_fuzz_outbound(ngx_msec_t ms)
{
    u_char      *buf, *p;
    uint64_t     unit;
    ngx_str_t    v;
    ngx_msec_t   back, mine;

    ms = ngx_min(ms, (ngx_msec_t) NGX_MAX_INT32_VALUE);

    /* exactly its room: a byte past it is reported */

    buf = malloc(NGX_HTTP_IDEM_GRPC_TIMEOUT_LEN);
    if (buf == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    p = ngx_http_idem_grpc_timeout(buf, ms);

    v.data = buf;
    v.len = p - buf;

    ngx_http_idem_fuzz_assert(v.len >= 2
                              && v.len <= NGX_HTTP_IDEM_GRPC_TIMEOUT_LEN);
    ngx_http_idem_fuzz_assert(ngx_http_idem_parse_grpc_timeout(&v, &back)
                              == NGX_OK);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_grpc(&v, &mine) == NGX_OK);
    ngx_http_idem_fuzz_assert(back == mine && back <= ms);

    switch (buf[v.len - 1]) {
    case 'm':
        unit = 1;
        break;
    case 'S':
        unit = 1000;
        break;
    case 'M':
        unit = 60000;
        break;
    default:
        unit = 3600000;
    }

    ngx_http_idem_fuzz_assert(ms - back < unit);

    free(buf);
}
