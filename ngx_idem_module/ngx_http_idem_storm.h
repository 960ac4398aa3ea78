
/*
 * Retry storms: a retry budget and a circuit breaker per upstream, kept in
 * shared memory so that all workers see one budget and one breaker.
 */


#ifndef _NGX_HTTP_IDEM_STORM_H_INCLUDED_
#define _NGX_HTTP_IDEM_STORM_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/* the counts are kept in buckets of 100 ms, over the last 60 s */
#define NGX_HTTP_IDEM_STORM_TICK         100
#define NGX_HTTP_IDEM_STORM_BUCKETS      600
#define NGX_HTTP_IDEM_STORM_MAX_WINDOW                                       \
    (NGX_HTTP_IDEM_STORM_TICK * NGX_HTTP_IDEM_STORM_BUCKETS)

/* breaker states, as the idem_breaker_state gauge shows them */
#define NGX_HTTP_IDEM_BREAKER_CLOSED     0
#define NGX_HTTP_IDEM_BREAKER_OPEN       1
#define NGX_HTTP_IDEM_BREAKER_HALF_OPEN  2

/* why no retry followed an attempt (its record says so) */
#define NGX_HTTP_IDEM_NO_RETRY_BUDGET    1


/* a location's idem_retry_budget and idem_breaker */
typedef struct {
    ngx_flag_t                budget;       /* NGX_CONF_UNSET: not set here */
    ngx_uint_t                ratio;        /* retries per 1000 calls */
    ngx_uint_t                min;          /* retries per second */
    ngx_msec_t                window;

    ngx_flag_t                breaker;      /* NGX_CONF_UNSET: not set here */
    ngx_uint_t                failures;     /* percent */
    ngx_uint_t                min_calls;
    ngx_msec_t                breaker_window;
    ngx_msec_t                open;
    ngx_uint_t                probes;

    ngx_shm_zone_t           *zone;         /* NULL: no directive anywhere */
} ngx_http_idem_storm_conf_t;


typedef struct ngx_http_idem_storm_node_s  ngx_http_idem_storm_node_t;


/*
 * A call's view of one upstream's budget and breaker.  A call that
 * reaches another upstream later (error_page, a named location,
 * X-Accel-Redirect) gets another one: each upstream counts its own part.
 */
typedef struct {
    ngx_http_idem_storm_node_t  *node;
    ngx_str_t                   *name;      /* the upstream's */
    ngx_http_idem_storm_conf_t  *conf;      /* the proxying location's */
    ngx_uint_t                   retry_on;  /* its idem_retry on= */
    unsigned                     probe:1;   /* let through half-open */
    unsigned                     done:1;    /* its outcome was counted */
} ngx_http_idem_storm_ctx_t;


char *ngx_http_idem_storm_set_budget(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_storm_set_breaker(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
void ngx_http_idem_storm_create_conf(ngx_http_idem_storm_conf_t *conf);
char *ngx_http_idem_storm_merge_conf(ngx_conf_t *cf,
    ngx_http_idem_storm_conf_t *conf, ngx_http_idem_storm_conf_t *prev);
ngx_int_t ngx_http_idem_storm_init(ngx_conf_t *cf);

size_t ngx_http_idem_storm_metrics_len(ngx_http_request_t *r);
u_char *ngx_http_idem_storm_metrics(ngx_http_request_t *r, u_char *p);


#endif /* _NGX_HTTP_IDEM_STORM_H_INCLUDED_ */
