
/*
 * Redis Sentinel: which Redis the store's one node connects to.
 *
 * Each worker keeps one connection to one of the sentinels listed.  On it
 * "SENTINEL get-master-addr-by-name NAME" and "SUBSCRIBE +switch-master"
 * are pipelined: the answer gives the master's address, the channel each
 * failover.  A new address closes the connection to the old master (what
 * was outstanding on it is answered as lost) and connects to the new one
 * at once, without a reload.
 *
 * A master connection that fails three times in a row, or a master that
 * says it is a replica (ROLE, sent right after connecting), makes the
 * worker ask the next sentinel, in case a switch was missed.  A sentinel
 * that fails or does not know the master is left for the next one, on
 * the connection's backoff.  Until an address is known, commands are
 * dropped and counted, as with one Redis that is down.
 *
 * Sentinels may be named by host names, and so may the master (sentinels
 * with "announce-hostnames yes" name it as it announced itself) when
 * http{} has a resolver: each is resolved at its connect (redis_node.c).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis_common.h"


/* master connects that fail in a row before another sentinel is asked */
#define NGX_HTTP_IDEM_SENTINEL_FAILURES  3


struct ngx_http_idem_redis_sentinel_s {
    ngx_http_idem_redis_node_t      *node;       /* to a sentinel */
    ngx_uint_t                       current;    /* which one, in seeds */
    ngx_uint_t                       failures;   /* master connects */
    unsigned                         switching:1;
};


static void ngx_http_idem_redis_sentinel_use(ngx_http_idem_redis_t *rd,
    ngx_uint_t n);
static void ngx_http_idem_redis_sentinel_addr(
    ngx_http_idem_redis_node_t *node, u_char *host, size_t len,
    ngx_int_t port, ngx_uint_t name);
static void ngx_http_idem_redis_sentinel_up(ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_sentinel_down(
    ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_sentinel_addr_done(redisAsyncContext *ac,
    void *r, void *privdata);
static void ngx_http_idem_redis_sentinel_message(redisAsyncContext *ac,
    void *r, void *privdata);
static void ngx_http_idem_redis_sentinel_master(ngx_http_idem_redis_t *rd,
    u_char *host, size_t len, ngx_int_t port, const char *from);
static void ngx_http_idem_redis_sentinel_ask_next(ngx_http_idem_redis_t *rd);
static void ngx_http_idem_redis_master_up(ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_master_down(
    ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_master_role(redisAsyncContext *ac, void *r,
    void *privdata);


ngx_int_t
ngx_http_idem_redis_sentinel_init(ngx_http_idem_redis_t *rd,
    ngx_cycle_t *cycle)
{
    ngx_http_idem_redis_node_t      *node;
    ngx_http_idem_redis_sentinel_t  *sn;

    sn = ngx_pcalloc(cycle->pool, sizeof(ngx_http_idem_redis_sentinel_t));
    if (sn == NULL) {
        return NGX_ERROR;
    }

    rd->sentinel = sn;

    /* the master: no address until a sentinel names it */

    node = ngx_http_idem_redis_node_create(rd, NGX_HTTP_IDEM_REDIS_DATA);
    if (node == NULL) {
        return NGX_ERROR;
    }

    node->auth = &rd->conf->auth;
    node->db = rd->conf->db;
    node->up = ngx_http_idem_redis_master_up;
    node->down = ngx_http_idem_redis_master_down;
    node->data = sn;

    rd->node = node;

    node = ngx_http_idem_redis_node_create(rd, NGX_HTTP_IDEM_REDIS_SENTINEL);
    if (node == NULL) {
        return NGX_ERROR;
    }

    node->auth = &rd->conf->sentinel_auth;
    node->up = ngx_http_idem_redis_sentinel_up;
    node->down = ngx_http_idem_redis_sentinel_down;
    node->data = sn;

    sn->node = node;

    ngx_http_idem_redis_sentinel_use(rd, 0);
    ngx_http_idem_redis_node_connect(node);

    return NGX_OK;
}


static void
ngx_http_idem_redis_sentinel_use(ngx_http_idem_redis_t *rd, ngx_uint_t n)
{
    ngx_http_idem_store_addr_t      *seed;
    ngx_http_idem_redis_sentinel_t  *sn;

    sn = rd->sentinel;
    seed = rd->conf->seeds->elts;

    sn->current = n % rd->conf->seeds->nelts;
    seed = &seed[sn->current];

    ngx_http_idem_redis_sentinel_addr(sn->node, seed->host.data,
                                      seed->host.len, seed->port,
                                      seed->resolve);
}


/* an IP, or a host name resolved at each connect (redis_node.c) */

static void
ngx_http_idem_redis_sentinel_addr(ngx_http_idem_redis_node_t *node,
    u_char *host, size_t len, ngx_int_t port, ngx_uint_t name)
{
    if (name) {
        ngx_http_idem_redis_node_set_name(node, host, len, port);
        return;
    }

    node->resolve.len = 0;
    node->resolved = 0;

    ngx_http_idem_redis_node_set_addr(node, host, len, port);
}


/*
 * Connected (and AUTH sent): the question, then the channel.  Not counted
 * as outstanding: a subscription is never answered for good, and must not
 * keep an exiting worker.
 */

static void
ngx_http_idem_redis_sentinel_up(ngx_http_idem_redis_node_t *node)
{
    size_t                  lens[3];
    const char             *argv[3];
    ngx_http_idem_redis_t  *rd;

    rd = node->rd;

    argv[0] = "SENTINEL";
    lens[0] = sizeof("SENTINEL") - 1;
    argv[1] = "get-master-addr-by-name";
    lens[1] = sizeof("get-master-addr-by-name") - 1;
    argv[2] = (const char *) rd->conf->master_name.data;
    lens[2] = rd->conf->master_name.len;

    if (redisAsyncCommandArgv(node->ac,
                              ngx_http_idem_redis_sentinel_addr_done,
                              NULL, 3, argv, lens)
        != REDIS_OK)
    {
        return;
    }

    argv[0] = "SUBSCRIBE";
    lens[0] = sizeof("SUBSCRIBE") - 1;
    argv[1] = "+switch-master";
    lens[1] = sizeof("+switch-master") - 1;

    (void) redisAsyncCommandArgv(node->ac,
                                 ngx_http_idem_redis_sentinel_message,
                                 NULL, 2, argv, lens);

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis sentinel: asked \"%V\" for \"%V\"",
                   &node->name, &rd->conf->master_name);
}


/* lost or failed: the next sentinel, on the connection's backoff */

static void
ngx_http_idem_redis_sentinel_down(ngx_http_idem_redis_node_t *node)
{
    ngx_http_idem_redis_t  *rd;

    rd = node->rd;

    ngx_http_idem_redis_sentinel_use(rd, rd->sentinel->current + 1);
}


static void
ngx_http_idem_redis_sentinel_addr_done(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply *reply = r;

    ngx_int_t                    port;
    redisReply                  *host, *p;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    node = ac->data;
    rd = node->rd;

    if (reply == NULL || rd->closing) {
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[1]->type != REDIS_REPLY_STRING)
    {
        ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                      "idem: redis sentinel \"%V\" does not name a master "
                      "\"%V\"%s%*s, asking another one",
                      &node->name, &rd->conf->master_name,
                      reply->type == REDIS_REPLY_ERROR ? ": " : "",
                      (size_t) (reply->type == REDIS_REPLY_ERROR
                                ? reply->len : 0),
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "");

        ngx_http_idem_redis_node_drop(node);
        return;
    }

    node->backoff = NGX_HTTP_IDEM_REDIS_BACKOFF_MIN;
    node->attempts = 0;

    host = reply->element[0];
    p = reply->element[1];

    port = ngx_atoi((u_char *) p->str, p->len);

    ngx_http_idem_redis_sentinel_master(rd, (u_char *) host->str, host->len,
                                        port, "asked");
}


/* "+switch-master": "<name> <old ip> <old port> <new ip> <new port>" */

static void
ngx_http_idem_redis_sentinel_message(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply *reply = r;

    u_char                      *p, *last, *field[5];
    size_t                       len[5];
    ngx_int_t                    port;
    ngx_uint_t                   n;
    redisReply                  *msg;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    node = ac->data;
    rd = node->rd;

    if (reply == NULL || rd->closing) {
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[0]->len != 7
        || ngx_strncmp(reply->element[0]->str, "message", 7) != 0
        || reply->element[2]->type != REDIS_REPLY_STRING)
    {
        return;
    }

    msg = reply->element[2];

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis sentinel: +switch-master \"%*s\"",
                   msg->len, msg->str);

    p = (u_char *) msg->str;
    last = p + msg->len;

    for (n = 0; n < 5 && p < last; n++) {
        field[n] = p;

        p = ngx_strlchr(p, last, ' ');
        if (p == NULL) {
            p = last;
        }

        len[n] = p - field[n];
        p++;
    }

    if (n != 5
        || len[0] != rd->conf->master_name.len
        || ngx_strncmp(field[0], rd->conf->master_name.data, len[0]) != 0)
    {
        return;
    }

    port = ngx_atoi(field[4], len[4]);

    ngx_http_idem_redis_sentinel_master(rd, field[3], len[3], port,
                                        "switched");
}


/*
 * The master's address: a new one closes the old connection (never from
 * one of the master's callbacks: it is the sentinel's answer or message)
 * and connects to the new one now.
 */

static void
ngx_http_idem_redis_sentinel_master(ngx_http_idem_redis_t *rd, u_char *host,
    size_t len, ngx_int_t port, const char *from)
{
    ngx_str_t                        old, name;
    ngx_uint_t                       resolve;
    ngx_http_idem_redis_node_t      *master;
    ngx_http_idem_redis_sentinel_t  *sn;
#if (NGX_HAVE_INET6)
    u_char                           inaddr6[16];
#endif

    sn = rd->sentinel;
    master = rd->node;

    name.data = host;
    name.len = len;

    /*
     * a host name (sentinels with "announce-hostnames yes" give the one
     * the master announced) only with http{}'s resolver to resolve it
     */

    resolve = (len > NGX_SOCKADDR_STRLEN
               || (ngx_inet_addr(host, len) == INADDR_NONE
#if (NGX_HAVE_INET6)
                   && ngx_inet6_addr(host, len, inaddr6) != NGX_OK
#endif
                  ));

    if (port < 1 || port > 65535
        || (resolve && (rd->conf->resolver == NULL
                        || ngx_http_idem_redis_host_name(&name) != NGX_OK)))
    {
        ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                      "idem: redis sentinel: master \"%V\" at \"%*s\" "
                      "port %i is not an IP address and port%s, ignored",
                      &rd->conf->master_name, len, host, port,
                      rd->conf->resolver ? ", nor a host name"
                      : " (a host name needs a \"resolver\" in http{})");
        return;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis sentinel: master at %s \"%V\" port %i (%s)",
                   resolve ? "the name" : "the IP", &name, port, from);

    if (master->port == port
        && (resolve
            ? (master->resolve.len == len
               && ngx_strncmp(master->resolve.data, host, len) == 0)
            : (master->resolve.len == 0
               && ngx_strlen(master->host) == len
               && ngx_strncmp(master->host, host, len) == 0)))
    {
        if (master->ac == NULL && !master->reconnect_ev.timer_set) {
            ngx_http_idem_redis_node_connect(master);
        }

        return;
    }

    old = master->name;

    ngx_log_error(NGX_LOG_NOTICE, rd->log, 0,
                  "idem: redis sentinel: master \"%V\" is %*s:%i (%s, "
                  "was %V)", &rd->conf->master_name, len, host, port, from,
                  master->port ? &old : &rd->conf->master_name);

    sn->switching = 1;
    ngx_http_idem_redis_node_close(master);
    sn->switching = 0;

    sn->failures = 0;
    master->failing = 0;
    master->attempts = 0;

    ngx_http_idem_redis_sentinel_addr(master, host, len, port, resolve);
    ngx_http_idem_redis_node_connect(master);
}


/* not from a callback of the sentinel's connection */

static void
ngx_http_idem_redis_sentinel_ask_next(ngx_http_idem_redis_t *rd)
{
    ngx_http_idem_redis_sentinel_t  *sn;

    sn = rd->sentinel;
    sn->failures = 0;

    if (sn->node->state != NGX_HTTP_IDEM_REDIS_UP) {

        /* already on its way to another one */
        return;
    }

    ngx_log_error(NGX_LOG_NOTICE, rd->log, 0,
                  "idem: redis sentinel: asking another sentinel than "
                  "\"%V\" for \"%V\"", &sn->node->name,
                  &rd->conf->master_name);

    /* closing it calls sentinel_down(), which moves to the next one */

    ngx_http_idem_redis_node_close(sn->node);
    ngx_http_idem_redis_node_connect(sn->node);
}


/* the master connected: is it still one? */

static void
ngx_http_idem_redis_master_up(ngx_http_idem_redis_node_t *node)
{
    size_t       lens[1];
    const char  *argv[1];

    node->rd->sentinel->failures = 0;

    argv[0] = "ROLE";
    lens[0] = sizeof("ROLE") - 1;

    (void) ngx_http_idem_redis_node_command(node,
                                            ngx_http_idem_redis_master_role,
                                            NULL, 1, argv, lens, 1);
}


static void
ngx_http_idem_redis_master_role(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply *reply = r;

    redisReply                  *role;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    node = ac->data;
    rd = node->rd;

    ngx_http_idem_redis_pending_done(rd);

    if (reply == NULL || rd->closing) {
        return;
    }

    /* an error (ROLE not allowed, say) proves nothing either way */

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0
        || reply->element[0]->type != REDIS_REPLY_STRING)
    {
        return;
    }

    role = reply->element[0];

    if (role->len == 6 && ngx_strncmp(role->str, "master", 6) == 0) {
        return;
    }

    ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                  "idem: redis sentinel: \"%V\" is not a master (ROLE), "
                  "closing it", &node->name);

    ngx_http_idem_redis_count_failure(node, NGX_HTTP_IDEM_STORE_FAIL_READONLY);

    ngx_http_idem_redis_node_drop(node);
    ngx_http_idem_redis_sentinel_ask_next(rd);
}


static void
ngx_http_idem_redis_master_down(ngx_http_idem_redis_node_t *node)
{
    ngx_http_idem_redis_sentinel_t  *sn;

    sn = node->rd->sentinel;

    if (sn->switching) {
        return;
    }

    if (++sn->failures >= NGX_HTTP_IDEM_SENTINEL_FAILURES) {
        ngx_http_idem_redis_sentinel_ask_next(node->rd);
    }
}


/*
 * Letters, digits, '-', '_' and '.' in labels of 1 to 63: what DNS can
 * look up.  Here, where the fuzz target of the sentinels' and the
 * cluster's answers runs it; the configuration's (redis_conf.c) and the
 * slot map's (redis_cluster.c) are read with it too.
 */

ngx_int_t
ngx_http_idem_redis_host_name(ngx_str_t *host)
{
    u_char      c;
    size_t      i, label;

    if (host->len == 0 || host->len > 253) {
        return NGX_ERROR;
    }

    label = 0;

    for (i = 0; i < host->len; i++) {
        c = host->data[i];

        if (c == '.') {
            if (label == 0) {
                return NGX_ERROR;
            }

            label = 0;
            continue;
        }

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '-' || c == '_')
            || ++label > 63)
        {
            return NGX_ERROR;
        }
    }

    /* no empty last label: nginx's resolver refuses "name." */

    return label ? NGX_OK : NGX_ERROR;
}
