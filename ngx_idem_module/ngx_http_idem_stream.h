
/*
 * The compensation stream of UNKNOWN executions (idem_unknown_stream).
 */


#ifndef _NGX_HTTP_IDEM_STREAM_H_INCLUDED_
#define _NGX_HTTP_IDEM_STREAM_H_INCLUDED_


#include "ngx_http_idem_common.h"


char *ngx_http_idem_unknown_stream(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
void ngx_http_idem_stream_final(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t state, ngx_uint_t ok);


#endif /* _NGX_HTTP_IDEM_STREAM_H_INCLUDED_ */
