
/*
 * Headers: what the client sent, what the upstream receives (added to the
 * request's own header list, so that every proxy module forwards it with no
 * proxy_set_header), and what the client gets back.
 */


#include "ngx_http_idem_headers.h"
#include "ngx_http_idem_call_id_source.h"
#include "ngx_http_idem_deadline.h"
#include "ngx_http_idem_trace.h"
#include "ngx_http_idem_util.h"


static ngx_inline ngx_uint_t ngx_http_idem_header_is(ngx_table_elt_t *h,
    ngx_http_idem_header_t *name);
static ngx_uint_t ngx_http_idem_header_alias(ngx_table_elt_t *h,
    ngx_http_idem_header_t *name);
static ngx_uint_t ngx_http_idem_owned(ngx_http_idem_main_conf_t *imcf,
    ngx_http_idem_loc_conf_t *ilcf, ngx_table_elt_t *h);
static ngx_table_elt_t *ngx_http_idem_push_value(ngx_http_request_t *r,
    ngx_http_idem_header_t *name, size_t size);
static ngx_table_elt_t *ngx_http_idem_push(ngx_list_t *list,
    ngx_http_idem_header_t *name, ngx_str_t *value);
static void ngx_http_idem_hide_response_headers(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);


ngx_int_t
ngx_http_idem_header_init(ngx_pool_t *pool, ngx_http_idem_header_t *h,
    ngx_str_t *name)
{
    h->name = *name;

    h->lowcase = ngx_pnalloc(pool, name->len);
    if (h->lowcase == NULL) {
        return NGX_ERROR;
    }

    h->hash = ngx_hash_strlow(h->lowcase, name->data, name->len);

    return NGX_OK;
}


/* an HTTP field name (token) that nginx also accepts from clients */

ngx_int_t
ngx_http_idem_header_name_valid(ngx_str_t *name)
{
    u_char  c;
    size_t  i;

    if (name->len == 0 || name->len > 64) {
        return NGX_DECLINED;
    }

    for (i = 0; i < name->len; i++) {
        c = name->data[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9') || c == '-' || c == '_')
        {
            continue;
        }

        return NGX_DECLINED;
    }

    return NGX_OK;
}


static ngx_inline ngx_uint_t
ngx_http_idem_header_is(ngx_table_elt_t *h, ngx_http_idem_header_t *name)
{
    return h->hash == name->hash
           && h->key.len == name->name.len
           && ngx_strncmp(h->lowcase_key, name->lowcase, name->name.len) == 0;
}


/*
 * With underscores_in_headers on, nginx keeps "X_Call_Id_Source" as a
 * header of its own, but FastCGI, uwsgi and SCGI turn both it and
 * "X-Call-Id-Source" into HTTP_X_CALL_ID_SOURCE.  A name that differs
 * from one the module reads or writes only by "_" for "-" is an alias:
 * it is dropped, never read.
 */

static ngx_uint_t
ngx_http_idem_header_alias(ngx_table_elt_t *h, ngx_http_idem_header_t *name)
{
    u_char      a, b;
    size_t      i;
    ngx_uint_t  differs;

    if (h->key.len != name->name.len || h->lowcase_key == NULL) {
        return 0;
    }

    differs = 0;

    for (i = 0; i < name->name.len; i++) {
        a = h->lowcase_key[i];
        b = name->lowcase[i];

        if (a == b) {
            continue;
        }

        if ((a == '_' || a == '-') && (b == '_' || b == '-')) {
            differs = 1;
            continue;
        }

        return 0;
    }

    return differs;
}


/*
 * The headers the module writes upstream, and aliases of every header it
 * reads or writes: a client's copy never passes.
 */

static ngx_uint_t
ngx_http_idem_owned(ngx_http_idem_main_conf_t *imcf,
    ngx_http_idem_loc_conf_t *ilcf, ngx_table_elt_t *h)
{
    if (ngx_http_idem_header_is(h, &imcf->source_header)
        || ngx_http_idem_header_is(h, &imcf->attempt_header)
        || ngx_http_idem_header_is(h, &imcf->traceparent_header)
        || ngx_http_idem_header_is(h, &imcf->tracestate_header)
        || ngx_http_idem_header_is(h, &imcf->grpc_timeout_header)
        || (ilcf->deadline_header.name.len
            && ngx_http_idem_header_is(h, &ilcf->deadline_header)))
    {
        return 1;
    }

    /* the id comes from elsewhere: a client's header never passes */

    if ((ilcf->call_id_from != NULL || ilcf->call_id_json != NULL)
        && ngx_http_idem_header_is(h, &ilcf->call_id_header))
    {
        return 1;
    }

    return ngx_http_idem_header_alias(h, &ilcf->call_id_header)
           || ngx_http_idem_header_alias(h, &ilcf->trace_id_header)
           || ngx_http_idem_header_alias(h, &imcf->source_header)
           || ngx_http_idem_header_alias(h, &imcf->attempt_header)
           || ngx_http_idem_header_alias(h, &imcf->grpc_timeout_header)
           || (ilcf->deadline_header.name.len
               && ngx_http_idem_header_alias(h, &ilcf->deadline_header));
}


ngx_int_t
ngx_http_idem_scan_request(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in)
{
    ngx_table_elt_t              *h;
    ngx_http_idem_main_conf_t    *imcf;
    ngx_http_idem_header_iter_t   it;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    ngx_memzero(in, sizeof(ngx_http_idem_inbound_t));

    for (h = ngx_http_idem_header_first(&it, &r->headers_in.headers);
         h != NULL;
         h = ngx_http_idem_header_next(&it))
    {
        if (ilcf->call_id_from == NULL && ilcf->call_id_json == NULL
            && ngx_http_idem_header_is(h, &ilcf->call_id_header))
        {
            in->call_id = h;
            in->call_id_count++;
            continue;
        }

        if (ngx_http_idem_header_is(h, &ilcf->trace_id_header)) {
            in->trace_id = h;
            in->trace_id_count++;
            continue;
        }

        if (!ngx_http_idem_owned(imcf, ilcf, h)) {
            continue;
        }

        in->owned_count++;

        if (ngx_http_idem_header_is(h, &imcf->traceparent_header)) {
            in->traceparent = h;
            in->traceparent_count++;

        } else if (ngx_http_idem_header_is(h, &imcf->tracestate_header)) {
            if (in->tracestate == NULL) {
                in->tracestate = h;
            }

            in->tracestate_count++;

        } else if (ngx_http_idem_header_is(h,
                                           &imcf->grpc_timeout_header))
        {
            in->grpc_timeout = h;
            in->grpc_timeout_count++;

        } else if (ngx_http_idem_header_is(h, &ilcf->deadline_header)) {
            in->deadline = h;
            in->deadline_count++;
        }
    }

    return NGX_OK;
}


/*
 * Removes the client's copies of the headers the module writes.  Proxy and
 * grpc forward every entry of the list whatever its hash, so the entries
 * are unlinked: the list is rebuilt, and the old entries stay in memory for
 * the r->headers_in fields that point to them.
 */

ngx_int_t
ngx_http_idem_drop_owned(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in)
{
    ngx_uint_t                    n;
    ngx_list_t                    old;
    ngx_list_part_t              *part;
    ngx_table_elt_t              *h, *copy;
    ngx_http_idem_main_conf_t    *imcf;
    ngx_http_idem_header_iter_t   it;

    if (in->owned_count == 0) {
        return NGX_OK;
    }

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    old = r->headers_in.headers;

    n = 0;
    for (part = &old.part; part; part = part->next) {
        n += part->nelts;
    }

    if (ngx_list_init(&r->headers_in.headers, r->pool, n + 8,
                      sizeof(ngx_table_elt_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (h = ngx_http_idem_header_first(&it, &old);
         h != NULL;
         h = ngx_http_idem_header_next(&it))
    {
        if (ngx_http_idem_owned(imcf, ilcf, h)) {
            ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                           "idem: dropping client header \"%V: %V\"",
                           &h->key, &h->value);
            continue;
        }

        copy = ngx_list_push(&r->headers_in.headers);
        if (copy == NULL) {
            return NGX_ERROR;
        }

        *copy = *h;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idem_inject(ngx_http_request_t *r, ngx_http_idem_loc_conf_t *ilcf,
    ngx_http_idem_inbound_t *in, ngx_http_idem_ctx_t *ctx)
{
    ngx_list_t                 *list;
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);
    list = &r->headers_in.headers;

    if (ngx_http_idem_drop_owned(r, ilcf, in) != NGX_OK) {
        return NGX_ERROR;
    }

    /* a configured source's id replaces the client's header, dropped */

    if ((in->call_id == NULL
         || in->call_id_source != NGX_HTTP_IDEM_SOURCE_CLIENT)
        && ngx_http_idem_push(list, ctx->ids.call_id_header,
                              &ctx->ids.call_id_echo)
           == NULL)
    {
        return NGX_ERROR;
    }

    if (in->trace_id == NULL
        && ngx_http_idem_push(list, ctx->ids.trace_id_header,
                              &ctx->ids.trace_id)
           == NULL)
    {
        return NGX_ERROR;
    }

    if (ngx_http_idem_push(list, &imcf->source_header,
                           ngx_http_idem_source_name(ctx->ids.source))
        == NULL)
    {
        return NGX_ERROR;
    }

    /*
     * The headers below change from attempt to attempt: their values get
     * room for any content and are rewritten in place.
     */

    ctx->ids.attempt_h = ngx_http_idem_push_value(r, &imcf->attempt_header,
                                                  NGX_INT_T_LEN);
    if (ctx->ids.attempt_h == NULL) {
        return NGX_ERROR;
    }

    if (ctx->deadline.set && ilcf->deadline_header.name.len) {
        ctx->ids.deadline_h = ngx_http_idem_push_value(r,
                                                       &ilcf->deadline_header,
                                                       NGX_INT_T_LEN);
        if (ctx->ids.deadline_h == NULL) {
            return NGX_ERROR;
        }
    }

    /* a W3C traceparent only for a trace id that is one */

    if (ngx_http_idem_trace_id_w3c(&ctx->ids.trace_id)) {
        ctx->ids.traceparent_h = ngx_http_idem_push_value(r,
                                               &imcf->traceparent_header,
                                               NGX_HTTP_IDEM_TRACEPARENT_LEN);
        if (ctx->ids.traceparent_h == NULL) {
            return NGX_ERROR;
        }

        /* the client's tracestate, valid and combined, as it came */

        if (ctx->trace.tracestate.len
            && ngx_http_idem_push(list, &imcf->tracestate_header,
                                  &ctx->trace.tracestate)
               == NULL)
        {
            return NGX_ERROR;
        }
    }

    ctx->upstream.attempt = 0;

    return ngx_http_idem_set_attempt_headers(r, ctx, 0);
}


/*
 * The values of one attempt: its number, a new span id and the traceparent
 * with the parent its upstream gets (ngx_http_idem_trace.c), the budget
 * left, and for gRPC upstreams a grpc-timeout as well.
 * ctx->upstream.attempt is the attempt about to start, 0 before the
 * upstream is involved.
 */

ngx_int_t
ngx_http_idem_set_attempt_headers(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t grpc)
{
    u_char                     *p, *parent;
    ngx_msec_int_t              left;
    ngx_table_elt_t            *h;
    ngx_http_idem_main_conf_t  *imcf;

    static u_char               hex[] = "0123456789abcdef";

    h = ctx->ids.attempt_h;

    if (h == NULL) {

        /* the ids were never injected (a refused call): nothing to send */

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "idem: an attempt of a call whose ids were never "
                      "settled");
        return NGX_ERROR;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem attempt headers: attempt %ui", ctx->upstream.attempt);

    h->value.len = ngx_sprintf(h->value.data, "%ui",
                               ngx_max(ctx->upstream.attempt, 1))
                   - h->value.data;

    h = ctx->ids.traceparent_h;

    if (h != NULL) {
        ngx_http_idem_random_hex(ctx->trace.span_id,
                                 NGX_HTTP_IDEM_SPAN_ID_LEN);

        parent = ngx_http_idem_trace_upstream_parent(r, ctx,
                                                     ctx->trace.span_id);

        /* version 00 (W3C: the highest one known), the call's flags */

        p = ngx_cpymem(h->value.data, "00-", 3);
        p = ngx_cpymem(p, ctx->ids.trace_id.data, NGX_HTTP_IDEM_TRACE_ID_LEN);
        *p++ = '-';
        p = ngx_cpymem(p, parent, NGX_HTTP_IDEM_SPAN_ID_LEN);
        *p++ = '-';
        *p++ = hex[(ctx->trace.flags >> 4) & 0xf];
        *p++ = hex[ctx->trace.flags & 0xf];
        h->value.len = p - h->value.data;

        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem attempt span \"%*s\", traceparent \"%V\"",
                       (size_t) NGX_HTTP_IDEM_SPAN_ID_LEN, ctx->trace.span_id,
                       &h->value);
    }

    if (!ctx->deadline.set) {
        return NGX_OK;
    }

    left = ngx_max(ngx_http_idem_remaining(ctx), 0);

    h = ctx->ids.deadline_h;

    if (h != NULL) {
        h->value.len = ngx_sprintf(h->value.data, "%M", (ngx_msec_t) left)
                       - h->value.data;
    }

    if (!grpc) {
        return NGX_OK;
    }

    if (ctx->ids.grpc_timeout_h == NULL) {
        imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

        ctx->ids.grpc_timeout_h = ngx_http_idem_push_value(r,
                                          &imcf->grpc_timeout_header,
                                          NGX_HTTP_IDEM_GRPC_TIMEOUT_LEN);
        if (ctx->ids.grpc_timeout_h == NULL) {
            return NGX_ERROR;
        }
    }

    h = ctx->ids.grpc_timeout_h;
    h->value.len = ngx_http_idem_grpc_timeout(h->value.data,
                                              (ngx_msec_t) left)
                   - h->value.data;

    return NGX_OK;
}


static ngx_table_elt_t *
ngx_http_idem_push_value(ngx_http_request_t *r, ngx_http_idem_header_t *name,
    size_t size)
{
    ngx_str_t  value;

    value.data = ngx_pnalloc(r->pool, size);
    if (value.data == NULL) {
        return NULL;
    }

    value.len = 0;

    return ngx_http_idem_push(&r->headers_in.headers, name, &value);
}


static ngx_table_elt_t *
ngx_http_idem_push(ngx_list_t *list, ngx_http_idem_header_t *name,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(list);
    if (h == NULL) {
        return NULL;
    }

    h->hash = name->hash;
    h->key = name->name;
    h->lowcase_key = name->lowcase;
    h->value = *value;

    return h;
}


/* the request's ids replace any copy from the upstream, a cache or config */

ngx_int_t
ngx_http_idem_set_response_headers(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx)
{
    ngx_table_elt_t            *h;
    ngx_http_idem_main_conf_t  *imcf;

    ngx_http_idem_hide_response_headers(r, ctx);

    /*
     * The call id in the form the client sent it.  A client whose own id
     * was refused gets none: it could take a gateway id for its own.  Nor
     * does a call the module refused (nothing forwarded) with an id the
     * gateway made: a client library that echoes the header back would
     * send a refused call's id as its own (its record, if any, says
     * "not sent").
     */

    if (!ctx->ids.call_id_refused
        && !(ctx->refused != NULL
             && ctx->ids.source == NGX_HTTP_IDEM_SOURCE_GATEWAY))
    {
        h = ngx_http_idem_push(&r->headers_out.headers, ctx->ids.call_id_header,
                               &ctx->ids.call_id_echo);
        if (h == NULL) {
            return NGX_ERROR;
        }
    }

    h = ngx_http_idem_push(&r->headers_out.headers, ctx->ids.trace_id_header,
                           &ctx->ids.trace_id);
    if (h == NULL) {
        return NGX_ERROR;
    }

    /* an id not from the call id header says where it came from */

    if (ctx->ids.source >= NGX_HTTP_IDEM_SOURCE_VARIABLE) {
        imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

        h = ngx_http_idem_push(&r->headers_out.headers, &imcf->source_header,
                               ngx_http_idem_source_name(ctx->ids.source));
        if (h == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* one walk over the answer's headers for both names */

static void
ngx_http_idem_hide_response_headers(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx)
{
    ngx_table_elt_t              *h;
    ngx_http_idem_main_conf_t    *imcf;
    ngx_http_idem_header_iter_t   it;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    for (h = ngx_http_idem_header_first(&it, &r->headers_out.headers);
         h != NULL;
         h = ngx_http_idem_header_next(&it))
    {
        if (h->hash != 0
            && (ngx_http_idem_header_named(h, &ctx->ids.call_id_header->name)
                || ngx_http_idem_header_named(h,
                                              &ctx->ids.trace_id_header->name)
                || (ctx->ids.source >= NGX_HTTP_IDEM_SOURCE_VARIABLE
                    && ngx_http_idem_header_named(h,
                                                  &imcf->source_header.name))))
        {
            h->hash = 0;
        }
    }
}
