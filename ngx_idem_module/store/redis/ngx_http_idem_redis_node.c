
/*
 * The store's connections ("nodes"): connect with a timeout, AUTH and
 * SELECT pipelined ahead of anything else, reconnect after 100 ms doubling
 * up to 5 s, close.  A node that holds commands (sent while it was not
 * up: redis_op.c) connects at once, and every 100 ms at most while it
 * fails, an exiting worker's too; once up, it has them sent behind the
 * handshake.  See ngx_http_idem_redis.c for the whole store.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis_common.h"
#include "ngx_http_idem_redis_adapter.h"


static void ngx_http_idem_redis_node_follow(ngx_http_idem_redis_node_t *node);
static ngx_http_idem_redis_node_t *ngx_http_idem_redis_durable_follow(
    ngx_http_idem_redis_node_t *node, ngx_http_idem_store_op_t *op);
static void ngx_http_idem_redis_node_free(ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_node_handshake(
    ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_connect_failed(
    ngx_http_idem_redis_node_t *node, const char *err, ngx_uint_t reason);
static void ngx_http_idem_redis_retry(ngx_http_idem_redis_node_t *node);
static ngx_uint_t ngx_http_idem_redis_conn_level(
    ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_connected(const redisAsyncContext *ac,
    int status);
static void ngx_http_idem_redis_disconnected(const redisAsyncContext *ac,
    int status);
static void ngx_http_idem_redis_connect_timeout(ngx_event_t *ev);
static void ngx_http_idem_redis_reconnect(ngx_event_t *ev);
static void ngx_http_idem_redis_script_loaded(redisAsyncContext *ac,
    void *r, void *privdata);
static void ngx_http_idem_redis_handshake_done(redisAsyncContext *ac,
    void *r, void *privdata);
static void ngx_http_idem_redis_node_resolve(ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_node_resolved(ngx_resolver_ctx_t *ctx);
static void ngx_http_idem_redis_resolve_again(ngx_event_t *ev);
static void ngx_http_idem_redis_unresolve(ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_node_end(ngx_http_idem_redis_node_t *node);


/*
 * A connection of this worker's store; it lives as long as the process.
 * A data node gets NGX_HTTP_IDEM_REDIS_DURABLE_TURNS connections more for
 * each kind of durable claim the routes ask for, which take turns.
 */

ngx_http_idem_redis_node_t *
ngx_http_idem_redis_node_create(ngx_http_idem_redis_t *rd, ngx_uint_t role)
{
    ngx_uint_t                      i, k, n;
    ngx_http_idem_redis_node_t     *node, *durable, **last;
    ngx_http_idem_store_durable_t  *kind;

    if (rd->nnodes == NGX_HTTP_IDEM_REDIS_MAX_NODES) {
        ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                      "idem: redis \"%V\": more than %d nodes",
                      &rd->name, NGX_HTTP_IDEM_REDIS_MAX_NODES);
        return NULL;
    }

    node = ngx_http_idem_redis_node_alloc(rd, role);
    if (node == NULL) {
        return NULL;
    }

    if (role == NGX_HTTP_IDEM_REDIS_DATA && rd->conf->durable != NULL) {

        /* not among rd->nodes: the modes never route to them */

        kind = rd->conf->durable->elts;
        last = &node->durable;

        /* a kind's connections side by side, in turn order */

        n = rd->conf->durable->nelts * NGX_HTTP_IDEM_REDIS_DURABLE_TURNS;

        for (i = 0; i < n; i++) {
            durable = ngx_http_idem_redis_node_alloc(rd, role);
            if (durable == NULL) {
                while (node->durable) {
                    durable = node->durable;
                    node->durable = durable->next;
                    ngx_free(durable);
                }

                ngx_free(node);
                return NULL;
            }

            k = i / NGX_HTTP_IDEM_REDIS_DURABLE_TURNS;

            durable->main = node;
            durable->replicas = kind[k].replicas;
            durable->wait = kind[k].wait;
            durable->turn = i % NGX_HTTP_IDEM_REDIS_DURABLE_TURNS;

            *last = durable;
            last = &durable->next;
        }
    }

    rd->nodes[rd->nnodes++] = node;

    return node;
}


/* a connection none of the modes routes to (durable claims', pub/sub's) */

ngx_http_idem_redis_node_t *
ngx_http_idem_redis_node_alloc(ngx_http_idem_redis_t *rd, ngx_uint_t role)
{
    ngx_http_idem_redis_node_t  *node;

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

    node->resolve_ev.handler = ngx_http_idem_redis_resolve_again;
    node->resolve_ev.data = node;
    node->resolve_ev.log = rd->log;
    node->resolve_ev.cancelable = 1;

    ngx_queue_init(&node->held);
    ngx_queue_init(&node->flight);

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


/*
 * A host name (a sentinel's, or the master's as a sentinel names it) and
 * port: kept in the node's own buffer, resolved at each connect
 */

void
ngx_http_idem_redis_node_set_name(ngx_http_idem_redis_node_t *node,
    u_char *name, size_t len, ngx_int_t port)
{
    u_char  *p;

    len = ngx_min(len, NGX_HTTP_IDEM_REDIS_HOST_LEN);

    ngx_memcpy(node->resolve_buf, name, len);
    node->resolve.data = node->resolve_buf;
    node->resolve.len = len;
    node->resolved = 0;
    node->valid = 0;

    node->host[0] = '\0';
    node->port = port;

    p = ngx_slprintf(node->name_buf,
                     node->name_buf + NGX_HTTP_IDEM_REDIS_NAME_LEN,
                     "%*s:%i", len, name, port);

    node->name.data = node->name_buf;
    node->name.len = p - node->name_buf;
}


void
ngx_http_idem_redis_node_connect(ngx_http_idem_redis_node_t *node)
{
    redisAsyncContext           *ac;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *durable;

    rd = node->rd;

    if (node->ac != NULL || node->resolving != NULL || rd->closing
        || ngx_terminate)
    {
        return;
    }

    /* an exiting worker connects for what it still owes only */

    if ((ngx_exiting || ngx_quit) && node->nheld == 0) {
        return;
    }

    if (node->unix_path.len == 0 && node->port == 0) {
        return;
    }

    /* a host name: where it points now, at every connect (a failover) */

    if (node->resolve.len && !node->resolved) {
        ngx_http_idem_redis_node_resolve(node);
        return;
    }

    node->resolved = 0;

    for (durable = node->durable; durable; durable = durable->next) {
        if (durable->ac == NULL) {
            ngx_http_idem_redis_node_follow(durable);
        }
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
        ngx_http_idem_redis_connect_failed(node, "out of memory",
                                           NGX_HTTP_IDEM_STORE_FAIL_CONNECT);
        return;
    }

    if (ac->err) {
        ngx_http_idem_redis_connect_failed(node, ac->errstr,
                                           NGX_HTTP_IDEM_STORE_FAIL_CONNECT);
        redisAsyncFree(ac);
        return;
    }

    if (node->unix_path.len == 0 && redisEnableKeepAlive(&ac->c) != REDIS_OK)
    {
        ngx_http_idem_redis_connect_failed(node, ac->c.errstr,
                                           NGX_HTTP_IDEM_STORE_FAIL_CONNECT);
        redisAsyncFree(ac);
        return;
    }

    ac->data = node;

    if (ngx_http_idem_redis_attach(ac, rd->log) != NGX_OK) {
        ngx_http_idem_redis_connect_failed(node, "no connection to watch it",
                                           NGX_HTTP_IDEM_STORE_FAIL_CONNECT);
        redisAsyncFree(ac);
        return;
    }

    redisAsyncSetConnectCallback(ac, ngx_http_idem_redis_connected);
    redisAsyncSetDisconnectCallback(ac, ngx_http_idem_redis_disconnected);

    node->ac = ac;
    node->state = NGX_HTTP_IDEM_REDIS_CONNECTING;

    ngx_http_idem_redis_node_handshake(node);

    ngx_add_timer(&node->connect_ev, rd->conf->connect_timeout);
}


/*
 * AUTH and SELECT, queued first: commands sent while the connection is
 * being made follow them, and Redis runs them in that order.  Then, on a
 * data node, SCRIPT LOAD of a call's script: a claim's EVALSHA then
 * never meets NOSCRIPT on a Redis just restarted or promoted, where its
 * text could only follow its reply, which may come after the request is
 * gone (a claim made by nobody's request is never released).
 */

static void
ngx_http_idem_redis_node_handshake(ngx_http_idem_redis_node_t *node)
{
    u_char                        db[NGX_INT_T_LEN];
    size_t                        lens[3];
    ngx_uint_t                    n;
    const char                   *argv[3];
    ngx_http_idem_redis_script_t *script;

    if (node->auth && node->auth->password.len) {
        n = 0;
        argv[n] = "AUTH";
        lens[n++] = sizeof("AUTH") - 1;

        if (node->auth->user.len) {
            argv[n] = (const char *) node->auth->user.data;
            lens[n++] = node->auth->user.len;
        }

        argv[n] = (const char *) node->auth->password.data;
        lens[n++] = node->auth->password.len;

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, node->rd->log, 0,
                       "idem redis: AUTH to \"%V\"%s", &node->name,
                       node->auth->user.len ? " as an ACL user" : "");

        (void) ngx_http_idem_redis_node_command(node,
                              ngx_http_idem_redis_handshake_done,
                              (void *) NGX_HTTP_IDEM_REDIS_AUTH, n, argv, lens,
                              1);
    }

    if (node->db) {
        argv[0] = "SELECT";
        lens[0] = sizeof("SELECT") - 1;
        argv[1] = (const char *) db;
        lens[1] = ngx_sprintf(db, "%i", node->db) - db;

        (void) ngx_http_idem_redis_node_command(node,
                            ngx_http_idem_redis_handshake_done,
                            (void *) NGX_HTTP_IDEM_REDIS_SELECT, 2, argv, lens,
                            1);
    }

    if (node->role != NGX_HTTP_IDEM_REDIS_DATA) {
        return;
    }

    script = &ngx_http_idem_redis_take_lua;

    argv[0] = "SCRIPT";
    lens[0] = sizeof("SCRIPT") - 1;
    argv[1] = "LOAD";
    lens[1] = sizeof("LOAD") - 1;
    argv[2] = (const char *) script->text.data;
    lens[2] = script->text.len;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, node->rd->log, 0,
                   "idem redis \"%V\": SCRIPT LOAD, %uz bytes",
                   &node->name, lens[2]);

    (void) ngx_http_idem_redis_node_command(node,
                                            ngx_http_idem_redis_script_loaded,
                                            NULL, 3, argv, lens, 1);
}


/*
 * The connection of a node for the op's kind of durable claim, NULL:
 * none.  An op that follows one of the kind's ops not answered yet (its
 * key; a PUBLISH's, the key it tells of) goes on that op's connection,
 * where Redis runs it after that op: a release after its claim.  Else
 * the kind's connections take turns: the op goes on the first that is
 * up with no WAIT in flight, so that a claim runs at once and has a WAIT
 * of its own; when every one that is up has a WAIT in flight, behind the
 * WAIT that left first, which returns first; when none is up, on the
 * first, which connects when an op is held on it (redis_op.c).
 */

ngx_http_idem_redis_node_t *
ngx_http_idem_redis_durable_node(ngx_http_idem_redis_t *rd,
    ngx_http_idem_redis_node_t *node, ngx_http_idem_store_op_t *op)
{
    ngx_http_idem_redis_node_t  *durable, *first, *oldest;

    if (node == NULL) {
        return NULL;
    }

    durable = ngx_http_idem_redis_durable_follow(node, op);

    if (durable != NULL) {
        ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                       "idem redis: a durable op follows one on \"%V\" #%ui",
                       &durable->name, durable->turn);
        return durable;
    }

    first = NULL;
    oldest = NULL;

    for (durable = node->durable; durable; durable = durable->next) {
        if (durable->replicas != op->replicas || durable->wait != op->wait) {
            continue;
        }

        if (first == NULL) {
            first = durable;
        }

        if (!ngx_http_idem_redis_node_takes(durable)) {
            continue;
        }

        if (!durable->batch.waiting) {
            break;
        }

        if (oldest == NULL || durable->batch.turn < oldest->batch.turn) {
            oldest = durable;
        }
    }

    if (durable == NULL) {
        durable = oldest ? oldest : first;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: a durable op for %ui replicas in %M ms "
                   "on \"%V\" #%ui", op->replicas, op->wait,
                   durable ? &durable->name : &node->name,
                   durable ? durable->turn : 0);

    return durable;
}


/* the kind's connection with an op in flight for the op's key, or NULL */

static ngx_http_idem_redis_node_t *
ngx_http_idem_redis_durable_follow(ngx_http_idem_redis_node_t *node,
    ngx_http_idem_store_op_t *op)
{
    size_t                       len;
    ngx_uint_t                   k, f;
    ngx_queue_t                 *q;
    const char                  *key;
    ngx_http_idem_store_op_t    *sent;
    ngx_http_idem_redis_node_t  *durable;

    if (op->argc == 3 && op->lens[0] == sizeof("PUBLISH") - 1
        && ngx_strncasecmp((u_char *) op->argv[0], (u_char *) "PUBLISH",
                           sizeof("PUBLISH") - 1) == 0)
    {
        k = 2;

    } else {
        k = op->key;

        if (k == 0) {
            return NULL;
        }
    }

    key = op->argv[k];
    len = op->lens[k];

    for (durable = node->durable; durable; durable = durable->next) {
        if (durable->replicas != op->replicas || durable->wait != op->wait) {
            continue;
        }

        for (q = ngx_queue_head(&durable->flight);
             q != ngx_queue_sentinel(&durable->flight);
             q = ngx_queue_next(q))
        {
            sent = ngx_queue_data(q, ngx_http_idem_store_op_t, queue);

            f = sent->key;

            if (f != 0 && sent->lens[f] == len
                && ngx_memcmp(sent->argv[f], key, len) == 0)
            {
                return durable;
            }
        }
    }

    return NULL;
}


/* a durable claims' connection goes where its node goes, now */

static void
ngx_http_idem_redis_node_follow(ngx_http_idem_redis_node_t *node)
{
    ngx_http_idem_redis_node_t  *main;

    main = node->main;

    ngx_memcpy(node->host, main->host, sizeof(node->host));
    node->port = main->port;
    node->unix_path = main->unix_path;
    node->resolve = main->resolve;
    node->valid = main->valid;
    node->auth = main->auth;
    node->db = main->db;
    node->name = main->name;

    ngx_log_debug4(NGX_LOG_DEBUG_EVENT, node->rd->log, 0,
                   "idem redis: a connection for durable claims to \"%V\" "
                   "#%ui, %ui replicas in %M ms", &node->name, node->turn,
                   node->replicas, node->wait);

    ngx_http_idem_redis_node_connect(node);
}


static void
ngx_http_idem_redis_connect_failed(ngx_http_idem_redis_node_t *node,
    const char *err, ngx_uint_t reason)
{
    ngx_uint_t  level;

    node->attempts++;

    ngx_http_idem_redis_count_failure(node, reason);

    ngx_http_idem_redis_retry(node);

    level = ngx_http_idem_redis_conn_level(node);

    if (node->subscriber) {
        level = ngx_max(level, NGX_LOG_WARN);
    }

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


/*
 * The next attempt: after the backoff, or within 100 ms while commands
 * are held, which wait for it under their own timeouts.  A node nobody
 * needs (no slots, an exiting worker) waits for a command to connect.
 */

static void
ngx_http_idem_redis_retry(ngx_http_idem_redis_node_t *node)
{
    node->retry_in = 0;
    node->failing = 1;

    if (node->rd->closing || ngx_terminate) {
        return;
    }

    if (node->nheld == 0
        && (node->idle || (node->main != NULL && node->main->idle)
            || ngx_exiting || ngx_quit))
    {
        return;
    }

    node->retry_in = node->backoff;

    if (node->nheld) {
        node->retry_in = ngx_min(node->retry_in,
                                 NGX_HTTP_IDEM_REDIS_HELD_RETRY);
    }

    if (node->reconnect_ev.timer_set) {
        ngx_del_timer(&node->reconnect_ev);
    }

    ngx_add_timer(&node->reconnect_ev, node->retry_in);

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
    ngx_uint_t                   level;
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
                                           c->errstr ? c->errstr : "?",
                                           NGX_HTTP_IDEM_STORE_FAIL_CONNECT);
        return;
    }

    node->state = NGX_HTTP_IDEM_REDIS_UP;
    rd->stats.connects++;

    ngx_http_idem_redis_count_connect(node);

    /* the name is asked again when its answer's validity ends */

    if (node->resolve.len && node->valid) {
        ngx_add_timer(&node->resolve_ev,
                      (ngx_msec_t) ngx_max(node->valid - ngx_time(), 1)
                      * 1000);
    }

    level = node->failing ? NGX_LOG_NOTICE : NGX_LOG_INFO;

    ngx_log_error(level, rd->log, 0, "idem: redis \"%V\": connected%s",
                  &node->name, node->failing ? " again" : "");

    node->failing = 0;

    if (node->up) {
        node->up(node);
    }

    /*
     * What it held goes behind the handshake (and what up() sent): Redis
     * runs them after (redis_op.c, which calls nothing here by name)
     */

    if (node->flush_held && node->nheld) {
        node->flush_held(node);
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

    if (node->resolve_ev.timer_set) {
        ngx_del_timer(&node->resolve_ev);
    }

    /* durable claims made on it wait for no WAIT on the next one */

    if (node->batch.lost) {
        node->batch.lost(node);
    }

    if (rd->closing) {
        return;
    }

    if (node->dropping) {
        node->dropping = 0;

    } else if (status != REDIS_OK) {

        /* a connection that never answered well is one more attempt */

        node->attempts++;
        level = ngx_http_idem_redis_conn_level(node);

        /* no request fails with the subscriber: its waiters poll */

        if (node->subscriber) {
            level = ngx_max(level, NGX_LOG_WARN);
        }

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

    ngx_http_idem_redis_connect_failed(node, (const char *) err,
                                       NGX_HTTP_IDEM_STORE_FAIL_CONNECT);
}


static void
ngx_http_idem_redis_reconnect(ngx_event_t *ev)
{
    ngx_http_idem_redis_node_t *node = ev->data;

    if (node->rd->closing || node->ac != NULL) {
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
 * As ngx_http_idem_redis_node_drop(), but once the replies still expected
 * have come (hiredis' disconnect): commands meanwhile are held, and the
 * connection is made again by disconnected().
 */

static void
ngx_http_idem_redis_node_end(ngx_http_idem_redis_node_t *node)
{
    if (node->ac == NULL || node->dropping) {
        return;
    }

    node->dropping = 1;
    node->state = NGX_HTTP_IDEM_REDIS_DOWN;

    redisAsyncDisconnect(node->ac);
}


/*
 * Never from a reply callback of this node: the context is freed now, its
 * outstanding commands are answered with NULL, and no reconnect is armed
 * (the caller connects again, elsewhere, or the worker exits).
 */

void
ngx_http_idem_redis_node_close(ngx_http_idem_redis_node_t *node)
{
    redisAsyncContext           *ac;
    ngx_http_idem_redis_node_t  *durable;

    /* its connections for durable claims too, whatever state they are in */

    for (durable = node->durable; durable; durable = durable->next) {
        ngx_http_idem_redis_node_close(durable);
    }

    if (node->connect_ev.timer_set) {
        ngx_del_timer(&node->connect_ev);
    }

    if (node->reconnect_ev.timer_set) {
        ngx_del_timer(&node->reconnect_ev);
    }

    ngx_http_idem_redis_unresolve(node);

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

void
ngx_http_idem_redis_free_all(ngx_http_idem_redis_t *rd)
{
    ngx_uint_t                   i;
    ngx_http_idem_redis_node_t  *durable;

    /* every node, then their connections for durable claims */

    for (i = 0; i < rd->nnodes; i++) {
        ngx_http_idem_redis_node_free(rd->nodes[i]);
    }

    for (i = 0; i < rd->nnodes; i++) {
        for (durable = rd->nodes[i]->durable; durable; durable = durable->next)
        {
            ngx_http_idem_redis_node_free(durable);
        }
    }
}


static void
ngx_http_idem_redis_node_free(ngx_http_idem_redis_node_t *node)
{
    redisAsyncContext  *ac;

    ngx_http_idem_redis_unresolve(node);

    if (node->ac == NULL) {
        return;
    }

    ac = node->ac;

    node->dropping = 1;
    node->state = NGX_HTTP_IDEM_REDIS_DOWN;

    redisAsyncFree(ac);

    node->ac = NULL;
    node->dropping = 0;
}


ngx_int_t
ngx_http_idem_redis_node_command(ngx_http_idem_redis_node_t *node,
    redisCallbackFn *fn, void *privdata, ngx_uint_t argc, const char **argv,
    size_t *lens, ngx_uint_t now)
{
    ngx_http_idem_redis_t  *rd;

    rd = node->rd;

    /* a connection being made takes its handshake */

    if (node->ac == NULL || node->state == NGX_HTTP_IDEM_REDIS_DOWN) {
        return NGX_DECLINED;
    }

    /* appends to hiredis' output buffer and arms the write event, no I/O */

    if (redisAsyncCommandArgv(node->ac, fn, privdata, (int) argc, argv, lens)
        != REDIS_OK)
    {
        return NGX_ERROR;
    }

    /*
     * A command nobody waits for ("now" unset) may wait a moment for
     * others to leave with (the adapter); anything else leaves at the end
     * of this turn.
     */

    if (now) {
        ngx_http_idem_redis_flush(node->ac);
    }

    rd->stats.sent++;

    ngx_http_idem_redis_pending_add(rd);

    return NGX_OK;
}


/* argument arrays for hiredis: on the caller's stack when they fit */

const char **
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
        ngx_http_idem_redis_node_answered(node);
        return;
    }

    rd->stats.failed++;
    node->attempts++;

    if (privdata == (void *) NGX_HTTP_IDEM_REDIS_AUTH) {
        ngx_http_idem_redis_count_failure(node,
                                          NGX_HTTP_IDEM_STORE_FAIL_AUTH);
    }

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
 * SCRIPT LOAD's reply.  An error (scripts refused, say) is logged: the
 * EVALSHA of a call then meets NOSCRIPT and sends the text, as before.
 */

static void
ngx_http_idem_redis_script_loaded(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply *reply = r;

    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    node = ac->data;
    rd = node->rd;

    ngx_http_idem_redis_pending_done(rd);

    if (reply == NULL || rd->closing) {
        return;
    }

    if (reply->type != REDIS_REPLY_ERROR) {
        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, rd->log, 0,
                       "idem redis \"%V\": script %*s loaded", &node->name,
                       (int) reply->len, reply->str);
        return;
    }

    rd->stats.failed++;

    ngx_log_error(NGX_LOG_WARN, rd->log, 0,
                  "idem: redis \"%V\": SCRIPT LOAD failed: \"%*s\"",
                  &node->name, reply->len, reply->str);
}


/* a reply that is not an error: the connection works */

void
ngx_http_idem_redis_node_answered(ngx_http_idem_redis_node_t *node)
{
    node->backoff = NGX_HTTP_IDEM_REDIS_BACKOFF_MIN;
    node->attempts = 0;
}


/*
 * A node that holds commands connects now: after a working connection
 * was lost, at once; while it keeps failing, within 100 ms.
 */

void
ngx_http_idem_redis_node_wake(ngx_http_idem_redis_node_t *node)
{
    if (node->ac != NULL) {

        /* being made: the held commands go once it is up */
        return;
    }

    if (node->reconnect_ev.timer_set && node->attempts > 1) {

        if (node->reconnect_ev.timer.key
            > ngx_current_msec + NGX_HTTP_IDEM_REDIS_HELD_RETRY)
        {
            ngx_del_timer(&node->reconnect_ev);
            ngx_add_timer(&node->reconnect_ev,
                          NGX_HTTP_IDEM_REDIS_HELD_RETRY);
        }

        return;
    }

    if (node->main != NULL) {
        ngx_http_idem_redis_node_follow(node);
        return;
    }

    ngx_http_idem_redis_node_connect(node);
}


/*
 * A host name, through http{}'s resolver (nginx's own: nothing blocks):
 * the connect goes on in ngx_http_idem_redis_node_resolved() with the
 * address it names now.  Commands meanwhile are held, as for any connect.
 */

static void
ngx_http_idem_redis_node_resolve(ngx_http_idem_redis_node_t *node)
{
    ngx_resolver_ctx_t     *ctx;
    ngx_http_idem_redis_t  *rd;

    rd = node->rd;

    ctx = ngx_resolve_start(rd->conf->resolver, NULL);
    if (ctx == NULL || ctx == NGX_NO_RESOLVER) {
        ngx_http_idem_redis_connect_failed(node, "no resolver",
                                           NGX_HTTP_IDEM_STORE_FAIL_RESOLVE);
        return;
    }

    ctx->name = node->resolve;
    ctx->handler = ngx_http_idem_redis_node_resolved;
    ctx->data = node;
    ctx->timeout = rd->conf->resolver_timeout;

    node->resolving = ctx;

    if (node->ac == NULL) {
        node->state = NGX_HTTP_IDEM_REDIS_CONNECTING;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: resolving \"%V\"", &node->resolve);

    /* the handler may run now, from the resolver's cache */

    if (ngx_resolve_name(ctx) != NGX_OK) {
        node->resolving = NULL;
        node->state = NGX_HTTP_IDEM_REDIS_DOWN;
        ngx_http_idem_redis_connect_failed(node, "resolving failed",
                                           NGX_HTTP_IDEM_STORE_FAIL_RESOLVE);
    }
}


/*
 * The name's answer.  Before a connect: its first address, then the
 * connect.  While connected (its validity ended): an address that is
 * not the connection's any more ends the connection gracefully, and the
 * next one resolves the name again.
 */

static void
ngx_http_idem_redis_node_resolved(ngx_resolver_ctx_t *ctx)
{
    u_char                       text[NGX_SOCKADDR_STRLEN + 1];
    u_char                       err[NGX_HTTP_IDEM_REDIS_ERRSTR_LEN];
    size_t                       len;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node;

    node = ctx->data;
    rd = node->rd;

    node->resolving = NULL;

    if (ctx->state) {
        ngx_snprintf(err, sizeof(err) - 1, "\"%V\" could not be resolved "
                     "(%i: %s)%Z", &ctx->name, ctx->state,
                     ngx_resolver_strerror(ctx->state));
        ngx_resolve_name_done(ctx);
        err[sizeof(err) - 1] = '\0';

        if (node->ac != NULL) {

            /* keep what works; ask again a validity period later */

            ngx_log_error(NGX_LOG_WARN, rd->log, 0,
                          "idem: redis \"%V\": %s, keeping its connection",
                          &node->name, err);

            ngx_add_timer(&node->resolve_ev,
                          NGX_HTTP_IDEM_REDIS_BACKOFF_MAX);
            return;
        }

        node->state = NGX_HTTP_IDEM_REDIS_DOWN;
        ngx_http_idem_redis_connect_failed(node, (char *) err,
                                           NGX_HTTP_IDEM_STORE_FAIL_RESOLVE);
        return;
    }

    len = ngx_sock_ntop(ctx->addrs[0].sockaddr, ctx->addrs[0].socklen, text,
                        NGX_SOCKADDR_STRLEN, 0);
    text[len] = '\0';

    node->valid = ctx->valid;

    ngx_resolve_name_done(ctx);

    ngx_log_debug3(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: \"%V\" is %s for %T s", &node->resolve,
                   text, node->valid - ngx_time());

    if (node->ac != NULL) {

        if (ngx_strcmp(text, node->host) == 0) {
            ngx_add_timer(&node->resolve_ev,
                          (ngx_msec_t) ngx_max(node->valid - ngx_time(), 1)
                          * 1000);
            return;
        }

        ngx_log_error(NGX_LOG_NOTICE, rd->log, 0,
                      "idem: redis \"%V\": its name is %s now, not %s: "
                      "connecting there", &node->name, text, node->host);

        ngx_memcpy(node->host, text, len + 1);
        node->resolved = 1;

        /* its replies still come; then it reconnects (disconnected()) */

        ngx_http_idem_redis_node_end(node);
        return;
    }

    ngx_memcpy(node->host, text, len + 1);
    node->resolved = 1;
    node->state = NGX_HTTP_IDEM_REDIS_DOWN;

    ngx_http_idem_redis_node_connect(node);
}


static void
ngx_http_idem_redis_resolve_again(ngx_event_t *ev)
{
    ngx_http_idem_redis_node_t *node = ev->data;

    if (node->ac == NULL || node->resolving != NULL
        || node->state != NGX_HTTP_IDEM_REDIS_UP || node->rd->closing)
    {
        return;
    }

    ngx_http_idem_redis_node_resolve(node);
}


static void
ngx_http_idem_redis_unresolve(ngx_http_idem_redis_node_t *node)
{
    if (node->resolve_ev.timer_set) {
        ngx_del_timer(&node->resolve_ev);
    }

    if (node->resolving != NULL) {
        ngx_resolve_name_done(node->resolving);
        node->resolving = NULL;
    }
}


/*
 * READONLY from a node named by a host name: the primary behind the name
 * was demoted (a DNS failover).  The connection ends once the replies
 * still expected have come (each refused write is held again by its op,
 * and sent after the reconnect, which resolves the name again).  NGX_OK:
 * so handled.
 */

ngx_int_t
ngx_http_idem_redis_node_readonly(ngx_http_idem_redis_node_t *node,
    redisReply *reply)
{
    ngx_uint_t  level;

    if (node->resolve.len == 0
        || reply == NULL || reply->type != REDIS_REPLY_ERROR
        || reply->len < sizeof("READONLY") - 1
        || ngx_strncmp(reply->str, "READONLY", sizeof("READONLY") - 1) != 0)
    {
        return NGX_DECLINED;
    }

    if (node->ac != NULL && !node->dropping) {

        /* once, then a second apart: the name may point there a while */

        level = ngx_http_idem_redis_conn_level(node);

        ngx_log_error(level, node->rd->log, 0,
                      "idem: redis \"%V\": READONLY from %s: a replica "
                      "now, connecting again to where its name points",
                      &node->name, node->host);

        ngx_http_idem_redis_count_failure(node,
                                          NGX_HTTP_IDEM_STORE_FAIL_READONLY);

        ngx_http_idem_redis_node_end(node);
    }

    return NGX_OK;
}
