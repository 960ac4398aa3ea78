
/*
 * The request's context: made once per request, shared by its
 * subrequests, and found again after an internal redirect.
 */


#include "ngx_http_idem_ctx.h"


static void ngx_http_idem_cleanup(void *data);


/*
 * Internal redirects and error pages zero module contexts; the context is
 * also kept as the data of a pool cleanup, where it is found again (the
 * technique of ngx_http_realip_module).  Subrequests share the main
 * request's context.
 */

ngx_http_idem_ctx_t *
ngx_http_idem_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t   *cln;
    ngx_http_request_t   *mr;
    ngx_http_idem_ctx_t  *ctx;

    mr = r->main;

    ctx = ngx_http_get_module_ctx(mr, ngx_http_idem_module);

    if (ctx != NULL || !(mr->internal || mr->filter_finalize)) {
        return ctx;
    }

    for (cln = mr->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_idem_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(mr, ctx, ngx_http_idem_module);
            return ctx;
        }
    }

    return NULL;
}


ngx_http_idem_ctx_t *
ngx_http_idem_create_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t   *cln;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_idem_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_idem_cleanup;
    cln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_idem_module);

    return ctx;
}


/*
 * A posted event's handler (ev->data: the context): the request that a
 * feature parked in its access phase goes on where it was, as a write
 * event would run it.
 */

void
ngx_http_idem_ctx_resume(ngx_event_t *ev)
{
    ngx_connection_t     *c;
    ngx_http_request_t   *r;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ev->data;
    r = ctx->request;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
}


/*
 * Runs when the request's pool goes: no timer or posted event of the
 * context may outlive the request.  What a feature holds besides (a claim
 * on its way, a digest) it releases in a pool cleanup of its own.  (This
 * cleanup's other job is to be found again after an internal redirect.)
 */

static void
ngx_http_idem_cleanup(void *data)
{
    ngx_http_idem_ctx_t *ctx = data;

    ngx_uint_t    i;
    ngx_event_t  *ev[7];

    ev[0] = &ctx->deadline.ev;
    ev[1] = &ctx->deadline.try_ev;
    ev[2] = &ctx->upstream.backoff_ev;
    ev[3] = &ctx->record.arrival_ev;
    ev[4] = &ctx->dedupe.resume_ev;
    ev[5] = &ctx->dedupe.poll_ev;
    ev[6] = &ctx->dedupe.bound_ev;

    for (i = 0; i < sizeof(ev) / sizeof(ev[0]); i++) {

        if (ev[i]->timer_set) {
            ngx_del_timer(ev[i]);
        }

        if (ev[i]->posted) {
            ngx_delete_posted_event(ev[i]);
        }
    }
}
