
/*
 * idem_resend_limit_zone, idem_resend_limit: a cap on each client's
 * resends of call ids already known, counted in shared memory.
 */


#ifndef _NGX_HTTP_IDEM_RESEND_LIMIT_H_INCLUDED_
#define _NGX_HTTP_IDEM_RESEND_LIMIT_H_INCLUDED_


#include "ngx_http_idem_common.h"


char *ngx_http_idem_resend_limit_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_resend_limit(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_idem_resend_limit_init(ngx_conf_t *cf);

ngx_int_t ngx_http_idem_resend_check(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t force);
ngx_int_t ngx_http_idem_resend_refuse(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
ngx_int_t ngx_http_idem_resend_record(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEM_RESEND_LIMIT_H_INCLUDED_ */
