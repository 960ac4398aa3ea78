
/*
 * The call id from a variable or a JSON body field: its directives, the
 * body read for it, the value found.
 */


#ifndef _NGX_HTTP_IDEM_CALL_ID_SOURCE_H_INCLUDED_
#define _NGX_HTTP_IDEM_CALL_ID_SOURCE_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_str_t *ngx_http_idem_source_name(ngx_uint_t source);
ngx_int_t ngx_http_idem_source_value(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_inbound_t *in);
ngx_int_t ngx_http_idem_source_read_body(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_http_client_body_handler_pt handler);
void ngx_http_idem_source_body_filter(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_chain_t *in);
char *ngx_http_idem_set_call_id_from(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_call_id_json(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_source_merge(ngx_conf_t *cf,
    ngx_http_idem_loc_conf_t *conf, ngx_http_idem_loc_conf_t *prev);


#endif /* _NGX_HTTP_IDEM_CALL_ID_SOURCE_H_INCLUDED_ */
