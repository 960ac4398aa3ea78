
/*
 * Redis Cluster: which node a command goes to.
 *
 * Each worker reads the slot map (CLUSTER SLOTS) from any node it is
 * connected to, keeps a connection per master (ngx_http_idem_redis.c) and
 * sends each command to the master of its key's slot.  Every key the
 * module writes is tagged ("{call id}"), so one call, its record, claim
 * and answer, is one slot and the Lua scripts never cross slots.
 *
 * MOVED updates the map for that slot at once, sends the command again to
 * the node named, and asks for the whole map; ASK sends ASKING and the
 * command to the node named, without changing the map.  A command follows
 * at most NGX_HTTP_IDEM_CLUSTER_REDIRECTS redirects, within its timeout.
 *
 * A master that is lost, and slots nobody serves, make the map be read
 * again every second until every slot has a master that is up, and a
 * command for such a slot makes it be read at once (100 ms apart at
 * most): after a failover the promoted replica takes over without a
 * reload.  Meanwhile commands for the lost master's slots wait for one
 * read of the map, then are held by that master until it is up again,
 * each within its timeout (ngx_http_idem_redis_node.c), as with one
 * Redis that is down.  A node that no longer serves slots is not
 * reconnected.
 *
 * A node may be named by a host name: a seed, an entry of the map or a
 * redirect of a cluster that announces names (Redis 7's
 * cluster-announce-hostname with cluster-preferred-endpoint-type
 * hostname).  It is resolved by http{}'s resolver at each connect, as one
 * Redis named so is (ngx_http_idem_redis_node.c), never by a blocking
 * call, and it is known by its name and port, whatever address the name
 * has now.  Without a resolver such an entry is skipped, with a line.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis_common.h"


#define NGX_HTTP_IDEM_CLUSTER_SLOTS      16384
#define NGX_HTTP_IDEM_CLUSTER_REDIRECTS  5

/* the map is read again after this long at the soonest, and this often
 * while a slot has no master that is up */
#define NGX_HTTP_IDEM_CLUSTER_REFRESH_MIN    100
#define NGX_HTTP_IDEM_CLUSTER_REFRESH_RETRY  1000


struct ngx_http_idem_redis_cluster_s {
    ngx_http_idem_redis_node_t      *slots[NGX_HTTP_IDEM_CLUSTER_SLOTS];
    ngx_event_t                      refresh_ev;
    ngx_msec_t                       refreshed;  /* last asked */
    ngx_uint_t                       next;       /* the next node to ask */
    ngx_uint_t                       logged;     /* what the last line said */
    unsigned                         refreshing:1;
    unsigned                         mapped:1;
};


static ngx_http_idem_redis_node_t *ngx_http_idem_redis_cluster_node(
    ngx_http_idem_redis_t *rd, u_char *host, size_t len, ngx_int_t port);
static void ngx_http_idem_redis_cluster_up(ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_cluster_down(
    ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_cluster_refresh_later(
    ngx_http_idem_redis_t *rd, ngx_msec_t delay);
static void ngx_http_idem_redis_cluster_refresh_handler(ngx_event_t *ev);
static void ngx_http_idem_redis_cluster_refresh(ngx_http_idem_redis_t *rd);
static void ngx_http_idem_redis_cluster_slots_done(redisAsyncContext *ac,
    void *r, void *privdata);
static ngx_int_t ngx_http_idem_redis_cluster_map(ngx_http_idem_redis_t *rd,
    ngx_http_idem_redis_node_t *asked, redisReply *reply);
static ngx_int_t ngx_http_idem_redis_cluster_ip(u_char *host, size_t len);
static void ngx_http_idem_redis_cluster_read(ngx_http_idem_redis_t *rd);


static uint16_t  ngx_http_idem_redis_crc16_table[256];


ngx_int_t
ngx_http_idem_redis_cluster_init(ngx_http_idem_redis_t *rd,
    ngx_cycle_t *cycle)
{
    uint16_t                        crc;
    ngx_uint_t                      i, b;
    ngx_http_idem_store_addr_t     *seed;
    ngx_http_idem_redis_node_t     *node;
    ngx_http_idem_redis_cluster_t  *cl;

    /* CRC16-CCITT (XMODEM), the one Redis Cluster hashes keys with */

    for (i = 0; i < 256; i++) {
        crc = (uint16_t) (i << 8);

        for (b = 0; b < 8; b++) {
            crc = (crc & 0x8000) ? (uint16_t) ((crc << 1) ^ 0x1021)
                                 : (uint16_t) (crc << 1);
        }

        ngx_http_idem_redis_crc16_table[i] = crc;
    }

    cl = ngx_pcalloc(cycle->pool, sizeof(ngx_http_idem_redis_cluster_t));
    if (cl == NULL) {
        return NGX_ERROR;
    }

    cl->refresh_ev.handler = ngx_http_idem_redis_cluster_refresh_handler;
    cl->refresh_ev.data = rd;
    cl->refresh_ev.log = cycle->log;
    cl->refresh_ev.cancelable = 1;

    rd->cluster = cl;

    seed = rd->conf->seeds->elts;

    for (i = 0; i < rd->conf->seeds->nelts; i++) {
        node = ngx_http_idem_redis_cluster_node(rd, seed[i].host.data,
                                                seed[i].host.len,
                                                seed[i].port);
        if (node == NULL) {
            return NGX_ERROR;
        }

        ngx_http_idem_redis_node_connect(node);
    }

    return NGX_OK;
}


/*
 * A read of the map is over (or none can be made now): the ops parked
 * until then (redis_op.c) are sent again, after the events at hand, so
 * after the new map is in.
 */

static void
ngx_http_idem_redis_cluster_read(ngx_http_idem_redis_t *rd)
{
    if (!ngx_queue_empty(&rd->parked) && !rd->parked_ev.posted) {
        ngx_post_event(&rd->parked_ev, &ngx_posted_events);
    }
}


void
ngx_http_idem_redis_cluster_exit(ngx_http_idem_redis_t *rd)
{
    if (rd->cluster->refresh_ev.timer_set) {
        ngx_del_timer(&rd->cluster->refresh_ev);
    }
}


/* the key's slot: CRC16 of the key, or of its "{tag}" when not empty */

ngx_uint_t
ngx_http_idem_redis_cluster_slot(u_char *key, size_t len)
{
    u_char    *p, *last, *open, *close;
    uint16_t   crc;

    last = key + len;

    open = ngx_strlchr(key, last, '{');

    if (open != NULL) {
        close = ngx_strlchr(open + 1, last, '}');

        if (close != NULL && close != open + 1) {
            key = open + 1;
            last = close;
        }
    }

    crc = 0;

    for (p = key; p < last; p++) {
        crc = (uint16_t) (crc << 8)
              ^ ngx_http_idem_redis_crc16_table[((crc >> 8) ^ *p) & 0xff];
    }

    return crc & (NGX_HTTP_IDEM_CLUSTER_SLOTS - 1);
}


/* the master of the op's slot, up or not; NULL: nobody serves it */

ngx_http_idem_redis_node_t *
ngx_http_idem_redis_cluster_route(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op)
{
    ngx_uint_t                   i;
    ngx_http_idem_redis_node_t  *node;

    if (op->slot < NGX_HTTP_IDEM_CLUSTER_SLOTS) {
        return rd->cluster->slots[op->slot];
    }

    /* a command without a key: any master that is up */

    for (i = 0; i < rd->nnodes; i++) {
        node = rd->nodes[i];

        if (node->serving && node->state == NGX_HTTP_IDEM_REDIS_UP) {
            return node;
        }
    }

    return NULL;
}


/*
 * From the reply callback of the op: "MOVED 3999 127.0.0.1:6381" or
 * "ASK 3999 127.0.0.1:6381" (or a host name and port: resolved).
 * NGX_OK: the op goes to "*to" (op->asking: after ASKING), and the op's
 * own file sends it again; NGX_DECLINED: not a redirect, or one too
 * many; NGX_ERROR: no room.
 */

ngx_int_t
ngx_http_idem_redis_cluster_redirect(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply,
    ngx_http_idem_redis_node_t **to)
{
    u_char                      *p, *last, *colon, *host;
    size_t                       len;
    ngx_int_t                    slot, port;
    ngx_uint_t                   ask;
    ngx_http_idem_redis_node_t  *node;

    p = (u_char *) reply->str;
    last = p + reply->len;

    if (reply->len > 6 && ngx_strncmp(p, "MOVED ", 6) == 0) {
        ask = 0;
        p += 6;

    } else if (reply->len > 4 && ngx_strncmp(p, "ASK ", 4) == 0) {
        ask = 1;
        p += 4;

    } else {
        return NGX_DECLINED;
    }

    if (++op->redirects > NGX_HTTP_IDEM_CLUSTER_REDIRECTS) {
        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                       "idem redis cluster: more than %d redirects",
                       NGX_HTTP_IDEM_CLUSTER_REDIRECTS);
        return NGX_DECLINED;
    }

    host = ngx_strlchr(p, last, ' ');
    if (host == NULL) {
        return NGX_DECLINED;
    }

    slot = ngx_atoi(p, host - p);
    if (slot == NGX_ERROR || slot >= NGX_HTTP_IDEM_CLUSTER_SLOTS) {
        return NGX_DECLINED;
    }

    host++;

    if (host >= last) {
        return NGX_DECLINED;
    }

    /* the last colon: an IPv6 address is not in brackets here */

    for (colon = last - 1; colon > host && *colon != ':'; colon--) {
        /* void */
    }

    if (colon == host) {
        return NGX_DECLINED;
    }

    len = colon - host;

    port = ngx_atoi(colon + 1, last - colon - 1);
    if (port < 1 || port > 65535) {
        return NGX_DECLINED;
    }

    rd->stats.redirects++;

    ngx_log_debug5(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis cluster: %s slot %i to %*s:%i",
                   ask ? "ASK" : "MOVED", slot, len, host, port);

    node = ngx_http_idem_redis_cluster_node(rd, host, len, port);
    if (node == NULL) {
        return NGX_DECLINED;
    }

    if (!ask) {
        if (rd->cluster->slots[slot] != node) {
            rd->cluster->slots[slot] = node;
            node->serving = 1;
        }

        ngx_http_idem_redis_cluster_refresh_later(rd, 0);
    }

    /* a durable claim goes on that node's connection for its kind */

    if (op->wait) {
        node = ngx_http_idem_redis_durable_node(rd, node, op);

        if (node == NULL) {
            return NGX_ERROR;
        }
    }

    if (rd->stats.pending + 2 > rd->conf->max_pending) {
        return NGX_ERROR;
    }

    /*
     * A node not connected yet (a replica just promoted) holds the op,
     * and its ASKING, until it is up, under the op's own timeout
     * (op_send_to, which sends ASKING right before the op).
     */

    op->asking = ask;

    *to = node;

    return NGX_OK;
}


/*
 * The node at an address, or at a host name (by the name, not the address
 * it has now), made and hooked up when it is new
 */

static ngx_http_idem_redis_node_t *
ngx_http_idem_redis_cluster_node(ngx_http_idem_redis_t *rd, u_char *host,
    size_t len, ngx_int_t port)
{
    ngx_str_t                    name;
    ngx_uint_t                   i, named;
    ngx_resolver_t              *r;
    ngx_http_idem_redis_node_t  *node;

    for (i = 0; i < rd->nnodes; i++) {
        node = rd->nodes[i];

        if (node->port != port) {
            continue;
        }

        if (node->resolve.len
            ? node->resolve.len == len
              && ngx_strncasecmp(node->resolve.data, host, len) == 0
            : ngx_strlen(node->host) == len
              && ngx_strncmp(node->host, host, len) == 0)
        {
            return node;
        }
    }

    named = 0;

    if (len > NGX_SOCKADDR_STRLEN
        || ngx_http_idem_redis_cluster_ip(host, len) != NGX_OK)
    {
        r = rd->conf->resolver;

        name.data = host;
        name.len = len;

        if (ngx_http_idem_redis_host_name(&name) != NGX_OK
            || r == NULL || r->connections.nelts == 0)
        {
            ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                          "idem: redis cluster: \"%*s\" is not an IP "
                          "address, skipped%s", len, host,
                          ngx_http_idem_redis_host_name(&name) == NGX_OK
                          ? ": a host name needs a \"resolver\" in http{}"
                          : "");
            return NULL;
        }

        named = 1;
    }

    node = ngx_http_idem_redis_node_create(rd, NGX_HTTP_IDEM_REDIS_DATA);
    if (node == NULL) {
        return NULL;
    }

    if (named) {
        ngx_log_debug3(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                       "idem redis cluster: node \"%*s:%i\" by its name",
                       len, host, port);

        ngx_http_idem_redis_node_set_name(node, host, len, port);

    } else {
        ngx_http_idem_redis_node_set_addr(node, host, len, port);
    }

    node->auth = &rd->conf->auth;
    node->up = ngx_http_idem_redis_cluster_up;
    node->down = ngx_http_idem_redis_cluster_down;
    node->data = rd->cluster;

    return node;
}


static ngx_int_t
ngx_http_idem_redis_cluster_ip(u_char *host, size_t len)
{
#if (NGX_HAVE_INET6)
    u_char  inaddr6[16];

    if (ngx_inet6_addr(host, len, inaddr6) == NGX_OK) {
        return NGX_OK;
    }
#endif

    if (ngx_inet_addr(host, len) != INADDR_NONE) {
        return NGX_OK;
    }

    return NGX_ERROR;
}


static void
ngx_http_idem_redis_cluster_up(ngx_http_idem_redis_node_t *node)
{
    ngx_http_idem_redis_t  *rd;

    rd = node->rd;

    if (!rd->cluster->mapped) {
        ngx_http_idem_redis_cluster_refresh(rd);
    }
}


static void
ngx_http_idem_redis_cluster_down(ngx_http_idem_redis_node_t *node)
{
    if (node->serving) {
        ngx_http_idem_redis_cluster_refresh_later(node->rd,
                                           NGX_HTTP_IDEM_CLUSTER_REFRESH_MIN);
    }
}


/*
 * A command found its slot's master down: the map is read again now, or
 * 100 ms after the last time, so that traffic finds a promoted replica
 * as soon as the cluster has one.
 */

void
ngx_http_idem_redis_cluster_stale(ngx_http_idem_redis_t *rd)
{
    ngx_http_idem_redis_cluster_refresh_later(rd, 0);
}


static void
ngx_http_idem_redis_cluster_refresh_later(ngx_http_idem_redis_t *rd,
    ngx_msec_t delay)
{
    ngx_msec_t                      since;
    ngx_http_idem_redis_cluster_t  *cl;

    cl = rd->cluster;

    if (rd->closing || ngx_exiting) {
        return;
    }

    since = ngx_current_msec - cl->refreshed;

    if (since < NGX_HTTP_IDEM_CLUSTER_REFRESH_MIN) {
        delay = ngx_max(delay, NGX_HTTP_IDEM_CLUSTER_REFRESH_MIN - since);
    }

    if (cl->refresh_ev.timer_set) {
        if (cl->refresh_ev.timer.key <= ngx_current_msec + delay) {
            return;
        }

        ngx_del_timer(&cl->refresh_ev);
    }

    ngx_add_timer(&cl->refresh_ev, delay ? delay : 1);
}


static void
ngx_http_idem_redis_cluster_refresh_handler(ngx_event_t *ev)
{
    ngx_http_idem_redis_cluster_refresh(ev->data);
}


/* CLUSTER SLOTS to the next node that is up; none: connect them all */

static void
ngx_http_idem_redis_cluster_refresh(ngx_http_idem_redis_t *rd)
{
    size_t                          lens[2];
    ngx_uint_t                      i, n;
    const char                     *argv[2];
    ngx_http_idem_redis_node_t     *node;
    ngx_http_idem_redis_cluster_t  *cl;

    cl = rd->cluster;

    if (rd->closing) {
        return;
    }

    /* one at a time, unless the node asked has not answered in time */

    if (cl->refreshing
        && ngx_current_msec - cl->refreshed < rd->conf->timeout)
    {
        ngx_http_idem_redis_cluster_refresh_later(rd, rd->conf->timeout);
        return;
    }

    for (i = 0; i < rd->nnodes; i++) {
        n = (cl->next + i) % rd->nnodes;
        node = rd->nodes[n];

        if (node->state != NGX_HTTP_IDEM_REDIS_UP) {
            continue;
        }

        argv[0] = "CLUSTER";
        lens[0] = sizeof("CLUSTER") - 1;
        argv[1] = "SLOTS";
        lens[1] = sizeof("SLOTS") - 1;

        if (ngx_http_idem_redis_node_command(node,
                                       ngx_http_idem_redis_cluster_slots_done,
                                       node, 2, argv, lens, 1)
            != NGX_OK)
        {
            continue;
        }

        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                       "idem redis cluster: CLUSTER SLOTS to \"%V\"",
                       &node->name);

        cl->next = n + 1;
        cl->refreshing = 1;
        cl->refreshed = ngx_current_msec;

        return;
    }

    /* nobody to ask: every known node is tried again */

    ngx_log_debug0(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis cluster: no node up to read the map from");

    ngx_http_idem_redis_cluster_read(rd);

    for (i = 0; i < rd->nnodes; i++) {
        node = rd->nodes[i];

        if (node->ac == NULL && !node->reconnect_ev.timer_set) {
            ngx_http_idem_redis_node_connect(node);
        }
    }

    ngx_http_idem_redis_cluster_refresh_later(rd,
                                         NGX_HTTP_IDEM_CLUSTER_REFRESH_RETRY);
}


static void
ngx_http_idem_redis_cluster_slots_done(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply                  *reply = r;
    ngx_http_idem_redis_node_t  *asked = privdata;

    ngx_http_idem_redis_t  *rd;

    rd = asked->rd;

    ngx_http_idem_redis_pending_done(rd);

    rd->cluster->refreshing = 0;

    if (rd->closing) {
        return;
    }

    /* the commands waiting for this read go after it, read or not */

    ngx_http_idem_redis_cluster_read(rd);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                      "idem: redis cluster: CLUSTER SLOTS to \"%V\" failed%s"
                      "%*s", &asked->name, reply ? ": " : "",
                      (size_t) (reply && reply->str ? reply->len : 0),
                      reply && reply->str ? reply->str : "");

        ngx_http_idem_redis_cluster_refresh_later(rd,
                                         NGX_HTTP_IDEM_CLUSTER_REFRESH_RETRY);
        return;
    }

    if (ngx_http_idem_redis_cluster_map(rd, asked, reply) != NGX_OK) {
        ngx_http_idem_redis_cluster_refresh_later(rd,
                                         NGX_HTTP_IDEM_CLUSTER_REFRESH_RETRY);
    }
}


/*
 * A new map: [[start, end, [ip, port, id], [replica] ...] ...], a host
 * name in place of the ip where the cluster announces names.  An empty
 * ip is the node asked.  NGX_DECLINED: not every slot has a master that
 * is up yet, ask again soon.
 */

static ngx_int_t
ngx_http_idem_redis_cluster_map(ngx_http_idem_redis_t *rd,
    ngx_http_idem_redis_node_t *asked, redisReply *reply)
{
    u_char                         *host;
    size_t                          len;
    ngx_int_t                       rc;
    ngx_uint_t                      i, s, covered, masters, level;
    redisReply                     *e, *m;
    ngx_http_idem_redis_node_t     *node;
    ngx_http_idem_redis_cluster_t  *cl;

    cl = rd->cluster;

    for (i = 0; i < rd->nnodes; i++) {
        rd->nodes[i]->serving = 0;
    }

    ngx_memzero(cl->slots, sizeof(cl->slots));

    covered = 0;

    for (i = 0; i < reply->elements; i++) {
        e = reply->element[i];

        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3
            || e->element[0]->type != REDIS_REPLY_INTEGER
            || e->element[1]->type != REDIS_REPLY_INTEGER
            || e->element[2]->type != REDIS_REPLY_ARRAY
            || e->element[2]->elements < 2
            || e->element[2]->element[0]->type != REDIS_REPLY_STRING
            || e->element[2]->element[1]->type != REDIS_REPLY_INTEGER
            || e->element[0]->integer < 0
            || e->element[1]->integer >= NGX_HTTP_IDEM_CLUSTER_SLOTS
            || e->element[0]->integer > e->element[1]->integer)
        {
            continue;
        }

        m = e->element[2];

        /* hiredis would connect to the port modulo 65536: another one */

        if (m->element[1]->integer < 1 || m->element[1]->integer > 65535) {
            ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                          "idem: redis cluster: port %L in the map from "
                          "\"%V\" is not a port, skipped",
                          (int64_t) m->element[1]->integer, &asked->name);
            continue;
        }

        host = (u_char *) m->element[0]->str;
        len = m->element[0]->len;

        if (len == 0 && asked->resolve.len) {
            host = asked->resolve.data;
            len = asked->resolve.len;

        } else if (len == 0) {
            host = asked->host;
            len = ngx_strlen(asked->host);
        }

        node = ngx_http_idem_redis_cluster_node(rd, host, len,
                                                (ngx_int_t)
                                                m->element[1]->integer);
        if (node == NULL) {
            continue;
        }

        node->serving = 1;

        for (s = (ngx_uint_t) e->element[0]->integer;
             s <= (ngx_uint_t) e->element[1]->integer;
             s++)
        {
            cl->slots[s] = node;
        }

        covered += e->element[1]->integer - e->element[0]->integer + 1;
    }

    cl->mapped = 1;

    /* masters are connected; a node without slots is not kept trying */

    rc = NGX_OK;
    masters = 0;

    for (i = 0; i < rd->nnodes; i++) {
        node = rd->nodes[i];

        if (!node->serving) {
            node->idle = 1;

            if (node->reconnect_ev.timer_set) {
                ngx_del_timer(&node->reconnect_ev);
            }

            continue;
        }

        masters++;

        if (node->ac == NULL && (node->idle || !node->reconnect_ev.timer_set))
        {
            ngx_http_idem_redis_node_connect(node);
        }

        /* connecting is fine: a failure calls cluster_down() */

        if (node->state == NGX_HTTP_IDEM_REDIS_DOWN) {
            rc = NGX_DECLINED;
        }
    }

    if (covered < NGX_HTTP_IDEM_CLUSTER_SLOTS) {
        rc = NGX_DECLINED;
    }

    /* a line when the map's shape changes, not at every read of it */

    s = (covered << 8) + (masters << 1) + (rc == NGX_OK);

    if (s == cl->logged) {
        ngx_log_debug3(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                       "idem redis cluster: map from \"%V\": %ui slots "
                       "on %ui masters, unchanged", &asked->name, covered,
                       masters);
        return rc;
    }

    cl->logged = s;

    /* ngx_log_error() evaluates its level twice */

    level = (rc == NGX_OK) ? NGX_LOG_INFO : NGX_LOG_NOTICE;

    ngx_log_error(level, rd->log, 0,
                  "idem: redis cluster: map from \"%V\": %ui slots "
                  "on %ui masters%s", &asked->name, covered, masters,
                  rc == NGX_OK ? "" : ", not all of them up");

    return rc;
}
