
/*
 * A record read back, as JSON.
 */


#ifndef _NGX_HTTP_IDEM_RECORD_JSON_H_INCLUDED_
#define _NGX_HTTP_IDEM_RECORD_JSON_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_int_t ngx_http_idem_record_json(ngx_http_request_t *r, ngx_str_t *id,
    uint64_t now, ngx_str_t *elts, ngx_uint_t n, ngx_str_t *out);


#endif /* _NGX_HTTP_IDEM_RECORD_JSON_H_INCLUDED_ */
