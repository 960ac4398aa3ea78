
/*
 * The answer a claim's owner keeps for its duplicates, and its replay.
 */


#ifndef _NGX_HTTP_IDEM_ANSWER_H_INCLUDED_
#define _NGX_HTTP_IDEM_ANSWER_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_int_t ngx_http_idem_answer_header(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
void ngx_http_idem_answer_body(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_chain_t *in);
ngx_int_t ngx_http_idem_answer_replay(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_str_t *answer);
u_char ngx_http_idem_answer_keep(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t state, ngx_uint_t sent,
    ngx_int_t grpc, ngx_str_t *answer);


#endif /* _NGX_HTTP_IDEM_ANSWER_H_INCLUDED_ */
