
/*
 * gRPC calls: statuses, Trailers-Only answers, retryable statuses.
 */


#ifndef _NGX_HTTP_IDEM_GRPC_H_INCLUDED_
#define _NGX_HTTP_IDEM_GRPC_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_uint_t ngx_http_idem_grpc_request(ngx_http_request_t *r);
ngx_int_t ngx_http_idem_grpc_read_body(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
ngx_int_t ngx_http_idem_grpc_trailers_only(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t status, ngx_str_t *type,
    ngx_str_t *title, ngx_str_t *detail);
ngx_int_t ngx_http_idem_grpc_header_filter(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
ngx_int_t ngx_http_idem_grpc_status(ngx_http_request_t *r);
ngx_int_t ngx_http_idem_grpc_upstream_status(ngx_http_upstream_t *u);
ngx_uint_t ngx_http_idem_grpc_retryable(ngx_http_request_t *r,
    ngx_msec_int_t *delay);


#endif /* _NGX_HTTP_IDEM_GRPC_H_INCLUDED_ */
