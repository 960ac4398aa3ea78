
/*
 * The list of calls that need a person: an idem_status location asked
 * for without an id.
 */


#ifndef _NGX_HTTP_IDEM_CALLS_LIST_H_INCLUDED_
#define _NGX_HTTP_IDEM_CALLS_LIST_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_int_t ngx_http_idem_calls_list(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_uint_t html);


#endif /* _NGX_HTTP_IDEM_CALLS_LIST_H_INCLUDED_ */
