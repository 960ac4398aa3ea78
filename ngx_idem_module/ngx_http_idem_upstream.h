
/*
 * Attempts: the wrapped balancer of every upstream.
 */


#ifndef _NGX_HTTP_IDEM_UPSTREAM_H_INCLUDED_
#define _NGX_HTTP_IDEM_UPSTREAM_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_int_t ngx_http_idem_upstream_init(ngx_conf_t *cf);


#endif /* _NGX_HTTP_IDEM_UPSTREAM_H_INCLUDED_ */
