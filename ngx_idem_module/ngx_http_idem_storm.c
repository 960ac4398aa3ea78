
/*
 * Retry storms: per upstream{} block (implicit upstreams by their
 * address), a retry budget and a circuit breaker, shared by all workers.
 *
 * One shared memory zone, "idem_storm", added by the first idem_retry_budget
 * or idem_breaker that is not "off", holds a node per upstream: a ring of
 * 100 ms buckets (first attempts, retries, calls judged, calls failed) over
 * the last 60 s, the breaker's state and two counters.  Each location
 * compares the sums over its own window with its own limits.  Every call
 * on an "idem on" route counts, whichever location it comes from: the
 * upstream is sick, or not, for all of them.
 *
 * A reload with as many upstreams keeps the zone: its nodes are found
 * again by upstream name, so the budget and the breaker carry on; a new
 * size gives a new zone, counted from zero.  The nodes of upstreams that
 * neither the running nor the new configuration names are freed then
 * (storm_zone.c); a worker of an older configuration still holding one
 * finds its serial changed and counts nothing: its counts are lost.
 */


#include "ngx_http_idem_storm.h"
#include "ngx_http_idem_problem.h"
#include "ngx_http_idem_storm_zone.h"
#include "ngx_http_idem_util.h"


static ngx_int_t ngx_http_idem_storm_refuse(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_msec_t wait);
static ngx_int_t ngx_http_idem_storm_failed(ngx_http_idem_ctx_t *ctx,
    ngx_http_idem_storm_ctx_t *sctx);
static void ngx_http_idem_storm_lost(ngx_log_t *log,
    ngx_http_idem_storm_ctx_t *sctx);
static ngx_http_idem_storm_bucket_t *ngx_http_idem_storm_bucket(
    ngx_http_idem_storm_node_t *node);
static void ngx_http_idem_storm_sum(ngx_http_idem_storm_node_t *node,
    ngx_msec_t window, uint32_t since, ngx_http_idem_storm_sums_t *sums);


/*
 * Before the first attempt (the wrapped peer.init): the call joins its
 * upstream's counts; an open breaker answers it at once.  NGX_DONE: it
 * was answered, the upstream is finished with.  A call that comes from
 * another upstream (error_page, X-Accel-Redirect) is over there.
 */

ngx_int_t
ngx_http_idem_storm_admit(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_msec_t                       now, wait, stale;
    ngx_uint_t                       refuse;
    ngx_http_idem_storm_ctx_t       *sctx;
    ngx_http_idem_storm_conf_t      *scf;
    ngx_http_idem_storm_node_t      *node;
    ngx_http_idem_storm_zone_t      *zone;
    ngx_http_idem_storm_upstream_t  *su;

    /* the upstream the call leaves is judged by the answer it gave */

    if (ctx->upstream.storm != NULL) {
        ngx_http_idem_storm_finish(r, ctx);
        ctx->upstream.storm = NULL;
    }

    scf = &ctx->conf->storm;

    if (scf->zone == NULL) {
        return NGX_OK;
    }

    zone = scf->zone->data;

    su = ngx_http_idem_storm_find(zone, us);
    if (su == NULL || su->node == NULL) {
        return NGX_OK;
    }

    sctx = ngx_pcalloc(r->pool, sizeof(ngx_http_idem_storm_ctx_t));
    if (sctx == NULL) {
        return NGX_ERROR;
    }

    node = su->node;
    sctx->node = node;
    sctx->serial = su->serial;
    sctx->name = &su->name;
    sctx->conf = scf;
    sctx->retry_on = ctx->conf->retry_on;
    ctx->upstream.storm = sctx;

    if (!scf->breaker) {
        return NGX_OK;
    }

    now = ngx_current_msec;
    refuse = 0;
    wait = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (!ngx_http_idem_storm_live(node, sctx->serial)) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        ngx_http_idem_storm_lost(r->connection->log, sctx);
        return NGX_OK;
    }

    if (node->state == NGX_HTTP_IDEM_BREAKER_OPEN) {

        if ((ngx_msec_int_t) (node->open_until - now) > 0) {
            refuse = 1;
            wait = node->open_until - now;

        } else {
            node->state = NGX_HTTP_IDEM_BREAKER_HALF_OPEN;
            node->half_open_at = now;
            node->probes_out = 0;
            node->probes_ok = 0;
        }
    }

    if (node->state == NGX_HTTP_IDEM_BREAKER_HALF_OPEN && !refuse) {

        /* probes whose calls never ended (a worker gone) are given up */

        stale = ngx_max(scf->open, scf->breaker_window);

        if (node->probes_out && now - node->half_open_at >= stale) {
            node->probes_out = 0;
        }

        if (node->probes_out + node->probes_ok < scf->probes) {
            node->probes_out++;
            node->half_open_at = now;
            sctx->probe = 1;

        } else {
            refuse = 1;
        }
    }

    if (refuse) {
        node->breaker_rejected++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem storm: upstream \"%V\": the call %s",
                   sctx->name, refuse ? "is refused, the breaker is open"
                                      : (sctx->probe ? "goes as a probe"
                                                     : "goes"));

    if (!refuse) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idem: the breaker of upstream \"%V\" is open: "
                  "the call is not sent", sctx->name);

    return ngx_http_idem_storm_refuse(r, ctx, wait);
}


/*
 * 503 problem+json with Retry-After, the call not sent.  peer.init cannot
 * answer a request itself: the upstream is finished with as
 * ngx_http_upstream_finalize_request() would (nothing was connected yet),
 * and the request holds one more reference for the answer, as a content
 * handler's, while the upstream's own finalization only releases one.
 */

static ngx_int_t
ngx_http_idem_storm_refuse(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_msec_t wait)
{
    ngx_int_t                 rc;
    ngx_str_t                 value;
    ngx_http_upstream_t      *u;
    ngx_http_idem_problem_t   problem;

    ngx_http_idem_problem_set(r, &problem,
                              NGX_HTTP_IDEM_P_UPSTREAM_UNAVAILABLE, NULL,
                              "the upstream's circuit breaker is "
                              "open: the call was not sent");

    value.data = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
    if (value.data == NULL) {
        return NGX_ERROR;
    }

    /* seconds until it half-opens, at least 1 */

    value.len = ngx_sprintf(value.data, "%M", ngx_max((wait + 999) / 1000, 1))
                - value.data;

    if (ngx_http_idem_add_response_header(r, "Retry-After", &value)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    u = r->upstream;

    *u->cleanup = NULL;
    u->cleanup = NULL;

#if (NGX_HTTP_CACHE)
    if (r->cache) {
        ngx_http_file_cache_free(r->cache, NULL);
    }
#endif

    r->read_event_handler = ngx_http_block_reading;

    r->main->count++;

    rc = ngx_http_idem_send_problem(r, &problem, &ctx->ids.call_id);

    ngx_http_finalize_request(r, rc);

    return NGX_DONE;
}


/* an attempt starts: the first counts as a call, the others as retries */

void
ngx_http_idem_storm_attempt(ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_storm_ctx_t     *sctx;
    ngx_http_idem_storm_zone_t    *zone;
    ngx_http_idem_storm_bucket_t  *b;

    sctx = ctx->upstream.storm;
    if (sctx == NULL) {
        return;
    }

    zone = sctx->conf->zone->data;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (!ngx_http_idem_storm_live(sctx->node, sctx->serial)) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        ngx_http_idem_storm_lost(ctx->request->connection->log, sctx);
        return;
    }

    b = ngx_http_idem_storm_bucket(sctx->node);

    if (ctx->upstream.attempt > ctx->upstream.first_attempt) {
        b->retries++;

    } else {
        b->calls++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "idem storm: upstream \"%V\": attempt %ui counted",
                   sctx->name, ctx->upstream.attempt);
}


/*
 * May a failed attempt be retried?  Retries over the window may not
 * exceed ratio x first attempts + min per second x window.
 */

ngx_uint_t
ngx_http_idem_storm_retry(ngx_http_idem_ctx_t *ctx)
{
    uint64_t                     have, allowed;
    ngx_http_idem_attempt_t     *a;
    ngx_http_idem_storm_ctx_t   *sctx;
    ngx_http_idem_storm_conf_t  *scf;
    ngx_http_idem_storm_zone_t  *zone;
    ngx_http_idem_storm_sums_t   sums;

    sctx = ctx->upstream.storm;

    if (sctx == NULL || !sctx->conf->budget) {
        return 1;
    }

    scf = sctx->conf;

    zone = scf->zone->data;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (!ngx_http_idem_storm_live(sctx->node, sctx->serial)) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        ngx_http_idem_storm_lost(ctx->request->connection->log, sctx);
        return 1;
    }

    ngx_http_idem_storm_sum(sctx->node, scf->window, 0, &sums);

    /* in thousandths: ratio is per 1000 calls, min per 1000 ms */

    have = (sums.retries + 1) * 1000;
    allowed = scf->ratio * sums.calls + (uint64_t) scf->min * scf->window;

    if (have > allowed) {
        sctx->node->budget_exhausted++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "idem storm: upstream \"%V\": %uL retries, %uL calls "
                   "in %Mms, retry %s",
                   sctx->name, sums.retries, sums.calls, scf->window,
                   have > allowed ? "refused" : "allowed");

    if (have <= allowed) {
        return 1;
    }

    ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                  "idem: the retry budget of upstream \"%V\" is spent: "
                  "no retry", sctx->name);

    if (ctx->record.attempts != NULL && ctx->record.attempts->nelts) {
        a = ctx->record.attempts->elts;
        a[ctx->record.attempts->nelts - 1].no_retry =
                                                NGX_HTTP_IDEM_NO_RETRY_BUDGET;
    }

    return 0;
}


/*
 * The call is over (log phase): its last attempt is a success or a
 * failure for the breaker, or neither (no attempt, a client gone).
 */

void
ngx_http_idem_storm_finish(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t                      failed;
    ngx_msec_t                     now;
    ngx_http_idem_storm_ctx_t     *sctx;
    ngx_http_idem_storm_conf_t    *scf;
    ngx_http_idem_storm_node_t    *node;
    ngx_http_idem_storm_zone_t    *zone;
    ngx_http_idem_storm_sums_t     sums;
    ngx_http_idem_storm_bucket_t  *b;

    sctx = ctx->upstream.storm;

    if (sctx == NULL || sctx->done) {
        return;
    }

    sctx->done = 1;

    scf = sctx->conf;
    zone = scf->zone->data;
    node = sctx->node;
    now = ngx_current_msec;

    failed = ngx_http_idem_storm_failed(ctx, sctx);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem storm: upstream \"%V\": the call %s",
                   sctx->name, failed == 1 ? "failed"
                               : (failed == 0 ? "succeeded"
                                              : "is not judged"));

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (!ngx_http_idem_storm_live(node, sctx->serial)) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        ngx_http_idem_storm_lost(r->connection->log, sctx);
        return;
    }

    if (failed != NGX_DECLINED) {
        b = ngx_http_idem_storm_bucket(node);
        b->judged++;
        b->failed += failed;
    }

    if (sctx->probe) {

        if (node->state != NGX_HTTP_IDEM_BREAKER_HALF_OPEN) {
            /* another probe decided already */

        } else if (failed == NGX_DECLINED) {
            if (node->probes_out) {
                node->probes_out--;
            }

        } else if (failed) {
            node->state = NGX_HTTP_IDEM_BREAKER_OPEN;
            node->open_until = now + scf->open;
            sctx->probe = 0;

            ngx_shmtx_unlock(&zone->shpool->mutex);

            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "idem: the breaker of upstream \"%V\" opens again "
                          "for %Mms: a probe failed", sctx->name, scf->open);
            return;

        } else {
            if (node->probes_out) {
                node->probes_out--;
            }

            if (++node->probes_ok >= scf->probes) {
                node->state = NGX_HTTP_IDEM_BREAKER_CLOSED;

                /* counted afresh: the failures before do not count */

                b = ngx_http_idem_storm_bucket(node);
                b->judged = 0;
                b->failed = 0;
                node->since = b->tick;

                ngx_shmtx_unlock(&zone->shpool->mutex);

                ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                              "idem: the breaker of upstream \"%V\" closes",
                              sctx->name);
                return;
            }
        }

    } else if (scf->breaker && failed == 1
               && node->state == NGX_HTTP_IDEM_BREAKER_CLOSED)
    {
        ngx_http_idem_storm_sum(node, scf->breaker_window, node->since,
                                &sums);

        if (sums.judged >= scf->min_calls
            && sums.failed * 100 >= scf->failures * sums.judged)
        {
            node->state = NGX_HTTP_IDEM_BREAKER_OPEN;
            node->open_until = now + scf->open;

            ngx_shmtx_unlock(&zone->shpool->mutex);

            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "idem: the breaker of upstream \"%V\" opens for "
                          "%Mms: %uL of %uL calls failed in %Mms",
                          sctx->name, scf->open, sums.failed, sums.judged,
                          scf->breaker_window);
            return;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/*
 * 1: the last answer the call got from this upstream is a failure that the
 * proxying location's idem_retry "on=" names; 0: it is not; NGX_DECLINED:
 * nothing to judge (no attempt ended, or the client left before the answer).
 */

static ngx_int_t
ngx_http_idem_storm_failed(ngx_http_idem_ctx_t *ctx,
    ngx_http_idem_storm_ctx_t *sctx)
{
    ngx_uint_t                on, ft;
    ngx_http_idem_attempt_t  *a;

    if (ctx->record.attempts == NULL || ctx->record.attempts->nelts == 0) {
        return NGX_DECLINED;
    }

    a = ctx->record.attempts->elts;
    a = &a[ctx->record.attempts->nelts - 1];
    on = sctx->retry_on;

    switch (a->outcome) {

    case NGX_HTTP_IDEM_OUTCOME_OK:
        return 0;

    case NGX_HTTP_IDEM_OUTCOME_HTTP:

        switch (a->status) {
        case NGX_HTTP_INTERNAL_SERVER_ERROR:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_500;
            break;
        case NGX_HTTP_BAD_GATEWAY:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_502;
            break;
        case NGX_HTTP_SERVICE_UNAVAILABLE:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_503;
            break;
        case NGX_HTTP_GATEWAY_TIME_OUT:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_504;
            break;
        case NGX_HTTP_TOO_MANY_REQUESTS:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_429;
            break;
        default:
            return 0;
        }

        return (on & ft) ? 1 : 0;

    case NGX_HTTP_IDEM_OUTCOME_TIMEOUT:
    case NGX_HTTP_IDEM_OUTCOME_DEADLINE:
        return (on & NGX_HTTP_UPSTREAM_FT_TIMEOUT) ? 1 : 0;

    case NGX_HTTP_IDEM_OUTCOME_CONNECT_ERROR:
    case NGX_HTTP_IDEM_OUTCOME_ERROR_AFTER_SEND:
        return (on & NGX_HTTP_UPSTREAM_FT_ERROR) ? 1 : 0;

    default:    /* a client gone, or an attempt that never ended */
        return NGX_DECLINED;
    }
}


/*
 * The call's node was freed by a reload since its worker's configuration
 * was loaded (the upstream was renamed or removed two reloads ago): its
 * counts are lost, said once per call.
 */

static void
ngx_http_idem_storm_lost(ngx_log_t *log, ngx_http_idem_storm_ctx_t *sctx)
{
    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, log, 0,
                   "idem storm: upstream \"%V\": node (serial %uL) freed "
                   "by a reload, not counted", sctx->name, sctx->serial);

    if (sctx->lost) {
        return;
    }

    sctx->lost = 1;

    ngx_log_error(NGX_LOG_INFO, log, 0,
                  "idem: upstream \"%V\" is no more in the "
                  "\"" NGX_HTTP_IDEM_STORM_ZONE_NAME "\" zone (renamed or "
                  "removed by a later reload): this call goes unjudged, "
                  "its counts are lost", sctx->name);
}


/* the bucket of this tick, emptied if it held an older one; locked */

static ngx_http_idem_storm_bucket_t *
ngx_http_idem_storm_bucket(ngx_http_idem_storm_node_t *node)
{
    uint32_t                       tick;
    ngx_http_idem_storm_bucket_t  *b;

    tick = (uint32_t) (ngx_current_msec / NGX_HTTP_IDEM_STORM_TICK);
    b = &node->buckets[tick % NGX_HTTP_IDEM_STORM_BUCKETS];

    if (b->tick != tick) {
        ngx_memzero(b, sizeof(ngx_http_idem_storm_bucket_t));
        b->tick = tick;
    }

    return b;
}


/* the counts of the last "window" ms, from tick "since" on; locked */

static void
ngx_http_idem_storm_sum(ngx_http_idem_storm_node_t *node, ngx_msec_t window,
    uint32_t since, ngx_http_idem_storm_sums_t *sums)
{
    uint32_t                       tick, t;
    ngx_uint_t                     i, n;
    ngx_http_idem_storm_bucket_t  *b;

    ngx_memzero(sums, sizeof(ngx_http_idem_storm_sums_t));

    tick = (uint32_t) (ngx_current_msec / NGX_HTTP_IDEM_STORM_TICK);
    n = (window + NGX_HTTP_IDEM_STORM_TICK - 1) / NGX_HTTP_IDEM_STORM_TICK;

    for (i = 0; i < n; i++) {
        t = tick - i;

        if ((int32_t) (t - since) < 0) {
            break;
        }

        b = &node->buckets[t % NGX_HTTP_IDEM_STORM_BUCKETS];

        if (b->tick != t) {
            continue;
        }

        sums->calls += b->calls;
        sums->retries += b->retries;
        sums->judged += b->judged;
        sums->failed += b->failed;
    }
}
