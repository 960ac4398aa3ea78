
/*
 * The module's own error answers (problem+json, or gRPC statuses).
 */


#ifndef _NGX_HTTP_IDEM_PROBLEM_H_INCLUDED_
#define _NGX_HTTP_IDEM_PROBLEM_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_int_t ngx_http_idem_send_problem(ngx_http_request_t *r,
    ngx_http_idem_problem_t *problem, ngx_str_t *call_id);
void ngx_http_idem_problem_set(ngx_http_request_t *r,
    ngx_http_idem_problem_t *problem, ngx_http_idem_problem_e id,
    ngx_str_t *header, char *reason);
void ngx_http_idem_problem_empty_scope(ngx_http_request_t *r,
    ngx_http_idem_problem_t *problem, ngx_http_idem_loc_conf_t *ilcf,
    char *who);
void ngx_http_idem_problem_count(ngx_http_idem_problem_t *problem);
ngx_int_t ngx_http_idem_problem_replace(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_problem_t *problem);
ngx_chain_t *ngx_http_idem_problem_swap(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_chain_t *in);


#endif /* _NGX_HTTP_IDEM_PROBLEM_H_INCLUDED_ */
