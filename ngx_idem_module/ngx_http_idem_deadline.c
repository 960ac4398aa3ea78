
/*
 * Deadline budgets: the route's budget, shrunk by what the caller allows,
 * counted from the request's arrival; and the timers that end an attempt
 * when the budget (or the attempt's own per_try_timeout) runs out.
 */


#include "ngx_http_idem_deadline.h"
#include "ngx_http_idem_problem.h"


static ngx_int_t ngx_http_idem_parse_deadline(ngx_str_t *value,
    ngx_msec_t *ms);
static ngx_int_t ngx_http_idem_parse_grpc_timeout(ngx_str_t *value,
    ngx_msec_t *ms);
static void ngx_http_idem_expire_handler(ngx_event_t *ev);


/*
 * Settles the request's budget: min(idem_deadline, the inbound deadline
 * header, the inbound grpc-timeout).  NGX_DECLINED: a bad inbound value.
 */

ngx_int_t
ngx_http_idem_deadline_init(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_problem_t *problem)
{
    ngx_msec_t       budget, ms;
    ngx_time_t      *tp;
    ngx_msec_int_t   elapsed;

    budget = ilcf->deadline ? ilcf->deadline : NGX_MAX_INT32_VALUE;

    if (in->deadline_count) {
        if (in->deadline_count > 1) {
            ngx_http_idem_problem_set(r, problem,
                                      NGX_HTTP_IDEM_P_INVALID_DEADLINE,
                                      &ilcf->deadline_header.name,
                                      "sent more than once");
            return NGX_DECLINED;
        }

        if (ngx_http_idem_parse_deadline(&in->deadline->value, &ms)
            != NGX_OK)
        {
            ngx_http_idem_problem_set(r, problem,
                                      NGX_HTTP_IDEM_P_INVALID_DEADLINE,
                                      &ilcf->deadline_header.name,
                                      "not a number of milliseconds "
                                      "from 0 to 2147483647");
            return NGX_DECLINED;
        }

        budget = ngx_min(budget, ms);
    }

    if (in->grpc_timeout_count) {
        if (in->grpc_timeout_count > 1
            || ngx_http_idem_parse_grpc_timeout(&in->grpc_timeout->value, &ms)
               != NGX_OK)
        {
            ngx_http_idem_problem_set(r, problem,
                                      NGX_HTTP_IDEM_P_INVALID_DEADLINE,
                                      &in->grpc_timeout->key,
                                      "not a valid gRPC timeout");
            return NGX_DECLINED;
        }

        budget = ngx_min(budget, ms);
    }

    if (ilcf->deadline == 0 && in->deadline_count == 0
        && in->grpc_timeout_count == 0)
    {
        return NGX_OK;
    }

    /* counted from the arrival of the request, not from now */

    tp = ngx_timeofday();
    elapsed = (ngx_msec_int_t) ((tp->sec - r->start_sec) * 1000
                                + (tp->msec - r->start_msec));
    if (elapsed < 0) {
        elapsed = 0;
    }

    ctx->deadline.at = ngx_current_msec + budget - elapsed;
    ctx->deadline.set = 1;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem deadline: budget %M ms, %M ms spent on arrival",
                   budget, (ngx_msec_t) elapsed);

    return NGX_OK;
}


/* digits only: a sign, a space or a fraction is a client error */

static ngx_int_t
ngx_http_idem_parse_deadline(ngx_str_t *value, ngx_msec_t *ms)
{
    ngx_int_t  n;

    if (value->len == 0 || value->len > 10) {
        return NGX_ERROR;
    }

    n = ngx_atoi(value->data, value->len);

    if (n == NGX_ERROR || n > NGX_MAX_INT32_VALUE) {
        return NGX_ERROR;
    }

    *ms = (ngx_msec_t) n;

    return NGX_OK;
}


/* gRPC over HTTP/2: TimeoutValue (1 to 8 digits) and TimeoutUnit */

static ngx_int_t
ngx_http_idem_parse_grpc_timeout(ngx_str_t *value, ngx_msec_t *ms)
{
    uint64_t   v;
    ngx_int_t  n;

    if (value->len < 2 || value->len > 9) {
        return NGX_ERROR;
    }

    n = ngx_atoi(value->data, value->len - 1);
    if (n == NGX_ERROR) {
        return NGX_ERROR;
    }

    v = (uint64_t) n;

    switch (value->data[value->len - 1]) {
    case 'H':
        v *= 3600000;
        break;
    case 'M':
        v *= 60000;
        break;
    case 'S':
        v *= 1000;
        break;
    case 'm':
        break;
    case 'u':
        v /= 1000;
        break;
    case 'n':
        v /= 1000000;
        break;
    default:
        return NGX_ERROR;
    }

    *ms = (ngx_msec_t) ngx_min(v, (uint64_t) NGX_MAX_INT32_VALUE);

    return NGX_OK;
}


/*
 * An outbound grpc-timeout: gRPC allows at most 8 digits before the unit,
 * so a budget over 99999999 ms goes in seconds, minutes or hours, rounded
 * down (a timeout that ends a little early never extends the budget).
 * p has room for 9 bytes.
 */

u_char *
ngx_http_idem_grpc_timeout(u_char *p, ngx_msec_t ms)
{
    if (ms <= NGX_HTTP_IDEM_GRPC_TIMEOUT_MAX) {
        return ngx_sprintf(p, "%Mm", ms);
    }

    ms /= 1000;

    if (ms <= NGX_HTTP_IDEM_GRPC_TIMEOUT_MAX) {
        return ngx_sprintf(p, "%MS", ms);
    }

    ms /= 60;

    if (ms <= NGX_HTTP_IDEM_GRPC_TIMEOUT_MAX) {
        return ngx_sprintf(p, "%MM", ms);
    }

    ms = ngx_min(ms / 60, NGX_HTTP_IDEM_GRPC_TIMEOUT_MAX);

    return ngx_sprintf(p, "%MH", ms);
}


/* what is left of the budget, in ms; negative once it is spent */

ngx_msec_int_t
ngx_http_idem_remaining(ngx_http_idem_ctx_t *ctx)
{
    return (ngx_msec_int_t) (ctx->deadline.at - ngx_current_msec);
}


/*
 * Before the first attempt (after access checks): a spent budget is
 * answered at once; otherwise a timer ends the call when it runs out.
 */

ngx_int_t
ngx_http_idem_deadline_start(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_msec_int_t  left;

    if (!ctx->deadline.set || ctx->deadline.ev.timer_set) {
        return NGX_OK;
    }

    left = ngx_http_idem_remaining(ctx);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem deadline: %i ms left before the first attempt",
                   (ngx_int_t) left);

    if (left <= 0) {
        return NGX_DECLINED;
    }

    ctx->deadline.ev.handler = ngx_http_idem_expire_handler;
    ctx->deadline.ev.data = ctx;
    ctx->deadline.ev.log = r->connection->log;

    ngx_add_timer(&ctx->deadline.ev, (ngx_msec_t) left);

    return NGX_OK;
}


void
ngx_http_idem_arm_try_timer(ngx_http_idem_ctx_t *ctx)
{
    ngx_msec_t  timeout;

    timeout = ctx->conf->retry_per_try_timeout;

    if (ctx->deadline.try_ev.timer_set) {
        ngx_del_timer(&ctx->deadline.try_ev);
    }

    if (timeout == 0) {
        return;
    }

    ctx->deadline.try_ev.handler = ngx_http_idem_expire_handler;
    ctx->deadline.try_ev.data = ctx;
    ctx->deadline.try_ev.log = ctx->request->connection->log;

    ngx_add_timer(&ctx->deadline.try_ev, timeout);
}


/*
 * The budget or the attempt's time ran out.  nginx's own timeout path does
 * the rest: the upstream connection's event is marked timed out and posted,
 * so the attempt ends as a timeout (a retry when allowed, else a 504).  A
 * response whose header was already sent is never cut.
 */

static void
ngx_http_idem_expire_handler(ngx_event_t *ev)
{
    ngx_connection_t     *c;
    ngx_http_request_t   *r;
    ngx_http_upstream_t  *u;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ev->data;
    r = ctx->request;
    u = r->upstream;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "idem: %s expired",
                   ev == &ctx->deadline.ev ? "deadline" : "per-try timeout");

    if (u == NULL || u->peer.connection == NULL || u->header_sent) {
        return;
    }

    c = u->peer.connection;

    if (ev == &ctx->deadline.ev) {
        ctx->deadline.expired = 1;
    }

    if (ctx->upstream.backoff_ev.timer_set) {
        ngx_del_timer(&ctx->upstream.backoff_ev);
    }

    /* process_header and send_request both take a timed out event */

    if (u->request_sent) {
        c->read->timedout = 1;
        ngx_post_event(c->read, &ngx_posted_events);

    } else {
        c->write->timedout = 1;
        ngx_post_event(c->write, &ngx_posted_events);
    }
}
