
/*
 * The timeline page: the status endpoint's answer for a person.
 */


#ifndef _NGX_HTTP_IDEM_TIMELINE_H_INCLUDED_
#define _NGX_HTTP_IDEM_TIMELINE_H_INCLUDED_


#include "ngx_http_idem_common.h"


/* a page's parts beside the record (ngx_http_idem_timeline_page) */
#define NGX_HTTP_IDEM_TIMELINE_FORM   1     /* resolve=on: the form */
#define NGX_HTTP_IDEM_TIMELINE_LIST   2     /* a link to the list */

/* ngx_http_idem_timeline_outcome(): its room beside 6x the name's */
#define NGX_HTTP_IDEM_TIMELINE_OUTCOME  80


ngx_uint_t ngx_http_idem_timeline_wanted(ngx_http_request_t *r);
ngx_int_t ngx_http_idem_timeline_page(ngx_http_request_t *r, ngx_str_t *id,
    uint64_t now, ngx_str_t *elts, ngx_uint_t n, ngx_uint_t flags,
    ngx_str_t *out);
ngx_int_t ngx_http_idem_timeline_answer(ngx_http_request_t *r, ngx_str_t *id,
    ngx_uint_t status, ngx_str_t *out);
ngx_int_t ngx_http_idem_timeline_refused(ngx_http_request_t *r,
    ngx_str_t *id, ngx_str_t *title, ngx_str_t *detail, ngx_str_t *out);
ngx_int_t ngx_http_idem_timeline_headers(ngx_http_request_t *r,
    ngx_uint_t html);
u_char *ngx_http_idem_timeline_outcome(u_char *p, ngx_str_t *outcome);


#endif /* _NGX_HTTP_IDEM_TIMELINE_H_INCLUDED_ */
