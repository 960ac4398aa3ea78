
/*
 * Retry storms: per upstream{} block (implicit upstreams by their
 * address), a retry budget and a circuit breaker, shared by all workers.
 *
 * One shared memory zone, "idem_storm", added by the first idem_retry_budget
 * or idem_breaker that is not "off", holds a node per upstream: a ring of
 * 100 ms buckets (first attempts, retries, calls judged, calls failed) over
 * the last 60 s, the breaker's state and two counters.  Each location
 * compares the sums over its own window with its own limits.  Every call
 * on an "idem on" route counts, whichever location it comes from: the
 * upstream is sick, or not, for all of them.
 *
 * A reload with as many upstreams keeps the zone: its nodes are found
 * again by upstream name, so the budget and the breaker carry on; a new
 * size gives a new zone, counted from zero.  Nodes are never freed, as
 * exiting workers may still count into them.
 */


#include "ngx_http_idem_module.h"


#define NGX_HTTP_IDEM_STORM_ZONE_NAME  "idem_storm"


typedef struct {
    uint32_t                      tick;
    uint32_t                      calls;      /* first attempts */
    uint32_t                      retries;
    uint32_t                      judged;     /* finished, for the breaker */
    uint32_t                      failed;
} ngx_http_idem_storm_bucket_t;


struct ngx_http_idem_storm_node_s {
    ngx_queue_t                   queue;

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
    u_char                        name[1];
};


typedef struct {
    ngx_queue_t                   nodes;
} ngx_http_idem_storm_shctx_t;


/* one upstream of this configuration */
typedef struct {
    ngx_http_upstream_srv_conf_t *us;
    ngx_str_t                     name;
    ngx_http_idem_storm_node_t   *node;       /* NULL: no room in the zone */
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


static ngx_shm_zone_t *ngx_http_idem_storm_zone(ngx_conf_t *cf,
    ngx_uint_t create);
static ngx_int_t ngx_http_idem_storm_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_http_idem_storm_node_t *ngx_http_idem_storm_node(
    ngx_http_idem_storm_zone_t *zone, ngx_str_t *name, ngx_log_t *log);
static int ngx_libc_cdecl ngx_http_idem_storm_cmp(const void *one,
    const void *two);
static ngx_http_idem_storm_upstream_t *ngx_http_idem_storm_find(
    ngx_http_idem_storm_zone_t *zone, ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_idem_storm_refuse(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_msec_t wait);
static ngx_int_t ngx_http_idem_storm_failed(ngx_http_idem_ctx_t *ctx);
static ngx_http_idem_storm_bucket_t *ngx_http_idem_storm_bucket(
    ngx_http_idem_storm_node_t *node);
static void ngx_http_idem_storm_sum(ngx_http_idem_storm_node_t *node,
    ngx_msec_t window, uint32_t since, ngx_http_idem_storm_sums_t *sums);
static ngx_uint_t ngx_http_idem_storm_state(ngx_http_idem_storm_node_t *node);
static u_char *ngx_http_idem_storm_label(u_char *p, ngx_str_t *name);
static ngx_int_t ngx_http_idem_storm_parse(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *value, char *name, ngx_uint_t *n,
    ngx_uint_t min, ngx_uint_t max);
static ngx_int_t ngx_http_idem_storm_parse_time(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *value, char *name, ngx_msec_t *ms,
    ngx_msec_t min, ngx_msec_t max);


/*
 * idem_retry_budget ratio=R [min=N] [window=T] | off
 */

char *
ngx_http_idem_storm_set_budget(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idem_storm_conf_t  *scf;

    u_char      *p;
    ngx_int_t    ratio;
    ngx_str_t   *value, s, v;
    ngx_uint_t   i;

    scf = (ngx_http_idem_storm_conf_t *) ((char *) conf + cmd->offset);

    if (scf->budget != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2
        && value[1].len == 3 && ngx_strncmp(value[1].data, "off", 3) == 0)
    {
        scf->budget = 0;
        return NGX_CONF_OK;
    }

    scf->budget = 1;
    scf->ratio = NGX_CONF_UNSET_UINT;
    scf->min = 10;
    scf->window = 10000;

    for (i = 1; i < cf->args->nelts; i++) {

        p = (u_char *) ngx_strchr(value[i].data, '=');
        if (p == NULL) {
            goto invalid;
        }

        s.data = value[i].data;
        s.len = p - value[i].data;
        v.data = p + 1;
        v.len = value[i].data + value[i].len - v.data;

        if (s.len == 5 && ngx_strncmp(s.data, "ratio", 5) == 0) {

            /* three decimals: "0.2" is 200 retries per 1000 calls */

            ratio = v.len ? ngx_atofp(v.data, v.len, 3) : NGX_ERROR;

            if (ratio == NGX_ERROR || ratio > 100000) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid value \"%V\" in \"%V\" "
                                   "directive, \"ratio\" must be a number "
                                   "from 0 to 100 with at most three "
                                   "decimals", &value[i], &cmd->name);
                return NGX_CONF_ERROR;
            }

            scf->ratio = ratio;

        } else if (s.len == 3 && ngx_strncmp(s.data, "min", 3) == 0) {

            if (ngx_http_idem_storm_parse(cf, cmd, &value[i], "min",
                                          &scf->min, 0, 1000000)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (s.len == 6 && ngx_strncmp(s.data, "window", 6) == 0) {

            if (ngx_http_idem_storm_parse_time(cf, cmd, &value[i], "window",
                                               &scf->window,
                                               NGX_HTTP_IDEM_STORM_TICK,
                                               NGX_HTTP_IDEM_STORM_MAX_WINDOW)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else {
            goto invalid;
        }
    }

    if (scf->ratio == NGX_CONF_UNSET_UINT) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" needs \"ratio=\" (or \"off\")",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_idem_storm_zone(cf, 1) == NULL) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" in \"%V\" directive",
                       &value[i], &cmd->name);

    return NGX_CONF_ERROR;
}


/*
 * idem_breaker [failures=P%] [min_calls=N] [window=T] [open=T] [probes=N]
 *     | off
 */

char *
ngx_http_idem_storm_set_breaker(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idem_storm_conf_t  *scf;

    u_char      *p;
    ngx_str_t   *value, s, v;
    ngx_uint_t   i;

    scf = (ngx_http_idem_storm_conf_t *) ((char *) conf + cmd->offset);

    if (scf->breaker != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2
        && value[1].len == 3 && ngx_strncmp(value[1].data, "off", 3) == 0)
    {
        scf->breaker = 0;
        return NGX_CONF_OK;
    }

    scf->breaker = 1;
    scf->failures = 50;
    scf->min_calls = 20;
    scf->breaker_window = 10000;
    scf->open = 5000;
    scf->probes = 1;

    for (i = 1; i < cf->args->nelts; i++) {

        p = (u_char *) ngx_strchr(value[i].data, '=');
        if (p == NULL) {
            goto invalid;
        }

        s.data = value[i].data;
        s.len = p - value[i].data;
        v.data = p + 1;
        v.len = value[i].data + value[i].len - v.data;

        if (s.len == 8 && ngx_strncmp(s.data, "failures", 8) == 0) {

            if (v.len && v.data[v.len - 1] == '%') {
                value[i].len--;
            }

            if (ngx_http_idem_storm_parse(cf, cmd, &value[i], "failures",
                                          &scf->failures, 1, 100)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (s.len == 9 && ngx_strncmp(s.data, "min_calls", 9) == 0) {

            if (ngx_http_idem_storm_parse(cf, cmd, &value[i], "min_calls",
                                          &scf->min_calls, 1, 1000000)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (s.len == 6 && ngx_strncmp(s.data, "probes", 6) == 0) {

            if (ngx_http_idem_storm_parse(cf, cmd, &value[i], "probes",
                                          &scf->probes, 1, 1000)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (s.len == 6 && ngx_strncmp(s.data, "window", 6) == 0) {

            if (ngx_http_idem_storm_parse_time(cf, cmd, &value[i], "window",
                                               &scf->breaker_window,
                                               NGX_HTTP_IDEM_STORM_TICK,
                                               NGX_HTTP_IDEM_STORM_MAX_WINDOW)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (s.len == 4 && ngx_strncmp(s.data, "open", 4) == 0) {

            if (ngx_http_idem_storm_parse_time(cf, cmd, &value[i], "open",
                                               &scf->open, 1,
                                               24 * 60 * 60 * 1000)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else {
            goto invalid;
        }
    }

    if (ngx_http_idem_storm_zone(cf, 1) == NULL) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" in \"%V\" directive",
                       &value[i], &cmd->name);

    return NGX_CONF_ERROR;
}


/* "name=N", N from min to max */

static ngx_int_t
ngx_http_idem_storm_parse(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *value, char *name, ngx_uint_t *n, ngx_uint_t min,
    ngx_uint_t max)
{
    size_t     len;
    ngx_int_t  v;

    len = ngx_strlen(name) + 1;

    v = ngx_atoi(value->data + len, value->len - len);

    if (v == NGX_ERROR || (ngx_uint_t) v < min || (ngx_uint_t) v > max) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "\"%s\" must be from %ui to %ui",
                           value, &cmd->name, name, min, max);
        return NGX_ERROR;
    }

    *n = v;

    return NGX_OK;
}


/* "name=T", T from min to max ms */

static ngx_int_t
ngx_http_idem_storm_parse_time(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *value, char *name, ngx_msec_t *ms, ngx_msec_t min,
    ngx_msec_t max)
{
    size_t      len;
    ngx_str_t   v;
    ngx_msec_t  t;

    len = ngx_strlen(name) + 1;

    v.data = value->data + len;
    v.len = value->len - len;

    t = ngx_parse_time(&v, 0);

    if (t == (ngx_msec_t) NGX_ERROR || t < min || t > max) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "\"%s\" must be from %Mms to %Mms",
                           value, &cmd->name, name, min, max);
        return NGX_ERROR;
    }

    *ms = t;

    return NGX_OK;
}


void
ngx_http_idem_storm_create_conf(ngx_http_idem_storm_conf_t *conf)
{
    /*
     * set by ngx_pcalloc():
     *
     *     conf->ratio = 0; ... conf->probes = 0;
     *     conf->zone = NULL;
     */

    conf->budget = NGX_CONF_UNSET;
    conf->breaker = NGX_CONF_UNSET;
}


/* each directive is one: its parameters are inherited together */

char *
ngx_http_idem_storm_merge_conf(ngx_conf_t *cf,
    ngx_http_idem_storm_conf_t *conf, ngx_http_idem_storm_conf_t *prev)
{
    if (conf->budget == NGX_CONF_UNSET) {
        conf->budget = prev->budget;
        conf->ratio = prev->ratio;
        conf->min = prev->min;
        conf->window = prev->window;
    }

    ngx_conf_merge_value(conf->budget, prev->budget, 0);

    if (conf->breaker == NGX_CONF_UNSET) {
        conf->breaker = prev->breaker;
        conf->failures = prev->failures;
        conf->min_calls = prev->min_calls;
        conf->breaker_window = prev->breaker_window;
        conf->open = prev->open;
        conf->probes = prev->probes;
    }

    ngx_conf_merge_value(conf->breaker, prev->breaker, 0);

    /* the whole http{} block is parsed by now: the zone exists, or not */

    if (conf->zone == NULL) {
        conf->zone = ngx_http_idem_storm_zone(cf, 0);
    }

    return NGX_CONF_OK;
}


/*
 * The zone of this configuration; "create": add it (its size is known
 * once every upstream is, in ngx_http_idem_storm_init()).
 */

static ngx_shm_zone_t *
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
        shpool->data = zone->sh;

        shpool->log_nomem = 0;
    }

    su = zone->upstreams.elts;

    for (i = 0; i < zone->upstreams.nelts; i++) {
        su[i].node = ngx_http_idem_storm_node(zone, &su[i].name,
                                              shm_zone->shm.log);
    }

    return NGX_OK;
}


/* the node of an upstream name: the one a previous configuration made */

static ngx_http_idem_storm_node_t *
ngx_http_idem_storm_node(ngx_http_idem_storm_zone_t *zone, ngx_str_t *name,
    ngx_log_t *log)
{
    ngx_queue_t                 *q;
    ngx_http_idem_storm_node_t  *node;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (q = ngx_queue_head(&zone->sh->nodes);
         q != ngx_queue_sentinel(&zone->sh->nodes);
         q = ngx_queue_next(q))
    {
        node = ngx_queue_data(q, ngx_http_idem_storm_node_t, queue);

        if (node->len == name->len
            && ngx_strncmp(node->name, name->data, name->len) == 0)
        {
            ngx_shmtx_unlock(&zone->shpool->mutex);
            return node;
        }
    }

    node = ngx_slab_calloc_locked(zone->shpool,
                                  sizeof(ngx_http_idem_storm_node_t)
                                  + name->len);

    if (node == NULL) {
        ngx_shmtx_unlock(&zone->shpool->mutex);

        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "idem: no room in the \"" NGX_HTTP_IDEM_STORM_ZONE_NAME
                      "\" zone for upstream \"%V\": its retry budget and "
                      "breaker are off until nginx restarts", name);
        return NULL;
    }

    node->state = NGX_HTTP_IDEM_BREAKER_CLOSED;
    node->len = name->len;
    ngx_memcpy(node->name, name->data, name->len);

    ngx_queue_insert_tail(&zone->sh->nodes, &node->queue);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return node;
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


static ngx_http_idem_storm_upstream_t *
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


/*
 * Before the first attempt (the wrapped peer.init): the call joins its
 * upstream's counts; an open breaker answers it at once.  NGX_DONE: it
 * was answered, the upstream is finished with.
 */

ngx_int_t
ngx_http_idem_storm_admit(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_msec_t                       now, wait, stale;
    ngx_uint_t                       refuse;
    ngx_http_idem_storm_ctx_t       *sctx;
    ngx_http_idem_storm_conf_t      *scf;
    ngx_http_idem_storm_node_t      *node;
    ngx_http_idem_storm_zone_t      *zone;
    ngx_http_idem_storm_upstream_t  *su;

    scf = &ctx->conf->storm;

    if (scf->zone == NULL || ctx->storm != NULL) {
        return NGX_OK;
    }

    zone = scf->zone->data;

    su = ngx_http_idem_storm_find(zone, us);
    if (su == NULL || su->node == NULL) {
        return NGX_OK;
    }

    sctx = ngx_pcalloc(r->pool, sizeof(ngx_http_idem_storm_ctx_t));
    if (sctx == NULL) {
        return NGX_ERROR;
    }

    node = su->node;
    sctx->node = node;
    sctx->name = &su->name;
    ctx->storm = sctx;

    if (!scf->breaker) {
        return NGX_OK;
    }

    now = ngx_current_msec;
    refuse = 0;
    wait = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (node->state == NGX_HTTP_IDEM_BREAKER_OPEN) {

        if ((ngx_msec_int_t) (node->open_until - now) > 0) {
            refuse = 1;
            wait = node->open_until - now;

        } else {
            node->state = NGX_HTTP_IDEM_BREAKER_HALF_OPEN;
            node->half_open_at = now;
            node->probes_out = 0;
            node->probes_ok = 0;
        }
    }

    if (node->state == NGX_HTTP_IDEM_BREAKER_HALF_OPEN && !refuse) {

        /* probes whose calls never ended (a worker gone) are given up */

        stale = ngx_max(scf->open, scf->breaker_window);

        if (node->probes_out && now - node->half_open_at >= stale) {
            node->probes_out = 0;
        }

        if (node->probes_out + node->probes_ok < scf->probes) {
            node->probes_out++;
            node->half_open_at = now;
            sctx->probe = 1;

        } else {
            refuse = 1;
        }
    }

    if (refuse) {
        node->breaker_rejected++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem storm: upstream \"%V\": the call %s",
                   sctx->name, refuse ? "is refused, the breaker is open"
                                      : (sctx->probe ? "goes as a probe"
                                                     : "goes"));

    if (!refuse) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idem: the breaker of upstream \"%V\" is open: "
                  "the call is not sent", sctx->name);

    return ngx_http_idem_storm_refuse(r, ctx, wait);
}


/*
 * 503 problem+json with Retry-After, the call not sent.  peer.init cannot
 * answer a request itself: the upstream is finished with as
 * ngx_http_upstream_finalize_request() would (nothing was connected yet),
 * and the request holds one more reference for the answer, as a content
 * handler's, while the upstream's own finalization only releases one.
 */

static ngx_int_t
ngx_http_idem_storm_refuse(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_msec_t wait)
{
    ngx_int_t                 rc;
    ngx_str_t                 value;
    ngx_http_upstream_t      *u;
    ngx_http_idem_problem_t   problem;

    ngx_http_idem_problem_set(r, &problem, NGX_HTTP_SERVICE_UNAVAILABLE,
                              "upstream-unavailable", "Upstream unavailable",
                              NULL, "the upstream's circuit breaker is "
                              "open: the call was not sent");

    value.data = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
    if (value.data == NULL) {
        return NGX_ERROR;
    }

    /* seconds until it half-opens, at least 1 */

    value.len = ngx_sprintf(value.data, "%M", ngx_max((wait + 999) / 1000, 1))
                - value.data;

    if (ngx_http_idem_add_response_header(r, "Retry-After", &value)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    u = r->upstream;

    *u->cleanup = NULL;
    u->cleanup = NULL;

#if (NGX_HTTP_CACHE)
    if (r->cache) {
        ngx_http_file_cache_free(r->cache, NULL);
    }
#endif

    r->read_event_handler = ngx_http_block_reading;

    r->main->count++;

    rc = ngx_http_idem_send_problem(r, &problem, &ctx->call_id);

    ngx_http_finalize_request(r, rc);

    return NGX_DONE;
}


/* an attempt starts: the first counts as a call, the others as retries */

void
ngx_http_idem_storm_attempt(ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_storm_ctx_t     *sctx;
    ngx_http_idem_storm_zone_t    *zone;
    ngx_http_idem_storm_bucket_t  *b;

    sctx = ctx->storm;
    if (sctx == NULL) {
        return;
    }

    zone = ctx->conf->storm.zone->data;

    ngx_shmtx_lock(&zone->shpool->mutex);

    b = ngx_http_idem_storm_bucket(sctx->node);

    if (ctx->attempt > 1) {
        b->retries++;

    } else {
        b->calls++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "idem storm: upstream \"%V\": attempt %ui counted",
                   sctx->name, ctx->attempt);
}


/*
 * May a failed attempt be retried?  Retries over the window may not
 * exceed ratio x first attempts + min per second x window.
 */

ngx_uint_t
ngx_http_idem_storm_retry(ngx_http_idem_ctx_t *ctx)
{
    uint64_t                     have, allowed;
    ngx_http_idem_attempt_t     *a;
    ngx_http_idem_storm_ctx_t   *sctx;
    ngx_http_idem_storm_conf_t  *scf;
    ngx_http_idem_storm_zone_t  *zone;
    ngx_http_idem_storm_sums_t   sums;

    sctx = ctx->storm;
    scf = &ctx->conf->storm;

    if (sctx == NULL || !scf->budget) {
        return 1;
    }

    zone = scf->zone->data;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ngx_http_idem_storm_sum(sctx->node, scf->window, 0, &sums);

    /* in thousandths: ratio is per 1000 calls, min per 1000 ms */

    have = (sums.retries + 1) * 1000;
    allowed = scf->ratio * sums.calls + (uint64_t) scf->min * scf->window;

    if (have > allowed) {
        sctx->node->budget_exhausted++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "idem storm: upstream \"%V\": %uL retries, %uL calls "
                   "in %Mms, retry %s",
                   sctx->name, sums.retries, sums.calls, scf->window,
                   have > allowed ? "refused" : "allowed");

    if (have <= allowed) {
        return 1;
    }

    ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                  "idem: the retry budget of upstream \"%V\" is spent: "
                  "no retry", sctx->name);

    if (ctx->attempts != NULL && ctx->attempts->nelts) {
        a = ctx->attempts->elts;
        a[ctx->attempts->nelts - 1].no_retry = NGX_HTTP_IDEM_NO_RETRY_BUDGET;
    }

    return 0;
}


/*
 * The call is over (log phase): its last attempt is a success or a
 * failure for the breaker, or neither (no attempt, a client gone).
 */

void
ngx_http_idem_storm_finish(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t                      failed;
    ngx_msec_t                     now;
    ngx_http_idem_storm_ctx_t     *sctx;
    ngx_http_idem_storm_conf_t    *scf;
    ngx_http_idem_storm_node_t    *node;
    ngx_http_idem_storm_zone_t    *zone;
    ngx_http_idem_storm_sums_t     sums;
    ngx_http_idem_storm_bucket_t  *b;

    sctx = ctx->storm;

    if (sctx == NULL || sctx->done) {
        return;
    }

    sctx->done = 1;

    scf = &ctx->conf->storm;
    zone = scf->zone->data;
    node = sctx->node;
    now = ngx_current_msec;

    failed = ngx_http_idem_storm_failed(ctx);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem storm: upstream \"%V\": the call %s",
                   sctx->name, failed == 1 ? "failed"
                               : (failed == 0 ? "succeeded"
                                              : "is not judged"));

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (failed != NGX_DECLINED) {
        b = ngx_http_idem_storm_bucket(node);
        b->judged++;
        b->failed += failed;
    }

    if (sctx->probe) {

        if (node->state != NGX_HTTP_IDEM_BREAKER_HALF_OPEN) {
            /* another probe decided already */

        } else if (failed == NGX_DECLINED) {
            if (node->probes_out) {
                node->probes_out--;
            }

        } else if (failed) {
            node->state = NGX_HTTP_IDEM_BREAKER_OPEN;
            node->open_until = now + scf->open;
            sctx->probe = 0;

            ngx_shmtx_unlock(&zone->shpool->mutex);

            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "idem: the breaker of upstream \"%V\" opens again "
                          "for %Mms: a probe failed", sctx->name, scf->open);
            return;

        } else {
            if (node->probes_out) {
                node->probes_out--;
            }

            if (++node->probes_ok >= scf->probes) {
                node->state = NGX_HTTP_IDEM_BREAKER_CLOSED;

                /* counted afresh: the failures before do not count */

                b = ngx_http_idem_storm_bucket(node);
                b->judged = 0;
                b->failed = 0;
                node->since = b->tick;

                ngx_shmtx_unlock(&zone->shpool->mutex);

                ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                              "idem: the breaker of upstream \"%V\" closes",
                              sctx->name);
                return;
            }
        }

    } else if (scf->breaker && failed == 1
               && node->state == NGX_HTTP_IDEM_BREAKER_CLOSED)
    {
        ngx_http_idem_storm_sum(node, scf->breaker_window, node->since,
                                &sums);

        if (sums.judged >= scf->min_calls
            && sums.failed * 100 >= scf->failures * sums.judged)
        {
            node->state = NGX_HTTP_IDEM_BREAKER_OPEN;
            node->open_until = now + scf->open;

            ngx_shmtx_unlock(&zone->shpool->mutex);

            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "idem: the breaker of upstream \"%V\" opens for "
                          "%Mms: %uL of %uL calls failed in %Mms",
                          sctx->name, scf->open, sums.failed, sums.judged,
                          scf->breaker_window);
            return;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/*
 * 1: the call's final answer is a failure that idem_retry's "on=" names;
 * 0: it is not; NGX_DECLINED: nothing to judge (no attempt ended, or the
 * client left before the answer).
 */

static ngx_int_t
ngx_http_idem_storm_failed(ngx_http_idem_ctx_t *ctx)
{
    ngx_uint_t                on, ft;
    ngx_http_idem_attempt_t  *a;

    if (ctx->attempts == NULL || ctx->attempts->nelts == 0) {
        return NGX_DECLINED;
    }

    a = ctx->attempts->elts;
    a = &a[ctx->attempts->nelts - 1];
    on = ctx->conf->retry_on;

    switch (a->outcome) {

    case NGX_HTTP_IDEM_OUTCOME_OK:
        return 0;

    case NGX_HTTP_IDEM_OUTCOME_HTTP:

        switch (a->status) {
        case NGX_HTTP_INTERNAL_SERVER_ERROR:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_500;
            break;
        case NGX_HTTP_BAD_GATEWAY:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_502;
            break;
        case NGX_HTTP_SERVICE_UNAVAILABLE:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_503;
            break;
        case NGX_HTTP_GATEWAY_TIME_OUT:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_504;
            break;
        case NGX_HTTP_TOO_MANY_REQUESTS:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_429;
            break;
        default:
            return 0;
        }

        return (on & ft) ? 1 : 0;

    case NGX_HTTP_IDEM_OUTCOME_TIMEOUT:
    case NGX_HTTP_IDEM_OUTCOME_DEADLINE:
        return (on & NGX_HTTP_UPSTREAM_FT_TIMEOUT) ? 1 : 0;

    case NGX_HTTP_IDEM_OUTCOME_CONNECT_ERROR:
    case NGX_HTTP_IDEM_OUTCOME_ERROR_AFTER_SEND:
        return (on & NGX_HTTP_UPSTREAM_FT_ERROR) ? 1 : 0;

    default:    /* a client gone, or an attempt that never ended */
        return NGX_DECLINED;
    }
}


/* the bucket of this tick, emptied if it held an older one; locked */

static ngx_http_idem_storm_bucket_t *
ngx_http_idem_storm_bucket(ngx_http_idem_storm_node_t *node)
{
    uint32_t                       tick;
    ngx_http_idem_storm_bucket_t  *b;

    tick = (uint32_t) (ngx_current_msec / NGX_HTTP_IDEM_STORM_TICK);
    b = &node->buckets[tick % NGX_HTTP_IDEM_STORM_BUCKETS];

    if (b->tick != tick) {
        ngx_memzero(b, sizeof(ngx_http_idem_storm_bucket_t));
        b->tick = tick;
    }

    return b;
}


/* the counts of the last "window" ms, from tick "since" on; locked */

static void
ngx_http_idem_storm_sum(ngx_http_idem_storm_node_t *node, ngx_msec_t window,
    uint32_t since, ngx_http_idem_storm_sums_t *sums)
{
    uint32_t                       tick, t;
    ngx_uint_t                     i, n;
    ngx_http_idem_storm_bucket_t  *b;

    ngx_memzero(sums, sizeof(ngx_http_idem_storm_sums_t));

    tick = (uint32_t) (ngx_current_msec / NGX_HTTP_IDEM_STORM_TICK);
    n = (window + NGX_HTTP_IDEM_STORM_TICK - 1) / NGX_HTTP_IDEM_STORM_TICK;

    for (i = 0; i < n; i++) {
        t = tick - i;

        if ((int32_t) (t - since) < 0) {
            break;
        }

        b = &node->buckets[t % NGX_HTTP_IDEM_STORM_BUCKETS];

        if (b->tick != t) {
            continue;
        }

        sums->calls += b->calls;
        sums->retries += b->retries;
        sums->judged += b->judged;
        sums->failed += b->failed;
    }
}


/* the state as the next call will find it: an open past its time is half */

static ngx_uint_t
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
