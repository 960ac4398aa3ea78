
/*
 * The record store on Redis: asynchronous hiredis connections ("nodes")
 * of one worker process, driven by nginx's event loop
 * (ngx_http_idem_redis_adapter.c).  One Redis is one node; with Sentinel
 * the node is the master the sentinels name
 * (ngx_http_idem_redis_sentinel.c); in a cluster there is a node per
 * master and each command goes to its key's slot
 * (ngx_http_idem_redis_cluster.c).
 *
 * A node is down, connecting or up; commands are taken only when it is
 * up, and never more than max_pending at a time in the whole store
 * (hiredis' output buffer has no bound of its own).  On connect, AUTH and
 * SELECT are pipelined ahead of anything else.  A lost or failed
 * connection is tried again after 100 ms, doubling up to 5 s, on a
 * cancelable timer.
 *
 * While commands are outstanding a non-cancelable timer is armed: a worker
 * that is shutting down (reload, QUIT) stays until their replies came, or
 * gives up after five times the timeout.
 *
 * What requests run into (drops, error replies, read timeouts, replies
 * lost with the connection) is counted and reported in one error line a
 * second at most; connection errors are logged once, then once a second.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis.h"
#include "ngx_http_idem_redis_adapter.h"

#include <openssl/evp.h>


/* "idem_redis" defaults */
#define NGX_HTTP_IDEM_REDIS_CONNECT_TIMEOUT  1000
#define NGX_HTTP_IDEM_REDIS_TIMEOUT          1000
#define NGX_HTTP_IDEM_REDIS_MAX_PENDING      10000

#define NGX_HTTP_IDEM_REDIS_BACKOFF_MAX      5000

/* at most one error line a second for what requests run into */
#define NGX_HTTP_IDEM_REDIS_REPORT           1000

/* outstanding commands are looked at this often, and when exiting */
#define NGX_HTTP_IDEM_REDIS_WATCH            1000
#define NGX_HTTP_IDEM_REDIS_DRAIN_CHECK      100
#define NGX_HTTP_IDEM_REDIS_DRAIN_TIMEOUTS   5

/* handshake replies, told apart by their privdata */
#define NGX_HTTP_IDEM_REDIS_AUTH             0
#define NGX_HTTP_IDEM_REDIS_SELECT           1

/* a command without a key: any node of a cluster */
#define NGX_HTTP_IDEM_REDIS_ANY_SLOT         16384


static ngx_int_t ngx_http_idem_redis_parse_addr(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *addr, ngx_http_idem_store_addr_t *a,
    ngx_uint_t ip_only);
static ngx_int_t ngx_http_idem_redis_parse_seeds(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *value,
    ngx_http_idem_store_conf_t *conf);
static ngx_int_t ngx_http_idem_redis_parse_msec(ngx_str_t *value,
    size_t skip, ngx_msec_t *msec);

static void ngx_http_idem_redis_connect_failed(
    ngx_http_idem_redis_node_t *node, const char *err);
static void ngx_http_idem_redis_retry(ngx_http_idem_redis_node_t *node);
static ngx_uint_t ngx_http_idem_redis_conn_level(
    ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_connected(const redisAsyncContext *ac,
    int status);
static void ngx_http_idem_redis_disconnected(const redisAsyncContext *ac,
    int status);
static void ngx_http_idem_redis_connect_timeout(ngx_event_t *ev);
static void ngx_http_idem_redis_reconnect(ngx_event_t *ev);
static void ngx_http_idem_redis_free_all(ngx_http_idem_redis_t *rd);

static const char **ngx_http_idem_redis_argv(ngx_http_idem_redis_t *rd,
    ngx_uint_t n, const char **args_buf, size_t *lens_buf, size_t **lens);
static void ngx_http_idem_redis_handshake_done(redisAsyncContext *ac,
    void *r, void *privdata);
static void ngx_http_idem_redis_written(redisAsyncContext *ac, void *r,
    void *privdata);
static ngx_http_idem_store_op_t *ngx_http_idem_redis_op_create(
    ngx_http_idem_redis_t *rd, ngx_http_idem_redis_script_t *script,
    ngx_uint_t argc, ngx_str_t *argv, size_t ext);
static ngx_int_t ngx_http_idem_redis_op_command(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, ngx_http_idem_redis_script_t *script,
    ngx_uint_t argc, ngx_str_t *argv);
static void ngx_http_idem_redis_op_free(ngx_http_idem_store_op_t *op);
static ngx_int_t ngx_http_idem_redis_noscript(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply);
static ngx_int_t ngx_http_idem_redis_op_send(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op);
static void ngx_http_idem_redis_answer(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply);
static void ngx_http_idem_redis_read_timeout(ngx_event_t *ev);

static ngx_int_t ngx_http_idem_redis_accept(ngx_http_idem_redis_t *rd,
    ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_answered(ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_error_reply(ngx_http_idem_redis_t *rd,
    redisReply *reply);
static void ngx_http_idem_redis_pending_add(ngx_http_idem_redis_t *rd);
static void ngx_http_idem_redis_pending_handler(ngx_event_t *ev);
static void ngx_http_idem_redis_report_handler(ngx_event_t *ev);
static void ngx_http_idem_redis_report(ngx_http_idem_redis_t *rd);


static ngx_http_idem_redis_t  ngx_http_idem_redis;


/*
 * idem_redis ADDR [db=N] [password=S] [connect_timeout=T] [timeout=T]
 *            [max_pending=N]
 * idem_redis cluster ADDR ... [password=S] [connect_timeout=T] ...
 * idem_redis sentinel=NAME ADDR ... [sentinel_password=S] [db=N] ...
 */

char *
ngx_http_idem_store_parse(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_http_idem_store_conf_t *conf)
{
    ngx_int_t                    n;
    ngx_str_t                   *value;
    ngx_uint_t                   i;
    ngx_http_idem_store_addr_t   a;

    if (conf->addr.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    conf->addr = value[1];
    conf->db = 0;
    ngx_str_null(&conf->password);
    ngx_str_null(&conf->sentinel_password);
    conf->connect_timeout = NGX_HTTP_IDEM_REDIS_CONNECT_TIMEOUT;
    conf->timeout = NGX_HTTP_IDEM_REDIS_TIMEOUT;
    conf->max_pending = NGX_HTTP_IDEM_REDIS_MAX_PENDING;

    if (value[1].len == 7 && ngx_strncmp(value[1].data, "cluster", 7) == 0) {
        conf->mode = NGX_HTTP_IDEM_STORE_CLUSTER;

    } else if (value[1].len > 9
               && ngx_strncmp(value[1].data, "sentinel=", 9) == 0)
    {
        conf->mode = NGX_HTTP_IDEM_STORE_SENTINEL;
        conf->master_name.data = value[1].data + 9;
        conf->master_name.len = value[1].len - 9;

    } else {
        conf->mode = NGX_HTTP_IDEM_STORE_SINGLE;

        if (ngx_http_idem_redis_parse_addr(cf, cmd, &value[1], &a, 0)
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }

        conf->host = a.host;
        conf->port = a.port;
        conf->unix_path = a.unix_path;
    }

    if (conf->mode != NGX_HTTP_IDEM_STORE_SINGLE
        && ngx_http_idem_redis_parse_seeds(cf, cmd, value, conf) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    for (i = 2; i < cf->args->nelts; i++) {

        if (conf->mode != NGX_HTTP_IDEM_STORE_SINGLE
            && ngx_strlchr(value[i].data, value[i].data + value[i].len, '=')
               == NULL)
        {
            /* a seed, parsed above */
            continue;
        }

        if (ngx_strncmp(value[i].data, "db=", 3) == 0
            && conf->mode != NGX_HTTP_IDEM_STORE_CLUSTER)
        {
            n = ngx_atoi(value[i].data + 3, value[i].len - 3);
            if (n == NGX_ERROR || n > NGX_MAX_INT32_VALUE) {
                goto invalid;
            }

            conf->db = n;
            continue;
        }

        if (ngx_strncmp(value[i].data, "password=", 9) == 0) {
            if (value[i].len == 9) {
                goto invalid;
            }

            conf->password.data = value[i].data + 9;
            conf->password.len = value[i].len - 9;
            continue;
        }

        if (ngx_strncmp(value[i].data, "sentinel_password=", 18) == 0
            && conf->mode == NGX_HTTP_IDEM_STORE_SENTINEL)
        {
            if (value[i].len == 18) {
                goto invalid;
            }

            conf->sentinel_password.data = value[i].data + 18;
            conf->sentinel_password.len = value[i].len - 18;
            continue;
        }

        if (ngx_strncmp(value[i].data, "connect_timeout=", 16) == 0) {
            if (ngx_http_idem_redis_parse_msec(&value[i], 16,
                                               &conf->connect_timeout)
                != NGX_OK)
            {
                goto invalid;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "timeout=", 8) == 0) {
            if (ngx_http_idem_redis_parse_msec(&value[i], 8, &conf->timeout)
                != NGX_OK)
            {
                goto invalid;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "max_pending=", 12) == 0) {
            n = ngx_atoi(value[i].data + 12, value[i].len - 12);
            if (n == NGX_ERROR || n == 0) {
                goto invalid;
            }

            conf->max_pending = n;
            continue;
        }

        goto invalid;
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" in \"%V\" directive",
                       &value[i], &cmd->name);

    return NGX_CONF_ERROR;
}


/* cluster nodes or sentinels: the arguments without "=", IPs only */

static ngx_int_t
ngx_http_idem_redis_parse_seeds(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *value, ngx_http_idem_store_conf_t *conf)
{
    ngx_uint_t                   i;
    ngx_http_idem_store_addr_t  *a;

    conf->seeds = ngx_array_create(cf->pool, 4,
                                   sizeof(ngx_http_idem_store_addr_t));
    if (conf->seeds == NULL) {
        return NGX_ERROR;
    }

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strlchr(value[i].data, value[i].data + value[i].len, '=')
            != NULL)
        {
            continue;
        }

        if (conf->seeds->nelts == NGX_HTTP_IDEM_REDIS_MAX_NODES / 2) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "too many addresses in \"%V\" directive",
                               &cmd->name);
            return NGX_ERROR;
        }

        a = ngx_array_push(conf->seeds);
        if (a == NULL) {
            return NGX_ERROR;
        }

        if (ngx_http_idem_redis_parse_addr(cf, cmd, &value[i], a, 1)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (conf->seeds->nelts == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V %V\" needs at least one IP address and port",
                           &cmd->name, &value[1]);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * "IPv4:port", "[IPv6]:port" or "unix:/path" (not for cluster nodes and
 * sentinels).  Host names are refused: hiredis would resolve them with a
 * blocking getaddrinfo() in the worker.
 */

static ngx_int_t
ngx_http_idem_redis_parse_addr(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *addr, ngx_http_idem_store_addr_t *a, ngx_uint_t ip_only)
{
    u_char              *p, *last;
    ngx_int_t            port;
    ngx_str_t            host;
    struct sockaddr_un  *saun;
#if (NGX_HAVE_INET6)
    u_char               inaddr6[16];
#endif

    ngx_memzero(a, sizeof(ngx_http_idem_store_addr_t));

    a->addr = *addr;

    if (addr->len >= 5 && ngx_strncmp(addr->data, "unix:", 5) == 0) {

        host.data = addr->data + 5;
        host.len = addr->len - 5;

        if (ip_only || host.len == 0 || host.len >= sizeof(saun->sun_path)) {
            goto invalid;
        }

        a->unix_path.data = ngx_pnalloc(cf->pool, host.len + 1);
        if (a->unix_path.data == NULL) {
            return NGX_ERROR;
        }

        ngx_cpystrn(a->unix_path.data, host.data, host.len + 1);
        a->unix_path.len = host.len;

        return NGX_OK;
    }

    last = addr->data + addr->len;

    if (addr->len && addr->data[0] == '[') {

        p = ngx_strlchr(addr->data, last, ']');
        if (p == NULL || p + 1 == last || p[1] != ':') {
            goto invalid;
        }

        host.data = addr->data + 1;
        host.len = p - host.data;

#if (NGX_HAVE_INET6)
        if (ngx_inet6_addr(host.data, host.len, inaddr6) != NGX_OK) {
            goto invalid;
        }
#else
        goto invalid;
#endif

        p += 2;

    } else {

        p = ngx_strlchr(addr->data, last, ':');
        if (p == NULL) {
            goto invalid;
        }

        host.data = addr->data;
        host.len = p - addr->data;

        if (ngx_inet_addr(host.data, host.len) == INADDR_NONE) {
            goto invalid;
        }

        p++;
    }

    port = ngx_atoi(p, last - p);
    if (port < 1 || port > 65535) {
        goto invalid;
    }

    a->host.data = ngx_pnalloc(cf->pool, host.len + 1);
    if (a->host.data == NULL) {
        return NGX_ERROR;
    }

    ngx_cpystrn(a->host.data, host.data, host.len + 1);
    a->host.len = host.len;
    a->port = port;

    return NGX_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, "
                       "it must be an IP address and port%s",
                       addr, &cmd->name, ip_only ? "" : ", or unix:/path");

    return NGX_ERROR;
}


static ngx_int_t
ngx_http_idem_redis_parse_msec(ngx_str_t *value, size_t skip,
    ngx_msec_t *msec)
{
    ngx_str_t   s;
    ngx_msec_t  ms;

    s.data = value->data + skip;
    s.len = value->len - skip;

    ms = ngx_parse_time(&s, 0);
    if (ms == (ngx_msec_t) NGX_ERROR || ms == 0) {
        return NGX_ERROR;
    }

    *msec = ms;

    return NGX_OK;
}


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
    node->password = conf->password;
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
    ngx_uint_t              i;
    ngx_http_idem_redis_t  *rd;

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

    if (rd->cluster) {
        ngx_http_idem_redis_cluster_exit(rd);
    }

    /* a sentinel's connection is one of the nodes */

    for (i = 0; i < rd->nnodes; i++) {
        ngx_http_idem_redis_node_close(rd->nodes[i]);
    }

    /* every callback has run: nothing refers to the nodes any more */

    for (i = 0; i < rd->nnodes; i++) {
        ngx_free(rd->nodes[i]);
    }

    rd->nnodes = 0;
    rd->node = NULL;
}


/* a connection of this worker's store; it lives as long as the process */

ngx_http_idem_redis_node_t *
ngx_http_idem_redis_node_create(ngx_http_idem_redis_t *rd, ngx_uint_t role)
{
    ngx_http_idem_redis_node_t  *node;

    if (rd->nnodes == NGX_HTTP_IDEM_REDIS_MAX_NODES) {
        ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                      "idem: redis \"%V\": more than %d nodes",
                      &rd->name, NGX_HTTP_IDEM_REDIS_MAX_NODES);
        return NULL;
    }

    node = ngx_calloc(sizeof(ngx_http_idem_redis_node_t), rd->log);
    if (node == NULL) {
        return NULL;
    }

    node->rd = rd;
    node->role = role;
    node->backoff = NGX_HTTP_IDEM_REDIS_BACKOFF_MIN;
    node->name = rd->name;

    node->connect_ev.handler = ngx_http_idem_redis_connect_timeout;
    node->connect_ev.data = node;
    node->connect_ev.log = rd->log;
    node->connect_ev.cancelable = 1;

    node->reconnect_ev.handler = ngx_http_idem_redis_reconnect;
    node->reconnect_ev.data = node;
    node->reconnect_ev.log = rd->log;
    node->reconnect_ev.cancelable = 1;

    rd->nodes[rd->nnodes++] = node;

    return node;
}


/* an IP (as Redis or a sentinel wrote it) and port; the name follows */

void
ngx_http_idem_redis_node_set_addr(ngx_http_idem_redis_node_t *node,
    u_char *host, size_t len, ngx_int_t port)
{
    u_char  *p, *last;

    len = ngx_min(len, NGX_SOCKADDR_STRLEN);

    ngx_memcpy(node->host, host, len);
    node->host[len] = '\0';
    node->port = port;

    p = node->name_buf;
    last = node->name_buf + NGX_HTTP_IDEM_REDIS_NAME_LEN;

    if (ngx_strlchr(host, host + len, ':') != NULL) {
        p = ngx_slprintf(p, last, "[%*s]:%i", len, host, port);

    } else {
        p = ngx_slprintf(p, last, "%*s:%i", len, host, port);
    }

    node->name.data = node->name_buf;
    node->name.len = p - node->name_buf;
}


void
ngx_http_idem_redis_node_connect(ngx_http_idem_redis_node_t *node)
{
    redisAsyncContext      *ac;
    ngx_http_idem_redis_t  *rd;

    rd = node->rd;

    if (node->ac != NULL || rd->closing
        || ngx_exiting || ngx_quit || ngx_terminate)
    {
        return;
    }

    if (node->unix_path.len == 0 && node->port == 0) {
        return;
    }

    if (node->reconnect_ev.timer_set) {
        ngx_del_timer(&node->reconnect_ev);
    }

    node->idle = 0;

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: connecting to \"%V\"", &node->name);

    if (node->unix_path.len) {
        ac = redisAsyncConnectUnix((const char *) node->unix_path.data);

    } else {
        ac = redisAsyncConnect((const char *) node->host, (int) node->port);
    }

    if (ac == NULL) {
        ngx_http_idem_redis_connect_failed(node, "out of memory");
        return;
    }

    if (ac->err) {
        ngx_http_idem_redis_connect_failed(node, ac->errstr);
        redisAsyncFree(ac);
        return;
    }

    if (node->unix_path.len == 0 && redisEnableKeepAlive(&ac->c) != REDIS_OK)
    {
        ngx_http_idem_redis_connect_failed(node, ac->c.errstr);
        redisAsyncFree(ac);
        return;
    }

    ac->data = node;

    if (ngx_http_idem_redis_attach(ac, rd->log) != NGX_OK) {
        ngx_http_idem_redis_connect_failed(node, "no connection to watch it");
        redisAsyncFree(ac);
        return;
    }

    redisAsyncSetConnectCallback(ac, ngx_http_idem_redis_connected);
    redisAsyncSetDisconnectCallback(ac, ngx_http_idem_redis_disconnected);

    node->ac = ac;
    node->state = NGX_HTTP_IDEM_REDIS_CONNECTING;

    ngx_add_timer(&node->connect_ev, rd->conf->connect_timeout);
}


static void
ngx_http_idem_redis_connect_failed(ngx_http_idem_redis_node_t *node,
    const char *err)
{
    ngx_uint_t  level;

    node->attempts++;

    ngx_http_idem_redis_retry(node);

    level = ngx_http_idem_redis_conn_level(node);

    if (node->retry_in) {
        ngx_log_error(level, node->rd->log, 0,
                      "idem: redis \"%V\": connect failed: %s, "
                      "next attempt in %M ms",
                      &node->name, err, node->retry_in);

    } else {
        ngx_log_error(level, node->rd->log, 0,
                      "idem: redis \"%V\": connect failed: %s",
                      &node->name, err);
    }

    if (node->down) {
        node->down(node);
    }
}


static void
ngx_http_idem_redis_retry(ngx_http_idem_redis_node_t *node)
{
    node->retry_in = 0;
    node->failing = 1;

    if (node->rd->closing || node->idle
        || ngx_exiting || ngx_quit || ngx_terminate)
    {
        return;
    }

    node->retry_in = node->backoff;

    if (node->reconnect_ev.timer_set) {
        ngx_del_timer(&node->reconnect_ev);
    }

    ngx_add_timer(&node->reconnect_ev, node->backoff);

    node->backoff = ngx_min(node->backoff * 2,
                            NGX_HTTP_IDEM_REDIS_BACKOFF_MAX);
}


/*
 * Connection errors: the first one after a working connection is logged,
 * then one a second at most (the others at "info").  "attempts" counts the
 * failures since the last good reply.
 */

static ngx_uint_t
ngx_http_idem_redis_conn_level(ngx_http_idem_redis_node_t *node)
{
    if (node->attempts > 1
        && ngx_current_msec - node->conn_logged < NGX_HTTP_IDEM_REDIS_REPORT)
    {
        return NGX_LOG_INFO;
    }

    node->conn_logged = ngx_current_msec;

    return NGX_LOG_ERR;
}


static void
ngx_http_idem_redis_connected(const redisAsyncContext *c, int status)
{
    u_char                       db[NGX_INT_T_LEN];
    size_t                       lens[2];
    ngx_uint_t                   level;
    const char                  *argv[2];
    redisAsyncContext           *ac;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    ac = (redisAsyncContext *) c;
    node = ac->data;
    rd = node->rd;

    if (node->connect_ev.timer_set) {
        ngx_del_timer(&node->connect_ev);
    }

    if (status != REDIS_OK) {

        /* hiredis frees the context when this returns */

        node->ac = NULL;
        node->state = NGX_HTTP_IDEM_REDIS_DOWN;

        ngx_http_idem_redis_connect_failed(node,
                                           c->errstr ? c->errstr : "?");
        return;
    }

    node->state = NGX_HTTP_IDEM_REDIS_UP;
    rd->stats.connects++;

    level = node->failing ? NGX_LOG_NOTICE : NGX_LOG_INFO;

    ngx_log_error(level, rd->log, 0, "idem: redis \"%V\": connected%s",
                  &node->name, node->failing ? " again" : "");

    node->failing = 0;

    /* pipelined: Redis runs them before anything sent after them */

    if (node->password.len) {
        argv[0] = "AUTH";
        lens[0] = sizeof("AUTH") - 1;
        argv[1] = (const char *) node->password.data;
        lens[1] = node->password.len;

        (void) ngx_http_idem_redis_node_command(node,
                              ngx_http_idem_redis_handshake_done,
                              (void *) NGX_HTTP_IDEM_REDIS_AUTH, 2, argv, lens);
    }

    if (node->db) {
        argv[0] = "SELECT";
        lens[0] = sizeof("SELECT") - 1;
        argv[1] = (const char *) db;
        lens[1] = ngx_sprintf(db, "%i", node->db) - db;

        (void) ngx_http_idem_redis_node_command(node,
                            ngx_http_idem_redis_handshake_done,
                            (void *) NGX_HTTP_IDEM_REDIS_SELECT, 2, argv, lens);
    }

    if (node->up) {
        node->up(node);
    }
}


static void
ngx_http_idem_redis_disconnected(const redisAsyncContext *ac, int status)
{
    ngx_uint_t                   level;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    node = ac->data;
    rd = node->rd;

    /* the replies still expected were answered with NULL already */

    node->ac = NULL;
    node->state = NGX_HTTP_IDEM_REDIS_DOWN;

    if (rd->closing) {
        return;
    }

    if (node->dropping) {
        node->dropping = 0;

    } else if (status != REDIS_OK) {

        /* a connection that never answered well is one more attempt */

        node->attempts++;
        level = ngx_http_idem_redis_conn_level(node);

        ngx_log_error(level, rd->log, 0,
                      "idem: redis \"%V\": connection lost: %s, "
                      "%ui commands unanswered",
                      &node->name, ac->errstr ? ac->errstr : "?",
                      rd->lost);

        /* reported here, not again */

        rd->lost = 0;

    } else {
        ngx_log_error(NGX_LOG_INFO, rd->log, 0,
                      "idem: redis \"%V\": connection closed",
                      &node->name);
    }

    ngx_http_idem_redis_retry(node);

    if (node->down) {
        node->down(node);
    }
}


static void
ngx_http_idem_redis_connect_timeout(ngx_event_t *ev)
{
    ngx_http_idem_redis_node_t *node = ev->data;

    u_char              err[64];
    redisAsyncContext  *ac;

    ac = node->ac;

    if (ac == NULL || node->state != NGX_HTTP_IDEM_REDIS_CONNECTING) {
        return;
    }

    /* not connected: hiredis calls no disconnect callback */

    node->ac = NULL;
    node->state = NGX_HTTP_IDEM_REDIS_DOWN;

    redisAsyncFree(ac);

    *ngx_snprintf(err, sizeof(err) - 1, "timed out after %M ms",
                  node->rd->conf->connect_timeout) = '\0';

    ngx_http_idem_redis_connect_failed(node, (const char *) err);
}


static void
ngx_http_idem_redis_reconnect(ngx_event_t *ev)
{
    ngx_http_idem_redis_node_t *node = ev->data;

    if (node->rd->closing || node->ac != NULL
        || ngx_exiting || ngx_quit || ngx_terminate)
    {
        return;
    }

    ngx_http_idem_redis_node_connect(node);
}


/*
 * From a reply callback of this node only: hiredis frees the context when
 * the callback returns, answers what is outstanding with NULL and calls
 * the disconnect callback, which arms the reconnect.
 */

void
ngx_http_idem_redis_node_drop(ngx_http_idem_redis_node_t *node)
{
    if (node->ac == NULL || node->dropping) {
        return;
    }

    node->dropping = 1;
    node->state = NGX_HTTP_IDEM_REDIS_DOWN;

    redisAsyncFree(node->ac);
}


/*
 * Never from a reply callback of this node: the context is freed now, its
 * outstanding commands are answered with NULL, and no reconnect is armed
 * (the caller connects again, elsewhere, or the worker exits).
 */

void
ngx_http_idem_redis_node_close(ngx_http_idem_redis_node_t *node)
{
    redisAsyncContext  *ac;

    if (node->connect_ev.timer_set) {
        ngx_del_timer(&node->connect_ev);
    }

    if (node->reconnect_ev.timer_set) {
        ngx_del_timer(&node->reconnect_ev);
    }

    ac = node->ac;

    if (ac == NULL) {
        node->state = NGX_HTTP_IDEM_REDIS_DOWN;
        return;
    }

    node->dropping = 1;
    node->state = NGX_HTTP_IDEM_REDIS_DOWN;

    redisAsyncFree(ac);

    node->ac = NULL;
    node->dropping = 0;

    if (node->reconnect_ev.timer_set) {
        ngx_del_timer(&node->reconnect_ev);
    }

    node->backoff = NGX_HTTP_IDEM_REDIS_BACKOFF_MIN;
}


/* a timer handler, not a hiredis callback: every context freed now */

static void
ngx_http_idem_redis_free_all(ngx_http_idem_redis_t *rd)
{
    ngx_uint_t                   i;
    redisAsyncContext           *ac;
    ngx_http_idem_redis_node_t  *node;

    for (i = 0; i < rd->nnodes; i++) {
        node = rd->nodes[i];
        ac = node->ac;

        if (ac == NULL) {
            continue;
        }

        node->dropping = 1;
        node->state = NGX_HTTP_IDEM_REDIS_DOWN;

        redisAsyncFree(ac);

        node->ac = NULL;
        node->dropping = 0;
    }
}


ngx_int_t
ngx_http_idem_redis_node_command(ngx_http_idem_redis_node_t *node,
    redisCallbackFn *fn, void *privdata, ngx_uint_t argc, const char **argv,
    size_t *lens)
{
    ngx_http_idem_redis_t  *rd;

    rd = node->rd;

    if (node->state != NGX_HTTP_IDEM_REDIS_UP || node->ac == NULL) {
        return NGX_DECLINED;
    }

    /* appends to hiredis' output buffer and arms the write event, no I/O */

    if (redisAsyncCommandArgv(node->ac, fn, privdata, (int) argc, argv, lens)
        != REDIS_OK)
    {
        return NGX_ERROR;
    }

    /*
     * A write nobody waits for may wait a moment for others to leave
     * with (the adapter); anything else leaves at the end of this turn.
     */

    if (rd->urgent
        || !(fn == ngx_http_idem_redis_written
             || (fn == ngx_http_idem_redis_op_done
                 && (((ngx_http_idem_store_op_t *) privdata)->handler == NULL
                     || rd->lazy))))
    {
        ngx_http_idem_redis_flush(node->ac);
    }

    rd->stats.sent++;

    ngx_http_idem_redis_pending_add(rd);

    return NGX_OK;
}


/* argument arrays for hiredis: on the caller's stack when they fit */

static const char **
ngx_http_idem_redis_argv(ngx_http_idem_redis_t *rd, ngx_uint_t n,
    const char **args_buf, size_t *lens_buf, size_t **lens)
{
    const char  **args;

    if (n <= NGX_HTTP_IDEM_REDIS_ARGS) {
        *lens = lens_buf;
        return args_buf;
    }

    args = ngx_alloc(n * (sizeof(char *) + sizeof(size_t)), rd->log);
    if (args == NULL) {
        return NULL;
    }

    *lens = (size_t *) &args[n];

    return args;
}


static void
ngx_http_idem_redis_handshake_done(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply *reply = r;

    ngx_uint_t                   level;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    node = ac->data;
    rd = node->rd;

    ngx_http_idem_redis_pending_done(rd);

    if (reply == NULL || rd->closing) {
        return;
    }

    if (reply->type != REDIS_REPLY_ERROR) {
        ngx_http_idem_redis_answered(node);
        return;
    }

    rd->stats.failed++;
    node->attempts++;

    /* ngx_log_error() evaluates its level twice */

    level = ngx_http_idem_redis_conn_level(node);

    ngx_log_error(level, rd->log, 0,
                  "idem: redis \"%V\": %s failed: \"%*s\", "
                  "closing the connection", &node->name,
                  privdata == (void *) NGX_HTTP_IDEM_REDIS_AUTH
                  ? "AUTH" : "SELECT",
                  reply->len, reply->str);

    ngx_http_idem_redis_node_drop(node);
}


/*
 * A write, fire and forget.  Writes of one turn sit side by side in
 * hiredis' buffer: they leave in one write and Redis runs them in order.
 * In a cluster each is an op of its own, kept for a redirect.
 */

ngx_int_t
ngx_http_idem_redis_write(ngx_uint_t argc, ngx_str_t *argv)
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

    if (rd->cluster) {
        op = ngx_http_idem_redis_op_create(rd, NULL, argc, argv, 0);
        if (op == NULL) {
            return NGX_DECLINED;
        }

        if (ngx_http_idem_redis_op_send(rd, op) != NGX_OK) {
            ngx_http_idem_redis_op_free(op);
            return NGX_DECLINED;
        }

        return NGX_OK;
    }

    node = rd->node;

    if (ngx_http_idem_redis_accept(rd, node) != NGX_OK) {
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

    rc = ngx_http_idem_redis_node_command(node, ngx_http_idem_redis_written,
                                          NULL, argc, args, lens);

    if (args != args_buf) {
        ngx_free(args);
    }

    if (rc != NGX_OK) {
        rd->stats.dropped++;
        rd->down++;
        ngx_http_idem_redis_report_later(rd);
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * The commands that follow leave at the end of this turn (urgent: a
 * claim's writes), or may wait with the writes (lazy: a read whose reply
 * no request waits for).
 */

void
ngx_http_idem_redis_urgent(ngx_uint_t urgent)
{
    ngx_http_idem_redis.urgent = urgent ? 1 : 0;
}


void
ngx_http_idem_redis_lazy(ngx_uint_t lazy)
{
    ngx_http_idem_redis.lazy = lazy ? 1 : 0;
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

    if (rd->stats.pending + n > rd->conf->max_pending) {
        rd->stats.dropped++;
        rd->full++;
        ngx_http_idem_redis_report_later(rd);
        return NGX_DECLINED;
    }

    if (rd->cluster == NULL
        && (rd->node == NULL || rd->node->state != NGX_HTTP_IDEM_REDIS_UP))
    {
        rd->stats.dropped++;
        rd->down++;
        ngx_http_idem_redis_report_later(rd);
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* the answer to a write: only an error matters */

static void
ngx_http_idem_redis_written(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply *reply = r;

    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    node = ac->data;
    rd = node->rd;

    ngx_http_idem_redis_pending_done(rd);

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
        ngx_http_idem_redis_answered(node);
        return;
    }

    rd->stats.failed++;

    ngx_http_idem_redis_error_reply(rd, reply);
}


/*
 * An op with room for "ext" bytes of its caller's, and its command.  A
 * script's command is "EVALSHA <sha1>" and argv.
 */

static ngx_http_idem_store_op_t *
ngx_http_idem_redis_op_create(ngx_http_idem_redis_t *rd,
    ngx_http_idem_redis_script_t *script, ngx_uint_t argc, ngx_str_t *argv,
    size_t ext)
{
    ngx_http_idem_store_op_t  *op;

    op = ngx_alloc(sizeof(ngx_http_idem_store_op_t) + ext, rd->log);
    if (op == NULL) {
        rd->stats.dropped++;
        return NULL;
    }

    ngx_memzero(op, sizeof(ngx_http_idem_store_op_t));

    op->ext = ext ? (void *) &op[1] : NULL;

    op->timeout.handler = ngx_http_idem_redis_read_timeout;
    op->timeout.data = op;
    op->timeout.log = rd->log;

    if (ngx_http_idem_redis_op_command(rd, op, script, argc, argv) != NGX_OK)
    {
        ngx_free(op);
        rd->stats.dropped++;
        return NULL;
    }

    return op;
}


/* the op's command, copied (a command it had before goes) */

static ngx_int_t
ngx_http_idem_redis_op_command(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, ngx_http_idem_redis_script_t *script,
    ngx_uint_t argc, ngx_str_t *argv)
{
    u_char       *p, md[EVP_MAX_MD_SIZE];
    size_t        size;
    ngx_uint_t    i, k, n, skip;
    const char  **args;
    unsigned int  len;

    skip = 0;

    if (script != NULL) {
        if (!script->hashed) {
            if (EVP_Digest(script->text.data, script->text.len, md, &len,
                           EVP_sha1(), NULL)
                != 1 || len != 20)
            {
                return NGX_ERROR;
            }

            ngx_hex_dump(script->sha1, md, 20);
            script->hashed = 1;
        }

        skip = 2;
    }

    n = argc + skip;

    size = n * (sizeof(char *) + sizeof(size_t));

    for (i = 0; i < argc; i++) {
        size += argv[i].len;
    }

    args = ngx_alloc(size, rd->log);
    if (args == NULL) {
        return NGX_ERROR;
    }

    if (op->argv != NULL) {
        ngx_free(op->argv);
    }

    op->script = script;
    op->resent = 0;
    op->redirects = 0;

    op->argc = n;
    op->argv = args;
    op->lens = (size_t *) &args[n];

    p = (u_char *) &op->lens[n];

    if (script != NULL) {
        op->argv[0] = "EVALSHA";
        op->lens[0] = sizeof("EVALSHA") - 1;
        op->argv[1] = (const char *) script->sha1;
        op->lens[1] = sizeof(script->sha1);
    }

    for (i = 0; i < argc; i++) {
        op->argv[skip + i] = (const char *) p;
        op->lens[skip + i] = argv[i].len;
        p = ngx_cpymem(p, argv[i].data, argv[i].len);
    }

    /* EVAL script numkeys key ...: the first key; else the argument 1 */

    k = 0;

    if (script != NULL) {
        if (n >= 4 && !(op->lens[2] == 1 && op->argv[2][0] == '0')) {
            k = 3;
        }

    } else if (n >= 2) {
        k = 1;
    }

    if (k == 0 || rd->cluster == NULL) {
        op->slot = NGX_HTTP_IDEM_REDIS_ANY_SLOT;

    } else {
        op->slot = ngx_http_idem_redis_cluster_slot((u_char *) op->argv[k],
                                                    op->lens[k]);
    }

    return NGX_OK;
}


static void
ngx_http_idem_redis_op_free(ngx_http_idem_store_op_t *op)
{
    if (op->argv != NULL) {
        ngx_free(op->argv);
    }

    ngx_free(op);
}


/* an op to its node: the one Redis, or the node that holds its slot */

static ngx_int_t
ngx_http_idem_redis_op_send(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op)
{
    ngx_int_t                    rc;
    ngx_http_idem_redis_node_t  *node;

    if (rd->cluster == NULL) {
        node = rd->node;

        if (ngx_http_idem_redis_accept(rd, node) != NGX_OK) {
            return NGX_DECLINED;
        }

        goto send;
    }

    node = ngx_http_idem_redis_cluster_route(rd, op);

    if (node == NULL || node->state != NGX_HTTP_IDEM_REDIS_UP) {

        /* a failover may have given the slot to another node by now */

        ngx_http_idem_redis_cluster_stale(rd);
    }

    if (node == NULL) {
        rd->stats.dropped++;
        rd->down++;
        ngx_http_idem_redis_report_later(rd);
        return NGX_DECLINED;
    }

    if (ngx_http_idem_redis_accept(rd, node) != NGX_OK) {
        return NGX_DECLINED;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: %*s for slot %ui",
                   op->lens[0], op->argv[0], op->slot);

send:

    rc = ngx_http_idem_redis_node_command(node, ngx_http_idem_redis_op_done,
                                          op, op->argc, op->argv, op->lens);
    if (rc != NGX_OK) {
        rd->stats.dropped++;
        rd->down++;
        ngx_http_idem_redis_report_later(rd);
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * A read: a command, or a script (argv without "EVALSHA <sha1>").  The op
 * belongs to the store: the caller forgets it when its handler runs (the
 * op is freed right after, unless the handler sent it again with
 * ngx_http_idem_redis_again()), or when it cancels it.
 */

ngx_http_idem_store_op_t *
ngx_http_idem_redis_read(ngx_http_idem_redis_script_t *script,
    ngx_uint_t argc, ngx_str_t *argv, ngx_http_idem_redis_reply_pt handler,
    void *data, size_t ext)
{
    ngx_http_idem_redis_t     *rd;
    ngx_http_idem_store_op_t  *op;

    rd = &ngx_http_idem_redis;

    if (!rd->started || rd->closing || argc == 0) {
        rd->stats.dropped++;
        return NULL;
    }

    op = ngx_http_idem_redis_op_create(rd, script, argc, argv, ext);
    if (op == NULL) {
        return NULL;
    }

    op->handler = handler;
    op->data = data;

    if (ngx_http_idem_redis_op_send(rd, op) != NGX_OK) {
        ngx_http_idem_redis_op_free(op);
        return NULL;
    }

    /* not cancelable: a request waits on it, an exiting worker too */

    ngx_add_timer(&op->timeout, rd->conf->timeout);

    return op;
}


/*
 * From inside the op's handler (a reply, never a timeout): the same op
 * asks again with another command, under a timeout of its own.
 */

ngx_int_t
ngx_http_idem_redis_again(ngx_http_idem_store_op_t *op,
    ngx_http_idem_redis_script_t *script, ngx_uint_t argc, ngx_str_t *argv)
{
    ngx_http_idem_redis_t  *rd;

    rd = &ngx_http_idem_redis;

    if (rd->closing
        || ngx_http_idem_redis_op_command(rd, op, script, argc, argv)
           != NGX_OK
        || ngx_http_idem_redis_op_send(rd, op) != NGX_OK)
    {
        return NGX_ERROR;
    }

    op->done = 0;
    op->again = 1;

    ngx_add_timer(&op->timeout, rd->conf->timeout);

    return NGX_OK;
}


void
ngx_http_idem_store_cancel(ngx_http_idem_store_op_t *op)
{
    if (op == NULL) {
        return;
    }

    /* freed when its reply comes, or the connection goes */

    op->done = 1;

    if (op->timeout.timer_set) {
        ngx_del_timer(&op->timeout);
    }
}


/*
 * The reply to an op.  In a cluster, MOVED and ASK send it again to the
 * node named, the same op with the same timeout.
 */

void
ngx_http_idem_redis_op_done(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply                *reply = r;
    ngx_http_idem_store_op_t  *op = privdata;

    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    node = ac->data;
    rd = node->rd;

    ngx_http_idem_redis_pending_done(rd);

    if (reply != NULL
        && reply->type == REDIS_REPLY_ERROR
        && !op->done
        && !rd->closing)
    {
        if (rd->cluster != NULL
            && ngx_http_idem_redis_cluster_redirect(rd, op, reply) == NGX_OK)
        {
            return;
        }

        if (ngx_http_idem_redis_noscript(rd, op, reply) == NGX_OK) {
            return;
        }
    }

    if (op->timeout.timer_set) {
        ngx_del_timer(&op->timeout);
    }

    if (op->done || rd->closing) {

        /* timed out, cancelled, or the worker exits */

        ngx_http_idem_redis_op_free(op);
        return;
    }

    op->done = 1;

    if (reply == NULL) {
        rd->stats.failed++;
        rd->lost++;

        if (op->handler) {
            op->handler(op->data, NGX_ERROR, NULL, 0);
        }

    } else if (reply->type == REDIS_REPLY_ERROR) {
        rd->stats.failed++;
        ngx_http_idem_redis_error_reply(rd, reply);

        if (op->handler) {
            op->handler(op->data, NGX_ERROR, NULL, 0);
        }

    } else {
        ngx_http_idem_redis_answered(node);

        if (op->handler) {
            ngx_http_idem_redis_answer(rd, op, reply);
        }
    }

    if (op->again) {

        /* its handler asked again (ngx_http_idem_redis_again) */

        op->again = 0;
        return;
    }

    ngx_http_idem_redis_op_free(op);
}


/*
 * NOSCRIPT to an EVALSHA: the same script sent again with its text, once,
 * to the same node (hiredis takes commands from a reply callback); the op
 * waits on under its own timer, and the node keeps the script from then
 * on.  NGX_OK: sent.
 */

static ngx_int_t
ngx_http_idem_redis_noscript(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply)
{
    if (op->script == NULL || op->resent
        || reply->len < sizeof("NOSCRIPT") - 1
        || ngx_strncmp(reply->str, "NOSCRIPT", sizeof("NOSCRIPT") - 1) != 0)
    {
        return NGX_DECLINED;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: NOSCRIPT for %*s, sending its text",
                   (size_t) sizeof(op->script->sha1), op->script->sha1);

    op->resent = 1;

    op->argv[0] = "EVAL";
    op->lens[0] = sizeof("EVAL") - 1;
    op->argv[1] = (const char *) op->script->text.data;
    op->lens[1] = op->script->text.len;

    if (ngx_http_idem_redis_op_send(rd, op) != NGX_OK) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * A reply as strings: an array element by element (integers in decimal,
 * nil and nested arrays as empty strings), a string or status as one
 * element, an integer as one, nil as none.
 */

static void
ngx_http_idem_redis_answer(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply)
{
    u_char      *p, num[NGX_INT64_LEN];
    size_t       i, n;
    ngx_str_t   *elts, one;
    redisReply  *e;

    switch (reply->type) {

    case REDIS_REPLY_NIL:
        op->handler(op->data, NGX_OK, NULL, 0);
        return;

    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        one.data = (u_char *) reply->str;
        one.len = reply->len;
        op->handler(op->data, NGX_OK, &one, 1);
        return;

    case REDIS_REPLY_INTEGER:
        one.data = num;
        one.len = ngx_sprintf(num, "%L", (int64_t) reply->integer) - num;
        op->handler(op->data, NGX_OK, &one, 1);
        return;

    case REDIS_REPLY_ARRAY:
        break;

    default:
        op->handler(op->data, NGX_ERROR, NULL, 0);
        return;
    }

    n = reply->elements;

    if (n == 0) {
        op->handler(op->data, NGX_OK, NULL, 0);
        return;
    }

    /* the strings first, then room for integers formatted */

    elts = ngx_alloc(n * (sizeof(ngx_str_t) + NGX_INT64_LEN), rd->log);
    if (elts == NULL) {
        op->handler(op->data, NGX_ERROR, NULL, 0);
        return;
    }

    p = (u_char *) &elts[n];

    for (i = 0; i < n; i++) {
        e = reply->element[i];

        switch (e->type) {

        case REDIS_REPLY_STRING:
        case REDIS_REPLY_STATUS:
        case REDIS_REPLY_ERROR:
            elts[i].data = (u_char *) e->str;
            elts[i].len = e->len;
            break;

        case REDIS_REPLY_INTEGER:
            elts[i].data = p;
            p = ngx_sprintf(p, "%L", (int64_t) e->integer);
            elts[i].len = p - elts[i].data;
            break;

        default:
            ngx_str_set(&elts[i], "");
            break;
        }
    }

    op->handler(op->data, NGX_OK, elts, n);

    ngx_free(elts);
}


static void
ngx_http_idem_redis_read_timeout(ngx_event_t *ev)
{
    ngx_http_idem_store_op_t *op = ev->data;

    ngx_http_idem_redis_t  *rd;

    rd = &ngx_http_idem_redis;

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: no reply within the timeout, %ui redirects",
                   op->redirects);

    /* the late reply, or the disconnect, frees the op */

    op->done = 1;

    rd->stats.failed++;
    rd->timedout++;
    ngx_http_idem_redis_report_later(rd);

    op->handler(op->data, NGX_ERROR, NULL, 0);
}


static ngx_int_t
ngx_http_idem_redis_accept(ngx_http_idem_redis_t *rd,
    ngx_http_idem_redis_node_t *node)
{
    if (node == NULL || node->state != NGX_HTTP_IDEM_REDIS_UP) {
        rd->stats.dropped++;
        rd->down++;
        ngx_http_idem_redis_report_later(rd);
        return NGX_DECLINED;
    }

    if (rd->stats.pending >= rd->conf->max_pending) {
        rd->stats.dropped++;
        rd->full++;
        ngx_http_idem_redis_report_later(rd);
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* a reply that is not an error: the connection works */

static void
ngx_http_idem_redis_answered(ngx_http_idem_redis_node_t *node)
{
    node->backoff = NGX_HTTP_IDEM_REDIS_BACKOFF_MIN;
    node->attempts = 0;
}


/*
 * OOM, READONLY (a replica), MOVED (not a cluster, or too many
 * redirects), CLUSTERDOWN, LOADING ...: the store cannot take the command
 * now; counted and reported.
 */

static void
ngx_http_idem_redis_error_reply(ngx_http_idem_redis_t *rd, redisReply *reply)
{
    rd->errors++;
    rd->errstr_len = ngx_min(reply->len, NGX_HTTP_IDEM_REDIS_ERRSTR_LEN);
    ngx_memcpy(rd->errstr, reply->str, rd->errstr_len);

    ngx_http_idem_redis_report_later(rd);
}


/*
 * While commands are outstanding a non-cancelable timer keeps a worker
 * that is shutting down alive (ngx_event_no_timers_left()); it is checked
 * once a second, or every 100 ms once the worker is exiting.
 */

static void
ngx_http_idem_redis_pending_add(ngx_http_idem_redis_t *rd)
{
    rd->stats.pending++;
    rd->pending_ev.cancelable = 0;

    if (!rd->pending_ev.timer_set && !rd->closing) {
        ngx_add_timer(&rd->pending_ev, ngx_exiting
                                       ? NGX_HTTP_IDEM_REDIS_DRAIN_CHECK
                                       : NGX_HTTP_IDEM_REDIS_WATCH);
    }
}


void
ngx_http_idem_redis_pending_done(ngx_http_idem_redis_t *rd)
{
    if (rd->stats.pending) {
        rd->stats.pending--;
    }

    if (rd->stats.pending) {
        return;
    }

    rd->pending_ev.cancelable = 1;

    if (rd->draining) {
        rd->draining = 0;

        if (rd->pending_ev.timer_set) {
            ngx_del_timer(&rd->pending_ev);
        }

        ngx_log_error(NGX_LOG_INFO, rd->log, 0,
                      "idem: redis \"%V\": nothing outstanding after %M ms",
                      &rd->name, ngx_current_msec - rd->drain_start);
    }
}


static void
ngx_http_idem_redis_pending_handler(ngx_event_t *ev)
{
    ngx_http_idem_redis_t *rd = ev->data;

    ngx_msec_t  limit;

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

    limit = rd->conf->timeout * NGX_HTTP_IDEM_REDIS_DRAIN_TIMEOUTS;

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
}


void
ngx_http_idem_redis_report_later(ngx_http_idem_redis_t *rd)
{
    ngx_msec_t  elapsed;

    if (rd->report_ev.timer_set || rd->closing) {
        return;
    }

    elapsed = ngx_current_msec - rd->reported;

    if (elapsed >= NGX_HTTP_IDEM_REDIS_REPORT) {
        ngx_http_idem_redis_report(rd);
        return;
    }

    ngx_add_timer(&rd->report_ev, NGX_HTTP_IDEM_REDIS_REPORT - elapsed);
}


static void
ngx_http_idem_redis_report_handler(ngx_event_t *ev)
{
    ngx_http_idem_redis_report(ev->data);
}


static void
ngx_http_idem_redis_report(ngx_http_idem_redis_t *rd)
{
    u_char  *p, *last, buf[NGX_HTTP_IDEM_REDIS_ERRSTR_LEN + 256];

    p = buf;
    last = buf + sizeof(buf);

    if (rd->down) {
        p = ngx_slprintf(p, last, ", %ui dropped (not connected)", rd->down);
    }

    if (rd->full) {
        p = ngx_slprintf(p, last, ", %ui dropped (%ui pending)",
                         rd->full, rd->conf->max_pending);
    }

    if (rd->timedout) {
        p = ngx_slprintf(p, last, ", %ui timed out", rd->timedout);
    }

    if (rd->lost) {
        p = ngx_slprintf(p, last, ", %ui unanswered (disconnected)",
                         rd->lost);
    }

    if (rd->errors) {
        p = ngx_slprintf(p, last, ", %ui failed (last error: \"%*s\")",
                         rd->errors, rd->errstr_len, rd->errstr);
    }

    if (p == buf) {
        return;
    }

    ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                  "idem: redis \"%V\": since the last report: %*s",
                  &rd->name, (size_t) (p - buf - 2), buf + 2);

    rd->reported = ngx_current_msec;
    rd->down = 0;
    rd->full = 0;
    rd->timedout = 0;
    rd->lost = 0;
    rd->errors = 0;
}

