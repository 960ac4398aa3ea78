
/*
 * The record store on Redis: asynchronous hiredis connections ("nodes")
 * of one worker process, driven by nginx's event loop
 * (ngx_http_idem_redis_adapter.c).  One Redis is one node; with Sentinel
 * the node is the master the sentinels name
 * (ngx_http_idem_redis_sentinel.c); in a cluster there is a node per
 * master and each command goes to its key's slot
 * (ngx_http_idem_redis_cluster.c).
 *
 * A node is down, connecting or up; commands are sent when it is up,
 * held in order (each within its own timeout, a bounded number and size)
 * while it is not, and never more than max_pending at a time in the whole
 * store (hiredis' output buffer has no bound of its own).  On connect,
 * AUTH and SELECT are pipelined ahead of anything else, then what was
 * held.  A lost or failed connection is tried again after 100 ms,
 * doubling up to 5 s, on a cancelable timer; at once, then every 100 ms,
 * while commands are held.
 *
 * While commands are outstanding or held a non-cancelable timer is armed:
 * a worker that is shutting down (reload, QUIT) stays, and connects
 * again, until their replies came, or gives up: one timeout after
 * worker_shutdown_timeout where it is set, else after five times the
 * timeout.
 *
 * What requests run into (drops, error replies, read timeouts, replies
 * lost with the connection) is counted and reported in one error line a
 * second at most; connection errors are logged once, then once a second.
 *
 * This file starts and stops the store and queues writes; the directive
 * is parsed in redis_conf.c, connections live in redis_node.c, commands
 * that wait for a reply in redis_op.c, counts and reports in
 * redis_stats.c, and the store's operations (what ngx_http_idem_store.h
 * offers) become Redis commands in redis_record.c.
 */



#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis_common.h"
#include "ngx_http_idem_redis_adapter.h"


static void ngx_http_idem_redis_pending_handler(ngx_event_t *ev);


ngx_http_idem_redis_t  ngx_http_idem_redis;


ngx_int_t
ngx_http_idem_store_init_process(ngx_cycle_t *cycle,
    ngx_http_idem_store_conf_t *conf)
{
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    if (conf == NULL || conf->addr.data == NULL) {
        return NGX_OK;
    }

    /* not in the cache manager and loader */

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    rd = &ngx_http_idem_redis;

    if (rd->started) {
        return NGX_OK;
    }

    ngx_memzero(rd, sizeof(ngx_http_idem_redis_t));

    rd->started = 1;
    rd->conf = conf;
    rd->log = cycle->log;
    rd->name = conf->addr;

    /* cancelable only while nothing is outstanding */

    rd->pending_ev.handler = ngx_http_idem_redis_pending_handler;
    rd->pending_ev.data = rd;
    rd->pending_ev.log = cycle->log;
    rd->pending_ev.cancelable = 1;

    rd->report_ev.handler = ngx_http_idem_redis_report_handler;
    rd->report_ev.data = rd;
    rd->report_ev.log = cycle->log;
    rd->report_ev.cancelable = 1;

    ngx_queue_init(&rd->parked);

    rd->parked_ev.handler = ngx_http_idem_redis_unpark;
    rd->parked_ev.data = rd;
    rd->parked_ev.log = cycle->log;

    /* waiters woken by their owner's final write, when some route waits */

    if (ngx_http_idem_redis_subscribe_init(rd) != NGX_OK) {
        return NGX_ERROR;
    }

    switch (conf->mode) {

    case NGX_HTTP_IDEM_STORE_CLUSTER:
        return ngx_http_idem_redis_cluster_init(rd, cycle);

    case NGX_HTTP_IDEM_STORE_SENTINEL:
        return ngx_http_idem_redis_sentinel_init(rd, cycle);

    default:
        break;
    }

    node = ngx_http_idem_redis_node_create(rd, NGX_HTTP_IDEM_REDIS_DATA);
    if (node == NULL) {
        return NGX_ERROR;
    }

    if (conf->unix_path.len == 0) {
        ngx_http_idem_redis_node_set_addr(node, conf->host.data,
                                          conf->host.len, conf->port);
    }

    /* messages name it as written */

    node->name = conf->addr;
    node->unix_path = conf->unix_path;

    if (conf->resolve) {
        node->resolve = conf->host;
    }
    node->auth = &conf->auth;
    node->db = conf->db;

    rd->node = node;

    ngx_http_idem_redis_node_connect(node);

    return NGX_OK;
}


/*
 * Called from the worker's exit, never from inside hiredis: outstanding
 * commands are given up (their reads are not answered any more, the
 * process is going away) and every op is freed.
 */

void
ngx_http_idem_store_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                   i;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *durable, *next;

    rd = &ngx_http_idem_redis;

    if (!rd->started || rd->closing) {
        return;
    }

    rd->closing = 1;

    if (rd->pending_ev.timer_set) {
        ngx_del_timer(&rd->pending_ev);
    }

    if (rd->report_ev.timer_set) {
        ngx_del_timer(&rd->report_ev);
    }

    ngx_http_idem_redis_report(rd);

    ngx_http_idem_redis_subscribe_exit(rd);

    if (rd->cluster) {
        ngx_http_idem_redis_cluster_exit(rd);
        ngx_http_idem_redis_parked_free(rd);
    }

    /* a sentinel's connection is one of the nodes */

    for (i = 0; i < rd->nnodes; i++) {
        ngx_http_idem_redis_node_close(rd->nodes[i]);
    }

    /* every callback has run: nothing refers to the nodes any more */

    for (i = 0; i < rd->nnodes; i++) {
        ngx_http_idem_redis_op_held_free(rd->nodes[i], 0);

        for (durable = rd->nodes[i]->durable; durable; durable = next) {
            next = durable->next;
            ngx_http_idem_redis_op_held_free(durable, 0);
            ngx_free(durable);
        }

        ngx_free(rd->nodes[i]);
    }

    rd->nnodes = 0;
    rd->node = NULL;
}


/*
 * A write, fire and forget.  Writes of one turn sit side by side in
 * hiredis' buffer: they leave in one write and Redis runs them in order.
 * In a cluster each is an op of its own, kept for a redirect; so is one
 * with an "upgrade" script, kept for a WRONGTYPE (redis_op.c), and one
 * that its node holds until it is up (redis_node.c).
 */

ngx_int_t
ngx_http_idem_redis_write(ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_idem_redis_script_t *upgrade)
{
    size_t                       lens_buf[NGX_HTTP_IDEM_REDIS_ARGS], *lens;
    ngx_int_t                    rc;
    ngx_uint_t                   i;
    const char                  *args_buf[NGX_HTTP_IDEM_REDIS_ARGS], **args;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_store_op_t    *op;
    ngx_http_idem_redis_node_t  *node;

    rd = &ngx_http_idem_redis;

    if (!rd->started || rd->closing) {
        rd->stats.dropped++;
        return NGX_DECLINED;
    }

    node = rd->node;

    if (rd->cluster || upgrade || !ngx_http_idem_redis_node_takes(node)) {
        op = ngx_http_idem_redis_op_create(rd, NULL, argc, argv, 0);
        if (op == NULL) {
            return NGX_DECLINED;
        }

        op->upgrade = upgrade;

        if (ngx_http_idem_redis_op_send(rd, op) != NGX_OK) {
            ngx_http_idem_redis_op_free(op);
            return NGX_DECLINED;
        }

        return NGX_OK;
    }

    if (ngx_http_idem_redis_accept(rd, node, 1) != NGX_OK) {
        return NGX_DECLINED;
    }

    args = ngx_http_idem_redis_argv(rd, argc, args_buf, lens_buf, &lens);
    if (args == NULL) {
        rd->stats.dropped++;
        return NGX_DECLINED;
    }

    for (i = 0; i < argc; i++) {
        args[i] = (const char *) argv[i].data;
        lens[i] = argv[i].len;
    }

    /* a record's write whose first command it is: its count, as privdata */

    rc = ngx_http_idem_redis_node_command(node, ngx_http_idem_redis_written,
                                          (void *) rd->write_dropped, argc,
                                          args, lens, 0);

    if (args != args_buf) {
        ngx_free(args);
    }

    if (rc != NGX_OK) {
        return ngx_http_idem_redis_drop(rd, &rd->down);
    }

    rd->write_dropped = NULL;

    return NGX_OK;
}


/*
 * The reads that follow may wait with the writes (lazy: a read whose
 * reply no request waits for).
 */

void
ngx_http_idem_redis_lazy(ngx_uint_t lazy)
{
    ngx_http_idem_redis.lazy = lazy ? 1 : 0;
}


/*
 * The reads that follow are durable claims (for so many replicas, wait:
 * their WAIT's timeout, 0: the others): they go on the nodes' connections
 * for that kind of claim.
 */

void
ngx_http_idem_redis_durable(ngx_uint_t replicas, ngx_msec_t wait)
{
    ngx_http_idem_redis.durable = wait;
    ngx_http_idem_redis.replicas = wait ? replicas : 0;
}


/*
 * Room for n commands more: a record's write is all of its commands or
 * none (a record must not stay without its expiry).
 */

ngx_int_t
ngx_http_idem_redis_room(ngx_uint_t n)
{
    ngx_http_idem_redis_t  *rd;

    rd = &ngx_http_idem_redis;

    if (!rd->started || rd->closing) {
        rd->stats.dropped++;
        return NGX_DECLINED;
    }

    if (rd->cluster == NULL) {
        return ngx_http_idem_redis_accept(rd, rd->node, n);
    }

    if (rd->stats.pending + n > rd->conf->max_pending) {
        return ngx_http_idem_redis_drop(rd, &rd->full);
    }

    return NGX_OK;
}


/*
 * The answer to a write: only an error matters.  privdata: the counter of
 * the record's write it carries, which an error or no answer loses.
 */

void
ngx_http_idem_redis_written(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply *reply = r;

    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    node = ac->data;
    rd = node->rd;

    ngx_http_idem_redis_pending_done(rd);

    if (privdata != NULL
        && (reply == NULL || reply->type == REDIS_REPLY_ERROR))
    {
        ngx_http_idem_redis_write_dropped((ngx_atomic_t *) privdata);
    }

    if (rd->closing) {
        return;
    }

    if (reply == NULL) {

        /* the connection went away: the write may or may not have run */

        rd->stats.failed++;
        rd->lost++;
        return;
    }

    if (reply->type != REDIS_REPLY_ERROR) {
        ngx_http_idem_redis_node_answered(node);
        return;
    }

    rd->stats.failed++;

    /* a primary demoted behind its name: reconnect, resolving it again */

    (void) ngx_http_idem_redis_node_readonly(node, reply);

    /* its command is not kept: Redis's words alone (a NOPERM names it) */

    ngx_http_idem_redis_error_reply(rd, NULL, 0, reply);
}

static void
ngx_http_idem_redis_pending_handler(ngx_event_t *ev)
{
    ngx_http_idem_redis_t *rd = ev->data;

    ngx_uint_t                   i;
    ngx_msec_t                   limit;
    ngx_core_conf_t             *ccf;
    ngx_http_idem_redis_node_t  *durable;

    if (rd->stats.pending == 0 || rd->closing) {
        return;
    }

    if (!ngx_exiting) {
        ngx_add_timer(ev, NGX_HTTP_IDEM_REDIS_WATCH);
        return;
    }

    if (!rd->draining) {
        rd->draining = 1;
        rd->drain_start = ngx_current_msec;

        ngx_log_error(NGX_LOG_NOTICE, rd->log, 0,
                      "idem: redis \"%V\": waiting for %ui replies "
                      "before exiting", &rd->name, rd->stats.pending);
    }

    /*
     * nginx ends the requests at worker_shutdown_timeout, and their final
     * writes get one timeout more; without it, five timeouts
     */

    ccf = (ngx_core_conf_t *) ngx_get_conf(ngx_cycle->conf_ctx,
                                           ngx_core_module);

    if (ccf != NULL && ccf->shutdown_timeout) {
        limit = ccf->shutdown_timeout + rd->conf->timeout;

    } else {
        limit = rd->conf->timeout * NGX_HTTP_IDEM_REDIS_DRAIN_TIMEOUTS;
    }

    if (ngx_current_msec - rd->drain_start < limit) {
        ngx_add_timer(ev, NGX_HTTP_IDEM_REDIS_DRAIN_CHECK);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                  "idem: redis \"%V\": gave up waiting for %ui replies "
                  "after %M ms, exiting", &rd->name,
                  rd->stats.pending, ngx_current_msec - rd->drain_start);

    rd->draining = 0;
    ev->cancelable = 1;

    ngx_http_idem_redis_free_all(rd);

    rd->lost = 0;

    /* held commands are answered now: no request waits past the drain */

    for (i = 0; i < rd->nnodes; i++) {
        ngx_http_idem_redis_op_held_free(rd->nodes[i], 1);

        for (durable = rd->nodes[i]->durable; durable; durable = durable->next)
        {
            ngx_http_idem_redis_op_held_free(durable, 1);
        }
    }
}


/*
 * For idem_metrics: the nodes commands go to, each with whether it is up.
 * A node with no address yet (the master before a sentinel named it) or
 * that stopped trying (a cluster node that served no slot a while) is
 * not one the store uses, and is left out; so are the second connections
 * of durable claims and the subscriber's, which follow their node.
 */

ngx_uint_t
ngx_http_idem_store_nodes(ngx_http_idem_store_node_t *nodes, ngx_uint_t n)
{
    ngx_uint_t                   i, k;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    rd = &ngx_http_idem_redis;

    if (!rd->started || rd->closing) {
        return 0;
    }

    k = 0;

    for (i = 0; i < rd->nnodes && k < n; i++) {
        node = rd->nodes[i];

        if (node->idle || (node->port == 0 && node->unix_path.len == 0)) {
            continue;
        }

        nodes[k].name = node->name;
        nodes[k].sentinel = (node->role == NGX_HTTP_IDEM_REDIS_SENTINEL);
        nodes[k].up = (node->state == NGX_HTTP_IDEM_REDIS_UP);
        k++;
    }

    return k;
}


/* For idem_metrics: the connects counted for each node name */

ngx_uint_t
ngx_http_idem_store_counts(ngx_http_idem_store_count_t *counts, ngx_uint_t n)
{
    ngx_uint_t                    i, k;
    ngx_http_idem_redis_t        *rd;
    ngx_http_idem_redis_count_t  *c;

    rd = &ngx_http_idem_redis;

    if (!rd->started || rd->closing) {
        return 0;
    }

    k = 0;

    for (i = 0; i < NGX_HTTP_IDEM_REDIS_COUNTS && k < n; i++) {
        c = &rd->counts[i];

        if (c->len == 0) {
            continue;
        }

        counts[k].name.data = c->name;
        counts[k].name.len = c->len;
        counts[k].sentinel = (c->role == NGX_HTTP_IDEM_REDIS_SENTINEL);
        counts[k].connects = c->connects;
        ngx_memcpy(counts[k].failures, c->failures, sizeof(c->failures));
        k++;
    }

    return k;
}
