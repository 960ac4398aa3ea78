
/*
 * Small helpers with no feature of their own: random bytes, time, digests,
 * a walk over a list of headers, a directive's parameters, and the one way
 * the module sends an answer it makes itself.
 */


#ifndef _NGX_HTTP_IDEM_UTIL_H_INCLUDED_
#define _NGX_HTTP_IDEM_UTIL_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/* a string is this literal, byte for byte */
#define ngx_http_idem_str_is(s, lit)                                         \
    ((s)->len == sizeof(lit) - 1                                              \
     && ngx_strncmp((s)->data, lit, sizeof(lit) - 1) == 0)


/*
 * A walk over an ngx_list_t of ngx_table_elt_t, part after part:
 *
 *     for (h = ngx_http_idem_header_first(&it, &r->headers_in.headers);
 *          h;
 *          h = ngx_http_idem_header_next(&it))
 *
 * Entries pushed to the list during the walk are visited too.
 */
typedef struct {
    ngx_list_part_t          *part;
    ngx_uint_t                i;
} ngx_http_idem_header_iter_t;


static ngx_inline ngx_table_elt_t *
ngx_http_idem_header_next(ngx_http_idem_header_iter_t *it)
{
    ngx_table_elt_t  *h;

    while (it->i >= it->part->nelts) {
        if (it->part->next == NULL) {
            return NULL;
        }

        it->part = it->part->next;
        it->i = 0;
    }

    h = it->part->elts;

    return &h[it->i++];
}


static ngx_inline ngx_table_elt_t *
ngx_http_idem_header_first(ngx_http_idem_header_iter_t *it, ngx_list_t *list)
{
    it->part = &list->part;
    it->i = 0;

    return ngx_http_idem_header_next(it);
}


void ngx_http_idem_random_bytes(u_char *dst, size_t len);
void ngx_http_idem_random_hex(u_char *dst, size_t len);
uint64_t ngx_http_idem_unix_ms(void);
ngx_int_t ngx_http_idem_sha256_hex(u_char *dst, ngx_str_t *parts,
    ngx_uint_t n);
ngx_uint_t ngx_http_idem_header_named(ngx_table_elt_t *h, ngx_str_t *name);
ngx_table_elt_t *ngx_http_idem_header_find(ngx_list_t *list, char *name,
    size_t len);
ngx_int_t ngx_http_idem_add_response_header(ngx_http_request_t *r,
    char *name, ngx_str_t *value);
ngx_int_t ngx_http_idem_conf_param(ngx_str_t *arg, ngx_str_t *name,
    ngx_str_t *value);
ngx_uint_t ngx_http_idem_conf_off(ngx_conf_t *cf);
char *ngx_http_idem_conf_invalid(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *arg);
ngx_int_t ngx_http_idem_send_response(ngx_http_request_t *r,
    ngx_uint_t status, char *content_type, ngx_str_t *body);
ngx_int_t ngx_http_idem_link_path(ngx_http_request_t *r, ngx_str_t *path);


#endif /* _NGX_HTTP_IDEM_UTIL_H_INCLUDED_ */
