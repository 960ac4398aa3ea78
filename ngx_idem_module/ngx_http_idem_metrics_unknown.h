
/*
 * The UNKNOWN calls still waiting for a person, counted for idem_metrics
 * from the follow-up streams (idem_unknown_stream).
 */


#ifndef _NGX_HTTP_IDEM_METRICS_UNKNOWN_H_INCLUDED_
#define _NGX_HTTP_IDEM_METRICS_UNKNOWN_H_INCLUDED_


#include "ngx_http_idem_common.h"


/* streams shown, at most; idem_metrics' defaults and bounds */
#define NGX_HTTP_IDEM_METRICS_STREAMS      8
#define NGX_HTTP_IDEM_UNKNOWN_INTERVAL     10000
#define NGX_HTTP_IDEM_UNKNOWN_MAX          1000
#define NGX_HTTP_IDEM_UNKNOWN_MAX_LIMIT    10000


/*
 * A stream's last count, in the metrics zone.  "busy": the pid of the
 * worker reading it now, 0: none; "next": ngx_current_msec from which a
 * scrape may start the next read.  The count, its time and its name are
 * written by the reader alone, "seq" odd meanwhile.
 */
typedef struct {
    ngx_atomic_t              busy;
    ngx_atomic_t              next;
    ngx_atomic_t              seq;
    ngx_atomic_t              read_ms;      /* unix ms of its end, 0: none */
    ngx_atomic_t              unresolved;
    ngx_atomic_t              truncated;    /* unknown_max entries read */
    u_char                    len;
    u_char                    name[NGX_HTTP_IDEM_MAX_ID_LEN];
} ngx_http_idem_metrics_stream_t;


void ngx_http_idem_metrics_unknown_refresh(ngx_http_request_t *r,
    ngx_http_idem_metrics_stream_t *slots);
size_t ngx_http_idem_metrics_unknown_len(ngx_http_request_t *r);
u_char *ngx_http_idem_metrics_unknown_show(ngx_http_request_t *r, u_char *p,
    ngx_http_idem_metrics_stream_t *slots);
void ngx_http_idem_metrics_unknown_exit(ngx_http_idem_metrics_stream_t *slots);


#endif /* _NGX_HTTP_IDEM_METRICS_UNKNOWN_H_INCLUDED_ */
