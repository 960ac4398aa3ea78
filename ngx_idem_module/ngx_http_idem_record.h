
/*
 * Call records: each execution and its attempts, written to the store.
 */


#ifndef _NGX_HTTP_IDEM_RECORD_H_INCLUDED_
#define _NGX_HTTP_IDEM_RECORD_H_INCLUDED_


#include "ngx_http_idem_common.h"


/*
 * scope_digest=none (idem_status ... scope_digest=on): the call recorded
 * without a scope, also where the location has one
 */
#define NGX_HTTP_IDEM_SCOPE_NONE  "none"


ngx_int_t ngx_http_idem_record_key(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_str_t *id, ngx_str_t *key);
ngx_int_t ngx_http_idem_record_key_digest(ngx_http_request_t *r,
    ngx_str_t *digest, ngx_str_t *id, ngx_str_t *key);
ngx_int_t ngx_http_idem_record_arrive(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_store_known_pt known, void *data);
ngx_int_t ngx_http_idem_record_start(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
ngx_int_t ngx_http_idem_attempt_start(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
void ngx_http_idem_attempt_end(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_peer_connection_t *pc);
ngx_int_t ngx_http_idem_record_finish(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
ngx_str_t *ngx_http_idem_state_name(ngx_uint_t state);
ngx_str_t *ngx_http_idem_outcome_name(ngx_http_request_t *r,
    ngx_http_idem_attempt_t *a);
ngx_uint_t ngx_http_idem_sent(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t *unanswered);
ngx_int_t ngx_http_idem_record_prepare(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
void ngx_http_idem_record_unstart(ngx_http_idem_ctx_t *ctx);
u_char *ngx_http_idem_record_arrival(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, u_char *p, u_char state);
size_t ngx_http_idem_record_arrival_len(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
ngx_uint_t ngx_http_idem_current_state(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
char *ngx_http_idem_record_max_executions(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
void ngx_http_idem_record_expiring(ngx_http_idem_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEM_RECORD_H_INCLUDED_ */
