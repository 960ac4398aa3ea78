
/*
 * Retry storms: a retry budget and a circuit breaker per upstream, kept in
 * shared memory so that all workers see one budget and one breaker.
 */


#ifndef _NGX_HTTP_IDEM_STORM_H_INCLUDED_
#define _NGX_HTTP_IDEM_STORM_H_INCLUDED_


#include "ngx_http_idem_common.h"


char *ngx_http_idem_storm_set_budget(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_storm_set_breaker(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
void ngx_http_idem_storm_create_conf(ngx_http_idem_storm_conf_t *conf);
char *ngx_http_idem_storm_merge_conf(ngx_conf_t *cf,
    ngx_http_idem_storm_conf_t *conf, ngx_http_idem_storm_conf_t *prev);
ngx_int_t ngx_http_idem_storm_init(ngx_conf_t *cf);

size_t ngx_http_idem_storm_metrics_len(ngx_http_request_t *r);
u_char *ngx_http_idem_storm_metrics(ngx_http_request_t *r, u_char *p);


/* ngx_http_idem_storm.c */
ngx_int_t ngx_http_idem_storm_admit(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_http_upstream_srv_conf_t *us);
void ngx_http_idem_storm_attempt(ngx_http_idem_ctx_t *ctx);
ngx_uint_t ngx_http_idem_storm_retry(ngx_http_idem_ctx_t *ctx);
void ngx_http_idem_storm_finish(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEM_STORM_H_INCLUDED_ */
