
/*
 * Fuzz target: the call id and trace id a client sends (X-Call-Id,
 * X-Trace-Id, traceparent, tracestate), from the walk over the request
 * headers to the ids the call gets, and the 400 problem+json a bad one
 * gets; for a call let through, the headers the upstream gets: the
 * module's own, once, and none of the client's copies of them; the W3C
 * trace context kept (the client's parent id and flags, its tracestate
 * checked against an independent reading of Trace Context Level 2).
 *
 * A call id that opens with a quote is an RFC 8941 String (Idempotency-Key
 * form): its content is checked against an independent reading of the
 * String, and the id is that content, the header echoed as sent.
 *
 * Input: a flags byte (bit 0: idem_call_id_missing reject, bit 1: the
 * prefixed generator, bits 2-3: which idem_call_id_pattern, bit 4:
 * idem_call_id_form string, bit 5: idem_otel_sample 1), a byte of
 * idem_call_id_max_length (0: 128), then request headers, one a line: the
 * line's first byte picks the name, the rest is the value.
 */


#include "ngx_http_idem_call_id.c"
#include "ngx_http_idem_deadline.c"
#include "ngx_http_idem_headers.c"
#include "ngx_http_idem_call_id_source.c"
#include "ngx_http_idem_json.c"
#include "ngx_http_idem_util.c"
#include "ngx_http_idem_problem.c"
#include "ngx_http_idem_trace.c"

#include "ngx_http_idem_fuzz.h"


#define NGX_HTTP_IDEM_FUZZ_PATTERNS  4
#define NGX_HTTP_IDEM_FUZZ_NAMES     14


/* what the client sent of the trace context, and what is expected of it */
typedef struct {
    ngx_str_t                 *parent;      /* the traceparent, or NULL */
    ngx_uint_t                 taken;       /* it names the call's trace */
    ngx_uint_t                 flags;       /* flags expected upstream */
    ngx_array_t               *states;      /* tracestate lines */
} ngx_http_idem_fuzz_trace_t;


static void ngx_http_idem_fuzz_upstream(ngx_http_idem_fuzz_t *fz,
    ngx_http_idem_inbound_t *in, ngx_uint_t *before,
    ngx_http_idem_fuzz_trace_t *tc);
static void ngx_http_idem_fuzz_tracestate_upstream(ngx_http_idem_fuzz_t *fz,
    ngx_http_idem_fuzz_trace_t *tc);
static ngx_int_t ngx_http_idem_fuzz_tracestate(u_char *v, size_t len);
static ngx_table_elt_t *ngx_http_idem_fuzz_find(ngx_http_request_t *r,
    char *name, ngx_uint_t *n);
static ngx_uint_t ngx_http_idem_fuzz_traceparent(ngx_str_t *v);
static ngx_uint_t ngx_http_idem_fuzz_lower_hex(u_char *p, size_t len,
    ngx_uint_t nonzero);


static char  *ngx_http_idem_fuzz_names_in[NGX_HTTP_IDEM_FUZZ_NAMES] = {
    "X-Call-Id", "X-Trace-Id", "traceparent", "x-call-id", "X-TRACE-ID",
    "X-Call-Id-Source", "X-Call-Attempt", "X-Other", "X-Deadline-Ms",
    "grpc-timeout", "x-call-attempt", "X-Call-Ids", "tracestate",
    "TraceState"
};

/* idem_call_id_pattern values (index 0: none) */
static char  *ngx_http_idem_fuzz_patterns[NGX_HTTP_IDEM_FUZZ_PATTERNS] = {
    NULL, "^[a-z0-9-]{8,64}$", "^ord-[0-9]+$", "[.:]"
};

static pcre2_code  *ngx_http_idem_fuzz_re[NGX_HTTP_IDEM_FUZZ_PATTERNS];


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int                          perr;
    size_t                       max;
    u_char                      *tp;
    PCRE2_SIZE                   off;
    ngx_int_t                    rc;
    u_char                       err[64];
    ngx_str_t                    line, value, *cv, *tv, *pv, *id;
    ngx_str_t                    content, mcontent;
    ngx_uint_t                   flags, i, pattern, call_ok, trace_ok, sf;
    ngx_uint_t                   ncall, ntrace, nparent;
    ngx_uint_t                   before[NGX_HTTP_IDEM_FUZZ_NAMES];
    ngx_str_t                   *state;
    ngx_http_idem_fuzz_trace_t   tc;
    ngx_http_idem_traceparent_t  tpv;
    pcre2_match_data            *md;
    ngx_http_idem_fuzz_t         fz;
    ngx_http_idem_problem_t      problem;
    ngx_http_idem_inbound_t      in;
    ngx_http_idem_fuzz_input_t   input;

    for (i = 1; i < NGX_HTTP_IDEM_FUZZ_PATTERNS; i++) {
        if (ngx_http_idem_fuzz_re[i] == NULL) {
            ngx_http_idem_fuzz_re[i] = pcre2_compile(
                (PCRE2_SPTR) ngx_http_idem_fuzz_patterns[i],
                PCRE2_ZERO_TERMINATED, 0, &perr, &off, NULL);

            if (ngx_http_idem_fuzz_re[i] == NULL) {
                ngx_http_idem_fuzz_abort("pcre2_compile");
            }
        }
    }

    if (ngx_http_idem_fuzz_init(&fz, data, size, &input) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    ngx_http_idem_fuzz_names(&fz);

    flags = ngx_http_idem_fuzz_byte(&input);
    max = ngx_http_idem_fuzz_byte(&input);

    fz.ilcf->call_id_missing = (flags & 1) ? NGX_HTTP_IDEM_MISSING_REJECT
                                           : NGX_HTTP_IDEM_MISSING_GENERATE;
    fz.ilcf->call_id_generator = (flags & 2)
                                 ? NGX_HTTP_IDEM_GENERATOR_PREFIXED
                                 : NGX_HTTP_IDEM_GENERATOR_UUID;
    fz.ilcf->call_id_max_length = max ? max : 128;
    fz.ilcf->call_id_form = (flags & 16) ? NGX_HTTP_IDEM_FORM_STRING
                                         : NGX_HTTP_IDEM_FORM_TOKEN;
    fz.ilcf->otel_sample = (flags & 32) ? NGX_HTTP_IDEM_SAMPLE_ALL : 0;

    pattern = (flags >> 2) & 3;
    fz.ilcf->call_id_pattern = ngx_http_idem_fuzz_re[pattern];

    if (pattern) {
        fz.ilcf->call_id_pattern_src.data =
                             (u_char *) ngx_http_idem_fuzz_patterns[pattern];
        fz.ilcf->call_id_pattern_src.len =
                             ngx_strlen(ngx_http_idem_fuzz_patterns[pattern]);
    }

    /* the headers, and what SPEC says of them (the last copy counts) */

    ngx_memzero(before, sizeof(before));

    ncall = 0;
    ntrace = 0;
    nparent = 0;
    cv = NULL;
    tv = NULL;
    pv = NULL;

    ngx_memzero(&tc, sizeof(ngx_http_idem_fuzz_trace_t));

    tc.states = ngx_array_create(fz.pool, 4, sizeof(ngx_str_t));
    if (tc.states == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    while (input.pos < input.last) {
        ngx_http_idem_fuzz_line(&input, &line);

        i = line.len ? (line.data[0] & 15) % NGX_HTTP_IDEM_FUZZ_NAMES : 7;

        value.data = line.len ? line.data + 1 : line.data;
        value.len = line.len ? line.len - 1 : 0;

        if (ngx_http_idem_fuzz_header(&fz, &fz.request->headers_in.headers,
                                      ngx_http_idem_fuzz_names_in[i], &value)
            != NGX_OK)
        {
            ngx_http_idem_fuzz_abort("no memory");
        }

        before[i]++;

        if (i == 0 || i == 3) {
            ncall++;
            cv = ngx_http_idem_fuzz_last_value(&fz);

        } else if (i == 1 || i == 4) {
            ntrace++;
            tv = ngx_http_idem_fuzz_last_value(&fz);

        } else if (i == 2) {
            nparent++;
            pv = ngx_http_idem_fuzz_last_value(&fz);

        } else if (i == 12 || i == 13) {
            state = ngx_array_push(tc.states);
            if (state == NULL) {
                ngx_http_idem_fuzz_abort("no memory");
            }

            *state = *ngx_http_idem_fuzz_last_value(&fz);
        }
    }

    ngx_http_idem_scan_request(fz.request, fz.ilcf, &in);

    ngx_http_idem_fuzz_assert(in.call_id_count == ncall);
    ngx_http_idem_fuzz_assert(in.trace_id_count == ntrace);
    ngx_http_idem_fuzz_assert(in.traceparent_count == nparent);

    /* the id itself: the value, or the content of a String */

    id = cv;
    sf = 0;

    if (cv != NULL && cv->len && cv->data[0] == '"') {
        content.data = ngx_pnalloc(fz.pool, cv->len);
        mcontent.data = ngx_pnalloc(fz.pool, cv->len);

        if (content.data == NULL || mcontent.data == NULL) {
            ngx_http_idem_fuzz_abort("no memory");
        }

        sf = ngx_http_idem_fuzz_sf_string(cv, &content);
        rc = ngx_http_idem_parse_sf_string(cv, &mcontent, err, sizeof(err));

        ngx_http_idem_fuzz_assert(rc == NGX_OK || rc == NGX_DECLINED);
        ngx_http_idem_fuzz_assert(sf != 0 || rc == NGX_DECLINED);
        ngx_http_idem_fuzz_assert(sf != 1 || rc == NGX_OK);

        if (rc == NGX_OK) {
            ngx_http_idem_fuzz_assert(mcontent.len == content.len
                                      && ngx_memcmp(mcontent.data,
                                                    content.data,
                                                    content.len) == 0);
            id = &content;

        } else {
            ngx_http_idem_fuzz_assert(ngx_strlen(err) < sizeof(err));
            id = NULL;
        }
    }

    call_ok = (ncall == 0 && !(flags & 1))
              || (ncall == 1 && id != NULL
                  && ngx_http_idem_fuzz_id_valid(id,
                                            fz.ilcf->call_id_max_length));

    if (call_ok && ncall == 1 && pattern) {
        md = pcre2_match_data_create_from_pattern(
                                         ngx_http_idem_fuzz_re[pattern], NULL);
        if (md == NULL) {
            ngx_http_idem_fuzz_abort("no memory");
        }

        call_ok = pcre2_match(ngx_http_idem_fuzz_re[pattern], id->data,
                              id->len, 0, 0, md, NULL) >= 0;

        pcre2_match_data_free(md);
    }

    trace_ok = ntrace == 0
               || (ntrace == 1
                   && ngx_http_idem_fuzz_id_valid(tv,
                                             fz.ilcf->call_id_max_length));

    ngx_memzero(&problem, sizeof(ngx_http_idem_problem_t));

    rc = ngx_http_idem_resolve_ids(fz.request, fz.ilcf, &in, fz.ctx,
                                   &problem);

    ngx_http_idem_fuzz_assert(rc == NGX_OK || rc == NGX_DECLINED);
    ngx_http_idem_fuzz_assert((rc == NGX_OK) == (call_ok && trace_ok));

    /* the call id: the client's, byte for byte, or a gateway one */

    if (call_ok && ncall == 1) {
        ngx_http_idem_fuzz_assert(fz.ctx->ids.source
                                  == NGX_HTTP_IDEM_SOURCE_CLIENT);
        ngx_http_idem_fuzz_assert(fz.ctx->ids.call_id.len == id->len
                                  && ngx_memcmp(fz.ctx->ids.call_id.data,
                                                id->data, id->len) == 0);
        ngx_http_idem_fuzz_assert(fz.ctx->ids.call_id_echo.data == cv->data
                                  && fz.ctx->ids.call_id_echo.len == cv->len);

    } else {
        ngx_http_idem_fuzz_assert(fz.ctx->ids.source
                                  == NGX_HTTP_IDEM_SOURCE_GATEWAY);
        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_id_valid(
                                      &fz.ctx->ids.call_id, 255));

        /* a generated id goes out bare, or as a String (quoted) */

        if (flags & 16) {
            ngx_http_idem_fuzz_assert(
                fz.ctx->ids.call_id_echo.len == fz.ctx->ids.call_id.len + 2
                && fz.ctx->ids.call_id_echo.data[0] == '"'
                && ngx_memcmp(fz.ctx->ids.call_id_echo.data + 1,
                              fz.ctx->ids.call_id.data,
                              fz.ctx->ids.call_id.len) == 0
                && fz.ctx->ids.call_id_echo.data[fz.ctx->ids.call_id.len + 1]
                   == '"');

        } else {
            ngx_http_idem_fuzz_assert(
                fz.ctx->ids.call_id_echo.len == fz.ctx->ids.call_id.len
                && ngx_memcmp(fz.ctx->ids.call_id_echo.data,
                              fz.ctx->ids.call_id.data,
                              fz.ctx->ids.call_id.len) == 0);
        }
    }

    /* the trace id: the client's, the traceparent's, or a new one */

    if (trace_ok && ntrace == 1) {
        ngx_http_idem_fuzz_assert(fz.ctx->ids.trace_id.data == tv->data
                                  && fz.ctx->ids.trace_id.len == tv->len);

    } else if (ntrace == 0 && nparent == 1
               && ngx_http_idem_fuzz_traceparent(pv))
    {
        ngx_http_idem_fuzz_assert(fz.ctx->ids.trace_id.len == 32
                                  && fz.ctx->ids.trace_id.data == pv->data + 3);

    } else {
        ngx_http_idem_fuzz_assert(fz.ctx->ids.trace_id.len == 32
                                  && ngx_http_idem_fuzz_lower_hex(
                                         fz.ctx->ids.trace_id.data, 32, 1));
    }

    tp = NULL;

    if (pv != NULL
        && ngx_http_idem_traceparent_parse(pv, &tpv) == NGX_OK)
    {
        tp = tpv.trace_id.data;

        ngx_http_idem_fuzz_assert(tpv.trace_id.data == pv->data + 3
                                  && tpv.trace_id.len == 32
                                  && tpv.parent_id.data == pv->data + 36
                                  && tpv.parent_id.len == 16);
        ngx_http_idem_fuzz_assert(
            tpv.flags == (tpv.version == 0 ? tpv.flags : (tpv.flags & 1))
            && tpv.flags < 256);
    }

    ngx_http_idem_fuzz_assert((tp != NULL)
                              == (pv != NULL
                                  && ngx_http_idem_fuzz_traceparent(pv)));

    /*
     * The client's context is the call's when its traceparent is valid,
     * sent once, and names the call's trace: alone, or beside a valid
     * trace id header with the same trace id.
     */

    tc.parent = (nparent == 1) ? pv : NULL;
    tc.taken = nparent == 1 && tp != NULL
               && (ntrace == 0
                   || (ntrace == 1 && trace_ok && tv->len == 32
                       && ngx_memcmp(tv->data, pv->data + 3, 32) == 0));

    ngx_http_idem_fuzz_assert(fz.ctx->trace.client == tc.taken);

    if (tc.taken) {
        tc.flags = tpv.flags;

        ngx_http_idem_fuzz_assert(
            fz.ctx->trace.parent_id.data == pv->data + 36
            && fz.ctx->trace.parent_id.len == 16);

    } else {
        tc.flags = (flags & 32) ? 1 : 0;

        ngx_http_idem_fuzz_assert(fz.ctx->trace.parent_id.len == 0
                                  && fz.ctx->trace.tracestate.len == 0);
    }

    ngx_http_idem_fuzz_assert(fz.ctx->trace.flags == tc.flags
                              && fz.ctx->trace.sampled == (tc.flags & 1));

    if (cv != NULL) {
        ngx_http_idem_fuzz_assert(
            (ngx_http_idem_check_charset(cv) == NGX_OK)
            == (cv->len == 0 || ngx_http_idem_fuzz_id_valid(cv, cv->len)));
    }

    /* a call let through, with the budget it asks for, goes upstream */

    if (rc == NGX_OK
        && ngx_http_idem_deadline_init(fz.request, fz.ilcf, &in, fz.ctx,
                                       &problem)
           == NGX_OK)
    {
        ngx_http_idem_fuzz_upstream(&fz, &in, before, &tc);
    }

    /* a refused call: 400, problem+json that parses */

    if (rc == NGX_DECLINED) {
        ngx_http_idem_fuzz_assert(problem.status == NGX_HTTP_BAD_REQUEST);

        rc = ngx_http_idem_send_problem(fz.request, &problem,
                                        &fz.ctx->ids.call_id);

        ngx_http_idem_fuzz_problem_sent(rc);
        ngx_http_idem_fuzz_assert(
            fz.request->headers_out.content_length_n
            == (off_t) ngx_http_idem_fuzz_answer.body.len);
    }

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}


/*
 * SPEC: the upstream gets the call id and trace id once each, the module's
 * X-Call-Id-Source, X-Call-Attempt, traceparent and deadline header once
 * each (the last two when they apply), no client copy of any of these, and
 * every other header as the client sent it.
 */

static void
ngx_http_idem_fuzz_upstream(ngx_http_idem_fuzz_t *fz,
    ngx_http_idem_inbound_t *in, ngx_uint_t *before,
    ngx_http_idem_fuzz_trace_t *tc)
{
    u_char              *p;
    u_char               fl[2];
    ngx_uint_t           n, tp;
    ngx_table_elt_t     *h;
    ngx_http_request_t  *r;

    r = fz->request;

    ngx_http_idem_fuzz_assert(ngx_http_idem_inject(r, fz->ilcf, in, fz->ctx)
                              == NGX_OK);

    h = ngx_http_idem_fuzz_find(r, "X-Call-Id", &n);
    ngx_http_idem_fuzz_assert(n == 1
                              && h->value.len == fz->ctx->ids.call_id_echo.len
                              && ngx_memcmp(h->value.data,
                                            fz->ctx->ids.call_id_echo.data,
                                            h->value.len) == 0);

    h = ngx_http_idem_fuzz_find(r, "X-Trace-Id", &n);
    ngx_http_idem_fuzz_assert(n == 1
                              && h->value.len == fz->ctx->ids.trace_id.len
                              && ngx_memcmp(h->value.data,
                                            fz->ctx->ids.trace_id.data,
                                            h->value.len) == 0);

    h = ngx_http_idem_fuzz_find(r, "X-Call-Id-Source", &n);
    ngx_http_idem_fuzz_assert(n == 1);
    ngx_http_idem_fuzz_assert(
        fz->ctx->ids.source == NGX_HTTP_IDEM_SOURCE_CLIENT
        ? h->value.len == 6 && ngx_strncmp(h->value.data, "client", 6) == 0
        : h->value.len == 7 && ngx_strncmp(h->value.data, "gateway", 7) == 0);

    h = ngx_http_idem_fuzz_find(r, "X-Call-Attempt", &n);
    ngx_http_idem_fuzz_assert(n == 1 && h->value.len == 1
                              && h->value.data[0] == '1');

    /* a traceparent exactly for a trace id that can be a W3C one */

    tp = fz->ctx->ids.trace_id.len == 32
         && ngx_http_idem_fuzz_lower_hex(fz->ctx->ids.trace_id.data, 32, 1);

    h = ngx_http_idem_fuzz_find(r, "traceparent", &n);
    ngx_http_idem_fuzz_assert(n == tp);

    if (tp) {
        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_traceparent(&h->value));
        ngx_http_idem_fuzz_assert(h->value.len == 55
                                  && ngx_memcmp(h->value.data, "00-", 3) == 0
                                  && ngx_memcmp(h->value.data + 3,
                                                fz->ctx->ids.trace_id.data, 32)
                                     == 0);

        /* nothing is exported here: the client's parent, or a new span */

        ngx_http_idem_fuzz_assert(
            tc->taken
            ? ngx_memcmp(h->value.data + 36, tc->parent->data + 36, 16) == 0
            : ngx_memcmp(h->value.data + 36, fz->ctx->trace.span_id, 16)
              == 0);

        fl[0] = "0123456789abcdef"[tc->flags >> 4];
        fl[1] = "0123456789abcdef"[tc->flags & 15];

        ngx_http_idem_fuzz_assert(ngx_memcmp(h->value.data + 53, fl, 2)
                                  == 0);
    }

    ngx_http_idem_fuzz_tracestate_upstream(fz, tc);

    h = ngx_http_idem_fuzz_find(r, "X-Deadline-Ms", &n);
    ngx_http_idem_fuzz_assert(n == (fz->ctx->deadline.set ? 1 : 0));

    if (n) {
        for (p = h->value.data; p < h->value.data + h->value.len; p++) {
            ngx_http_idem_fuzz_assert(*p >= '0' && *p <= '9');
        }
    }

    ngx_http_idem_fuzz_find(r, "grpc-timeout", &n);
    ngx_http_idem_fuzz_assert(n == 0);

    /* the rest passes untouched */

    ngx_http_idem_fuzz_find(r, "X-Other", &n);
    ngx_http_idem_fuzz_assert(n == before[7]);

    ngx_http_idem_fuzz_find(r, "X-Call-Ids", &n);
    ngx_http_idem_fuzz_assert(n == before[11]);
}


/*
 * W3C: a tracestate only beside the client's traceparent; its lines
 * combined; valid, it passes on as sent up to 512 bytes, trimmed by whole
 * members past that; invalid or only empty members, none.
 */

static void
ngx_http_idem_fuzz_tracestate_upstream(ngx_http_idem_fuzz_t *fz,
    ngx_http_idem_fuzz_trace_t *tc)
{
    u_char           *p;
    size_t            len;
    ngx_int_t         m, k;
    ngx_str_t        *line;
    ngx_uint_t        i, n;
    ngx_table_elt_t  *h;

    h = ngx_http_idem_fuzz_find(fz->request, "tracestate", &n);

    if (!tc->taken || tc->states->nelts == 0) {
        ngx_http_idem_fuzz_assert(n == 0);
        return;
    }

    line = tc->states->elts;
    len = tc->states->nelts - 1;

    for (i = 0; i < tc->states->nelts; i++) {
        len += line[i].len;
    }

    p = ngx_pnalloc(fz->pool, len + 1);
    if (p == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    len = 0;

    for (i = 0; i < tc->states->nelts; i++) {
        if (i) {
            p[len++] = ',';
        }

        ngx_memcpy(p + len, line[i].data, line[i].len);
        len += line[i].len;
    }

    m = ngx_http_idem_fuzz_tracestate(p, len);

    if (m <= 0) {
        ngx_http_idem_fuzz_assert(n == 0);
        return;
    }

    if (len <= 512) {
        ngx_http_idem_fuzz_assert(n == 1 && h->value.len == len
                                  && ngx_memcmp(h->value.data, p, len) == 0);
        return;
    }

    /* a member may be longer than 512 bytes alone: then none is left */

    ngx_http_idem_fuzz_assert(n <= 1);

    if (n == 1) {
        k = ngx_http_idem_fuzz_tracestate(h->value.data, h->value.len);

        ngx_http_idem_fuzz_assert(h->value.len <= 512 && k >= 1 && k <= m);
    }
}


/*
 * A combined tracestate read as W3C Trace Context Level 2 says: its
 * members, between commas, spaces and tabs around them not theirs, empty
 * ones allowed; at most 32 of key=value, the key 1-256 of a-z 0-9 _ - * /
 * @ opening with a-z or 0-9, the value 1-256 of 0x20-0x7e but "," and "="
 * not ending in a space, no key twice.  The number of members, or -1.
 */

static ngx_int_t
ngx_http_idem_fuzz_tracestate(u_char *v, size_t len)
{
    u_char      c;
    size_t      i, j, start, end, eq, n;
    size_t      key[32], keylen[32];

    n = 0;
    start = 0;

    for (i = 0; i <= len; i++) {

        if (i < len && v[i] != ',') {
            continue;
        }

        end = i;

        while (start < end && (v[start] == ' ' || v[start] == '\t')) {
            start++;
        }

        while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t')) {
            end--;
        }

        if (start < end) {
            if (n == 32) {
                return -1;
            }

            for (eq = start; eq < end && v[eq] != '='; eq++) {
                /* void */
            }

            if (eq == end || eq == start || eq - start > 256
                || end - eq - 1 < 1 || end - eq - 1 > 256
                || v[end - 1] == ' ')
            {
                return -1;
            }

            c = v[start];

            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) {
                return -1;
            }

            for (j = start; j < eq; j++) {
                c = v[j];

                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
                      || ngx_strchr("_-*/@", c) != NULL) || c == '\0')
                {
                    return -1;
                }
            }

            for (j = eq + 1; j < end; j++) {
                if (v[j] < 0x20 || v[j] > 0x7e || v[j] == '=') {
                    return -1;
                }
            }

            for (j = 0; j < n; j++) {
                if (keylen[j] == eq - start
                    && ngx_memcmp(v + key[j], v + start, keylen[j]) == 0)
                {
                    return -1;
                }
            }

            key[n] = start;
            keylen[n] = eq - start;
            n++;
        }

        start = i + 1;
    }

    return (ngx_int_t) n;
}


/* the last of the request headers of that name (any case), and how many */

static ngx_table_elt_t *
ngx_http_idem_fuzz_find(ngx_http_request_t *r, char *name, ngx_uint_t *n)
{
    size_t            len;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h, *found;

    len = ngx_strlen(name);
    found = NULL;
    *n = 0;

    for (part = &r->headers_in.headers.part; part; part = part->next) {
        h = part->elts;

        for (i = 0; i < part->nelts; i++) {
            if (h[i].key.len == len
                && ngx_strncasecmp(h[i].key.data, (u_char *) name, len) == 0)
            {
                found = &h[i];
                (*n)++;
            }
        }
    }

    return found;
}


/* W3C Trace Context, level 1: what a valid traceparent is */

static ngx_uint_t
ngx_http_idem_fuzz_traceparent(ngx_str_t *v)
{
    u_char  *p;

    p = v->data;

    if (v->len < 55
        || !ngx_http_idem_fuzz_lower_hex(p, 2, 0)
        || ngx_strncmp(p, "ff", 2) == 0
        || p[2] != '-' || p[35] != '-' || p[52] != '-'
        || !ngx_http_idem_fuzz_lower_hex(p + 3, 32, 1)
        || !ngx_http_idem_fuzz_lower_hex(p + 36, 16, 1)
        || !ngx_http_idem_fuzz_lower_hex(p + 53, 2, 0))
    {
        return 0;
    }

    /* version 00 is exactly 55 bytes; a later one may go on after a '-' */

    if (ngx_strncmp(p, "00", 2) == 0) {
        return v->len == 55;
    }

    return v->len == 55 || p[55] == '-';
}


static ngx_uint_t
ngx_http_idem_fuzz_lower_hex(u_char *p, size_t len, ngx_uint_t nonzero)
{
    size_t      i;
    ngx_uint_t  zero;

    zero = 1;

    for (i = 0; i < len; i++) {
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
        {
            return 0;
        }

        if (p[i] != '0') {
            zero = 0;
        }
    }

    return !(nonzero && zero);
}
