
/*
 * The request's context: made once, found again after a redirect.
 */


#ifndef _NGX_HTTP_IDEM_CTX_H_INCLUDED_
#define _NGX_HTTP_IDEM_CTX_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_http_idem_ctx_t *ngx_http_idem_get_ctx(ngx_http_request_t *r);
ngx_http_idem_ctx_t *ngx_http_idem_create_ctx(ngx_http_request_t *r);
void ngx_http_idem_ctx_resume(ngx_event_t *ev);


#endif /* _NGX_HTTP_IDEM_CTX_H_INCLUDED_ */
