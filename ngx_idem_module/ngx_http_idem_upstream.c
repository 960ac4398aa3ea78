
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


#include "ngx_http_idem_upstream.h"
#include "ngx_http_idem_ctx.h"
#include "ngx_http_idem_deadline.h"
#include "ngx_http_idem_grpc.h"
#include "ngx_http_idem_headers.h"
#include "ngx_http_idem_record.h"
#include "ngx_http_idem_round.h"
#include "ngx_http_idem_storm.h"
#include "ngx_http_idem_util.h"


/*
 * The longest wait a Retry-After may ask of a call without a budget, unless
 * max_backoff is longer: a longer one gets no further attempt.
 */
#define NGX_HTTP_IDEM_RETRY_AFTER_MAX  10000


static ngx_int_t ngx_http_idem_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us);
static void ngx_http_idem_run_on(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_http_upstream_conf_t *conf);
static ngx_int_t ngx_http_idem_get_peer(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_idem_free_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state);
static void ngx_http_idem_notify_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t type);
#if (NGX_HTTP_SSL)
static ngx_int_t ngx_http_idem_set_session(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_idem_save_session(ngx_peer_connection_t *pc, void *data);
#endif
static ngx_int_t ngx_http_idem_chosen_peer(ngx_peer_connection_t *pc,
    void *data);
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
static void ngx_http_idem_grpc_retry(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static void ngx_http_idem_delay_next(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_msec_t delay);
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
    if (ctx == NULL || ctx->ids.attempt_h == NULL) {
        return NGX_OK;
    }

    /*
     * Every upstream the call reaches is wrapped: the first one, and one
     * reached later through error_page, a named location or
     * X-Accel-Redirect.  The policy is the proxying location's, or, where
     * that location has "idem off", the one the call had so far.
     */

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);
    if (ilcf->enable) {
        ctx->conf = ilcf;
    }

    ilcf = ctx->conf;
    u = r->upstream;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem: upstream %s, from attempt %ui",
                   ctx->upstream.balanced ? "reached again" : "wrapped",
                   ctx->upstream.attempt + 1);

    /* an open breaker answers here: NGX_DONE, the upstream is done with */

    if (ngx_http_idem_storm_admit(r, ctx, us) != NGX_OK) {
        return NGX_ERROR;
    }

    ctx->upstream.balanced = 1;
    ctx->upstream.first_attempt = ctx->upstream.attempt + 1;
    ctx->upstream.retry_after = 0;
    ctx->upstream.expire_after_backoff = 0;

    ctx->upstream.peer_data = u->peer.data;
    ctx->upstream.original_get = u->peer.get;
    ctx->upstream.original_free = u->peer.free;

    u->peer.data = ctx;
    u->peer.get = ngx_http_idem_get_peer;
    u->peer.free = ngx_http_idem_free_peer;

    /*
     * The whole peer contract goes through the module, as in the keepalive
     * module: the original balancer must never be handed our data.
     */

    ctx->upstream.original_notify = u->peer.notify;

    if (u->peer.notify) {
        u->peer.notify = ngx_http_idem_notify_peer;
    }

#if (NGX_HTTP_SSL)
    ctx->upstream.original_set_session = u->peer.set_session;
    ctx->upstream.original_save_session = u->peer.save_session;

    if (u->peer.set_session) {
        u->peer.set_session = ngx_http_idem_set_session;
    }

    if (u->peer.save_session) {
        u->peer.save_session = ngx_http_idem_save_session;
    }
#endif

    /* a 429/503's Retry-After is read before nginx decides on a retry */

    if (ilcf->idempotent
        && (ilcf->retry_on & (NGX_HTTP_UPSTREAM_FT_HTTP_503
                              |NGX_HTTP_UPSTREAM_FT_HTTP_429)))
    {
        ctx->upstream.original_process_header = u->process_header;
        u->process_header = ngx_http_idem_process_header;

        ctx->upstream.original_reinit_request = u->reinit_request;
        u->reinit_request = ngx_http_idem_reinit_request;
    }

    /* the policy is per request: change a copy of the proxy's conf */

    conf = ngx_palloc(r->pool, sizeof(ngx_http_upstream_conf_t));
    if (conf == NULL) {
        return NGX_ERROR;
    }

    *conf = *u->conf;
    u->conf = conf;

    ctx->upstream.connect_timeout = conf->connect_timeout;

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

    if (ctx->dedupe.owner
        && ilcf->dedupe_client_abort == NGX_HTTP_IDEM_CLIENT_ABORT_RUN)
    {
        ngx_http_idem_run_on(r, ctx, conf);
    }

    return NGX_OK;
}


/*
 * A claim's owner runs its upstream call to its end when its client goes
 * (idem_dedupe_client_abort run): its answer is kept for the resend,
 * where an abort would leave the call UNKNOWN.  The budget and the
 * upstream's timeouts still end it.  nginx set its checks of the client
 * from the location's conf before this init ran: they are undone as
 * ignore_client_abort would have left them (the body is read whole on a
 * dedupe route).
 */

static void
ngx_http_idem_run_on(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_upstream_conf_t *conf)
{
    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem dedupe: the owner's call runs on if its client goes");

    ctx->upstream.run_on = 1;

    if (conf->ignore_client_abort || conf->store || r->post_action) {
        return;
    }

    conf->ignore_client_abort = 1;

    if (!r->reading_body) {
        r->read_event_handler = ngx_http_block_reading;
    }

    r->write_event_handler = ngx_http_request_empty_handler;
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

    ctx->upstream.attempt++;

    /* a 504 of nginx's for this attempt comes with no redirect since */

    ctx->upstream.uri_changes = r->uri_changes;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, pc->log, 0,
                   "idem: attempt %ui", ctx->upstream.attempt);

    if (ctx->upstream.attempt > 1 || ctx->deadline.set) {
        if (ngx_http_idem_prepare_attempt(r, ctx) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    rc = ctx->upstream.original_get(pc, ctx->upstream.peer_data);

    /* every server was tried: more attempts than servers go round again */

    if (rc == NGX_BUSY && ctx->upstream.attempt > ctx->upstream.first_attempt
        && ngx_http_idem_new_round(r, ctx) == NGX_OK)
    {
        rc = ctx->upstream.original_get(pc, ctx->upstream.peer_data);
    }

    if (rc != NGX_OK && rc != NGX_DONE) {
        return rc;
    }

    delay = (ctx->upstream.attempt > ctx->upstream.first_attempt)
            ? ngx_http_idem_backoff(ctx) : 0;

    ctx->upstream.expire_after_backoff = 0;

    if (ctx->deadline.set) {
        left = ngx_http_idem_remaining(ctx);

        if (left <= 0) {
            delay = 0;
            ctx->upstream.expire_after_backoff = 1;

        } else if ((ngx_msec_int_t) delay >= left) {

            /* the wait would overrun the budget: wait it out, then 504 */

            delay = (ngx_msec_t) left;
            ctx->upstream.expire_after_backoff = 1;
        }
    }

    u->conf->connect_timeout = ctx->upstream.connect_timeout;

    /* an attempt that the budget will end before it connects is not one */

    if (!ctx->upstream.expire_after_backoff) {
        if (ngx_http_idem_attempt_start(r, ctx) != NGX_OK) {
            return NGX_ERROR;
        }

        ngx_http_idem_storm_attempt(ctx);
    }

    if (delay == 0 && !ctx->upstream.expire_after_backoff) {
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

    ngx_uint_t            waiting;
    ngx_http_upstream_t  *u;

    u = ctx->request->upstream;

    ngx_http_idem_attempt_end(ctx->request, ctx, pc);

    ctx->upstream.original_free(pc, ctx->upstream.peer_data, state);

    if (ctx->deadline.try_ev.timer_set) {
        ngx_del_timer(&ctx->deadline.try_ev);
    }

    waiting = ctx->upstream.backoff_ev.timer_set;

    if (waiting) {
        ngx_del_timer(&ctx->upstream.backoff_ev);
    }

    /*
     * An attempt ended while it still waited for its backoff: the worker
     * is shutting down (worker_shutdown_timeout), the client left, or the
     * budget ended.  No further attempt then.
     */

    if (waiting && (ngx_exiting || ngx_terminate || ngx_quit)) {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, pc->log, 0,
                       "idem: worker exiting during a backoff, no retry");

    } else if (state & NGX_PEER_FAILED && ngx_http_idem_may_retry(ctx, u)) {
        pc->tries = ctx->conf->idempotent
                    ? ctx->conf->retry_attempts
                      - (ctx->upstream.attempt
                         - ctx->upstream.first_attempt + 1)
                    : 1;
        return;
    }

    /*
     * No further attempt: nginx adds one back for a failed cached
     * (keepalive) connection after free, hence the mask too.
     */

    pc->tries = 0;
    u->conf->next_upstream = NGX_HTTP_UPSTREAM_FT_OFF;
}


static void
ngx_http_idem_notify_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t type)
{
    ngx_http_idem_ctx_t *ctx = data;

    if (ctx->upstream.original_notify != NULL) {
        ctx->upstream.original_notify(pc, ctx->upstream.peer_data, type);
    }
}


#if (NGX_HTTP_SSL)

/* proxy_ssl_session_reuse: the balancer keeps sessions in its own data */

static ngx_int_t
ngx_http_idem_set_session(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_idem_ctx_t *ctx = data;

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, pc->log, 0, "idem: set session");

    return ctx->upstream.original_set_session(pc, ctx->upstream.peer_data);
}


static void
ngx_http_idem_save_session(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_idem_ctx_t *ctx = data;

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, pc->log, 0, "idem: save session");

    ctx->upstream.original_save_session(pc, ctx->upstream.peer_data);
}

#endif


static ngx_uint_t
ngx_http_idem_may_retry(ngx_http_idem_ctx_t *ctx, ngx_http_upstream_t *u)
{
    ngx_uint_t                 n;
    ngx_http_request_t        *r;
    ngx_http_idem_loc_conf_t  *ilcf;

    r = ctx->request;
    ilcf = ctx->conf;

    /* an owner that runs on retries for the resend (client_abort run) */

    if (r->connection->error && !ctx->upstream.run_on) {
        return 0;
    }

    n = ctx->upstream.attempt - ctx->upstream.first_attempt + 1;

    if (ilcf->idempotent) {
        if (n >= ilcf->retry_attempts) {
            return 0;
        }

    } else if (!ilcf->retry_unsent || n >= 2 || u->request_sent) {
        return 0;
    }

    /* an unbuffered body that was sent cannot be sent again */

    if (u->request_sent && r->request_body_no_buffering) {
        return 0;
    }

    if (ctx->deadline.set && ngx_http_idem_remaining(ctx) <= 0) {
        return 0;
    }

    /* the upstream's retry budget, shared by all workers (storm.c) */

    return ngx_http_idem_storm_retry(ctx);
}


/* full jitter: uniform in [0, min(max_backoff, backoff * 2^(k-1))) */

static ngx_msec_t
ngx_http_idem_backoff(ngx_http_idem_ctx_t *ctx)
{
    ngx_uint_t                 k;
    ngx_msec_t                 cap, delay;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ctx->conf;
    k = ctx->upstream.attempt - ctx->upstream.first_attempt;

    cap = ilcf->retry_backoff;

    while (--k && cap < ilcf->retry_max_backoff) {
        cap *= 2;
    }

    cap = ngx_min(cap, ilcf->retry_max_backoff);

    delay = cap ? (ngx_msec_t) ngx_random() % cap : 0;

    /* the upstream's Retry-After can only make the wait longer */

    delay = ngx_max(delay, ctx->upstream.retry_after);
    ctx->upstream.retry_after = 0;

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
 * Waits "delay" before connecting, without blocking.  nginx needs a
 * connection when get returns NGX_AGAIN: it gets a stand-in, a socket that
 * is neither bound, connected nor watched, whose connect timer nginx arms
 * (stretched past the delay).  When the delay is over, nginx's own
 * ngx_event_connect_peer() makes the real connection (proxy_bind,
 * transparent, socket keepalive, rcvbuf, event registration for every
 * event method) and it takes the stand-in's place.
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

    c->type = SOCK_STREAM;
    c->recv = ngx_recv;
    c->send = ngx_send;
    c->recv_chain = ngx_recv_chain;
    c->send_chain = ngx_send_chain;
    c->sendfile = 1;
    c->log_error = pc->log_error;
    c->read->log = pc->log;
    c->write->log = pc->log;
    c->number = ngx_atomic_fetch_add(ngx_connection_counter, 1);
    c->start_time = ngx_current_msec;

    pc->connection = c;

    /* nginx arms the write event with this: the delay, then the real one */

    ctx->request->upstream->conf->connect_timeout =
                                        delay + ctx->upstream.connect_timeout;

    ctx->upstream.backoff_ev.handler = ngx_http_idem_backoff_handler;
    ctx->upstream.backoff_ev.data = ctx;
    ctx->upstream.backoff_ev.log = pc->log;

    ngx_add_timer(&ctx->upstream.backoff_ev, delay ? delay : 1);

    return NGX_AGAIN;
}


/* the peer was chosen before the backoff: ngx_event_connect_peer's get */

static ngx_int_t
ngx_http_idem_chosen_peer(ngx_peer_connection_t *pc, void *data)
{
    return NGX_OK;
}


static void
ngx_http_idem_backoff_handler(ngx_event_t *ev)
{
    ngx_int_t               rc;
    ngx_connection_t       *c, *stand_in;
    ngx_http_upstream_t    *u;
    ngx_http_idem_ctx_t    *ctx;
    ngx_peer_connection_t  *pc;

    ctx = ev->data;
    u = ctx->request->upstream;
    pc = &u->peer;
    stand_in = pc->connection;

    if (stand_in == NULL) {
        return;
    }

    if (stand_in->write->timer_set) {
        ngx_del_timer(stand_in->write);
    }

    if (ctx->upstream.expire_after_backoff) {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                       "idem: budget spent before the attempt");
        goto timedout;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "idem: backoff over, connecting");

    ngx_http_idem_arm_try_timer(ctx);

    pc->get = ngx_http_idem_chosen_peer;
    pc->connection = NULL;

    rc = ngx_event_connect_peer(pc);

    pc->get = ngx_http_idem_get_peer;

    if (rc != NGX_OK && rc != NGX_AGAIN) {

        /*
         * The connect failed at once (logged by nginx): the stand-in ends
         * the attempt, as a timeout, with nothing sent.
         */

        pc->connection = stand_in;
        goto timedout;
    }

    /* what ngx_http_upstream_connect() set on the stand-in */

    c = pc->connection;

    c->data = stand_in->data;
    c->read->handler = stand_in->read->handler;
    c->write->handler = stand_in->write->handler;
    c->requests = stand_in->requests;
    c->sendfile &= stand_in->sendfile;

    if (stand_in->tcp_nopush == NGX_TCP_NOPUSH_DISABLED) {
        c->tcp_nopush = NGX_TCP_NOPUSH_DISABLED;
    }

    c->pool = stand_in->pool;
    stand_in->pool = NULL;

    c->log = stand_in->log;
    c->pool->log = c->log;
    c->read->log = c->log;
    c->write->log = c->log;

    u->writer.connection = c;
    u->output.sendfile = c->sendfile;

    ngx_close_connection(stand_in);

    ngx_add_timer(c->write, ctx->upstream.connect_timeout);

    if (rc == NGX_OK) {
        ngx_post_event(c->write, &ngx_posted_events);
    }

    return;

timedout:

    c = pc->connection;

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

    rc = ctx->upstream.original_process_header(r);

    if (u->process_header != ngx_http_idem_process_header) {
        ctx->upstream.original_process_header = u->process_header;
        u->process_header = ngx_http_idem_process_header;
    }

    if (rc == NGX_OK) {
        if (ctx->grpc.on) {
            ngx_http_idem_grpc_retry(r, ctx);
        }

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

    rc = ctx->upstream.original_reinit_request(r);

    if (u->process_header != ngx_http_idem_process_header) {
        ctx->upstream.original_process_header = u->process_header;
        u->process_header = ngx_http_idem_process_header;
    }

    return rc;
}


/*
 * A 429 or 503 with Retry-After (seconds or an HTTP date): the next attempt
 * waits at least that long.  When that would overrun the budget, or, on a
 * route without a budget, when it is longer than 10 s and max_backoff,
 * there is no next attempt: the client gets the upstream's own answer,
 * Retry-After included, instead of a call parked for minutes (or weeks) on
 * a socket.
 */

static void
ngx_http_idem_retry_after(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    time_t                     t;
    ngx_int_t                  n;
    ngx_uint_t                 status;
    ngx_msec_t                 delay;
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

    h = ngx_http_idem_header_find(&u->headers_in.headers, "Retry-After",
                                  sizeof("Retry-After") - 1);
    if (h == NULL) {
        return;
    }

    n = ngx_atoi(h->value.data, h->value.len);

    if (n == NGX_ERROR) {
        t = ngx_parse_http_time(h->value.data, h->value.len);

        if (t == NGX_ERROR) {
            return;
        }

        n = ngx_max(t - ngx_time(), 0);
    }

    delay = (n > NGX_MAX_INT32_VALUE / 1000) ? NGX_MAX_INT32_VALUE
                                              : (ngx_msec_t) n * 1000;

    ngx_http_idem_delay_next(r, ctx, delay);
}


/*
 * The upstream asks for "delay" ms before the next attempt: the attempt
 * waits at least that long, or there is none when it would overrun the
 * budget (the client then gets the upstream's own answer).
 */

static void
ngx_http_idem_delay_next(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_msec_t delay)
{
    ngx_http_upstream_t  *u;

    u = r->upstream;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem: upstream asks to retry after %M ms", delay);

    /* without a budget, the wait has a cap of its own */

    if (!ctx->deadline.set
        && delay > ngx_max(ctx->conf->retry_max_backoff,
                           NGX_HTTP_IDEM_RETRY_AFTER_MAX))
    {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idem: no further attempt, the upstream's wait of "
                      "%M ms is longer than a call without a budget may "
                      "wait", delay);
        goto last;
    }

    if (ctx->deadline.set
        && (ngx_msec_int_t) delay >= ngx_http_idem_remaining(ctx))
    {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idem: no further attempt, the upstream's wait of "
                      "%M ms does not fit in the budget", delay);
        goto last;
    }

    ctx->upstream.retry_after = delay;
    return;

last:

    /* the client gets the upstream's own answer, a gRPC one as it came */

    u->peer.tries = 1;

    if (ctx->grpc.retry_status) {
        u->headers_in.status_n = NGX_HTTP_OK;
        ctx->grpc.retry_status = 0;
    }
}


/*
 * A gRPC upstream's Trailers-Only UNAVAILABLE (RESOURCE_EXHAUSTED) is the
 * retry rule's http_503 (http_429): where "on=" lists it and a further
 * attempt may follow, nginx is shown that status so that it asks the
 * balancer for the next attempt; grpc-retry-pushback-ms is its
 * Retry-After (negative: no retry).  The answer that reaches the client
 * gets its 200 back (grpc.c).
 */

static void
ngx_http_idem_grpc_retry(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_uint_t            status, mask;
    ngx_msec_int_t        delay;
    ngx_http_upstream_t  *u;

    u = r->upstream;
    ctx->grpc.retry_status = 0;

    status = ngx_http_idem_grpc_retryable(r, &delay);

    if (status == 0 || u->peer.tries <= 1) {
        return;
    }

    mask = (status == NGX_HTTP_SERVICE_UNAVAILABLE)
           ? NGX_HTTP_UPSTREAM_FT_HTTP_503 : NGX_HTTP_UPSTREAM_FT_HTTP_429;

    if (!(ctx->conf->retry_on & mask)
        || !(u->conf->next_upstream & mask))
    {
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem grpc: retryable grpc-status, seen as %ui", status);

    u->headers_in.status_n = status;
    ctx->grpc.retry_status = status;

    if (delay >= 0) {
        ngx_http_idem_delay_next(r, ctx, (ngx_msec_t) delay);
    }
}

