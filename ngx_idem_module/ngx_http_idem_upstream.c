
/*
 * Attempts: the balancer of every upstream is wrapped (as the keepalive
 * module does) so that, on routes with "idem on", the module decides how
 * many attempts a call gets, waits the backoff between them without
 * blocking, and gives each attempt its own headers.
 *
 * nginx's retry logic stays in charge of *when* an attempt failed
 * (ngx_http_upstream_next, ngx_http_upstream_test_next); the module only
 * sets, per request, the failure mask it checks (a copy of u->conf) and
 * the number of tries left (u->peer.tries).
 */


#include "ngx_http_idem_module.h"
#include "ngx_http_idem_round.h"


static ngx_int_t ngx_http_idem_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_idem_get_peer(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_idem_free_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state);
static ngx_uint_t ngx_http_idem_may_retry(ngx_http_idem_ctx_t *ctx,
    ngx_http_upstream_t *u);
static ngx_msec_t ngx_http_idem_backoff(ngx_http_idem_ctx_t *ctx);
static ngx_int_t ngx_http_idem_prepare_attempt(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static ngx_int_t ngx_http_idem_delay_connect(ngx_peer_connection_t *pc,
    ngx_http_idem_ctx_t *ctx, ngx_int_t rc, ngx_msec_t delay);
static void ngx_http_idem_backoff_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_idem_process_header(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_reinit_request(ngx_http_request_t *r);
static void ngx_http_idem_retry_after(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);


/*
 * Wraps the peer.init of every upstream, explicit or implicit; called only
 * when some location has "idem on".  Implicit upstreams (proxy_pass
 * host:port) have no srv_conf and always use round robin.
 */

ngx_int_t
ngx_http_idem_upstream_init(ngx_conf_t *cf)
{
    ngx_uint_t                      i;
    ngx_http_idem_srv_conf_t       *iscf;
    ngx_http_upstream_srv_conf_t  **uscfp;
    ngx_http_upstream_main_conf_t  *umcf;

    umcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_upstream_module);
    uscfp = umcf->upstreams.elts;

    for (i = 0; i < umcf->upstreams.nelts; i++) {

        if (uscfp[i]->srv_conf != NULL) {
            iscf = ngx_http_conf_upstream_srv_conf(uscfp[i],
                                                   ngx_http_idem_module);
            iscf->original_init = uscfp[i]->peer.init;
        }

        uscfp[i]->peer.init = ngx_http_idem_init_peer;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_int_t                  rc;
    ngx_http_upstream_t       *u;
    ngx_http_idem_ctx_t       *ctx;
    ngx_http_upstream_conf_t  *conf;
    ngx_http_idem_srv_conf_t  *iscf;
    ngx_http_idem_loc_conf_t  *ilcf;

    if (us->srv_conf != NULL) {
        iscf = ngx_http_conf_upstream_srv_conf(us, ngx_http_idem_module);
        rc = iscf->original_init(r, us);

    } else {
        rc = ngx_http_upstream_init_round_robin_peer(r, us);
    }

    if (rc != NGX_OK) {
        return rc;
    }

    /* subrequests (auth_request, mirror ...) are never retried by us */

    if (r != r->main) {
        return NGX_OK;
    }

    ctx = ngx_http_idem_get_ctx(r);
    if (ctx == NULL || ctx->balanced) {
        return NGX_OK;
    }

    /* the policy of the location that proxies (after a redirect, too) */

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);
    if (!ilcf->enable) {
        return NGX_OK;
    }

    u = r->upstream;
    ctx->conf = ilcf;

    ctx->balanced = 1;
    ctx->peer_data = u->peer.data;
    ctx->original_get = u->peer.get;
    ctx->original_free = u->peer.free;

    u->peer.data = ctx;
    u->peer.get = ngx_http_idem_get_peer;
    u->peer.free = ngx_http_idem_free_peer;

    /* a 429/503's Retry-After is read before nginx decides on a retry */

    if (ilcf->idempotent
        && (ilcf->retry_on & (NGX_HTTP_UPSTREAM_FT_HTTP_503
                              |NGX_HTTP_UPSTREAM_FT_HTTP_429)))
    {
        ctx->original_process_header = u->process_header;
        u->process_header = ngx_http_idem_process_header;

        ctx->original_reinit_request = u->reinit_request;
        u->reinit_request = ngx_http_idem_reinit_request;
    }

    /* the policy is per request: change a copy of the proxy's conf */

    conf = ngx_palloc(r->pool, sizeof(ngx_http_upstream_conf_t));
    if (conf == NULL) {
        return NGX_ERROR;
    }

    *conf = *u->conf;
    u->conf = conf;

    ctx->connect_timeout = conf->connect_timeout;

    conf->next_upstream_tries = 0;
    conf->next_upstream_timeout = 0;

    if (ilcf->idempotent) {
        conf->next_upstream = ilcf->retry_on
                              | NGX_HTTP_UPSTREAM_FT_NON_IDEMPOTENT;
        u->peer.tries = ilcf->retry_attempts;

    } else if (ilcf->retry_unsent) {
        /* free_peer allows the second try only when nothing was sent */
        conf->next_upstream = NGX_HTTP_UPSTREAM_FT_ERROR
                              | NGX_HTTP_UPSTREAM_FT_TIMEOUT;
        u->peer.tries = 2;

    } else {
        conf->next_upstream = NGX_HTTP_UPSTREAM_FT_OFF;
        u->peer.tries = 1;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_get_peer(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_idem_ctx_t *ctx = data;

    ngx_int_t                          rc;
    ngx_msec_t                         delay;
    ngx_msec_int_t                     left;
    ngx_http_request_t                *r;
    ngx_http_upstream_t               *u;

    r = ctx->request;
    u = r->upstream;

    ctx->attempt++;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, pc->log, 0,
                   "idem: attempt %ui", ctx->attempt);

    if (ctx->attempt > 1 || ctx->has_deadline) {
        if (ngx_http_idem_prepare_attempt(r, ctx) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    rc = ctx->original_get(pc, ctx->peer_data);

    /* every server was tried: more attempts than servers go round again */

    if (rc == NGX_BUSY && ctx->attempt > 1
        && ngx_http_idem_new_round(r, ctx) == NGX_OK)
    {
        rc = ctx->original_get(pc, ctx->peer_data);
    }

    if (rc != NGX_OK && rc != NGX_DONE) {
        return rc;
    }

    delay = (ctx->attempt > 1) ? ngx_http_idem_backoff(ctx) : 0;

    ctx->expire_after_backoff = 0;

    if (ctx->has_deadline) {
        left = ngx_http_idem_remaining(ctx);

        if (left <= 0) {
            delay = 0;
            ctx->expire_after_backoff = 1;

        } else if ((ngx_msec_int_t) delay >= left) {

            /* the wait would overrun the budget: wait it out, then 504 */

            delay = (ngx_msec_t) left;
            ctx->expire_after_backoff = 1;
        }
    }

    u->conf->connect_timeout = ctx->connect_timeout;

    /* an attempt that the budget will end before it connects is not one */

    if (!ctx->expire_after_backoff
        && ngx_http_idem_attempt_start(r, ctx) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (delay == 0 && !ctx->expire_after_backoff) {
        ngx_http_idem_arm_try_timer(ctx);
        return rc;
    }

    return ngx_http_idem_delay_connect(pc, ctx, rc, delay);
}


static void
ngx_http_idem_free_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state)
{
    ngx_http_idem_ctx_t *ctx = data;

    ngx_http_upstream_t  *u;

    u = ctx->request->upstream;

    ngx_http_idem_attempt_end(ctx->request, ctx, pc);

    ctx->original_free(pc, ctx->peer_data, state);

    if (ctx->try_ev.timer_set) {
        ngx_del_timer(&ctx->try_ev);
    }

    if (ctx->backoff_ev.timer_set) {
        ngx_del_timer(&ctx->backoff_ev);
    }

    if (state & NGX_PEER_FAILED && ngx_http_idem_may_retry(ctx, u)) {
        pc->tries = ctx->conf->idempotent
                    ? ctx->conf->retry_attempts - ctx->attempt : 1;
        return;
    }

    /*
     * No further attempt: nginx adds one back for a failed cached
     * (keepalive) connection after free, hence the mask too.
     */

    pc->tries = 0;
    u->conf->next_upstream = NGX_HTTP_UPSTREAM_FT_OFF;
}


static ngx_uint_t
ngx_http_idem_may_retry(ngx_http_idem_ctx_t *ctx, ngx_http_upstream_t *u)
{
    ngx_http_request_t        *r;
    ngx_http_idem_loc_conf_t  *ilcf;

    r = ctx->request;
    ilcf = ctx->conf;

    if (r->connection->error) {
        return 0;
    }

    if (ilcf->idempotent) {
        if (ctx->attempt >= ilcf->retry_attempts) {
            return 0;
        }

    } else if (!ilcf->retry_unsent || ctx->attempt >= 2 || u->request_sent) {
        return 0;
    }

    /* an unbuffered body that was sent cannot be sent again */

    if (u->request_sent && r->request_body_no_buffering) {
        return 0;
    }

    if (ctx->has_deadline && ngx_http_idem_remaining(ctx) <= 0) {
        return 0;
    }

    return 1;
}


/* full jitter: uniform in [0, min(max_backoff, backoff * 2^(k-1))) */

static ngx_msec_t
ngx_http_idem_backoff(ngx_http_idem_ctx_t *ctx)
{
    ngx_uint_t                 k;
    ngx_msec_t                 cap, delay;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ctx->conf;
    k = ctx->attempt - 1;

    cap = ilcf->retry_backoff;

    while (--k && cap < ilcf->retry_max_backoff) {
        cap *= 2;
    }

    cap = ngx_min(cap, ilcf->retry_max_backoff);

    delay = cap ? (ngx_msec_t) ngx_random() % cap : 0;

    /* the upstream's Retry-After can only make the wait longer */

    delay = ngx_max(delay, ctx->retry_after);
    ctx->retry_after = 0;

    return delay;
}


/*
 * create_request runs once per call; for a new attempt number, span id and
 * remaining budget the request is built again, from the same body.
 */

static ngx_int_t
ngx_http_idem_prepare_attempt(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_uint_t            grpc;
    ngx_http_upstream_t  *u;

    u = r->upstream;

    grpc = (u->schema.len >= 4
            && ngx_strncmp(u->schema.data, "grpc", 4) == 0);

    if (ngx_http_idem_set_attempt_headers(r, ctx, grpc) != NGX_OK) {
        return NGX_ERROR;
    }

    if (r->request_body && !r->request_body_no_buffering) {
        u->request_bufs = r->request_body->bufs;

    } else {
        u->request_bufs = NULL;
    }

    return u->create_request(r);
}


/*
 * Waits "delay" before connecting, without blocking: the chosen peer gets
 * a socket that is neither connected nor watched yet (an unconnected
 * socket reports ready at once), nginx arms its connect timer (stretched
 * past the delay) and waits for a write event that only our timer makes
 * happen.
 */

static ngx_int_t
ngx_http_idem_delay_connect(ngx_peer_connection_t *pc,
    ngx_http_idem_ctx_t *ctx, ngx_int_t rc, ngx_msec_t delay)
{
    ngx_socket_t       s;
    ngx_connection_t  *c;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, pc->log, 0,
                   "idem: backoff %M ms", delay);

    if (rc == NGX_DONE) {

        /* a cached keepalive connection is given up for a fresh one */

        c = pc->connection;

        if (c->pool) {
            ngx_destroy_pool(c->pool);
        }

        ngx_close_connection(c);

        pc->connection = NULL;
        pc->cached = 0;
    }

    s = ngx_socket(pc->sockaddr->sa_family, SOCK_STREAM, 0);
    if (s == (ngx_socket_t) -1) {
        ngx_log_error(NGX_LOG_ALERT, pc->log, ngx_socket_errno,
                      ngx_socket_n " failed");
        return NGX_ERROR;
    }

    c = ngx_get_connection(s, pc->log);
    if (c == NULL) {
        if (ngx_close_socket(s) == -1) {
            ngx_log_error(NGX_LOG_ALERT, pc->log, ngx_socket_errno,
                          ngx_close_socket_n " failed");
        }

        return NGX_ERROR;
    }

    if (ngx_nonblocking(s) == -1) {
        ngx_log_error(NGX_LOG_ALERT, pc->log, ngx_socket_errno,
                      ngx_nonblocking_n " failed");
        ngx_close_connection(c);
        return NGX_ERROR;
    }

    if (pc->local
        && bind(s, pc->local->sockaddr, pc->local->socklen) == -1)
    {
        ngx_log_error(NGX_LOG_CRIT, pc->log, ngx_socket_errno,
                      "bind(%V) failed", &pc->local->name);
        ngx_close_connection(c);
        return NGX_ERROR;
    }

    c->type = SOCK_STREAM;
    c->recv = ngx_recv;
    c->send = ngx_send;
    c->recv_chain = ngx_recv_chain;
    c->send_chain = ngx_send_chain;
    c->sendfile = 1;

    if (pc->sockaddr->sa_family == AF_UNIX) {
        c->tcp_nopush = NGX_TCP_NOPUSH_DISABLED;
        c->tcp_nodelay = NGX_TCP_NODELAY_DISABLED;
    }

    c->log_error = pc->log_error;
    c->read->log = pc->log;
    c->write->log = pc->log;
    c->number = ngx_atomic_fetch_add(ngx_connection_counter, 1);
    c->start_time = ngx_current_msec;

    pc->connection = c;

    /* nginx arms the write event with this: the delay, then the real one */

    ctx->request->upstream->conf->connect_timeout = delay
                                                    + ctx->connect_timeout;

    ctx->backoff_ev.handler = ngx_http_idem_backoff_handler;
    ctx->backoff_ev.data = ctx;
    ctx->backoff_ev.log = pc->log;

    ngx_add_timer(&ctx->backoff_ev, delay ? delay : 1);

    return NGX_AGAIN;
}


static void
ngx_http_idem_backoff_handler(ngx_event_t *ev)
{
    int                     rc;
    ngx_err_t               err;
    ngx_connection_t       *c;
    ngx_http_upstream_t    *u;
    ngx_http_idem_ctx_t    *ctx;
    ngx_peer_connection_t  *pc;

    ctx = ev->data;
    u = ctx->request->upstream;
    pc = &u->peer;
    c = pc->connection;

    if (c == NULL) {
        return;
    }

    if (ctx->expire_after_backoff) {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                       "idem: budget spent before the attempt");
        goto timedout;
    }

    ngx_http_idem_arm_try_timer(ctx);

    if (ngx_add_conn && ngx_add_conn(c) == NGX_ERROR) {
        goto timedout;
    }

    rc = connect(c->fd, pc->sockaddr, pc->socklen);

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    if (rc == 0) {
        c->write->ready = 1;
        ngx_add_timer(c->write, ctx->connect_timeout);
        ngx_post_event(c->write, &ngx_posted_events);
        return;
    }

    err = ngx_socket_errno;

    if (err == NGX_EINPROGRESS) {
        ngx_add_timer(c->write, ctx->connect_timeout);
        return;
    }

    /*
     * An immediate failure (seen on unix sockets): its error is not left
     * in SO_ERROR for nginx to find, so the attempt ends as a timeout,
     * with nothing sent.
     */

    ngx_log_error(NGX_LOG_ERR, c->log, err, "connect() to %V failed",
                  pc->name);

timedout:

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    c->write->timedout = 1;
    ngx_post_event(c->write, &ngx_posted_events);
}


/*
 * Wraps u->process_header.  Proxy replaces its status line parser with its
 * header parser halfway through, and reinit_request puts the status line
 * parser back for every new attempt: the wrapper re-installs itself.
 */

static ngx_int_t
ngx_http_idem_process_header(ngx_http_request_t *r)
{
    ngx_int_t             rc;
    ngx_http_upstream_t  *u;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);
    u = r->upstream;

    rc = ctx->original_process_header(r);

    if (u->process_header != ngx_http_idem_process_header) {
        ctx->original_process_header = u->process_header;
        u->process_header = ngx_http_idem_process_header;
    }

    if (rc == NGX_OK) {
        ngx_http_idem_retry_after(r, ctx);
    }

    return rc;
}


static ngx_int_t
ngx_http_idem_reinit_request(ngx_http_request_t *r)
{
    ngx_int_t             rc;
    ngx_http_upstream_t  *u;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);
    u = r->upstream;

    rc = ctx->original_reinit_request(r);

    if (u->process_header != ngx_http_idem_process_header) {
        ctx->original_process_header = u->process_header;
        u->process_header = ngx_http_idem_process_header;
    }

    return rc;
}


/*
 * A 429 or 503 with Retry-After (seconds or an HTTP date): the next attempt
 * waits at least that long; when that would overrun the budget there is no
 * next attempt, and the client gets the upstream's own answer.
 */

static void
ngx_http_idem_retry_after(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    time_t                     t;
    ngx_int_t                  n;
    ngx_uint_t                 i, status;
    ngx_msec_t                 delay;
    ngx_list_part_t           *part;
    ngx_table_elt_t           *h;
    ngx_http_upstream_t       *u;
    ngx_http_idem_loc_conf_t  *ilcf;

    u = r->upstream;
    ilcf = ctx->conf;
    status = u->headers_in.status_n;

    if (!((status == NGX_HTTP_SERVICE_UNAVAILABLE
           && (ilcf->retry_on & NGX_HTTP_UPSTREAM_FT_HTTP_503))
          || (status == NGX_HTTP_TOO_MANY_REQUESTS
              && (ilcf->retry_on & NGX_HTTP_UPSTREAM_FT_HTTP_429))))
    {
        return;
    }

    part = &u->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == sizeof("Retry-After") - 1
            && ngx_strncasecmp(h[i].key.data, (u_char *) "Retry-After",
                               sizeof("Retry-After") - 1)
               == 0)
        {
            break;
        }
    }

    n = ngx_atoi(h[i].value.data, h[i].value.len);

    if (n == NGX_ERROR) {
        t = ngx_parse_http_time(h[i].value.data, h[i].value.len);

        if (t == NGX_ERROR) {
            return;
        }

        n = ngx_max(t - ngx_time(), 0);
    }

    delay = (n > NGX_MAX_INT32_VALUE / 1000) ? NGX_MAX_INT32_VALUE
                                              : (ngx_msec_t) n * 1000;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem: upstream asks to retry after %M ms", delay);

    if (ctx->has_deadline
        && (ngx_msec_int_t) delay >= ngx_http_idem_remaining(ctx))
    {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idem: no further attempt, Retry-After %i s does "
                      "not fit in the budget", n);

        u->peer.tries = 1;
        return;
    }

    ctx->retry_after = delay;
}

