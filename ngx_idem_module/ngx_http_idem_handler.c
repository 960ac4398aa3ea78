
/*
 * The request's sequence on routes with "idem on": ids and the budget in
 * the rewrite phase (before any access check), the record and the claim in
 * the precontent phase (after them), the final state in the log phase.
 */


#include "ngx_http_idem_handler.h"
#include "ngx_http_idem_call_id.h"
#include "ngx_http_idem_call_id_source.h"
#include "ngx_http_idem_ctx.h"
#include "ngx_http_idem_deadline.h"
#include "ngx_http_idem_dedupe.h"
#include "ngx_http_idem_grpc.h"
#include "ngx_http_idem_headers.h"
#include "ngx_http_idem_metrics.h"
#include "ngx_http_idem_otel.h"
#include "ngx_http_idem_problem.h"
#include "ngx_http_idem_record.h"
#include "ngx_http_idem_resend_limit.h"
#include "ngx_http_idem_storm.h"
#include "ngx_http_idem_stream.h"


static ngx_int_t ngx_http_idem_settle(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static void ngx_http_idem_body_read(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_refused(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);


/*
 * Runs in the rewrite phase, before the rewrite module's own handlers and
 * before any access check, so that every answer (a 401, a "return", an
 * upstream's) carries the request's ids.
 */

ngx_int_t
ngx_http_idem_handler(ngx_http_request_t *r)
{
    ngx_http_idem_ctx_t       *ctx;
    ngx_http_idem_inbound_t    in;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (!ilcf->enable) {
        return NGX_DECLINED;
    }

    /*
     * The module's own endpoints (idem_status, its resolutions,
     * idem_metrics) are not calls, though "idem on" is inherited there:
     * no call id, no headers, not counted.
     */

    if (ilcf->status || ilcf->metrics) {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem handler: the module's endpoint, not a call");
        return NGX_DECLINED;
    }

    /*
     * ids are settled once per request, internal redirects included;
     * subrequests carry the main request's
     */

    if (ngx_http_idem_get_ctx(r) != NULL) {
        return NGX_DECLINED;
    }

    if (r != r->main) {

        /*
         * A subrequest (SSI, say) of a page the module never saw: it gets
         * no ids, but the client's copies of the headers the module owns
         * are dropped from its own list all the same.
         */

        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem handler: subrequest without ids");

        if (ngx_http_idem_scan_request(r, ilcf, &in) != NGX_OK
            || ngx_http_idem_drop_owned(r, ilcf, &in) != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return NGX_DECLINED;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem handler");

    ctx = ngx_http_idem_create_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;
    ctx->conf = ilcf;
    ctx->start_us = ngx_http_idem_metrics_clock();
    ctx->grpc.on = ngx_http_idem_grpc_request(r);
    ctx->ids.call_id_header = &ilcf->call_id_header;
    ctx->ids.trace_id_header = &ilcf->trace_id_header;

    if (ilcf->call_id_json != NULL) {

        /* the id is in the body: settled once it is read (precontent) */

        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem handler: the call id waits for the body");

        ctx->source.pending = 1;
        return NGX_DECLINED;
    }

    return ngx_http_idem_settle(r, ctx);
}


/*
 * The ids and the budget of the call, or its refusal: NGX_DECLINED goes
 * on, anything else is the request's answer.
 */

static ngx_int_t
ngx_http_idem_settle(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t                  rc;
    ngx_http_idem_problem_t    problem;
    ngx_http_idem_inbound_t    in;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ctx->conf;

    if (ngx_http_idem_scan_request(r, ilcf, &in) != NGX_OK
        || ngx_http_idem_source_value(r, ctx, &in) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (in.call_id_source == NGX_HTTP_IDEM_SOURCE_BODY && in.call_id == NULL) {
        ngx_http_idem_count(body_ids_missing);
    }

    rc = ngx_http_idem_resolve_ids(r, ilcf, &in, ctx, &problem);

    if (rc == NGX_OK) {
        rc = ngx_http_idem_deadline_init(r, ilcf, &in, ctx, &problem);
    }

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idem: rejected: %V", &problem.detail);

        ngx_http_idem_problem_count(&problem);

        /* what the client claimed never passes on, whatever comes next */

        if (ngx_http_idem_drop_owned(r, ilcf, &in) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_idem_send_problem(r, &problem, &ctx->ids.call_id);
    }

    /* the client's span, read before its traceparent is dropped */

    ngx_http_idem_otel_start(r, ctx, &in);

    if (ngx_http_idem_inject(r, ilcf, &in, ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->ids.settled = 1;

    ngx_http_idem_count(calls);

    switch (ctx->ids.source) {

    case NGX_HTTP_IDEM_SOURCE_GATEWAY:
        ngx_http_idem_count(generated);
        ngx_http_idem_count(call_ids_gateway);
        break;

    case NGX_HTTP_IDEM_SOURCE_VARIABLE:
        ngx_http_idem_count(call_ids_variable);
        break;

    case NGX_HTTP_IDEM_SOURCE_BODY:
        ngx_http_idem_count(call_ids_body);
        break;

    default: /* NGX_HTTP_IDEM_SOURCE_CLIENT */
        ngx_http_idem_count(call_ids_client);
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem call id: \"%V\" (%V), trace id: \"%V\"",
                   &ctx->ids.call_id,
                   ngx_http_idem_source_name(ctx->ids.source),
                   &ctx->ids.trace_id);

    return NGX_DECLINED;
}


/* a body id's body is read: the call's ids, then the phases go on */

static void
ngx_http_idem_body_read(ngx_http_request_t *r)
{
    ngx_int_t             rc;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    ctx->source.reading = 0;
    ctx->source.pending = 0;

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem handler: body read, settling the call id");

    r->write_event_handler = ngx_http_core_run_phases;

    rc = ngx_http_idem_settle(r, ctx);

    if (rc != NGX_DECLINED) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    ngx_http_core_run_phases(r);
}


/*
 * After access checks, before the content handler: the call's record and
 * its claim (a duplicate is answered here); a budget spent by now is
 * answered without contacting the upstream; otherwise the call is timed
 * from here on.
 */

ngx_int_t
ngx_http_idem_precontent_handler(ngx_http_request_t *r)
{
    ngx_int_t                  rc, rc2;
    ngx_http_idem_ctx_t       *ctx;
    ngx_http_idem_problem_t    problem;
    ngx_http_idem_loc_conf_t  *ilcf;

    if (r != r->main) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL) {
        return NGX_DECLINED;
    }

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (ctx->source.pending && ctx->refused == NULL) {

        /* the body's digest for dedupe, as it arrives: never read back */

        if (ilcf->dedupe && ilcf->dedupe_fingerprint_body
            && r->request_body == NULL
            && ngx_http_idem_dedupe_digest_begin(r, ctx) != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_idem_source_read_body(r, ctx,
                                              ngx_http_idem_body_read);
    }

    if (ctx->refused != NULL || !ctx->ids.settled) {
        return ngx_http_idem_refused(r, ctx);
    }

    if (!ilcf->dedupe) {
        rc = ngx_http_idem_grpc_read_body(r, ctx);
        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    rc = NGX_OK;

    if (ilcf->record || ilcf->dedupe) {
        rc = ngx_http_idem_record_prepare(r, ctx);

        if (rc == NGX_ERROR) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (rc == NGX_DECLINED && ilcf->dedupe) {
            ngx_http_idem_problem_empty_scope(r, &problem, ilcf,
                                              "the call's scope (who owns "
                                              "its id)");
            ngx_http_idem_problem_count(&problem);
            goto answer;
        }
    }

    rc2 = ngx_http_idem_dedupe(r, ctx);
    if (rc2 != NGX_DECLINED) {
        return rc2;
    }

    /*
     * A record-only route that limits resends: whether the id is known
     * is waited for (its arrival's reply), a known one may be refused
     */

    if (rc == NGX_OK) {
        rc2 = ngx_http_idem_resend_record(r, ctx);
        if (rc2 != NGX_DECLINED) {
            return rc2;
        }
    }

    /* a record-only route without a scope value records nothing */

    if (rc == NGX_OK && ngx_http_idem_record_start(r, ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!ctx->deadline.set || ngx_http_idem_deadline_start(r, ctx) == NGX_OK) {
        return NGX_DECLINED;
    }

    ngx_http_idem_problem_set(r, &problem,
                              NGX_HTTP_IDEM_P_DEADLINE_EXCEEDED, NULL,
                              "the call's budget was spent before "
                              "the first attempt");

    ngx_http_idem_problem_count(&problem);

answer:

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idem: %V", &problem.detail);

    rc = ngx_http_idem_send_problem(r, &problem, &ctx->ids.call_id);

    ngx_http_finalize_request(r, rc);

    return NGX_DONE;
}


/*
 * A call the module refused (or whose ids it could not settle) reached a
 * location's content after all: error_page after an answer that failed,
 * say.  It is never forwarded: the module's answer is sent again.
 */

static ngx_int_t
ngx_http_idem_refused(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t  rc;

    if (ctx->refused == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "idem: the ids of this call were never settled, "
                      "it is not forwarded");
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idem: a refused call reached \"%V\", not forwarded: "
                  "%V", &r->uri, &ctx->refused->detail);

    if (r->header_sent) {
        return NGX_ERROR;
    }

    rc = ngx_http_idem_send_problem(r, ctx->refused, &ctx->ids.call_id);

    ngx_http_finalize_request(r, rc);

    return NGX_DONE;
}


/* the request is over: its execution's final state, and its record */

ngx_int_t
ngx_http_idem_log_handler(ngx_http_request_t *r)
{
    ngx_int_t             rc;
    ngx_http_idem_ctx_t  *ctx;

    if (r != r->main) {
        return NGX_OK;
    }

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || ctx->ids.call_id.len == 0) {
        return NGX_OK;
    }

    if (ctx->dedupe.claim_op != NULL) {

        /*
         * The request ends while its claim is out (a worker shutting down,
         * a waiting duplicate's client gone, say): the claim may be made,
         * and is released by the final write, which leaves after it on the
         * same connection and writes nothing if the claim is not its own.
         */

        ctx->dedupe.owner = 1;
        ctx->dedupe.unsure = 1;
        ctx->record.on = 1;
    }

    ngx_http_idem_storm_finish(r, ctx);

    rc = ngx_http_idem_record_finish(r, ctx);

    ngx_http_idem_observe_call(r, ctx);

    ngx_http_idem_otel_end(r, ctx);

    /* an UNKNOWN execution, queued behind its final write (stream.c) */

    if (ctx->record.on) {
        ngx_http_idem_stream_final(r, ctx, ctx->record.final_state,
                                   rc == NGX_OK);
    }

    return NGX_OK;
}
