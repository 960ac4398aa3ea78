
/*
 * The retry storm zone: one node per upstream, found again by name after
 * a reload, and what idem_metrics shows of it.  See storm.c for the counts.
 *
 * A reload that keeps the zone (its size is unchanged) frees the nodes
 * that neither the running configuration nor the new one names: an
 * upstream renamed in every deploy (implicit ones are named host:port)
 * never fills the zone.  The running configuration's are kept, as its
 * workers count into them until they exit.
 *
 * Workers of older configurations may still run too (a long call, no
 * worker_shutdown_timeout), holding pointers to nodes freed since.  Each
 * configuration keeps, with each node, the serial the node had when it
 * was found; a node handed out gets a new serial (a 64-bit count that
 * never comes back), a freed one serial 0, and every count first checks,
 * under the mutex, that the serials still match: a stale worker's counts
 * are lost, never another upstream's.  That check is only sound if the
 * memory it reads is still a node: freed nodes are never given back to
 * the slab (whose free lists would then be where a stale worker writes)
 * but kept on the zone's own list of free nodes, taken first by the next
 * upstream that needs one.  So the zone holds at most as many nodes as
 * were ever named at once, and renames do not fill it.  The other way,
 * freeing a node once no worker that used it is left, needs the workers
 * alive per configuration, which a worker killed by a signal never
 * reports: not chosen.
 */


#include "ngx_http_idem_storm_zone.h"
#include "ngx_http_idem_storm.h"


static ngx_int_t ngx_http_idem_storm_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static void ngx_http_idem_storm_sweep(ngx_http_idem_storm_zone_t *zone,
    ngx_http_idem_storm_zone_t *ozone, ngx_log_t *log);
static ngx_http_idem_storm_node_t *ngx_http_idem_storm_lookup(
    ngx_http_idem_storm_zone_t *zone, ngx_str_t *name);
static void ngx_http_idem_storm_node(ngx_http_idem_storm_zone_t *zone,
    ngx_http_idem_storm_upstream_t *su, ngx_log_t *log);
static int ngx_libc_cdecl ngx_http_idem_storm_cmp(const void *one,
    const void *two);
static u_char *ngx_http_idem_storm_label(u_char *p, ngx_str_t *name);


/*
 * The zone of this configuration; "create": add it (its size is known
 * once every upstream is, in ngx_http_idem_storm_init()).
 */

ngx_shm_zone_t *
ngx_http_idem_storm_zone(ngx_conf_t *cf, ngx_uint_t create)
{
    ngx_str_t                    name;
    ngx_uint_t                   i;
    ngx_list_part_t             *part;
    ngx_shm_zone_t              *shm_zone;
    ngx_http_idem_storm_zone_t  *zone;

    ngx_str_set(&name, NGX_HTTP_IDEM_STORM_ZONE_NAME);

    part = &cf->cycle->shared_memory.part;
    shm_zone = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            shm_zone = part->elts;
            i = 0;
        }

        if (shm_zone[i].tag == &ngx_http_idem_module
            && shm_zone[i].shm.name.len == name.len
            && ngx_strncmp(shm_zone[i].shm.name.data, name.data, name.len)
               == 0)
        {
            return &shm_zone[i];
        }
    }

    if (!create) {
        return NULL;
    }

    zone = ngx_pcalloc(cf->pool, sizeof(ngx_http_idem_storm_zone_t));
    if (zone == NULL) {
        return NULL;
    }

    if (ngx_array_init(&zone->upstreams, cf->pool, 4,
                       sizeof(ngx_http_idem_storm_upstream_t))
        != NGX_OK)
    {
        return NULL;
    }

    shm_zone = ngx_shared_memory_add(cf, &name, 0, &ngx_http_idem_module);
    if (shm_zone == NULL) {
        return NULL;
    }

    shm_zone->init = ngx_http_idem_storm_init_zone;
    shm_zone->data = zone;

    return shm_zone;
}


/*
 * postconfiguration: every upstream is known; each gets a node, and the
 * zone a size with room for as many again, in steps of 32 nodes (a reload
 * that adds a few upstreams keeps the zone).
 */

ngx_int_t
ngx_http_idem_storm_init(ngx_conf_t *cf)
{
    size_t                           size;
    ngx_uint_t                       i;
    ngx_shm_zone_t                  *shm_zone;
    ngx_http_idem_storm_zone_t      *zone;
    ngx_http_upstream_srv_conf_t   **uscfp;
    ngx_http_upstream_main_conf_t   *umcf;
    ngx_http_idem_storm_upstream_t  *su;

    shm_zone = ngx_http_idem_storm_zone(cf, 0);
    if (shm_zone == NULL) {
        return NGX_OK;
    }

    zone = shm_zone->data;

    umcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_upstream_module);
    uscfp = umcf->upstreams.elts;

    for (i = 0; i < umcf->upstreams.nelts; i++) {

        su = ngx_array_push(&zone->upstreams);
        if (su == NULL) {
            return NGX_ERROR;
        }

        su->us = uscfp[i];
        su->node = NULL;

        /* "backend", or "127.0.0.1:8080" for proxy_pass host:port */

        if (uscfp[i]->port == 0) {
            su->name = uscfp[i]->host;
            continue;
        }

        su->name.data = ngx_pnalloc(cf->pool,
                                    uscfp[i]->host.len + 1 + NGX_INT_T_LEN);
        if (su->name.data == NULL) {
            return NGX_ERROR;
        }

        su->name.len = ngx_sprintf(su->name.data, "%V:%ui",
                                   &uscfp[i]->host,
                                   (ngx_uint_t) uscfp[i]->port)
                       - su->name.data;
    }

    /* peer.init finds its upstream's by a binary search */

    zone->sorted = ngx_palloc(cf->pool, (zone->upstreams.nelts + 1)
                                        * sizeof(void *));
    if (zone->sorted == NULL) {
        return NGX_ERROR;
    }

    su = zone->upstreams.elts;

    for (i = 0; i < zone->upstreams.nelts; i++) {
        zone->sorted[i] = &su[i];
    }

    ngx_qsort(zone->sorted, zone->upstreams.nelts, sizeof(void *),
              ngx_http_idem_storm_cmp);

    size = ngx_align(2 * zone->upstreams.nelts + 8, 32)
           * (sizeof(ngx_http_idem_storm_node_t) + 64);

    shm_zone->shm.size = ngx_align(size + 8 * ngx_pagesize, 64 * 1024);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, cf->log, 0,
                   "idem storm: %ui upstreams, zone of %uz bytes",
                   zone->upstreams.nelts, shm_zone->shm.size);

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_storm_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_idem_storm_zone_t *ozone = data;

    ngx_uint_t                       i;
    ngx_slab_pool_t                 *shpool;
    ngx_http_idem_storm_zone_t      *zone;
    ngx_http_idem_storm_upstream_t  *su;

    zone = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    zone->shpool = shpool;

    if (ozone != NULL) {

        /* a reload: the old zone, with its nodes, is ours */

        zone->sh = ozone->sh;

    } else if (shm_zone->shm.exists) {
        zone->sh = shpool->data;

    } else {
        zone->sh = ngx_slab_alloc(shpool,
                                  sizeof(ngx_http_idem_storm_shctx_t));
        if (zone->sh == NULL) {
            return NGX_ERROR;
        }

        ngx_queue_init(&zone->sh->nodes);
        ngx_queue_init(&zone->sh->free);
        zone->sh->serials = 0;
        zone->sh->sweeps = 0;
        shpool->data = zone->sh;

        shpool->log_nomem = 0;
    }

    if (ozone != NULL) {
        ngx_http_idem_storm_sweep(zone, ozone, shm_zone->shm.log);
    }

    su = zone->upstreams.elts;

    for (i = 0; i < zone->upstreams.nelts; i++) {
        ngx_http_idem_storm_node(zone, &su[i], shm_zone->shm.log);
    }

    return NGX_OK;
}


/*
 * A reload: the nodes of the running configuration ("ozone", whose
 * workers still count) and of the new one are kept, the others freed.
 * They can only be of configurations before the running one, or of a
 * reload that failed.  A freed node stays a node, on the free list, with
 * serial 0: the workers of older configurations that still hold it count
 * nothing more into it.  The master runs this, under the zone's mutex.
 */

static void
ngx_http_idem_storm_sweep(ngx_http_idem_storm_zone_t *zone,
    ngx_http_idem_storm_zone_t *ozone, ngx_log_t *log)
{
    ngx_uint_t                       i, sweep, freed;
    ngx_queue_t                     *q, *next;
    ngx_http_idem_storm_node_t      *node;
    ngx_http_idem_storm_upstream_t  *su;

    ngx_shmtx_lock(&zone->shpool->mutex);

    sweep = ++zone->sh->sweeps;

    su = ozone->upstreams.elts;

    for (i = 0; i < ozone->upstreams.nelts; i++) {
        if (su[i].node != NULL
            && ngx_http_idem_storm_live(su[i].node, su[i].serial))
        {
            su[i].node->named = sweep;
        }
    }

    su = zone->upstreams.elts;

    for (i = 0; i < zone->upstreams.nelts; i++) {
        node = ngx_http_idem_storm_lookup(zone, &su[i].name);

        if (node != NULL) {
            node->named = sweep;
        }
    }

    freed = 0;

    for (q = ngx_queue_head(&zone->sh->nodes);
         q != ngx_queue_sentinel(&zone->sh->nodes);
         q = next)
    {
        next = ngx_queue_next(q);
        node = ngx_queue_data(q, ngx_http_idem_storm_node_t, queue);

        if (node->named == sweep) {
            continue;
        }

        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, log, 0,
                       "idem storm: upstream \"%*s\" is named no more, "
                       "its node (serial %uL) is freed",
                       node->len, node->name, node->serial);

        /*
         * only a configuration being loaded reads names: workers have
         * their own copy, so the name may go back to the slab
         */

        ngx_slab_free_locked(zone->shpool, node->name);
        node->name = NULL;
        node->len = 0;
        node->serial = 0;

        ngx_queue_remove(q);
        ngx_queue_insert_head(&zone->sh->free, q);
        freed++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, log, 0,
                   "idem storm: reload, %ui nodes freed", freed);
}


/* the node of an upstream name, if there is one; locked */

static ngx_http_idem_storm_node_t *
ngx_http_idem_storm_lookup(ngx_http_idem_storm_zone_t *zone, ngx_str_t *name)
{
    ngx_queue_t                 *q;
    ngx_http_idem_storm_node_t  *node;

    for (q = ngx_queue_head(&zone->sh->nodes);
         q != ngx_queue_sentinel(&zone->sh->nodes);
         q = ngx_queue_next(q))
    {
        node = ngx_queue_data(q, ngx_http_idem_storm_node_t, queue);

        if (node->len == name->len
            && ngx_strncmp(node->name, name->data, name->len) == 0)
        {
            return node;
        }
    }

    return NULL;
}


/*
 * The node of an upstream of this configuration, with its serial: the one
 * a previous configuration made, or a free one, or a new one.
 */

static void
ngx_http_idem_storm_node(ngx_http_idem_storm_zone_t *zone,
    ngx_http_idem_storm_upstream_t *su, ngx_log_t *log)
{
    u_char                      *name;
    ngx_queue_t                 *q;
    ngx_http_idem_storm_node_t  *node;

    ngx_shmtx_lock(&zone->shpool->mutex);

    node = ngx_http_idem_storm_lookup(zone, &su->name);

    if (node != NULL) {
        su->node = node;
        su->serial = node->serial;

        ngx_shmtx_unlock(&zone->shpool->mutex);

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, log, 0,
                       "idem storm: upstream \"%V\" keeps its node "
                       "(serial %uL)", &su->name, su->serial);
        return;
    }

    name = ngx_slab_alloc_locked(zone->shpool, ngx_max(su->name.len, 1));

    if (name == NULL) {
        node = NULL;

    } else if (!ngx_queue_empty(&zone->sh->free)) {
        q = ngx_queue_head(&zone->sh->free);
        ngx_queue_remove(q);
        node = ngx_queue_data(q, ngx_http_idem_storm_node_t, queue);

        ngx_memzero(node, sizeof(ngx_http_idem_storm_node_t));

    } else {
        node = ngx_slab_calloc_locked(zone->shpool,
                                      sizeof(ngx_http_idem_storm_node_t));
        if (node == NULL) {
            ngx_slab_free_locked(zone->shpool, name);
        }
    }

    if (node == NULL) {
        ngx_shmtx_unlock(&zone->shpool->mutex);

        su->node = NULL;

        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "idem: no room in the \"" NGX_HTTP_IDEM_STORM_ZONE_NAME
                      "\" zone for upstream \"%V\": its retry budget and "
                      "breaker are off in this configuration", &su->name);
        return;
    }

    node->serial = ++zone->sh->serials;
    node->state = NGX_HTTP_IDEM_BREAKER_CLOSED;
    node->name = name;
    node->len = su->name.len;
    ngx_memcpy(node->name, su->name.data, su->name.len);

    ngx_queue_insert_tail(&zone->sh->nodes, &node->queue);

    su->node = node;
    su->serial = node->serial;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, log, 0,
                   "idem storm: upstream \"%V\" has a new node (serial %uL)",
                   &su->name, su->serial);
}


static int ngx_libc_cdecl
ngx_http_idem_storm_cmp(const void *one, const void *two)
{
    ngx_http_idem_storm_upstream_t * const  *a = one;
    ngx_http_idem_storm_upstream_t * const  *b = two;

    if ((*a)->us == (*b)->us) {
        return 0;
    }

    return ((uintptr_t) (*a)->us < (uintptr_t) (*b)->us) ? -1 : 1;
}


ngx_http_idem_storm_upstream_t *
ngx_http_idem_storm_find(ngx_http_idem_storm_zone_t *zone,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_uint_t                        lo, hi, mid;
    ngx_http_idem_storm_upstream_t  **su;

    su = zone->sorted;
    lo = 0;
    hi = zone->upstreams.nelts;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if (su[mid]->us == us) {
            return su[mid];
        }

        if ((uintptr_t) su[mid]->us < (uintptr_t) us) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    return NULL;
}


/* the state as the next call will find it: an open past its time is half */

ngx_uint_t
ngx_http_idem_storm_state(ngx_http_idem_storm_node_t *node)
{
    if (node->state == NGX_HTTP_IDEM_BREAKER_OPEN
        && (ngx_msec_int_t) (node->open_until - ngx_current_msec) <= 0)
    {
        return NGX_HTTP_IDEM_BREAKER_HALF_OPEN;
    }

    return node->state;
}


/* idem_metrics: per upstream, the refusals and the breaker's state */

static char  ngx_http_idem_storm_help[] =
    "# HELP idem_retry_budget_exhausted_total Retries the retry budget "
    "refused.\n"
    "# TYPE idem_retry_budget_exhausted_total counter\n"
    "# HELP idem_breaker_rejected_total Calls an open breaker answered "
    "without sending them.\n"
    "# TYPE idem_breaker_rejected_total counter\n"
    "# HELP idem_breaker_state Breaker state: 0 closed, 1 open, "
    "2 half-open.\n"
    "# TYPE idem_breaker_state gauge\n";


size_t
ngx_http_idem_storm_metrics_len(ngx_http_request_t *r)
{
    size_t                           len;
    ngx_uint_t                       i;
    ngx_http_idem_loc_conf_t        *ilcf;
    ngx_http_idem_storm_zone_t      *zone;
    ngx_http_idem_storm_upstream_t  *su;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (ilcf->storm.zone == NULL) {
        return 0;
    }

    zone = ilcf->storm.zone->data;
    su = zone->upstreams.elts;
    len = sizeof(ngx_http_idem_storm_help) - 1;

    for (i = 0; i < zone->upstreams.nelts; i++) {
        len += sizeof("idem_retry_budget_exhausted_total{upstream=\"\"} \n"
                      "idem_breaker_rejected_total{upstream=\"\"} \n"
                      "idem_breaker_state{upstream=\"\"} \n")
               + 3 * (2 * su[i].name.len + NGX_INT64_LEN);
    }

    return len;
}


u_char *
ngx_http_idem_storm_metrics(ngx_http_request_t *r, u_char *p)
{
    u_char                          *name, *last;
    uint64_t                         exhausted, rejected;
    ngx_uint_t                       i, state;
    ngx_http_idem_loc_conf_t        *ilcf;
    ngx_http_idem_storm_zone_t      *zone;
    ngx_http_idem_storm_upstream_t  *su;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (ilcf->storm.zone == NULL) {
        return p;
    }

    zone = ilcf->storm.zone->data;
    su = zone->upstreams.elts;

    p = ngx_cpymem(p, ngx_http_idem_storm_help,
                   sizeof(ngx_http_idem_storm_help) - 1);

    for (i = 0; i < zone->upstreams.nelts; i++) {

        if (su[i].node == NULL) {
            continue;
        }

        ngx_shmtx_lock(&zone->shpool->mutex);

        if (!ngx_http_idem_storm_live(su[i].node, su[i].serial)) {
            /* a worker of an older configuration: a reload freed it */
            ngx_shmtx_unlock(&zone->shpool->mutex);
            continue;
        }

        exhausted = su[i].node->budget_exhausted;
        rejected = su[i].node->breaker_rejected;
        state = ngx_http_idem_storm_state(su[i].node);

        ngx_shmtx_unlock(&zone->shpool->mutex);

        name = ngx_pnalloc(r->pool, 2 * su[i].name.len + 1);
        if (name == NULL) {
            return p;
        }

        last = ngx_http_idem_storm_label(name, &su[i].name);

        p = ngx_sprintf(p, "idem_retry_budget_exhausted_total"
                        "{upstream=\"%*s\"} %uL\n"
                        "idem_breaker_rejected_total{upstream=\"%*s\"} %uL\n"
                        "idem_breaker_state{upstream=\"%*s\"} %ui\n",
                        last - name, name, exhausted,
                        last - name, name, rejected,
                        last - name, name, state);
    }

    return p;
}


/* a label value: '"', '\\' and newlines escaped, as Prometheus reads them */

static u_char *
ngx_http_idem_storm_label(u_char *p, ngx_str_t *name)
{
    ngx_uint_t  i;

    for (i = 0; i < name->len; i++) {

        if (name->data[i] == '"' || name->data[i] == '\\') {
            *p++ = '\\';

        } else if (name->data[i] == '\n') {
            *p++ = '\\';
            *p++ = 'n';
            continue;
        }

        *p++ = name->data[i];
    }

    return p;
}
