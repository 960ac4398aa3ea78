
/*
 * Headers: what the client sent, the upstream gets, the client gets.
 */


#ifndef _NGX_HTTP_IDEM_HEADERS_H_INCLUDED_
#define _NGX_HTTP_IDEM_HEADERS_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_int_t ngx_http_idem_header_init(ngx_pool_t *pool,
    ngx_http_idem_header_t *h, ngx_str_t *name);
ngx_int_t ngx_http_idem_header_name_valid(ngx_str_t *name);
ngx_int_t ngx_http_idem_scan_request(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in);
ngx_int_t ngx_http_idem_drop_owned(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in);
ngx_int_t ngx_http_idem_inject(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx);
ngx_int_t ngx_http_idem_set_attempt_headers(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t grpc);
ngx_int_t ngx_http_idem_set_response_headers(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEM_HEADERS_H_INCLUDED_ */
