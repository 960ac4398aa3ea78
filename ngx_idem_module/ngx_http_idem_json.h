
/*
 * JSON: a string written into it (escaped, valid UTF-8); a field of a
 * JSON body, by path: the path parsed, the value found.
 */


#ifndef _NGX_HTTP_IDEM_JSON_H_INCLUDED_
#define _NGX_HTTP_IDEM_JSON_H_INCLUDED_


#include "ngx_http_idem_common.h"


/* the longest key a path step may name */
#define NGX_HTTP_IDEM_JSON_KEY_MAX       255


size_t ngx_http_idem_json_escape_len(u_char *src, size_t size);
u_char *ngx_http_idem_json_escape(u_char *dst, u_char *src, size_t size);
ngx_int_t ngx_http_idem_json_path_parse(ngx_pool_t *pool, ngx_str_t *path,
    ngx_array_t **steps, char **err);
ngx_int_t ngx_http_idem_json_extract(ngx_pool_t *pool, u_char *body,
    size_t len, ngx_array_t *steps, ngx_str_t *value, char **why);


#endif /* _NGX_HTTP_IDEM_JSON_H_INCLUDED_ */
