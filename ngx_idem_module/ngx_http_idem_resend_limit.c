
/*
 * A cap on each client's resends of call ids the gateway already knows
 * (idem_resend_limit_zone, idem_resend_limit).  nginx's limit_req and
 * limit_conn run before anyone knows that a request is a resend; this
 * runs when dedupe.c (or record.c) has learnt it, before a waiter slot is
 * taken or anything is forwarded.  First calls are never asked about.
 *
 * A zone holds a node per key: in a red-black tree by the key's CRC32,
 * and in a queue, the most recently used first, so that the oldest idle
 * nodes are reclaimed when a new key needs room.  A node counts two
 * things: the resends still running (released by the request's pool
 * cleanup, as limit_conn does, so that a worker of an older configuration
 * releases what it took in a zone a reload kept), and, when the zone has
 * a rate, the leaky bucket's excess (as limit_req, in thousandths of a
 * resend, leaked for all the time since its last resend).  A reload that
 * keeps the zone's size keeps its nodes; one that resizes it starts a new
 * zone, as nginx does with any zone, and the old workers release into the
 * old one.
 *
 * On a record-only route a request is counted before the store says
 * whether its id is known (its arrival's reply), so that resends sent at
 * once cannot all pass one look at the zone; a new id gives its count
 * back, as does a request that goes before the reply came.
 */


#include "ngx_http_idem_resend_limit.h"
#include "ngx_http_idem_ctx.h"
#include "ngx_http_idem_problem.h"
#include "ngx_http_idem_record.h"
#include "ngx_http_idem_store.h"
#include "ngx_http_idem_util.h"


/* a node idle this long, with its bucket empty, may be reclaimed */
#define NGX_HTTP_IDEM_RESEND_IDLE        60000


typedef struct {
    ngx_rbtree_node_t                 node;     /* key: the key's CRC32 */
    ngx_queue_t                       queue;
    ngx_msec_t                        last;     /* the bucket's last leak */
    ngx_uint_t                        excess;   /* thousandths of resends */
    ngx_uint_t                        running;  /* resends not finished */
    time_t                            logged;   /* the last refusal logged */
    u_short                           len;
    u_char                            counted;  /* a resend was: the next
                                                   adds a whole one */
    u_char                            data[1];
} ngx_http_idem_resend_node_t;


typedef struct {
    ngx_rbtree_t                      rbtree;
    ngx_rbtree_node_t                 sentinel;
    ngx_queue_t                       queue;    /* most recent first */
} ngx_http_idem_resend_shctx_t;


typedef struct {
    ngx_http_idem_resend_shctx_t     *sh;
    ngx_slab_pool_t                  *shpool;
    uint64_t                          rate;     /* thousandths of a resend
                                                   a minute, 0: no rate */
    ngx_http_complex_value_t          key;
    ngx_str_t                         name;
} ngx_http_idem_resend_zone_t;


struct ngx_http_idem_resend_limit_s {
    ngx_shm_zone_t                   *shm_zone;
    ngx_uint_t                        concurrent;   /* 0: no cap */
    ngx_uint_t                        burst;    /* thousandths */
    ngx_uint_t                        burst_set;
    u_char                           *file;     /* where it was written */
    ngx_uint_t                        line;
};


/* a first write's answer, for a request that may be gone by then */
typedef struct {
    ngx_http_idem_ctx_t              *ctx;      /* NULL: the request went */
} ngx_http_idem_resend_waiter_t;


/* what a counted resend gives back when its request ends */
typedef struct {
    ngx_shm_zone_t                   *shm_zone;
    ngx_http_idem_resend_node_t      *node;
    ngx_uint_t                        added;    /* to the excess */
    unsigned                          first:1;  /* the key's first count */
    unsigned                          tentative:1;  /* not known a resend:
                                                   all of it given back */
} ngx_http_idem_resend_cleanup_t;


static ngx_int_t ngx_http_idem_resend_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static void ngx_http_idem_resend_rbtree_insert(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);
static ngx_http_idem_resend_node_t *ngx_http_idem_resend_lookup(
    ngx_http_idem_resend_zone_t *zone, ngx_str_t *key, uint32_t hash);
static void ngx_http_idem_resend_expire(ngx_http_idem_resend_zone_t *zone,
    ngx_uint_t n);
static void ngx_http_idem_resend_free(ngx_http_idem_resend_zone_t *zone,
    ngx_http_idem_resend_node_t *node);
static ngx_int_t ngx_http_idem_resend_leak(ngx_http_idem_resend_zone_t *zone,
    ngx_http_idem_resend_node_t *node, ngx_msec_t now);
static void ngx_http_idem_resend_release(void *data);
static void ngx_http_idem_resend_settle(ngx_http_idem_ctx_t *ctx,
    ngx_uint_t known);
static void ngx_http_idem_resend_written(void *data, ngx_int_t rc);
static void ngx_http_idem_resend_read(void *data, ngx_int_t rc,
    ngx_http_idem_store_record_t *record);
static void ngx_http_idem_resend_cleanup(void *data);


/* the zones' tag: a zone of another use with the same name is refused */
static ngx_uint_t  ngx_http_idem_resend_tag;


/* idem_resend_limit_zone KEY zone=NAME:SIZE [rate=R/s|R/m] */

char *
ngx_http_idem_resend_limit_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    u_char                            *p;
    size_t                             len;
    ssize_t                            size;
    ngx_str_t                         *value, name, s;
    ngx_int_t                          rate, per_minute;
    ngx_uint_t                         i;
    ngx_shm_zone_t                    *shm_zone;
    ngx_http_idem_resend_zone_t       *zone;
    ngx_http_compile_complex_value_t   ccv;

    value = cf->args->elts;

    zone = ngx_pcalloc(cf->pool, sizeof(ngx_http_idem_resend_zone_t));
    if (zone == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = &zone->key;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    size = 0;
    rate = 0;
    per_minute = 60;
    ngx_str_null(&name);

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {

            name.data = value[i].data + 5;

            p = (u_char *) ngx_strchr(name.data, ':');
            size = NGX_ERROR;

            if (p != NULL) {
                name.len = p - name.data;

                s.data = p + 1;
                s.len = value[i].data + value[i].len - s.data;

                size = ngx_parse_size(&s);
            }

            if (p == NULL || name.len == 0 || size == NGX_ERROR) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid zone size \"%V\" in "
                                   "\"idem_resend_limit_zone\" directive, "
                                   "it must be \"zone=name:size\"",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }

            /* the slab pool's own pages, and room for nodes */

            if (size < (ssize_t) (8 * ngx_pagesize)) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "zone \"%V\" of \"idem_resend_limit_zone\" "
                                   "is too small: \"%V\", it must be at "
                                   "least %uzk", &name, &s,
                                   8 * ngx_pagesize / 1024);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "rate=", 5) == 0) {

            len = value[i].len;
            p = value[i].data + len - 3;

            if (len > 8 && ngx_strncmp(p, "r/s", 3) == 0) {
                per_minute = 60;
                len -= 3;

            } else if (len > 8 && ngx_strncmp(p, "r/m", 3) == 0) {
                per_minute = 1;
                len -= 3;

            } else {
                len = 0;
            }

            rate = (len > 5) ? ngx_atoi(value[i].data + 5, len - 5)
                             : NGX_ERROR;

            if (rate <= 0 || rate > 1000000) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid rate \"%V\" in "
                                   "\"idem_resend_limit_zone\" directive, "
                                   "it must be \"rate=N r/s\" or \"N r/m\" "
                                   "with N from 1 to 1000000",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\" in "
                           "\"idem_resend_limit_zone\" directive",
                           &value[i]);
        return NGX_CONF_ERROR;
    }

    if (name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_resend_limit_zone\" must have "
                           "a \"zone=name:size\" parameter");
        return NGX_CONF_ERROR;
    }

    /* a minute's: 1r/m leaks one resend in 60 s exactly, not in 62.5 */

    zone->rate = (uint64_t) rate * per_minute * 1000;
    zone->name = name;

    shm_zone = ngx_shared_memory_add(cf, &name, size,
                                     &ngx_http_idem_resend_tag);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if (shm_zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "duplicate \"idem_resend_limit_zone\" \"%V\"",
                           &name);
        return NGX_CONF_ERROR;
    }

    shm_zone->init = ngx_http_idem_resend_init_zone;
    shm_zone->data = zone;

    return NGX_CONF_OK;
}


/* idem_resend_limit zone=NAME [concurrent=N] [burst=B] | off */

char *
ngx_http_idem_resend_limit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    ngx_int_t                       n;
    ngx_str_t                      *value, s;
    ngx_uint_t                      i;
    ngx_http_idem_main_conf_t      *imcf;
    ngx_http_idem_resend_limit_t   *limit, **lp;

    if (ilcf->resend_limit != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    /* "off": an inherited limit is not applied here */

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        ilcf->resend_limit = NULL;
        return NGX_CONF_OK;
    }

    limit = ngx_pcalloc(cf->pool, sizeof(ngx_http_idem_resend_limit_t));
    if (limit == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {

            s.len = value[i].len - 5;
            s.data = value[i].data + 5;

            if (s.len == 0) {
                goto invalid;
            }

            /* the zone may come later in the file: its size is set there */

            limit->shm_zone = ngx_shared_memory_add(cf, &s, 0,
                                                    &ngx_http_idem_resend_tag);
            if (limit->shm_zone == NULL) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "concurrent=", 11) == 0) {

            n = ngx_atoi(value[i].data + 11, value[i].len - 11);
            if (n <= 0 || n > 1000000) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid value \"%V\" in "
                                   "\"idem_resend_limit\" directive, "
                                   "concurrent= must be a number from 1 "
                                   "to 1000000", &value[i]);
                return NGX_CONF_ERROR;
            }

            limit->concurrent = n;
            continue;
        }

        if (ngx_strncmp(value[i].data, "burst=", 6) == 0) {

            n = ngx_atoi(value[i].data + 6, value[i].len - 6);
            if (n < 0 || n > 1000000) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid value \"%V\" in "
                                   "\"idem_resend_limit\" directive, "
                                   "burst= must be a number from 0 to "
                                   "1000000", &value[i]);
                return NGX_CONF_ERROR;
            }

            limit->burst = n * 1000;
            limit->burst_set = 1;
            continue;
        }

        goto invalid;
    }

    if (limit->shm_zone == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_resend_limit\" must have "
                           "a \"zone=name\" parameter");
        return NGX_CONF_ERROR;
    }

    /* checked in ngx_http_idem_resend_limit_init(), once zones are known */

    limit->file = cf->conf_file->file.name.data;
    limit->line = cf->conf_file->line;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);

    if (imcf->resend_limits == NULL) {
        imcf->resend_limits = ngx_array_create(cf->pool, 4,
                                     sizeof(ngx_http_idem_resend_limit_t *));
        if (imcf->resend_limits == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    lp = ngx_array_push(imcf->resend_limits);
    if (lp == NULL) {
        return NGX_CONF_ERROR;
    }

    *lp = limit;
    ilcf->resend_limit = limit;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" in \"idem_resend_limit\" "
                       "directive", &value[i]);
    return NGX_CONF_ERROR;
}


/*
 * postconfiguration: every idem_resend_limit names a zone declared with
 * idem_resend_limit_zone, and limits something.
 */

ngx_int_t
ngx_http_idem_resend_limit_init(ngx_conf_t *cf)
{
    ngx_uint_t                      i;
    ngx_http_idem_main_conf_t      *imcf;
    ngx_http_idem_resend_zone_t    *zone;
    ngx_http_idem_resend_limit_t  **limits, *limit;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);

    if (imcf->resend_limits == NULL) {
        return NGX_OK;
    }

    limits = imcf->resend_limits->elts;

    for (i = 0; i < imcf->resend_limits->nelts; i++) {
        limit = limits[i];
        zone = limit->shm_zone->data;

        if (zone == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"idem_resend_limit\" names the unknown zone "
                          "\"%V\": no \"idem_resend_limit_zone\" declares "
                          "it in %s:%ui", &limit->shm_zone->shm.name,
                          limit->file, limit->line);
            return NGX_ERROR;
        }

        if (limit->burst_set && zone->rate == 0) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"idem_resend_limit\" has burst= but its zone "
                          "\"%V\" has no rate= in %s:%ui", &zone->name,
                          limit->file, limit->line);
            return NGX_ERROR;
        }

        if (limit->concurrent == 0 && zone->rate == 0) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"idem_resend_limit\" limits nothing: its zone "
                          "\"%V\" has no rate= and it has no concurrent= "
                          "in %s:%ui", &zone->name, limit->file,
                          limit->line);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_resend_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_idem_resend_zone_t  *ozone = data;

    size_t                        len;
    ngx_http_idem_resend_zone_t  *zone;

    zone = shm_zone->data;

    if (ozone) {

        /* a reload that kept the zone: its nodes and counts go on */

        if (zone->key.value.len != ozone->key.value.len
            || ngx_strncmp(zone->key.value.data, ozone->key.value.data,
                           zone->key.value.len)
               != 0)
        {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "idem_resend_limit_zone \"%V\" uses the \"%V\" "
                          "key while previously it used the \"%V\" key",
                          &shm_zone->shm.name, &zone->key.value,
                          &ozone->key.value);
            return NGX_ERROR;
        }

        zone->sh = ozone->sh;
        zone->shpool = ozone->shpool;

        return NGX_OK;
    }

    zone->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        zone->sh = zone->shpool->data;
        return NGX_OK;
    }

    zone->sh = ngx_slab_alloc(zone->shpool,
                              sizeof(ngx_http_idem_resend_shctx_t));
    if (zone->sh == NULL) {
        return NGX_ERROR;
    }

    zone->shpool->data = zone->sh;

    ngx_rbtree_init(&zone->sh->rbtree, &zone->sh->sentinel,
                    ngx_http_idem_resend_rbtree_insert);

    ngx_queue_init(&zone->sh->queue);

    len = sizeof(" in idem_resend_limit_zone \"\"") + shm_zone->shm.name.len;

    zone->shpool->log_ctx = ngx_slab_alloc(zone->shpool, len);
    if (zone->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(zone->shpool->log_ctx, " in idem_resend_limit_zone \"%V\"%Z",
                &shm_zone->shm.name);

    return NGX_OK;
}


/* by the key's hash, then by the key's bytes */

static void
ngx_http_idem_resend_rbtree_insert(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t            **p;
    ngx_http_idem_resend_node_t   *rn, *rnt;

    for ( ;; ) {

        if (node->key < temp->key) {
            p = &temp->left;

        } else if (node->key > temp->key) {
            p = &temp->right;

        } else { /* node->key == temp->key */

            rn = (ngx_http_idem_resend_node_t *) node;
            rnt = (ngx_http_idem_resend_node_t *) temp;

            p = (ngx_memn2cmp(rn->data, rnt->data, rn->len, rnt->len) < 0)
                ? &temp->left : &temp->right;
        }

        if (*p == sentinel) {
            break;
        }

        temp = *p;
    }

    *p = node;
    node->parent = temp;
    node->left = sentinel;
    node->right = sentinel;
    ngx_rbt_red(node);
}


/*
 * A resend of a known call id: count it, or refuse it.  NGX_OK: counted
 * (or not limited here: no limit, an empty key); NGX_BUSY: refused,
 * ctx->resend.retry_after says when to come back; NGX_ERROR.  Asked once
 * per request: a duplicate that waits asks again for its claim, not here.
 * "tentative": a record route's request whose id may yet turn out new,
 * counted before its arrival is written; NGX_BUSY then refuses nothing
 * (the record is read, and the limit asked again if the id is known), and
 * ngx_http_idem_resend_settle() keeps or gives back what was counted.
 */

ngx_int_t
ngx_http_idem_resend_check(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_uint_t tentative)
{
    size_t                           n;
    uint32_t                         hash;
    int64_t                          ms;
    ngx_int_t                        e;
    ngx_str_t                        key;
    ngx_msec_t                       now;
    ngx_uint_t                       excess, add;
    ngx_pool_cleanup_t              *cln;
    ngx_http_idem_loc_conf_t        *ilcf;
    ngx_http_idem_resend_zone_t     *zone;
    ngx_http_idem_resend_node_t     *node;
    ngx_http_idem_resend_limit_t    *limit;
    ngx_http_idem_resend_cleanup_t  *rc_data;

    if (ctx->resend.checked) {
        return ctx->resend.refused ? NGX_BUSY : NGX_OK;
    }

    ctx->resend.checked = 1;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);
    limit = ilcf->resend_limit;

    if (limit == NULL || r != r->main) {
        return NGX_OK;
    }

    zone = limit->shm_zone->data;

    if (ngx_http_complex_value(r, &zone->key, &key) != NGX_OK) {
        return NGX_ERROR;
    }

    if (key.len == 0) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem resend: \"%V\": empty key, not limited",
                       &ctx->ids.call_id);
        return NGX_OK;
    }

    if (key.len > 65535) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "idem: the key of idem_resend_limit_zone \"%V\" is "
                      "longer than 65535 bytes: not limited", &zone->name);
        return NGX_OK;
    }

    /* the cleanup first: once counted, nothing may fail before it is set */

    cln = ngx_pool_cleanup_add(r->pool,
                               sizeof(ngx_http_idem_resend_cleanup_t));
    if (cln == NULL) {
        return NGX_ERROR;
    }

    rc_data = cln->data;
    ngx_memzero(rc_data, sizeof(ngx_http_idem_resend_cleanup_t));
    cln->handler = ngx_http_idem_resend_release;

    hash = ngx_crc32_short(key.data, key.len);
    now = ngx_current_msec;

    ngx_shmtx_lock(&zone->shpool->mutex);

    node = ngx_http_idem_resend_lookup(zone, &key, hash);

    if (node == NULL) {

        /* room first: the oldest idle nodes go */

        ngx_http_idem_resend_expire(zone, 1);

        n = offsetof(ngx_http_idem_resend_node_t, data) + key.len;

        node = ngx_slab_alloc_locked(zone->shpool, n);

        if (node == NULL) {
            ngx_http_idem_resend_expire(zone, 0);
            node = ngx_slab_alloc_locked(zone->shpool, n);
        }

        if (node == NULL) {
            ngx_shmtx_unlock(&zone->shpool->mutex);

            ctx->resend.retry_after = 1;

            if (tentative) {
                ctx->resend.checked = 0;
                return NGX_BUSY;
            }

            /* as limit_req: no room to count it, so it is refused */

            ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                          "idem: no room in idem_resend_limit_zone \"%V\" "
                          "for a new key: resend of \"%V\" refused",
                          &zone->name, &ctx->ids.call_id);

            ctx->resend.refused = 1;
            return NGX_BUSY;
        }

        node->node.key = hash;
        node->len = (u_short) key.len;
        node->counted = 0;
        node->last = now;
        node->excess = 0;
        node->running = 0;
        node->logged = 0;
        ngx_memcpy(node->data, key.data, key.len);

        ngx_rbtree_insert(&zone->sh->rbtree, &node->node);

    } else {
        ngx_queue_remove(&node->queue);
    }

    ngx_queue_insert_head(&zone->sh->queue, &node->queue);

    excess = 0;
    add = 0;

    if (limit->concurrent && node->running >= limit->concurrent) {
        ctx->resend.retry_after = 1;
        goto busy;
    }

    if (zone->rate) {

        /*
         * As limit_req: the bucket leaks at the rate, a resend adds a
         * whole one, and a key's first resend finds it empty
         */

        add = node->counted ? 1000 : 0;

        e = ngx_http_idem_resend_leak(zone, node, now) + add;
        excess = (e > 0) ? (ngx_uint_t) e : 0;

        if (excess > limit->burst) {

            /*
             * Until the bucket has leaked room for one more, rounded up:
             * a resend sent after Retry-After goes on
             */

            ms = (int64_t) ((excess - limit->burst) * 60000 + zone->rate - 1)
                 / (int64_t) zone->rate;

            ctx->resend.retry_after = (time_t) ngx_max((ms + 999) / 1000, 1);
            goto busy;
        }

        node->excess = excess;
        node->last = now;
    }

    node->running++;

    rc_data->shm_zone = limit->shm_zone;
    rc_data->node = node;
    rc_data->added = add;
    rc_data->first = !node->counted;
    rc_data->tentative = tentative ? 1 : 0;

    node->counted = 1;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ctx->resend.count = rc_data;

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem resend: \"%V\" counted%s, %ui running, "
                   "excess %ui", &ctx->ids.call_id,
                   tentative ? " (if known)" : "", node->running, excess);
    return NGX_OK;

busy:

    if (tentative) {
        ngx_shmtx_unlock(&zone->shpool->mutex);

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem resend: \"%V\": at the limit, if known",
                       &ctx->ids.call_id);

        ctx->resend.checked = 0;
        return NGX_BUSY;
    }

    /* refused: one line per key and second at most in the error log */

    n = (node->logged != ngx_time());
    node->logged = ngx_time();

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ctx->resend.refused = 1;

    if (n) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "idem: resend of call \"%V\" refused by "
                      "idem_resend_limit_zone \"%V\": %s",
                      &ctx->ids.call_id, &zone->name,
                      excess ? "over its rate" : "too many running");
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem resend: \"%V\" refused, retry after %T s",
                   &ctx->ids.call_id, ctx->resend.retry_after);

    return NGX_BUSY;
}


/*
 * A record route's tentative count, once the store has said: kept for a
 * known id (a resend, forwarded now); given back whole for a new one, or
 * when the store said nothing (not limited then, as without an answer).
 */

static void
ngx_http_idem_resend_settle(ngx_http_idem_ctx_t *ctx, ngx_uint_t known)
{
    ngx_http_idem_resend_cleanup_t  *rc_data;

    rc_data = ctx->resend.count;

    if (rc_data == NULL || rc_data->node == NULL) {
        return;
    }

    if (known) {
        rc_data->tentative = 0;
        return;
    }

    ngx_http_idem_resend_release(rc_data);
}


/*
 * A resend over the limit: 429, nothing forwarded, nothing written (on a
 * dedupe route the claim script wrote nothing for a duplicate; on a
 * record route the arrival is not written), no waiter slot taken; the
 * error log had its line (one per key and second).
 */

ngx_int_t
ngx_http_idem_resend_refuse(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t                 rc;
    ngx_str_t                 value;
    ngx_http_idem_problem_t   problem;

    ctx->record.on = 0;

    ngx_http_idem_problem_set(r, &problem, NGX_HTTP_IDEM_P_TOO_MANY_RESENDS,
                              NULL, "this client resends call ids already "
                              "known faster than the gateway allows; "
                              "nothing was forwarded, the call is "
                              "untouched: retry later or ask for its "
                              "status");

    ngx_http_idem_problem_count(&problem);

    value.data = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
    if (value.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    value.len = ngx_sprintf(value.data, "%T", ctx->resend.retry_after)
                - value.data;

    if (ngx_http_idem_add_response_header(r, "Retry-After", &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_idem_send_problem(r, &problem, &ctx->ids.call_id);

    ngx_http_finalize_request(r, rc);
    return NGX_DONE;
}


/*
 * A record-only route (idem_record on, no idem_dedupe) that limits
 * resends: the call id is known when its record is there.  The record's
 * first write says so in its reply (how many of its fields were new), so
 * the arrival is written before the call is forwarded, and its reply
 * waited for: one round trip of latency, no command more.  The request
 * is counted before it writes, as if its id were known, so that resends
 * sent at once each take their own room (a new id gives it back).  A
 * client at its limit must not write: its record is read instead (a
 * read, no write), and a known id is refused.  Called in the precontent
 * phase after the record's key is settled; NGX_DECLINED: go on
 * (record_start writes nothing more for an arrival written here);
 * NGX_AGAIN: waiting; NGX_DONE: refused, answered.
 */

ngx_int_t
ngx_http_idem_resend_record(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t                       rc;
    ngx_str_t                       key;
    ngx_pool_cleanup_t             *cln;
    ngx_http_idem_loc_conf_t       *ilcf;
    ngx_http_idem_resend_zone_t    *zone;
    ngx_http_idem_resend_limit_t   *limit;
    ngx_http_idem_resend_waiter_t  *waiter;

    switch (ctx->resend.state) {

    case NGX_HTTP_IDEM_RESEND_WAIT:
        return NGX_AGAIN;

    case NGX_HTTP_IDEM_RESEND_DONE:
        return NGX_DECLINED;

    case NGX_HTTP_IDEM_RESEND_FOUND:

        r->read_event_handler = ngx_http_block_reading;
        ctx->resend.state = NGX_HTTP_IDEM_RESEND_DONE;

        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem resend: \"%V\": the store says %i (%s)",
                       &ctx->ids.call_id, ctx->resend.found,
                       ctx->resend.read ? "read" : "first write");

        if (ctx->resend.read) {

            /* at the limit: a known id is refused, a new one goes on */

            if (ctx->resend.found != NGX_OK) {
                return NGX_DECLINED;
            }

            rc = ngx_http_idem_resend_check(r, ctx, 0);

            if (rc == NGX_BUSY) {
                return ngx_http_idem_resend_refuse(r, ctx);
            }

            return (rc == NGX_OK) ? NGX_DECLINED
                                  : NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        /* written: a known id keeps its count, a new one gives it back */

        ngx_http_idem_resend_settle(ctx,
                                    ctx->resend.found == NGX_DECLINED);

        return NGX_DECLINED;

    default: /* NGX_HTTP_IDEM_RESEND_NONE */
        break;
    }

    ctx->resend.state = NGX_HTTP_IDEM_RESEND_DONE;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);
    limit = ilcf->resend_limit;

    if (limit == NULL || !ilcf->record || ilcf->dedupe || r != r->main
        || ctx->record.on || ctx->record.counted)
    {
        return NGX_DECLINED;
    }

    zone = limit->shm_zone->data;

    if (ngx_http_complex_value(r, &zone->key, &key) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (key.len == 0 || key.len > 65535) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem resend: \"%V\": empty key, not limited",
                       &ctx->ids.call_id);
        return NGX_DECLINED;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_idem_resend_cleanup;
    cln->data = ctx;

    ctx->resend.resume_ev.handler = ngx_http_idem_ctx_resume;
    ctx->resend.resume_ev.data = ctx;
    ctx->resend.resume_ev.log = r->connection->log;

    rc = ngx_http_idem_resend_check(r, ctx, 1);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_OK) {

        /* room for a resend, taken: the arrival now, its reply says */

        waiter = ngx_alloc(sizeof(ngx_http_idem_resend_waiter_t),
                           r->connection->log);
        if (waiter == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        waiter->ctx = ctx;

        rc = ngx_http_idem_record_arrive(r, ctx, ngx_http_idem_resend_written,
                                         waiter);

        if (rc != NGX_OK) {

            /* not written (the store is down): not told, not limited */

            ngx_free(waiter);
            ngx_http_idem_resend_settle(ctx, 0);
            return NGX_DECLINED;
        }

        ctx->resend.waiter = waiter;

    } else {

        /* at the limit: nothing written until the id is known new */

        ctx->resend.read = 1;
        ctx->resend.read_op = ngx_http_idem_store_read_record(
                                  &ctx->record.key, ngx_http_idem_resend_read,
                                  ctx);

        if (ctx->resend.read_op == NULL) {
            return NGX_DECLINED;
        }
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem resend: \"%V\": waits for the store (%s)",
                   &ctx->ids.call_id,
                   ctx->resend.read ? "a read, at the limit" : "its arrival");

    ctx->resend.state = NGX_HTTP_IDEM_RESEND_WAIT;

    /* a client that goes while it waits is seen (as limit_req's delay) */

    r->read_event_handler = ngx_http_test_reading;

    return NGX_AGAIN;
}


/* the arrival's reply: NGX_OK new id, NGX_DECLINED known, NGX_ERROR */

static void
ngx_http_idem_resend_written(void *data, ngx_int_t rc)
{
    ngx_http_idem_resend_waiter_t *waiter = data;

    ngx_http_idem_ctx_t  *ctx;

    ctx = waiter->ctx;
    ngx_free(waiter);

    if (ctx == NULL) {
        return;
    }

    ctx->resend.waiter = NULL;
    ctx->resend.found = rc;
    ctx->resend.state = NGX_HTTP_IDEM_RESEND_FOUND;

    ngx_post_event(&ctx->resend.resume_ev, &ngx_posted_events);
}


/* the read's reply: NGX_OK a record (known), NGX_DECLINED none */

static void
ngx_http_idem_resend_read(void *data, ngx_int_t rc,
    ngx_http_idem_store_record_t *record)
{
    ngx_http_idem_ctx_t *ctx = data;

    ctx->resend.read_op = NULL;
    ctx->resend.found = rc;
    ctx->resend.state = NGX_HTTP_IDEM_RESEND_FOUND;

    ngx_post_event(&ctx->resend.resume_ev, &ngx_posted_events);
}


/* the request goes: a reply still to come finds no request */

static void
ngx_http_idem_resend_cleanup(void *data)
{
    ngx_http_idem_ctx_t *ctx = data;

    ngx_http_idem_resend_waiter_t  *waiter;

    if (ctx->resend.resume_ev.posted) {
        ngx_delete_posted_event(&ctx->resend.resume_ev);
    }

    if (ctx->resend.read_op) {
        ngx_http_idem_store_cancel(ctx->resend.read_op);
        ctx->resend.read_op = NULL;
    }

    if (ctx->resend.waiter) {
        waiter = ctx->resend.waiter;
        waiter->ctx = NULL;
        ctx->resend.waiter = NULL;
    }
}


/*
 * The bucket's excess now, leaked for all the time since its last resend
 * (locked); below zero when it leaked more than it held: as limit_req, a
 * resend adds its 1000 to that before the bucket is clamped at empty.
 */

static ngx_int_t
ngx_http_idem_resend_leak(ngx_http_idem_resend_zone_t *zone,
    ngx_http_idem_resend_node_t *node, ngx_msec_t now)
{
    int64_t  ms, empty;

    ms = (ngx_msec_int_t) (now - node->last);

    /* another worker's clock, a little behind this one's, leaks nothing */

    if (ms < 0) {
        ms = 0;
    }

    /*
     * Past the time that empties the bucket and leaks one resend more,
     * the result is the same once clamped: it bounds the product below
     */

    empty = ((int64_t) node->excess + 1000) * 60000 / (int64_t) zone->rate
            + 1;

    if (ms > empty) {
        ms = empty;
    }

    return (ngx_int_t) node->excess
           - (ngx_int_t) ((int64_t) zone->rate * ms / 60000);
}


static ngx_http_idem_resend_node_t *
ngx_http_idem_resend_lookup(ngx_http_idem_resend_zone_t *zone,
    ngx_str_t *key, uint32_t hash)
{
    ngx_int_t                     rc;
    ngx_rbtree_node_t            *node, *sentinel;
    ngx_http_idem_resend_node_t  *rn;

    node = zone->sh->rbtree.root;
    sentinel = zone->sh->rbtree.sentinel;

    while (node != sentinel) {

        if (hash < node->key) {
            node = node->left;
            continue;
        }

        if (hash > node->key) {
            node = node->right;
            continue;
        }

        /* hash == node->key */

        rn = (ngx_http_idem_resend_node_t *) node;

        rc = ngx_memn2cmp(key->data, rn->data, key->len, (size_t) rn->len);

        if (rc == 0) {
            return rn;
        }

        node = (rc < 0) ? node->left : node->right;
    }

    return NULL;
}


/*
 * Reclaim from the least recently used end: nodes with no resend running
 * whose bucket is empty and that were idle a while; n == 0 (no room at
 * all): the first such node goes whatever its bucket holds.  A node with
 * resends running is never freed (their cleanups still point at it).
 */

static void
ngx_http_idem_resend_expire(ngx_http_idem_resend_zone_t *zone, ngx_uint_t n)
{
    ngx_msec_t                    now;
    ngx_queue_t                  *q, *prev;
    ngx_uint_t                    freed;
    ngx_msec_int_t                ms;
    ngx_http_idem_resend_node_t  *node;

    now = ngx_current_msec;
    freed = 0;

    for (q = ngx_queue_last(&zone->sh->queue);
         q != ngx_queue_sentinel(&zone->sh->queue) && freed < 2;
         q = prev)
    {
        prev = ngx_queue_prev(q);

        node = ngx_queue_data(q, ngx_http_idem_resend_node_t, queue);

        if (node->running) {
            continue;
        }

        if (n++ != 0) {
            ms = (ngx_msec_int_t) (now - node->last);

            if (ngx_abs(ms) < NGX_HTTP_IDEM_RESEND_IDLE) {
                return;
            }

            if (zone->rate
                && ngx_http_idem_resend_leak(zone, node, now) > 0)
            {
                return;
            }
        }

        ngx_http_idem_resend_free(zone, node);
        freed++;
    }
}


static void
ngx_http_idem_resend_free(ngx_http_idem_resend_zone_t *zone,
    ngx_http_idem_resend_node_t *node)
{
    ngx_queue_remove(&node->queue);
    ngx_rbtree_delete(&zone->sh->rbtree, &node->node);
    ngx_slab_free_locked(zone->shpool, node);
}


/*
 * The request that counted a resend ends: it runs no more.  The zone is
 * the one it counted in, whichever configuration is running now.  A
 * tentative count (a record route's, its id not known yet) is given back
 * whole: its request goes, or its id turned out new.
 */

static void
ngx_http_idem_resend_release(void *data)
{
    ngx_http_idem_resend_cleanup_t  *rc_data = data;

    ngx_http_idem_resend_zone_t  *zone;
    ngx_http_idem_resend_node_t  *node;

    if (rc_data->node == NULL) {
        return;
    }

    zone = rc_data->shm_zone->data;
    node = rc_data->node;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, rc_data->shm_zone->shm.log, 0,
                   "idem resend: released in \"%V\"%s",
                   &rc_data->shm_zone->shm.name,
                   rc_data->tentative ? ", its count given back" : "");

    ngx_shmtx_lock(&zone->shpool->mutex);

    node->running--;

    /* not a resend after all (or not known one): it counted nothing */

    if (rc_data->tentative) {
        node->excess -= ngx_min(node->excess, rc_data->added);

        if (rc_data->first) {
            node->counted = 0;
        }
    }

    /* with no rate, a node is only its running resends */

    if (node->running == 0 && zone->rate == 0) {
        ngx_http_idem_resend_free(zone, node);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    rc_data->node = NULL;
}
