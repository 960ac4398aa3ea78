
/*
 * The retry storm zone's insides, shared by storm_conf.c (directives),
 * storm_zone.c (the shared memory and metrics) and storm.c (the counts).
 */


#ifndef _NGX_HTTP_IDEM_STORM_ZONE_H_INCLUDED_
#define _NGX_HTTP_IDEM_STORM_ZONE_H_INCLUDED_


#include "ngx_http_idem_common.h"


#define NGX_HTTP_IDEM_STORM_ZONE_NAME  "idem_storm"


typedef struct {
    uint32_t                      tick;
    uint32_t                      calls;      /* first attempts */
    uint32_t                      retries;
    uint32_t                      judged;     /* finished, for the breaker */
    uint32_t                      failed;
} ngx_http_idem_storm_bucket_t;


/*
 * A node is never given back to the slab: freed, it goes to the zone's
 * list of free nodes, serial 0, so that a worker's stale pointer to it
 * always points at a node (storm_zone.c).
 */
struct ngx_http_idem_storm_node_s {
    ngx_queue_t                   queue;      /* in "nodes" or in "free" */
    uint64_t                      serial;     /* 0: free */
    ngx_uint_t                    named;      /* the sweep that kept it */

    ngx_uint_t                    state;
    ngx_msec_t                    open_until;
    ngx_msec_t                    half_open_at;
    ngx_uint_t                    probes_out;
    ngx_uint_t                    probes_ok;
    uint32_t                      since;      /* the breaker counts from */

    uint64_t                      budget_exhausted;
    uint64_t                      breaker_rejected;

    ngx_http_idem_storm_bucket_t  buckets[NGX_HTTP_IDEM_STORM_BUCKETS];

    size_t                        len;
    u_char                       *name;       /* a slab chunk of its own */
};


typedef struct {
    ngx_queue_t                   nodes;
    ngx_queue_t                   free;       /* freed nodes, kept as nodes */
    uint64_t                      serials;    /* the last one handed out */
    ngx_uint_t                    sweeps;     /* configurations loaded */
} ngx_http_idem_storm_shctx_t;


/* one upstream of this configuration */
typedef struct {
    ngx_http_upstream_srv_conf_t *us;
    ngx_str_t                     name;
    ngx_http_idem_storm_node_t   *node;       /* NULL: no room in the zone */
    uint64_t                      serial;     /* node's, when it was found */
} ngx_http_idem_storm_upstream_t;


/* the zone's data, one per configuration */
typedef struct {
    ngx_http_idem_storm_shctx_t      *sh;
    ngx_slab_pool_t                  *shpool;
    ngx_array_t                       upstreams;  /* in umcf's order */
    ngx_http_idem_storm_upstream_t  **sorted;     /* the same, by "us" */
} ngx_http_idem_storm_zone_t;


typedef struct {
    uint64_t                      calls;
    uint64_t                      retries;
    uint64_t                      judged;
    uint64_t                      failed;
} ngx_http_idem_storm_sums_t;


ngx_shm_zone_t *ngx_http_idem_storm_zone(ngx_conf_t *cf, ngx_uint_t create);
ngx_http_idem_storm_upstream_t *ngx_http_idem_storm_find(
    ngx_http_idem_storm_zone_t *zone, ngx_http_upstream_srv_conf_t *us);
ngx_uint_t ngx_http_idem_storm_state(ngx_http_idem_storm_node_t *node);

/* the node is still the one "serial" was found with: no reload freed it */
#define ngx_http_idem_storm_live(n, s)  ((n)->serial == (s))


#endif /* _NGX_HTTP_IDEM_STORM_ZONE_H_INCLUDED_ */
