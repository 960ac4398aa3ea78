
/*
 * Counters shared by all workers, and the idem_metrics handler.
 */


#ifndef _NGX_HTTP_IDEM_METRICS_H_INCLUDED_
#define _NGX_HTTP_IDEM_METRICS_H_INCLUDED_


#include "ngx_http_idem_common.h"
#include "ngx_http_idem_metrics_unknown.h"


/*
 * Counts only where some location shows the counters (idem_metrics).  The
 * counters are found through the cycle in use, never kept in a process
 * global: a reload that fails after creating a zone must not leave later
 * workers pointing into freed memory.
 */
#define ngx_http_idem_count(field)                                           \
    do {                                                                     \
        ngx_http_idem_counters_t  *counters_;                                \
                                                                             \
        counters_ = ngx_http_idem_counters();                                \
                                                                             \
        if (counters_ != NULL) {                                             \
            (void) ngx_atomic_fetch_add(&counters_->field, 1);               \
        }                                                                    \
    } while (0)


/* histograms: the bounds, in µs (ngx_http_idem_metrics.c), then +Inf */
#define NGX_HTTP_IDEM_METRICS_BUCKETS    16

/* how a waiting duplicate's wait ended (idem_dedupe_wait_seconds) */
#define NGX_HTTP_IDEM_WAITED_REPLAYED    0   /* the owner's answer */
#define NGX_HTTP_IDEM_WAITED_RAN         1   /* released: it ran itself */
#define NGX_HTTP_IDEM_WAITED_CONFLICT    2   /* 409, 422: not run */
#define NGX_HTTP_IDEM_WAITED_UNAVAILABLE 3   /* the store did not answer */
#define NGX_HTTP_IDEM_WAITED_TIMED_OUT   4   /* 409 call-in-flight */
#define NGX_HTTP_IDEM_WAITED_CLIENT_GONE 5
#define NGX_HTTP_IDEM_WAITED_N           6

/* a worker's Redis connections shown, and workers shown, at most */
#define NGX_HTTP_IDEM_METRICS_NODES      16
#define NGX_HTTP_IDEM_METRICS_WORKERS    128
#define NGX_HTTP_IDEM_METRICS_NAME_LEN   64


/* one histogram: counts per bucket (not cumulative), and the sum in µs */
typedef struct {
    ngx_atomic_t              bucket[NGX_HTTP_IDEM_METRICS_BUCKETS];
    ngx_atomic_t              sum;
} ngx_http_idem_histogram_t;


/* a Redis connection of one worker, as its worker last saw it */
typedef struct {
    u_char                    name[NGX_HTTP_IDEM_METRICS_NAME_LEN];
    u_char                    len;
    u_char                    sentinel;
    u_char                    up;
} ngx_http_idem_metrics_node_t;


/* a Redis node name's connects in one worker, since it started */
typedef struct {
    u_char                    name[NGX_HTTP_IDEM_METRICS_NAME_LEN];
    u_char                    len;
    u_char                    sentinel;
    ngx_uint_t                connects;
    ngx_uint_t                failures[NGX_HTTP_IDEM_STORE_FAILS];
} ngx_http_idem_metrics_count_t;


/*
 * What only a worker knows (its connections, its waiters), written by
 * that worker alone; "seq" is odd while it writes, so that a reader in
 * another worker sees a whole copy or reads again.  pid 0: free.
 */
typedef struct {
    ngx_atomic_t              pid;
    ngx_atomic_t              seq;
    ngx_atomic_t              waiters;
    ngx_uint_t                nnodes;
    ngx_http_idem_metrics_node_t  nodes[NGX_HTTP_IDEM_METRICS_NODES];
    ngx_uint_t                ncounts;
    ngx_http_idem_metrics_count_t  counts[NGX_HTTP_IDEM_METRICS_NODES];
} ngx_http_idem_metrics_worker_t;


/* the zone's data */
typedef struct {
    size_t                    size;       /* of this struct: its layout */
    ngx_http_idem_counters_t  counters;

    ngx_http_idem_histogram_t calls[3];   /* SUCCESS, FAILED, UNKNOWN */
    ngx_http_idem_histogram_t claims[2];  /* not durable, durable */
    ngx_http_idem_histogram_t waits[NGX_HTTP_IDEM_WAITED_N];

    ngx_http_idem_metrics_worker_t  workers[NGX_HTTP_IDEM_METRICS_WORKERS];

    /* idem_unknown_unresolved: by idem_unknown_streams' order */
    ngx_http_idem_metrics_stream_t  streams[NGX_HTTP_IDEM_METRICS_STREAMS];
} ngx_http_idem_metrics_shm_t;


char *ngx_http_idem_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
ngx_http_idem_counters_t *ngx_http_idem_counters(void);

ngx_int_t ngx_http_idem_metrics_init_process(ngx_cycle_t *cycle);
void ngx_http_idem_metrics_exit_process(ngx_cycle_t *cycle);

/* observations: a few atomic adds each, nothing without idem_metrics */
uint64_t ngx_http_idem_metrics_clock(void);
void ngx_http_idem_observe_call(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
void ngx_http_idem_observe_claim(ngx_http_idem_ctx_t *ctx);
void ngx_http_idem_observe_wait(ngx_http_idem_ctx_t *ctx, ngx_uint_t result);
ngx_uint_t ngx_http_idem_metrics_waited(ngx_http_idem_store_found_t *found);
void ngx_http_idem_metrics_waiters(ngx_uint_t n);


#endif /* _NGX_HTTP_IDEM_METRICS_H_INCLUDED_ */
