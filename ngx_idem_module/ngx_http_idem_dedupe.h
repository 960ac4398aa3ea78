
/*
 * Duplicate suppression: the claim, its verdict, a duplicate's wait.
 */


#ifndef _NGX_HTTP_IDEM_DEDUPE_H_INCLUDED_
#define _NGX_HTTP_IDEM_DEDUPE_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_int_t ngx_http_idem_dedupe_expires(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_loc_conf_t *ilcf);
ngx_int_t ngx_http_idem_dedupe(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
ngx_int_t ngx_http_idem_dedupe_digest_begin(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
void ngx_http_idem_dedupe_body_filter(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_chain_t *in);


#endif /* _NGX_HTTP_IDEM_DEDUPE_H_INCLUDED_ */
