
/*
 * Deadline budgets and the timers that end a call or an attempt.
 */


#ifndef _NGX_HTTP_IDEM_DEADLINE_H_INCLUDED_
#define _NGX_HTTP_IDEM_DEADLINE_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_int_t ngx_http_idem_deadline_init(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_problem_t *problem);
ngx_msec_int_t ngx_http_idem_remaining(ngx_http_idem_ctx_t *ctx);
u_char *ngx_http_idem_grpc_timeout(u_char *p, ngx_msec_t ms);
ngx_int_t ngx_http_idem_deadline_start(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
void ngx_http_idem_arm_try_timer(ngx_http_idem_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEM_DEADLINE_H_INCLUDED_ */
