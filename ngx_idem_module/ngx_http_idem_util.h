
/*
 * Small helpers with no feature of their own: random bytes, time, digests,
 * and the one way the module sends an answer it makes itself.
 */


#ifndef _NGX_HTTP_IDEM_UTIL_H_INCLUDED_
#define _NGX_HTTP_IDEM_UTIL_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


void ngx_http_idem_random_bytes(u_char *dst, size_t len);
void ngx_http_idem_random_hex(u_char *dst, size_t len);
uint64_t ngx_http_idem_unix_ms(void);
ngx_int_t ngx_http_idem_sha256_hex(u_char *dst, ngx_str_t *parts,
    ngx_uint_t n);
ngx_int_t ngx_http_idem_add_response_header(ngx_http_request_t *r,
    char *name, ngx_str_t *value);
ngx_int_t ngx_http_idem_send_response(ngx_http_request_t *r,
    ngx_uint_t status, char *content_type, ngx_str_t *body);


#endif /* _NGX_HTTP_IDEM_UTIL_H_INCLUDED_ */
