
/*
 * The phase handlers of the request's sequence (ngx_http_idem_handler.c).
 */


#ifndef _NGX_HTTP_IDEM_HANDLER_H_INCLUDED_
#define _NGX_HTTP_IDEM_HANDLER_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


ngx_int_t ngx_http_idem_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_idem_precontent_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_idem_log_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_IDEM_HANDLER_H_INCLUDED_ */
