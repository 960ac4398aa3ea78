
/*
 * The record store on Redis: one asynchronous hiredis connection per worker
 * process, driven by nginx's event loop (ngx_http_idem_redis_adapter.c).
 *
 * The connection is down, connecting or up; commands are taken only when
 * it is up, and never more than max_pending at a time (hiredis' output
 * buffer has no bound of its own).  On connect, AUTH and SELECT are
 * pipelined ahead of anything else.
 * A lost or failed connection is tried again after 100 ms, doubling up to
 * 5 s, on a cancelable timer.
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
#include "ngx_http_idem_redis_adapter.h"


#define NGX_HTTP_IDEM_REDIS_DOWN             0
#define NGX_HTTP_IDEM_REDIS_CONNECTING       1
#define NGX_HTTP_IDEM_REDIS_UP               2

/* "idem_redis" defaults */
#define NGX_HTTP_IDEM_REDIS_CONNECT_TIMEOUT  1000
#define NGX_HTTP_IDEM_REDIS_TIMEOUT          1000
#define NGX_HTTP_IDEM_REDIS_MAX_PENDING      10000

#define NGX_HTTP_IDEM_REDIS_BACKOFF_MIN      100
#define NGX_HTTP_IDEM_REDIS_BACKOFF_MAX      5000

/* at most one error line a second for what requests run into */
#define NGX_HTTP_IDEM_REDIS_REPORT           1000

/* outstanding commands are looked at this often, and when exiting */
#define NGX_HTTP_IDEM_REDIS_WATCH            1000
#define NGX_HTTP_IDEM_REDIS_DRAIN_CHECK      100
#define NGX_HTTP_IDEM_REDIS_DRAIN_TIMEOUTS   5

/* command arguments kept on the stack */
#define NGX_HTTP_IDEM_REDIS_ARGS             16

#define NGX_HTTP_IDEM_REDIS_ERRSTR_LEN       128

/* handshake replies, told apart by their privdata */
#define NGX_HTTP_IDEM_REDIS_AUTH             0
#define NGX_HTTP_IDEM_REDIS_SELECT           1


/* the store's own counters, per worker */
typedef struct {
    ngx_uint_t                 sent;           /* commands written */
    ngx_uint_t                 failed;         /* error replies */
    ngx_uint_t                 dropped;        /* not sent: store down/full */
    ngx_uint_t                 connects;       /* successful connects */
    ngx_uint_t                 pending;        /* outstanding now */
} ngx_http_idem_store_stats_t;


/* a read: malloc()ed, it outlives the request that asked for it */
struct ngx_http_idem_store_op_s {
    ngx_http_idem_store_read_pt      handler;
    void                            *data;
    ngx_event_t                      timeout;
    unsigned                         done:1;   /* answered or cancelled */
};


/* the store of this worker process */
typedef struct {
    ngx_http_idem_store_conf_t      *conf;
    ngx_log_t                       *log;
    redisAsyncContext               *ac;

    ngx_uint_t                       state;
    ngx_msec_t                       backoff;      /* the next delay */
    ngx_msec_t                       retry_in;     /* the delay armed */
    ngx_uint_t                       attempts;     /* failures in a row */
    ngx_msec_t                       drain_start;
    ngx_msec_t                       conn_logged;  /* connect errors */

    ngx_event_t                      connect_ev;   /* connect timeout */
    ngx_event_t                      reconnect_ev;
    ngx_event_t                      pending_ev;
    ngx_event_t                      report_ev;

    /* counted since the last report line */
    ngx_msec_t                       reported;
    ngx_uint_t                       down;
    ngx_uint_t                       full;
    ngx_uint_t                       errors;
    ngx_uint_t                       timedout;
    ngx_uint_t                       lost;
    size_t                           errstr_len;
    u_char                           errstr[NGX_HTTP_IDEM_REDIS_ERRSTR_LEN];

    ngx_http_idem_store_stats_t      stats;

    unsigned                         started:1;
    unsigned                         closing:1;    /* exit_process */
    unsigned                         dropping:1;   /* we free the context */
    unsigned                         draining:1;   /* exiting, pending */
    unsigned                         failing:1;    /* not up since a loss */
} ngx_http_idem_redis_t;


static ngx_int_t ngx_http_idem_redis_parse_addr(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *addr, ngx_http_idem_store_conf_t *conf);
static ngx_int_t ngx_http_idem_redis_parse_msec(ngx_str_t *value,
    size_t skip, ngx_msec_t *msec);

static void ngx_http_idem_redis_connect(ngx_http_idem_redis_t *rd);
static void ngx_http_idem_redis_connect_failed(ngx_http_idem_redis_t *rd,
    const char *err);
static void ngx_http_idem_redis_retry(ngx_http_idem_redis_t *rd);
static ngx_uint_t ngx_http_idem_redis_conn_level(ngx_http_idem_redis_t *rd);
static void ngx_http_idem_redis_connected(const redisAsyncContext *ac,
    int status);
static void ngx_http_idem_redis_disconnected(const redisAsyncContext *ac,
    int status);
static void ngx_http_idem_redis_connect_timeout(ngx_event_t *ev);
static void ngx_http_idem_redis_reconnect(ngx_event_t *ev);
static void ngx_http_idem_redis_drop(ngx_http_idem_redis_t *rd);

static ngx_int_t ngx_http_idem_redis_command(ngx_http_idem_redis_t *rd,
    redisCallbackFn *fn, void *privdata, ngx_uint_t argc, const char **argv,
    size_t *lens);
static const char **ngx_http_idem_redis_argv(ngx_http_idem_redis_t *rd,
    ngx_uint_t n, const char **args_buf, size_t *lens_buf, size_t **lens);
static void ngx_http_idem_redis_handshake_done(redisAsyncContext *ac,
    void *r, void *privdata);
static void ngx_http_idem_redis_written(redisAsyncContext *ac, void *r,
    void *privdata);
static void ngx_http_idem_redis_read_done(redisAsyncContext *ac, void *r,
    void *privdata);
static void ngx_http_idem_redis_answer(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply);
static void ngx_http_idem_redis_read_timeout(ngx_event_t *ev);

static ngx_int_t ngx_http_idem_redis_accept(ngx_http_idem_redis_t *rd);
static void ngx_http_idem_redis_answered(ngx_http_idem_redis_t *rd);
static void ngx_http_idem_redis_error_reply(ngx_http_idem_redis_t *rd,
    redisReply *reply);
static void ngx_http_idem_redis_pending_add(ngx_http_idem_redis_t *rd);
static void ngx_http_idem_redis_pending_done(ngx_http_idem_redis_t *rd);
static void ngx_http_idem_redis_pending_handler(ngx_event_t *ev);
static void ngx_http_idem_redis_report_later(ngx_http_idem_redis_t *rd);
static void ngx_http_idem_redis_report(ngx_http_idem_redis_t *rd);
static void ngx_http_idem_redis_report_handler(ngx_event_t *ev);


static ngx_http_idem_redis_t  ngx_http_idem_redis;


/*
 * idem_redis ADDR [db=N] [password=S] [connect_timeout=T] [timeout=T]
 *            [max_pending=N]
 */

char *
ngx_http_idem_store_parse(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_http_idem_store_conf_t *conf)
{
    ngx_int_t    n;
    ngx_str_t   *value;
    ngx_uint_t   i;

    if (conf->addr.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_http_idem_redis_parse_addr(cf, cmd, &value[1], conf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    conf->addr = value[1];
    conf->db = 0;
    ngx_str_null(&conf->password);
    conf->connect_timeout = NGX_HTTP_IDEM_REDIS_CONNECT_TIMEOUT;
    conf->timeout = NGX_HTTP_IDEM_REDIS_TIMEOUT;
    conf->max_pending = NGX_HTTP_IDEM_REDIS_MAX_PENDING;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "db=", 3) == 0) {
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


/*
 * "IPv4:port", "[IPv6]:port" or "unix:/path".  Host names are refused:
 * hiredis would resolve them with a blocking getaddrinfo() in the worker.
 */

static ngx_int_t
ngx_http_idem_redis_parse_addr(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *addr, ngx_http_idem_store_conf_t *conf)
{
    u_char              *p, *last;
    ngx_int_t            port;
    ngx_str_t            host;
    struct sockaddr_un  *saun;
#if (NGX_HAVE_INET6)
    u_char               inaddr6[16];
#endif

    if (addr->len >= 5 && ngx_strncmp(addr->data, "unix:", 5) == 0) {

        host.data = addr->data + 5;
        host.len = addr->len - 5;

        if (host.len == 0 || host.len >= sizeof(saun->sun_path)) {
            goto invalid;
        }

        conf->unix_path.data = ngx_pnalloc(cf->pool, host.len + 1);
        if (conf->unix_path.data == NULL) {
            return NGX_ERROR;
        }

        ngx_cpystrn(conf->unix_path.data, host.data, host.len + 1);
        conf->unix_path.len = host.len;

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

    conf->host.data = ngx_pnalloc(cf->pool, host.len + 1);
    if (conf->host.data == NULL) {
        return NGX_ERROR;
    }

    ngx_cpystrn(conf->host.data, host.data, host.len + 1);
    conf->host.len = host.len;
    conf->port = port;

    return NGX_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, "
                       "it must be an IP address and port, or unix:/path",
                       addr, &cmd->name);

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
    ngx_http_idem_redis_t  *rd;

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
    rd->backoff = NGX_HTTP_IDEM_REDIS_BACKOFF_MIN;

    rd->connect_ev.handler = ngx_http_idem_redis_connect_timeout;
    rd->connect_ev.data = rd;
    rd->connect_ev.log = cycle->log;
    rd->connect_ev.cancelable = 1;

    rd->reconnect_ev.handler = ngx_http_idem_redis_reconnect;
    rd->reconnect_ev.data = rd;
    rd->reconnect_ev.log = cycle->log;
    rd->reconnect_ev.cancelable = 1;

    /* cancelable only while nothing is outstanding */

    rd->pending_ev.handler = ngx_http_idem_redis_pending_handler;
    rd->pending_ev.data = rd;
    rd->pending_ev.log = cycle->log;
    rd->pending_ev.cancelable = 1;

    rd->report_ev.handler = ngx_http_idem_redis_report_handler;
    rd->report_ev.data = rd;
    rd->report_ev.log = cycle->log;
    rd->report_ev.cancelable = 1;

    ngx_http_idem_redis_connect(rd);

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
    redisAsyncContext      *ac;
    ngx_http_idem_redis_t  *rd;

    rd = &ngx_http_idem_redis;

    if (!rd->started || rd->closing) {
        return;
    }

    rd->closing = 1;

    if (rd->connect_ev.timer_set) {
        ngx_del_timer(&rd->connect_ev);
    }

    if (rd->reconnect_ev.timer_set) {
        ngx_del_timer(&rd->reconnect_ev);
    }

    if (rd->pending_ev.timer_set) {
        ngx_del_timer(&rd->pending_ev);
    }

    if (rd->report_ev.timer_set) {
        ngx_del_timer(&rd->report_ev);
    }

    ngx_http_idem_redis_report(rd);

    ac = rd->ac;

    if (ac != NULL) {
        rd->ac = NULL;
        rd->state = NGX_HTTP_IDEM_REDIS_DOWN;

        redisAsyncFree(ac);
    }
}


static void
ngx_http_idem_redis_connect(ngx_http_idem_redis_t *rd)
{
    redisAsyncContext           *ac;
    ngx_http_idem_store_conf_t  *conf;

    conf = rd->conf;

    if (conf->unix_path.len) {
        ac = redisAsyncConnectUnix((const char *) conf->unix_path.data);

    } else {
        ac = redisAsyncConnect((const char *) conf->host.data,
                               (int) conf->port);
    }

    if (ac == NULL) {
        ngx_http_idem_redis_connect_failed(rd, "out of memory");
        return;
    }

    if (ac->err) {
        ngx_http_idem_redis_connect_failed(rd, ac->errstr);
        redisAsyncFree(ac);
        return;
    }

    if (conf->unix_path.len == 0 && redisEnableKeepAlive(&ac->c) != REDIS_OK)
    {
        ngx_http_idem_redis_connect_failed(rd, ac->c.errstr);
        redisAsyncFree(ac);
        return;
    }

    ac->data = rd;

    if (ngx_http_idem_redis_attach(ac, rd->log) != NGX_OK) {
        ngx_http_idem_redis_connect_failed(rd, "no connection to watch it");
        redisAsyncFree(ac);
        return;
    }

    redisAsyncSetConnectCallback(ac, ngx_http_idem_redis_connected);
    redisAsyncSetDisconnectCallback(ac, ngx_http_idem_redis_disconnected);

    rd->ac = ac;
    rd->state = NGX_HTTP_IDEM_REDIS_CONNECTING;

    ngx_add_timer(&rd->connect_ev, conf->connect_timeout);
}


static void
ngx_http_idem_redis_connect_failed(ngx_http_idem_redis_t *rd,
    const char *err)
{
    ngx_uint_t  level;

    rd->attempts++;

    ngx_http_idem_redis_retry(rd);

    level = ngx_http_idem_redis_conn_level(rd);

    if (rd->retry_in) {
        ngx_log_error(level, rd->log, 0,
                      "idem: redis \"%V\": connect failed: %s, "
                      "next attempt in %M ms",
                      &rd->conf->addr, err, rd->retry_in);

    } else {
        ngx_log_error(level, rd->log, 0,
                      "idem: redis \"%V\": connect failed: %s",
                      &rd->conf->addr, err);
    }
}


static void
ngx_http_idem_redis_retry(ngx_http_idem_redis_t *rd)
{
    rd->retry_in = 0;
    rd->failing = 1;

    if (rd->closing || ngx_exiting || ngx_quit || ngx_terminate) {
        return;
    }

    rd->retry_in = rd->backoff;

    ngx_add_timer(&rd->reconnect_ev, rd->backoff);

    rd->backoff = ngx_min(rd->backoff * 2, NGX_HTTP_IDEM_REDIS_BACKOFF_MAX);
}


/*
 * Connection errors: the first one after a working connection is logged,
 * then one a second at most (the others at "info").  "attempts" counts the
 * failures since the last good reply.
 */

static ngx_uint_t
ngx_http_idem_redis_conn_level(ngx_http_idem_redis_t *rd)
{
    if (rd->attempts > 1
        && ngx_current_msec - rd->conn_logged < NGX_HTTP_IDEM_REDIS_REPORT)
    {
        return NGX_LOG_INFO;
    }

    rd->conn_logged = ngx_current_msec;

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
    ngx_http_idem_store_conf_t  *conf;

    ac = (redisAsyncContext *) c;
    rd = ac->data;
    conf = rd->conf;

    if (rd->connect_ev.timer_set) {
        ngx_del_timer(&rd->connect_ev);
    }

    if (status != REDIS_OK) {

        /* hiredis frees the context when this returns */

        rd->ac = NULL;
        rd->state = NGX_HTTP_IDEM_REDIS_DOWN;

        ngx_http_idem_redis_connect_failed(rd, c->errstr ? c->errstr : "?");
        return;
    }

    rd->state = NGX_HTTP_IDEM_REDIS_UP;
    rd->stats.connects++;

    level = rd->failing ? NGX_LOG_NOTICE : NGX_LOG_INFO;

    ngx_log_error(level, rd->log, 0, "idem: redis \"%V\": connected%s",
                  &conf->addr, rd->failing ? " again" : "");

    rd->failing = 0;

    /* pipelined: Redis runs them before anything sent after them */

    if (conf->password.len) {
        argv[0] = "AUTH";
        lens[0] = sizeof("AUTH") - 1;
        argv[1] = (const char *) conf->password.data;
        lens[1] = conf->password.len;

        (void) ngx_http_idem_redis_command(rd,
                              ngx_http_idem_redis_handshake_done,
                              (void *) NGX_HTTP_IDEM_REDIS_AUTH, 2, argv, lens);
    }

    if (conf->db) {
        argv[0] = "SELECT";
        lens[0] = sizeof("SELECT") - 1;
        argv[1] = (const char *) db;
        lens[1] = ngx_sprintf(db, "%i", conf->db) - db;

        (void) ngx_http_idem_redis_command(rd,
                            ngx_http_idem_redis_handshake_done,
                            (void *) NGX_HTTP_IDEM_REDIS_SELECT, 2, argv, lens);
    }
}


static void
ngx_http_idem_redis_disconnected(const redisAsyncContext *ac, int status)
{
    ngx_uint_t              level;
    ngx_http_idem_redis_t  *rd;

    rd = ac->data;

    /* the replies still expected were answered with NULL already */

    rd->ac = NULL;
    rd->state = NGX_HTTP_IDEM_REDIS_DOWN;

    if (rd->closing) {
        return;
    }

    if (rd->dropping) {
        rd->dropping = 0;

    } else if (status != REDIS_OK) {

        /* a connection that never answered well is one more attempt */

        rd->attempts++;
        level = ngx_http_idem_redis_conn_level(rd);

        ngx_log_error(level, rd->log, 0,
                      "idem: redis \"%V\": connection lost: %s, "
                      "%ui commands unanswered",
                      &rd->conf->addr, ac->errstr ? ac->errstr : "?",
                      rd->lost);

        /* reported here, not again */

        rd->lost = 0;

    } else {
        ngx_log_error(NGX_LOG_INFO, rd->log, 0,
                      "idem: redis \"%V\": connection closed",
                      &rd->conf->addr);
    }

    ngx_http_idem_redis_retry(rd);
}


static void
ngx_http_idem_redis_connect_timeout(ngx_event_t *ev)
{
    ngx_http_idem_redis_t *rd = ev->data;

    u_char              err[64];
    redisAsyncContext  *ac;

    ac = rd->ac;

    if (ac == NULL || rd->state != NGX_HTTP_IDEM_REDIS_CONNECTING) {
        return;
    }

    /* not connected: hiredis calls no disconnect callback */

    rd->ac = NULL;
    rd->state = NGX_HTTP_IDEM_REDIS_DOWN;

    redisAsyncFree(ac);

    *ngx_snprintf(err, sizeof(err) - 1, "timed out after %M ms",
                  rd->conf->connect_timeout) = '\0';

    ngx_http_idem_redis_connect_failed(rd, (const char *) err);
}


static void
ngx_http_idem_redis_reconnect(ngx_event_t *ev)
{
    ngx_http_idem_redis_t *rd = ev->data;

    if (rd->closing || rd->ac != NULL
        || ngx_exiting || ngx_quit || ngx_terminate)
    {
        return;
    }

    ngx_http_idem_redis_connect(rd);
}


/*
 * From a reply callback only: hiredis frees the context when the callback
 * returns, answers what is outstanding with NULL and calls the disconnect
 * callback, which arms the reconnect.
 */

static void
ngx_http_idem_redis_drop(ngx_http_idem_redis_t *rd)
{
    if (rd->ac == NULL || rd->dropping) {
        return;
    }

    rd->dropping = 1;
    rd->state = NGX_HTTP_IDEM_REDIS_DOWN;

    redisAsyncFree(rd->ac);
}


static ngx_int_t
ngx_http_idem_redis_command(ngx_http_idem_redis_t *rd, redisCallbackFn *fn,
    void *privdata, ngx_uint_t argc, const char **argv, size_t *lens)
{
    if (rd->state != NGX_HTTP_IDEM_REDIS_UP || rd->ac == NULL) {
        return NGX_DECLINED;
    }

    /* appends to hiredis' output buffer and arms the write event, no I/O */

    if (redisAsyncCommandArgv(rd->ac, fn, privdata, (int) argc, argv, lens)
        != REDIS_OK)
    {
        return NGX_ERROR;
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

    ngx_uint_t              level;
    ngx_http_idem_redis_t  *rd;

    rd = ac->data;

    ngx_http_idem_redis_pending_done(rd);

    if (reply == NULL || rd->closing) {
        return;
    }

    if (reply->type != REDIS_REPLY_ERROR) {
        ngx_http_idem_redis_answered(rd);
        return;
    }

    rd->stats.failed++;
    rd->attempts++;

    /* ngx_log_error() evaluates its level twice */

    level = ngx_http_idem_redis_conn_level(rd);

    ngx_log_error(level, rd->log, 0,
                  "idem: redis \"%V\": %s failed: \"%*s\", "
                  "closing the connection", &rd->conf->addr,
                  privdata == (void *) NGX_HTTP_IDEM_REDIS_AUTH
                  ? "AUTH" : "SELECT",
                  reply->len, reply->str);

    ngx_http_idem_redis_drop(rd);
}


/*
 * HSET of a few fields, then PEXPIRE, side by side in hiredis' buffer: they
 * leave in one write and Redis runs them in order.
 */

ngx_int_t
ngx_http_idem_store_hset(ngx_str_t *key, ngx_str_t *ttl, ngx_uint_t argc,
    ngx_str_t *argv)
{
    size_t                  lens_buf[NGX_HTTP_IDEM_REDIS_ARGS], *lens;
    ngx_int_t               rc;
    ngx_uint_t              i, n;
    const char             *args_buf[NGX_HTTP_IDEM_REDIS_ARGS], **args;
    ngx_http_idem_redis_t  *rd;

    rd = &ngx_http_idem_redis;

    if (!rd->started) {
        rd->stats.dropped++;
        return NGX_DECLINED;
    }

    if (ngx_http_idem_redis_accept(rd) != NGX_OK) {
        return NGX_DECLINED;
    }

    n = ngx_max(argc + 2, 3);

    args = ngx_http_idem_redis_argv(rd, n, args_buf, lens_buf, &lens);
    if (args == NULL) {
        rd->stats.dropped++;
        return NGX_DECLINED;
    }

    args[0] = "HSET";
    lens[0] = sizeof("HSET") - 1;
    args[1] = (const char *) key->data;
    lens[1] = key->len;

    for (i = 0; i < argc; i++) {
        args[2 + i] = (const char *) argv[i].data;
        lens[2 + i] = argv[i].len;
    }

    rc = ngx_http_idem_redis_command(rd, ngx_http_idem_redis_written,
                                     NULL, argc + 2, args, lens);

    if (rc == NGX_OK) {
        args[0] = "PEXPIRE";
        lens[0] = sizeof("PEXPIRE") - 1;
        args[2] = (const char *) ttl->data;
        lens[2] = ttl->len;

        rc = ngx_http_idem_redis_command(rd, ngx_http_idem_redis_written,
                                         NULL, 3, args, lens);
    }

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


/* the answer to a write: only an error matters */

static void
ngx_http_idem_redis_written(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply *reply = r;

    ngx_http_idem_redis_t  *rd;

    rd = ac->data;

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
        ngx_http_idem_redis_answered(rd);
        return;
    }

    rd->stats.failed++;

    ngx_http_idem_redis_error_reply(rd, reply);
}


/*
 * The op belongs to the store: the caller forgets it when its handler runs
 * (the op is freed right after), or when it cancels it.
 */

ngx_http_idem_store_op_t *
ngx_http_idem_store_read(ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_idem_store_read_pt handler, void *data, ngx_msec_t timeout)
{
    size_t                     lens_buf[NGX_HTTP_IDEM_REDIS_ARGS], *lens;
    ngx_int_t                  rc;
    ngx_uint_t                 i;
    const char                *args_buf[NGX_HTTP_IDEM_REDIS_ARGS], **args;
    ngx_http_idem_redis_t     *rd;
    ngx_http_idem_store_op_t  *op;

    rd = &ngx_http_idem_redis;

    if (!rd->started || argc == 0) {
        rd->stats.dropped++;
        return NULL;
    }

    if (ngx_http_idem_redis_accept(rd) != NGX_OK) {
        return NULL;
    }

    op = ngx_alloc(sizeof(ngx_http_idem_store_op_t), rd->log);
    if (op == NULL) {
        rd->stats.dropped++;
        return NULL;
    }

    ngx_memzero(op, sizeof(ngx_http_idem_store_op_t));

    op->handler = handler;
    op->data = data;

    op->timeout.handler = ngx_http_idem_redis_read_timeout;
    op->timeout.data = op;
    op->timeout.log = rd->log;

    args = ngx_http_idem_redis_argv(rd, argc, args_buf, lens_buf, &lens);
    if (args == NULL) {
        ngx_free(op);
        rd->stats.dropped++;
        return NULL;
    }

    for (i = 0; i < argc; i++) {
        args[i] = (const char *) argv[i].data;
        lens[i] = argv[i].len;
    }

    rc = ngx_http_idem_redis_command(rd, ngx_http_idem_redis_read_done, op,
                                     argc, args, lens);

    if (args != args_buf) {
        ngx_free(args);
    }

    if (rc != NGX_OK) {
        ngx_free(op);
        rd->stats.dropped++;
        rd->down++;
        ngx_http_idem_redis_report_later(rd);
        return NULL;
    }

    /* not cancelable: a request waits on it, an exiting worker too */

    ngx_add_timer(&op->timeout, timeout ? timeout : rd->conf->timeout);

    return op;
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


static void
ngx_http_idem_redis_read_done(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply                *reply = r;
    ngx_http_idem_store_op_t  *op = privdata;

    ngx_http_idem_redis_t  *rd;

    rd = ac->data;

    ngx_http_idem_redis_pending_done(rd);

    if (op->timeout.timer_set) {
        ngx_del_timer(&op->timeout);
    }

    if (op->done || rd->closing) {

        /* timed out, cancelled, or the worker exits */

        ngx_free(op);
        return;
    }

    op->done = 1;

    if (reply == NULL) {
        rd->stats.failed++;
        rd->lost++;

        op->handler(op->data, NGX_ERROR, NULL, 0);

    } else if (reply->type == REDIS_REPLY_ERROR) {
        rd->stats.failed++;
        ngx_http_idem_redis_error_reply(rd, reply);

        op->handler(op->data, NGX_ERROR, NULL, 0);

    } else {
        ngx_http_idem_redis_answered(rd);
        ngx_http_idem_redis_answer(rd, op, reply);
    }

    ngx_free(op);
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

    /* the late reply, or the disconnect, frees the op */

    op->done = 1;

    rd->stats.failed++;
    rd->timedout++;
    ngx_http_idem_redis_report_later(rd);

    op->handler(op->data, NGX_ERROR, NULL, 0);
}


static ngx_int_t
ngx_http_idem_redis_accept(ngx_http_idem_redis_t *rd)
{
    if (rd->state != NGX_HTTP_IDEM_REDIS_UP) {
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
ngx_http_idem_redis_answered(ngx_http_idem_redis_t *rd)
{
    rd->backoff = NGX_HTTP_IDEM_REDIS_BACKOFF_MIN;
    rd->attempts = 0;
}


/*
 * OOM, READONLY (a replica), MOVED (a cluster), LOADING ...: the
 * store cannot take the command now; counted and reported.
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


static void
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
                      &rd->conf->addr, ngx_current_msec - rd->drain_start);
    }
}


static void
ngx_http_idem_redis_pending_handler(ngx_event_t *ev)
{
    ngx_http_idem_redis_t *rd = ev->data;

    redisAsyncContext  *ac;
    ngx_msec_t          limit;

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
                      "before exiting", &rd->conf->addr, rd->stats.pending);
    }

    limit = rd->conf->timeout * NGX_HTTP_IDEM_REDIS_DRAIN_TIMEOUTS;

    if (ngx_current_msec - rd->drain_start < limit) {
        ngx_add_timer(ev, NGX_HTTP_IDEM_REDIS_DRAIN_CHECK);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                  "idem: redis \"%V\": gave up waiting for %ui replies "
                  "after %M ms, exiting", &rd->conf->addr,
                  rd->stats.pending, ngx_current_msec - rd->drain_start);

    rd->draining = 0;
    ev->cancelable = 1;

    ac = rd->ac;

    if (ac != NULL) {

        /* a timer handler, not a hiredis callback: freed right now */

        rd->dropping = 1;
        rd->state = NGX_HTTP_IDEM_REDIS_DOWN;

        redisAsyncFree(ac);

        rd->ac = NULL;
        rd->dropping = 0;
    }

    rd->lost = 0;
}


static void
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
                  &rd->conf->addr, (size_t) (p - buf - 2), buf + 2);

    rd->reported = ngx_current_msec;
    rd->down = 0;
    rd->full = 0;
    rd->timedout = 0;
    rd->lost = 0;
    rd->errors = 0;
}

