
/*
 * W3C Trace Context (traceparent, tracestate): what the client sent, kept
 * as it was; the sampling decision of a call that came without one
 * (idem_otel_sample); the parent id each attempt's upstream gets.
 */


#include "ngx_http_idem_trace.h"
#include "ngx_http_idem_ctx.h"
#include "ngx_http_idem_util.h"


static ngx_uint_t ngx_http_idem_trace_hex(u_char *p, size_t len,
    uint64_t *value);
static ngx_uint_t ngx_http_idem_trace_sample(ngx_http_idem_loc_conf_t *ilcf,
    ngx_str_t *trace_id);
static ngx_int_t ngx_http_idem_tracestate_lines(ngx_http_request_t *r,
    ngx_http_idem_inbound_t *in, ngx_str_t **lines);
static ngx_int_t ngx_http_idem_tracestate_member(u_char *p, u_char *last,
    ngx_str_t *key);
static ngx_int_t ngx_http_idem_tracestate_trim(ngx_pool_t *pool,
    ngx_str_t *members, ngx_uint_t n, ngx_str_t *out);


/*
 * Whether a call's trace id is one W3C and OTLP take: 32 lowercase hex
 * digits, not all zero (both call the zero id invalid).  Only such a
 * trace id gets a traceparent upstream and spans exported; another one
 * (an X-Trace-Id of the client's own form, or of 32 zeros) still goes on
 * byte for byte in the trace id header.
 */

ngx_uint_t
ngx_http_idem_trace_id_w3c(ngx_str_t *id)
{
    uint64_t  hi, lo;

    return id->len == NGX_HTTP_IDEM_TRACE_ID_LEN
           && ngx_http_idem_trace_hex(id->data, 16, &hi)
           && ngx_http_idem_trace_hex(id->data + 16, 16, &lo)
           && (hi != 0 || lo != 0);
}


/*
 * "<version>-<32 hex trace id>-<16 hex parent id>-<2 hex flags>", all
 * lowercase.  Version 00 is exactly that; a later version may go on after
 * a "-", and of its flags only "sampled" is known (W3C: parse the first
 * four fields, assume nothing of the rest).  Version ff, an all-zero id,
 * anything else: NGX_DECLINED, the traceparent is ignored.
 */

ngx_int_t
ngx_http_idem_traceparent_parse(ngx_str_t *value,
    ngx_http_idem_traceparent_t *tp)
{
    u_char    *p;
    uint64_t   version, flags, hi, lo;

    p = value->data;

    if (value->len < NGX_HTTP_IDEM_TRACEPARENT_LEN
        || !ngx_http_idem_trace_hex(p, 2, &version)
        || version == 0xff
        || p[2] != '-' || p[35] != '-' || p[52] != '-'
        || !ngx_http_idem_trace_hex(p + 3, 16, &hi)
        || !ngx_http_idem_trace_hex(p + 19, 16, &lo)
        || (hi == 0 && lo == 0)
        || !ngx_http_idem_trace_hex(p + 36, 16, &lo)
        || lo == 0
        || !ngx_http_idem_trace_hex(p + 53, 2, &flags))
    {
        return NGX_DECLINED;
    }

    if (value->len != NGX_HTTP_IDEM_TRACEPARENT_LEN
        && (version == 0 || p[NGX_HTTP_IDEM_TRACEPARENT_LEN] != '-'))
    {
        return NGX_DECLINED;
    }

    tp->version = (ngx_uint_t) version;
    tp->flags = (ngx_uint_t) (version == 0
                              ? flags : flags & NGX_HTTP_IDEM_TRACE_SAMPLED);

    tp->trace_id.data = p + 3;
    tp->trace_id.len = NGX_HTTP_IDEM_TRACE_ID_LEN;
    tp->parent_id.data = p + 36;
    tp->parent_id.len = NGX_HTTP_IDEM_SPAN_ID_LEN;

    return NGX_OK;
}


/* lowercase hex, at most 16 digits */

static ngx_uint_t
ngx_http_idem_trace_hex(u_char *p, size_t len, uint64_t *value)
{
    u_char    c;
    uint64_t  v;

    for (v = 0; len--; p++) {
        c = *p;

        if (c >= '0' && c <= '9') {
            v = (v << 4) | (uint64_t) (c - '0');

        } else if (c >= 'a' && c <= 'f') {
            v = (v << 4) | (uint64_t) (c - 'a' + 10);

        } else {
            return 0;
        }
    }

    *value = v;

    return 1;
}


/*
 * The client's traceparent names the call's trace: its parent id and its
 * flags are kept, the sampling decision with them.
 */

void
ngx_http_idem_trace_take(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_idem_traceparent_t *tp)
{
    ctx->trace.client = 1;
    ctx->trace.parent_id = tp->parent_id;
    ctx->trace.flags = tp->flags;
    ctx->trace.sampled = (tp->flags & NGX_HTTP_IDEM_TRACE_SAMPLED) ? 1 : 0;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem trace: the client's traceparent, version %02xi, "
                   "parent \"%V\", flags %02xi",
                   tp->version, &tp->parent_id, tp->flags);
}


/*
 * Once the trace id is settled: a call without the client's traceparent
 * gets its sampling decision from idem_otel_sample, and a tracestate
 * passes on only beside the client's traceparent (W3C).
 */

ngx_int_t
ngx_http_idem_trace_start(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t   rc;
    ngx_str_t  *lines;

    if (!ctx->trace.client) {
        ctx->trace.sampled = ngx_http_idem_trace_sample(ilcf,
                                                        &ctx->ids.trace_id);
        ctx->trace.flags = ctx->trace.sampled ? NGX_HTTP_IDEM_TRACE_SAMPLED
                                              : 0;

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem trace: no traceparent taken, sampled %ui, "
                       "%ui tracestate line(s) dropped",
                       (ngx_uint_t) ctx->trace.sampled,
                       in->tracestate_count);

        return NGX_OK;
    }

    if (in->tracestate_count == 0) {
        return NGX_OK;
    }

    if (ngx_http_idem_tracestate_lines(r, in, &lines) != NGX_OK) {
        return NGX_ERROR;
    }

    rc = ngx_http_idem_tracestate_combine(r->pool, lines,
                                          in->tracestate_count,
                                          &ctx->trace.tracestate);

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {

        /* an invalid tracestate is dropped, the traceparent kept (W3C) */

        ctx->trace.tracestate.len = 0;

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem trace: dropping an invalid tracestate "
                       "(%ui line(s))", in->tracestate_count);
        return NGX_OK;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem trace: tracestate \"%V\"", &ctx->trace.tracestate);

    return NGX_OK;
}


/*
 * idem_otel_sample.  A W3C trace id decides by its own low 64 bits, so
 * that every gateway with the same ratio decides a trace the same way;
 * another trace id by a random number.
 */

static ngx_uint_t
ngx_http_idem_trace_sample(ngx_http_idem_loc_conf_t *ilcf,
    ngx_str_t *trace_id)
{
    uint64_t  x;

    if (ilcf->otel_sample == 0) {
        return 0;
    }

    if (ilcf->otel_sample >= NGX_HTTP_IDEM_SAMPLE_ALL) {
        return 1;
    }

    if (!ngx_http_idem_trace_id_w3c(trace_id)
        || !ngx_http_idem_trace_hex(trace_id->data + 16, 16, &x))
    {
        ngx_http_idem_random_bytes((u_char *) &x, sizeof(uint64_t));
    }

    return x % NGX_HTTP_IDEM_SAMPLE_ALL < ilcf->otel_sample;
}


/* the client's tracestate lines, in the order sent */

static ngx_int_t
ngx_http_idem_tracestate_lines(ngx_http_request_t *r,
    ngx_http_idem_inbound_t *in, ngx_str_t **lines)
{
    ngx_uint_t                    n;
    ngx_str_t                    *line;
    ngx_table_elt_t              *h;
    ngx_http_idem_main_conf_t    *imcf;
    ngx_http_idem_header_iter_t   it;

    if (in->tracestate_count == 1) {
        *lines = &in->tracestate->value;
        return NGX_OK;
    }

    line = ngx_palloc(r->pool, in->tracestate_count * sizeof(ngx_str_t));
    if (line == NULL) {
        return NGX_ERROR;
    }

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    n = 0;

    for (h = ngx_http_idem_header_first(&it, &r->headers_in.headers);
         h != NULL && n < in->tracestate_count;
         h = ngx_http_idem_header_next(&it))
    {
        if (ngx_http_idem_header_named(h, &imcf->tracestate_header.name)) {
            line[n++] = h->value;
        }
    }

    in->tracestate_count = n;
    *lines = line;

    return NGX_OK;
}


/*
 * A tracestate sent in "n" lines, combined into one value as RFC 9110
 * combines a field's lines (joined by commas).  NGX_DECLINED: invalid
 * (a member neither empty nor key=value, over 32 members, a key twice),
 * to be dropped.  A value of 512 bytes or less passes as it came; a
 * longer one loses whole members, those over 128 bytes first, then from
 * the end (W3C).  "out" gets len 0 when no member is left.
 */

ngx_int_t
ngx_http_idem_tracestate_combine(ngx_pool_t *pool, ngx_str_t *lines,
    ngx_uint_t n, ngx_str_t *out)
{
    u_char      *p, *q, *s, *e, *last;
    size_t       len;
    ngx_str_t    v, keys[NGX_HTTP_IDEM_TRACESTATE_MEMBERS],
                 members[NGX_HTTP_IDEM_TRACESTATE_MEMBERS];
    ngx_uint_t   i, k, count;

    if (n == 1) {
        v = lines[0];

    } else {
        len = n - 1;

        for (i = 0; i < n; i++) {
            len += lines[i].len;
        }

        v.data = ngx_pnalloc(pool, len);
        if (v.data == NULL) {
            return NGX_ERROR;
        }

        p = v.data;

        for (i = 0; i < n; i++) {
            if (i) {
                *p++ = ',';
            }

            p = ngx_cpymem(p, lines[i].data, lines[i].len);
        }

        v.len = len;
    }

    count = 0;
    last = v.data + v.len;

    for (p = v.data; /* void */; p = q + 1) {

        q = ngx_strlchr(p, last, ',');
        if (q == NULL) {
            q = last;
        }

        /* spaces and tabs around a member are not part of it */

        for (s = p; s < q && (*s == ' ' || *s == '\t'); s++) { /* void */ }
        for (e = q; e > s && (e[-1] == ' ' || e[-1] == '\t'); e--) {
            /* void */
        }

        /* empty members are allowed */

        if (s != e) {
            if (count == NGX_HTTP_IDEM_TRACESTATE_MEMBERS
                || ngx_http_idem_tracestate_member(s, e, &keys[count])
                   != NGX_OK)
            {
                return NGX_DECLINED;
            }

            for (k = 0; k < count; k++) {
                if (keys[k].len == keys[count].len
                    && ngx_memcmp(keys[k].data, keys[count].data,
                                  keys[k].len)
                       == 0)
                {
                    return NGX_DECLINED;
                }
            }

            members[count].data = s;
            members[count].len = e - s;
            count++;
        }

        if (q == last) {
            break;
        }
    }

    if (count == 0) {
        out->len = 0;
        return NGX_OK;
    }

    if (v.len <= NGX_HTTP_IDEM_TRACESTATE_LEN) {
        *out = v;
        return NGX_OK;
    }

    return ngx_http_idem_tracestate_trim(pool, members, count, out);
}


/*
 * key = ( lcalpha / DIGIT ) 0*255 ( lcalpha / DIGIT / "_" / "-" / "*" /
 * "/" / "@" ), value = 0*255 ( %x20-2B / %x2D-3C / %x3E-7E ) and a last
 * byte that is not a space (Trace Context Level 2); "key" gets the key
 */

static ngx_int_t
ngx_http_idem_tracestate_member(u_char *p, u_char *last, ngx_str_t *key)
{
    u_char  c, *eq;

    eq = ngx_strlchr(p, last, '=');

    if (eq == NULL || eq == p || eq - p > 256
        || last - (eq + 1) < 1 || last - (eq + 1) > 256
        || last[-1] == ' ')
    {
        return NGX_DECLINED;
    }

    key->data = p;
    key->len = eq - p;

    c = *p;

    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) {
        return NGX_DECLINED;
    }

    for (p++; p < eq; p++) {
        c = *p;

        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
              || c == '_' || c == '-' || c == '*' || c == '/' || c == '@'))
        {
            return NGX_DECLINED;
        }
    }

    for (p = eq + 1; p < last; p++) {
        c = *p;

        if (c < 0x20 || c > 0x7e || c == ',' || c == '=') {
            return NGX_DECLINED;
        }
    }

    return NGX_OK;
}


/* over 512 bytes: whole members dropped until the rest fits */

static ngx_int_t
ngx_http_idem_tracestate_trim(ngx_pool_t *pool, ngx_str_t *members,
    ngx_uint_t n, ngx_str_t *out)
{
    u_char      *p;
    size_t       len;
    ngx_int_t    i;
    ngx_uint_t   k, kept, pass;
    u_char       keep[NGX_HTTP_IDEM_TRACESTATE_MEMBERS];

    len = n - 1;

    for (k = 0; k < n; k++) {
        keep[k] = 1;
        len += members[k].len;
    }

    kept = n;

    /* the first pass drops members over 128 bytes, the second any */

    for (pass = 0; pass < 2; pass++) {
        for (i = (ngx_int_t) n - 1;
             i >= 0 && len > NGX_HTTP_IDEM_TRACESTATE_LEN;
             i--)
        {
            if (!keep[i] || (pass == 0 && members[i].len <= 128)) {
                continue;
            }

            keep[i] = 0;
            len -= members[i].len + (--kept ? 1 : 0);
        }
    }

    if (kept == 0) {
        out->len = 0;
        return NGX_OK;
    }

    out->data = ngx_pnalloc(pool, len);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    p = out->data;

    for (k = 0; k < n; k++) {
        if (!keep[k]) {
            continue;
        }

        if (p != out->data) {
            *p++ = ',';
        }

        p = ngx_cpymem(p, members[k].data, members[k].len);
    }

    out->len = p - out->data;

    return NGX_OK;
}


/* for the span exporter: the call's sampling decision */

ngx_uint_t
ngx_http_idem_trace_sampled(ngx_http_request_t *r)
{
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    return ctx != NULL && ctx->trace.sampled;
}


/*
 * The parent id an attempt's upstream gets.  Where the call's spans are
 * exported, the attempt's own span; where they are not, the client's
 * span, so that no span that nobody exports becomes a parent; with
 * neither, the attempt's span all the same: a traceparent needs a parent
 * id (W3C), and that span is not exported.
 */

u_char *
ngx_http_idem_trace_upstream_parent(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, u_char *span_id)
{
    if (ctx->trace.export || ctx->trace.parent_id.len == 0) {
        return span_id;
    }

    return ctx->trace.parent_id.data;
}


/* idem_otel_sample ratio: 0 to 1, in millionths */

char *
ngx_http_idem_trace_set_sample(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_int_t    n;
    ngx_str_t   *value;
    ngx_uint_t  *np;

    np = (ngx_uint_t *) ((char *) conf + cmd->offset);

    if (*np != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    n = value[1].len ? ngx_atofp(value[1].data, value[1].len, 6)
                     : NGX_ERROR;

    if (n == NGX_ERROR || n > NGX_HTTP_IDEM_SAMPLE_ALL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, it "
                           "must be a ratio from 0 to 1 with at most six "
                           "decimals", &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    *np = (ngx_uint_t) n;

    return NGX_CONF_OK;
}
