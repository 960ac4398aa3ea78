
/*
 * W3C Trace Context: the client's traceparent and tracestate, the
 * sampling decision, the parent id each attempt's upstream gets.
 *
 * For the span exporter: ngx_http_idem_trace_sampled() is the call's
 * sampling decision (the client's sampled flag, or idem_otel_sample's for
 * a call that came without one); ctx->trace.parent_id is the client's
 * span (len 0: none), the parent of the call's server span.  The exporter
 * sets ctx->trace.export once the ids are resolved and before they are
 * injected (ngx_http_idem_settle(), between ngx_http_idem_resolve_ids()
 * and ngx_http_idem_inject()): from the first attempt's traceparent on,
 * each upstream then gets its own attempt's span as parent.
 */


#ifndef _NGX_HTTP_IDEM_TRACE_H_INCLUDED_
#define _NGX_HTTP_IDEM_TRACE_H_INCLUDED_


#include "ngx_http_idem_common.h"


#define NGX_HTTP_IDEM_TRACE_SAMPLED  0x01


/* a valid traceparent, its fields pointing into the header's value */
typedef struct {
    ngx_str_t                 trace_id;     /* 32 lowercase hex */
    ngx_str_t                 parent_id;    /* 16 lowercase hex */
    ngx_uint_t                version;
    ngx_uint_t                flags;        /* version 00: all eight;
                                               a later one: the sampled
                                               bit alone */
} ngx_http_idem_traceparent_t;


ngx_uint_t ngx_http_idem_trace_id_w3c(ngx_str_t *id);
ngx_int_t ngx_http_idem_traceparent_parse(ngx_str_t *value,
    ngx_http_idem_traceparent_t *tp);
void ngx_http_idem_trace_take(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_idem_traceparent_t *tp);
ngx_int_t ngx_http_idem_trace_start(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx);
ngx_int_t ngx_http_idem_tracestate_combine(ngx_pool_t *pool,
    ngx_str_t *lines, ngx_uint_t n, ngx_str_t *out);
ngx_uint_t ngx_http_idem_trace_sampled(ngx_http_request_t *r);
u_char *ngx_http_idem_trace_upstream_parent(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, u_char *span_id);
char *ngx_http_idem_trace_set_sample(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_IDEM_TRACE_H_INCLUDED_ */
