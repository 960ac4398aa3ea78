
/*
 * The call id and trace id of every answer, set by a header filter of its
 * own: a second module in the same .so, placed (ngx_module_order in
 * "config") before ngx_http_headers_filter_module, so that its filter runs
 * after add_header and expires.  A copy from add_header, the upstream or a
 * cache is replaced, and each id is sent once.  The main module's filter
 * stays where it is (before add_header), where an owner's answer is kept.
 */


#include "ngx_http_idem_common.h"
#include "ngx_http_idem_ctx.h"
#include "ngx_http_idem_headers.h"


static ngx_int_t ngx_http_idem_ids_filter_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_idem_ids_header_filter(ngx_http_request_t *r);


static ngx_http_module_t  ngx_http_idem_ids_filter_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_http_idem_ids_filter_init,         /* postconfiguration */

    NULL,                                  /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    NULL,                                  /* create location configuration */
    NULL                                   /* merge location configuration */
};


ngx_module_t  ngx_http_idem_ids_filter_module = {
    NGX_MODULE_V1,
    &ngx_http_idem_ids_filter_module_ctx,  /* module context */
    NULL,                                  /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;


static ngx_int_t
ngx_http_idem_ids_header_filter(ngx_http_request_t *r)
{
    ngx_http_idem_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || ctx->ids.call_id.len == 0) {
        return ngx_http_next_header_filter(r);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem ids filter: \"%V\", \"%V\"",
                   &ctx->ids.call_id, &ctx->ids.trace_id);

    if (ngx_http_idem_set_response_headers(r, ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_next_header_filter(r);
}


/* installed only where some location says "idem on", as the main module */

static ngx_int_t
ngx_http_idem_ids_filter_init(ngx_conf_t *cf)
{
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);

    if (!imcf->used) {
        return NGX_OK;
    }

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_idem_ids_header_filter;

    return NGX_OK;
}
