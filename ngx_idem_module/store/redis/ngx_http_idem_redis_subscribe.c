
/*
 * Waiters woken by their owner's final write (idem_dedupe_wait).  An
 * owner's final write is followed, on its connection, by PUBLISH
 * <prefix>wake <key> (redis_record.c): Redis sends the message once it
 * has run the write.  Each worker holds one connection subscribed to that
 * channel, not one per waiter, and a table of this worker's waiters by
 * key: a waiter costs no command while it waits.  A message wakes the
 * key's waiters, which read the record again (their claim).  Waiters of
 * the owner's own worker are woken by the PUBLISH's reply, without
 * waiting for the message.
 *
 * One channel for the whole key prefix, the key in the message: a channel
 * per call id would cost a SUBSCRIBE and an UNSUBSCRIBE per waiter.  On
 * a Cluster the channel is not sharded: a plain PUBLISH goes to every
 * node over the cluster bus, so the one subscription, on any node that is
 * up, hears every master's final writes, and a slot that moves changes
 * nothing for it.
 *
 * A message may be lost (the subscriber reconnecting, a failover): while
 * the subscription is not confirmed, watches are refused and waiters poll
 * as they did before; one that is lost tells its waiters, which poll
 * again.  A message that comes between a waiter's read of the record and
 * its watch is remembered a moment (the keys heard lately, by hash), so
 * that the watch asks again at once.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis_common.h"
#include "ngx_http_idem_redis_adapter.h"


/* waiters by key: a power of two */
#define NGX_HTTP_IDEM_REDIS_WAKE_BUCKETS     1024

/* keys heard lately: a power of two */
#define NGX_HTTP_IDEM_REDIS_WAKE_HEARD       64

/* a key longer than this in a message is none of ours */
#define NGX_HTTP_IDEM_REDIS_WAKE_KEY_MAX     4096

/* no node to subscribe on yet: looked for again after this */
#define NGX_HTTP_IDEM_REDIS_WAKE_LOOK        100


typedef struct {
    ngx_http_idem_redis_node_t      *node;
    ngx_str_t                        channel;
    ngx_queue_t                      buckets[NGX_HTTP_IDEM_REDIS_WAKE_BUCKETS];
    ngx_uint_t                       watchers;
    ngx_event_t                      look_ev;

    uint32_t                         heard[NGX_HTTP_IDEM_REDIS_WAKE_HEARD];
    ngx_msec_t                       heard_at[NGX_HTTP_IDEM_REDIS_WAKE_HEARD];
    ngx_uint_t                       nheard;

    unsigned                         subscribed:1;
} ngx_http_idem_redis_sub_t;


static ngx_http_idem_redis_node_t *ngx_http_idem_redis_subscribe_source(
    ngx_http_idem_redis_t *rd);
static ngx_int_t ngx_http_idem_redis_subscribe_follow(
    ngx_http_idem_redis_sub_t *sub);
static void ngx_http_idem_redis_subscribe_look(ngx_event_t *ev);
static void ngx_http_idem_redis_subscribe_up(ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_subscribe_down(
    ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_subscribe_reply(redisAsyncContext *ac,
    void *r, void *privdata);
static void ngx_http_idem_redis_unwatch_all(ngx_http_idem_redis_sub_t *sub,
    ngx_uint_t tell);
static void ngx_http_idem_redis_subscribe_lost(ngx_http_idem_redis_sub_t *sub);
static void ngx_http_idem_redis_wake(ngx_str_t *key, ngx_int_t rc);
static void ngx_http_idem_redis_published(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);


static ngx_http_idem_redis_sub_t  *ngx_http_idem_redis_sub;


/* the worker starts: a subscriber when some route waits */

ngx_int_t
ngx_http_idem_redis_subscribe_init(ngx_http_idem_redis_t *rd)
{
    ngx_uint_t                  i;
    ngx_http_idem_redis_sub_t  *sub;

    if (rd->conf->wake.len == 0) {
        return NGX_OK;
    }

    sub = ngx_calloc(sizeof(ngx_http_idem_redis_sub_t), rd->log);
    if (sub == NULL) {
        return NGX_ERROR;
    }

    sub->node = ngx_http_idem_redis_node_alloc(rd, NGX_HTTP_IDEM_REDIS_DATA);
    if (sub->node == NULL) {
        ngx_free(sub);
        return NGX_ERROR;
    }

    sub->channel = rd->conf->wake;

    for (i = 0; i < NGX_HTTP_IDEM_REDIS_WAKE_BUCKETS; i++) {
        ngx_queue_init(&sub->buckets[i]);
    }

    sub->node->subscriber = 1;
    sub->node->up = ngx_http_idem_redis_subscribe_up;
    sub->node->down = ngx_http_idem_redis_subscribe_down;
    sub->node->data = sub;

    sub->look_ev.handler = ngx_http_idem_redis_subscribe_look;
    sub->look_ev.data = sub;
    sub->look_ev.log = rd->log;
    sub->look_ev.cancelable = 1;

    ngx_http_idem_redis_sub = sub;

    /* the data nodes' addresses may come later (a sentinel, a cluster) */

    ngx_add_timer(&sub->look_ev, 1);

    return NGX_OK;
}


/* the worker exits, not from inside hiredis: nobody waits any more */

void
ngx_http_idem_redis_subscribe_exit(ngx_http_idem_redis_t *rd)
{
    ngx_http_idem_redis_sub_t  *sub;

    sub = ngx_http_idem_redis_sub;

    if (sub == NULL) {
        return;
    }

    /* a watch still on points into no table any more */

    ngx_http_idem_redis_unwatch_all(sub, 0);

    if (sub->look_ev.timer_set) {
        ngx_del_timer(&sub->look_ev);
    }

    sub->subscribed = 0;

    ngx_http_idem_redis_node_close(sub->node);

    ngx_free(sub->node);
    ngx_free(sub);

    ngx_http_idem_redis_sub = NULL;
}


/*
 * Where to subscribe: the one Redis, the master a sentinel named, or on a
 * Cluster any node that is up (a PUBLISH reaches them all).
 */

static ngx_http_idem_redis_node_t *
ngx_http_idem_redis_subscribe_source(ngx_http_idem_redis_t *rd)
{
    ngx_uint_t                   i;
    ngx_http_idem_redis_node_t  *node, *known;

    if (rd->cluster == NULL) {
        node = rd->node;

        return (node != NULL && (node->port || node->unix_path.len))
               ? node : NULL;
    }

    known = NULL;

    for (i = 0; i < rd->nnodes; i++) {
        node = rd->nodes[i];

        if (node->role != NGX_HTTP_IDEM_REDIS_DATA || node->port == 0) {
            continue;
        }

        if (node->state == NGX_HTTP_IDEM_REDIS_UP) {
            return node;
        }

        if (known == NULL) {
            known = node;
        }
    }

    return known;
}


/* the subscriber takes the address of its source; NGX_DECLINED: none */

static ngx_int_t
ngx_http_idem_redis_subscribe_follow(ngx_http_idem_redis_sub_t *sub)
{
    ngx_http_idem_redis_node_t  *node, *from;

    node = sub->node;

    from = ngx_http_idem_redis_subscribe_source(node->rd);
    if (from == NULL) {
        return NGX_DECLINED;
    }

    ngx_memcpy(node->host, from->host, sizeof(node->host));
    node->port = from->port;
    node->unix_path = from->unix_path;
    node->resolve = from->resolve;
    node->valid = from->valid;
    node->auth = from->auth;
    node->db = from->db;

    if (from->name.data == from->name_buf) {
        ngx_memcpy(node->name_buf, from->name_buf, from->name.len);
        node->name.data = node->name_buf;
        node->name.len = from->name.len;

    } else {
        node->name = from->name;
    }

    return NGX_OK;
}


static void
ngx_http_idem_redis_subscribe_look(ngx_event_t *ev)
{
    ngx_http_idem_redis_sub_t *sub = ev->data;

    ngx_http_idem_redis_node_t  *node;

    node = sub->node;

    if (node->rd->closing || node->ac != NULL
        || node->reconnect_ev.timer_set)
    {
        return;
    }

    if (ngx_http_idem_redis_subscribe_follow(sub) != NGX_OK) {
        ngx_add_timer(&sub->look_ev, NGX_HTTP_IDEM_REDIS_WAKE_LOOK);
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, node->rd->log, 0,
                   "idem redis: subscribing to \"%V\" on \"%V\"",
                   &sub->channel, &node->name);

    ngx_http_idem_redis_node_connect(node);
}


/* connected: SUBSCRIBE, behind the handshake */

static void
ngx_http_idem_redis_subscribe_up(ngx_http_idem_redis_node_t *node)
{
    ngx_http_idem_redis_sub_t *sub = node->data;

    size_t       lens[2];
    const char  *argv[2];

    argv[0] = "SUBSCRIBE";
    lens[0] = sizeof("SUBSCRIBE") - 1;
    argv[1] = (const char *) sub->channel.data;
    lens[1] = sub->channel.len;

    /*
     * Not through ngx_http_idem_redis_node_command(): its reply comes
     * for every message, and an exiting worker does not wait for it.
     */

    if (redisAsyncCommandArgv(node->ac, ngx_http_idem_redis_subscribe_reply,
                              sub, 2, argv, lens)
        != REDIS_OK)
    {
        ngx_log_error(NGX_LOG_WARN, node->rd->log, 0,
                      "idem: redis \"%V\": SUBSCRIBE not sent: waiters "
                      "poll", &node->name);
        ngx_http_idem_redis_node_drop(node);
        return;
    }

    ngx_http_idem_redis_flush(node->ac);

    node->rd->stats.sent++;

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, node->rd->log, 0,
                   "idem redis: SUBSCRIBE \"%V\" sent", &sub->channel);
}


/* lost or failed: its waiters poll; the next attempt may go elsewhere */

static void
ngx_http_idem_redis_subscribe_down(ngx_http_idem_redis_node_t *node)
{
    ngx_http_idem_redis_sub_t *sub = node->data;

    ngx_http_idem_redis_subscribe_lost(sub);

    if (node->rd->closing) {
        return;
    }

    /* a cluster node that went: another one, at the next attempt */

    (void) ngx_http_idem_redis_subscribe_follow(sub);

    if (!node->reconnect_ev.timer_set && node->ac == NULL
        && !sub->look_ev.timer_set)
    {
        ngx_add_timer(&sub->look_ev, NGX_HTTP_IDEM_REDIS_WAKE_LOOK);
    }
}


static void
ngx_http_idem_redis_subscribe_lost(ngx_http_idem_redis_sub_t *sub)
{
    if (!sub->subscribed) {
        return;
    }

    sub->subscribed = 0;

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, sub->node->rd->log, 0,
                   "idem redis: not subscribed any more: %ui waiters poll",
                   sub->watchers);

    ngx_http_idem_redis_unwatch_all(sub, 1);
}


/* every watch off the table; told (tell): its waiter polls from now on */

static void
ngx_http_idem_redis_unwatch_all(ngx_http_idem_redis_sub_t *sub,
    ngx_uint_t tell)
{
    ngx_uint_t                    i;
    ngx_queue_t                  *q;
    ngx_http_idem_store_watch_t  *w;

    for (i = 0; i < NGX_HTTP_IDEM_REDIS_WAKE_BUCKETS; i++) {

        while (!ngx_queue_empty(&sub->buckets[i])) {
            q = ngx_queue_head(&sub->buckets[i]);
            w = ngx_queue_data(q, ngx_http_idem_store_watch_t, queue);

            ngx_queue_remove(q);
            w->on = 0;
            sub->watchers--;

            /* the handler only posts or arms an event of its own */

            if (tell) {
                w->handler(w->data, NGX_DECLINED);
            }
        }
    }
}


/*
 * What a pub/sub reply says: NGX_OK, a message of the channel ("key"
 * its payload); NGX_DONE, the subscription confirmed; NGX_DECLINED,
 * anything else.  Outside input: nothing in it is trusted.
 */

ngx_int_t
ngx_http_idem_redis_wake_message(ngx_str_t *channel, redisReply *reply,
    ngx_str_t *key)
{
    ngx_uint_t   i;
    redisReply  *e[3];

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 3 || reply->element == NULL)
    {
        return NGX_DECLINED;
    }

    for (i = 0; i < 3; i++) {
        e[i] = reply->element[i];

        if (e[i] == NULL) {
            return NGX_DECLINED;
        }
    }

    if (e[0]->type != REDIS_REPLY_STRING
        || e[1]->type != REDIS_REPLY_STRING
        || e[1]->len != channel->len
        || e[1]->str == NULL
        || ngx_memcmp(e[1]->str, channel->data, channel->len) != 0)
    {
        return NGX_DECLINED;
    }

    if (e[0]->len == sizeof("subscribe") - 1 && e[0]->str != NULL
        && ngx_strncmp(e[0]->str, "subscribe", e[0]->len) == 0)
    {
        return NGX_DONE;
    }

    if (e[0]->len != sizeof("message") - 1 || e[0]->str == NULL
        || ngx_strncmp(e[0]->str, "message", e[0]->len) != 0
        || e[2]->type != REDIS_REPLY_STRING || e[2]->str == NULL
        || e[2]->len == 0 || e[2]->len > NGX_HTTP_IDEM_REDIS_WAKE_KEY_MAX)
    {
        return NGX_DECLINED;
    }

    key->data = (u_char *) e[2]->str;
    key->len = e[2]->len;

    return NGX_OK;
}


/* each message of the channel, its confirmation, or NULL: gone */

static void
ngx_http_idem_redis_subscribe_reply(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply *reply = r;

    ngx_str_t                    key;
    ngx_http_idem_redis_sub_t   *sub;
    ngx_http_idem_redis_node_t  *node;

    node = ac->data;
    sub = ngx_http_idem_redis_sub;

    if (sub == NULL || sub != privdata || node != sub->node
        || node->rd->closing)
    {
        return;
    }

    if (reply == NULL) {
        ngx_http_idem_redis_subscribe_lost(sub);
        return;
    }

    switch (ngx_http_idem_redis_wake_message(&sub->channel, reply, &key)) {

    case NGX_DONE:
        if (!sub->subscribed) {
            sub->subscribed = 1;
            ngx_http_idem_redis_node_answered(node);

            ngx_log_error(NGX_LOG_INFO, node->rd->log, 0,
                          "idem: redis \"%V\": subscribed to \"%V\": "
                          "waiters are woken by their owner's answer",
                          &node->name, &sub->channel);
        }

        return;

    case NGX_OK:
        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, node->rd->log, 0,
                       "idem redis: message: \"%V\" written", &key);

        ngx_http_idem_redis_wake(&key, NGX_OK);
        return;

    default:
        ngx_log_debug0(NGX_LOG_DEBUG_EVENT, node->rd->log, 0,
                       "idem redis: pub/sub reply ignored");
        return;
    }
}


/* the key's waiters of this worker, woken; the key heard, remembered */

static void
ngx_http_idem_redis_wake(ngx_str_t *key, ngx_int_t rc)
{
    uint32_t                      hash;
    ngx_uint_t                    n;
    ngx_queue_t                  *q, *next, *bucket;
    ngx_http_idem_redis_sub_t    *sub;
    ngx_http_idem_store_watch_t  *w;

    sub = ngx_http_idem_redis_sub;

    if (sub == NULL) {
        return;
    }

    hash = ngx_crc32_short(key->data, key->len);

    sub->heard[sub->nheard % NGX_HTTP_IDEM_REDIS_WAKE_HEARD] = hash;
    sub->heard_at[sub->nheard % NGX_HTTP_IDEM_REDIS_WAKE_HEARD] =
                                                             ngx_current_msec;
    sub->nheard++;

    bucket = &sub->buckets[hash & (NGX_HTTP_IDEM_REDIS_WAKE_BUCKETS - 1)];

    n = 0;

    for (q = ngx_queue_head(bucket);
         q != ngx_queue_sentinel(bucket);
         q = next)
    {
        next = ngx_queue_next(q);

        w = ngx_queue_data(q, ngx_http_idem_store_watch_t, queue);

        if (w->hash != hash || w->key.len != key->len
            || ngx_memcmp(w->key.data, key->data, key->len) != 0)
        {
            continue;
        }

        ngx_queue_remove(q);
        w->on = 0;
        sub->watchers--;
        n++;

        /* the handler posts an event: the bucket is not touched */

        w->handler(w->data, rc);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, ngx_cycle->log, 0,
                   "idem redis: \"%V\" written: %ui waiters woken", key, n);
}


ngx_int_t
ngx_http_idem_store_watch(ngx_http_idem_store_watch_t *w, ngx_msec_t since)
{
    uint32_t                    hash;
    ngx_uint_t                  i, n;
    ngx_http_idem_redis_sub_t  *sub;

    sub = ngx_http_idem_redis_sub;

    if (w->on) {
        ngx_http_idem_store_unwatch(w);
    }

    if (sub == NULL || !sub->subscribed) {
        return NGX_DECLINED;
    }

    hash = ngx_crc32_short(w->key.data, w->key.len);

    /* heard since the caller read the record: it reads it again */

    n = ngx_min(sub->nheard, NGX_HTTP_IDEM_REDIS_WAKE_HEARD);

    for (i = 0; i < n; i++) {
        if (sub->heard[i] == hash
            && (ngx_msec_int_t) (sub->heard_at[i] - since) >= 0)
        {
            return NGX_AGAIN;
        }
    }

    w->hash = hash;
    w->on = 1;

    ngx_queue_insert_tail(
                 &sub->buckets[hash & (NGX_HTTP_IDEM_REDIS_WAKE_BUCKETS - 1)],
                 &w->queue);

    sub->watchers++;

    return NGX_OK;
}


void
ngx_http_idem_store_unwatch(ngx_http_idem_store_watch_t *w)
{
    if (!w->on) {
        return;
    }

    ngx_queue_remove(&w->queue);
    w->on = 0;

    if (ngx_http_idem_redis_sub != NULL) {
        ngx_http_idem_redis_sub->watchers--;
    }
}


/*
 * PUBLISH <channel> <key> after a final write, where that write went:
 * the node of the key's slot (the channel's own slot says nothing on a
 * Cluster, where any node takes a PUBLISH).  Its reply wakes this
 * worker's waiters of the key: the write before it has run.
 */

ngx_int_t
ngx_http_idem_redis_publish(ngx_str_t *channel, ngx_str_t *key)
{
    ngx_int_t                  rc;
    ngx_str_t                  argv[3];
    ngx_uint_t                 lazy;
    ngx_http_idem_redis_t     *rd;
    ngx_http_idem_store_op_t  *op;

    rd = &ngx_http_idem_redis;

    if (!rd->started || rd->closing) {
        return NGX_DECLINED;
    }

    ngx_str_set(&argv[0], "PUBLISH");
    argv[1] = *channel;
    argv[2] = *key;

    op = ngx_http_idem_redis_op_create(rd, NULL, 3, argv, 0);
    if (op == NULL) {
        return NGX_DECLINED;
    }

    op->handler = ngx_http_idem_redis_published;
    op->data = op;

    if (rd->cluster != NULL) {
        op->slot = ngx_http_idem_redis_cluster_slot(key->data, key->len);
    }

    /* it leaves with the write it follows */

    lazy = rd->lazy;
    rd->lazy = 1;

    rc = ngx_http_idem_redis_op_send(rd, op);

    rd->lazy = lazy;

    if (rc != NGX_OK) {
        ngx_http_idem_redis_op_free(op);
        return NGX_DECLINED;
    }

    ngx_add_timer(&op->timeout, rd->conf->timeout + op->wait);

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: PUBLISH \"%V\" \"%V\"", channel, key);

    return NGX_OK;
}


/* the PUBLISH answered (or not: the waiters ask anyway, it costs a read) */

static void
ngx_http_idem_redis_published(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    ngx_str_t  key;

    if (op->argc != 3) {
        return;
    }

    key.data = (u_char *) op->argv[2];
    key.len = op->lens[2];

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, ngx_cycle->log, 0,
                   "idem redis: PUBLISH \"%V\": %s, this worker's waiters "
                   "woken", &key, rc == NGX_OK ? "answered" : "no answer");

    ngx_http_idem_redis_wake(&key, NGX_OK);
}
