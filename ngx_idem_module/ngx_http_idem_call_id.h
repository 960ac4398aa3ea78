
/*
 * Call ids and trace ids: validated, generated, decided.
 */


#ifndef _NGX_HTTP_IDEM_CALL_ID_H_INCLUDED_
#define _NGX_HTTP_IDEM_CALL_ID_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_int_t ngx_http_idem_resolve_ids(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_problem_t *problem);
ngx_int_t ngx_http_idem_generate_call_id(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_str_t *id);
ngx_int_t ngx_http_idem_generate_trace_id(ngx_pool_t *pool, ngx_str_t *id);
ngx_int_t ngx_http_idem_check_charset(ngx_str_t *value);
ngx_int_t ngx_http_idem_parse_sf_string(ngx_str_t *value, ngx_str_t *content,
    u_char *err, size_t size);
size_t ngx_http_idem_generated_length(ngx_http_idem_loc_conf_t *ilcf,
    ngx_str_t *node_id);


#endif /* _NGX_HTTP_IDEM_CALL_ID_H_INCLUDED_ */
