
/*
 * Spans exported over OTLP/HTTP: a server span per call, a client span
 * per attempt, queued per worker and sent in batches.
 */


#ifndef _NGX_HTTP_IDEM_OTEL_H_INCLUDED_
#define _NGX_HTTP_IDEM_OTEL_H_INCLUDED_


#include "ngx_http_idem_common.h"


char *ngx_http_idem_otel_endpoint(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
void ngx_http_idem_otel_create_conf(ngx_http_idem_otel_conf_t *oc);
char *ngx_http_idem_otel_init_conf(ngx_conf_t *cf,
    ngx_http_idem_main_conf_t *imcf);
ngx_int_t ngx_http_idem_otel_init_process(ngx_cycle_t *cycle);
void ngx_http_idem_otel_start(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_inbound_t *in);
void ngx_http_idem_otel_end(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEM_OTEL_H_INCLUDED_ */
