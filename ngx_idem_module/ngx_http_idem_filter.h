
/*
 * The module's filters (ngx_http_idem_filter.c).
 */


#ifndef _NGX_HTTP_IDEM_FILTER_H_INCLUDED_
#define _NGX_HTTP_IDEM_FILTER_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


void ngx_http_idem_filter_init(void);


#endif /* _NGX_HTTP_IDEM_FILTER_H_INCLUDED_ */
