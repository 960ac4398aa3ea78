
/*
 * The module's header and body filters, and its request body filter.  The
 * module is an HTTP_FILTER module, so these sit just before nginx's copy
 * filter: they see an answer before add_header, gzip and the rest (the
 * stored answer is taken there), and a request body as it arrives (the
 * dedupe digest).  The ids are set later, after add_header
 * (ngx_http_idem_ids_filter.c).
 */


#include "ngx_http_idem_filter.h"
#include "ngx_http_idem_answer.h"
#include "ngx_http_idem_call_id_source.h"
#include "ngx_http_idem_ctx.h"
#include "ngx_http_idem_deadline.h"
#include "ngx_http_idem_dedupe.h"
#include "ngx_http_idem_grpc.h"
#include "ngx_http_idem_metrics.h"
#include "ngx_http_idem_problem.h"
#include "ngx_http_idem_record.h"


static ngx_int_t ngx_http_idem_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_deadline_page(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static ngx_int_t ngx_http_idem_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static void ngx_http_idem_sink(ngx_chain_t *in);
static ngx_int_t ngx_http_idem_request_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;
static ngx_http_request_body_filter_pt   ngx_http_next_request_body_filter;


void
ngx_http_idem_filter_init(void)
{
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_idem_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_idem_body_filter;

    ngx_http_next_request_body_filter = ngx_http_top_request_body_filter;
    ngx_http_top_request_body_filter = ngx_http_idem_request_body_filter;
}


static ngx_int_t
ngx_http_idem_header_filter(ngx_http_request_t *r)
{
    ngx_http_upstream_t       *u;
    ngx_http_idem_ctx_t       *ctx;
    ngx_http_idem_loc_conf_t  *ilcf;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || ctx->ids.call_id.len == 0) {
        return ngx_http_next_header_filter(r);
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem header filter");

    /*
     * A gRPC call answered by nginx itself gets a grpc-status (grpc.c);
     * the ids themselves are set later, after add_header (ids_filter.c).
     */

    if (ngx_http_idem_grpc_header_filter(r, ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_idem_deadline_page(r, ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    /* a claim's owner keeps its answer for the duplicates */

    if (ctx->dedupe.owner && !ctx->answer.replayed
        && ctx->answer.capture == NULL && !ctx->answer.capture_over
        && ngx_http_idem_answer_header(r, ctx) != NGX_OK)
    {
        return NGX_ERROR;
    }

    /*
     * An owner that runs on after its client left (idem_dedupe_client_
     * abort run): the answer goes to the store, and nowhere else, so that
     * nginx reads it to its end instead of giving up at the first write.
     */

    if (ctx->upstream.run_on && r->connection->error) {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem: the client is gone, the answer is only kept");
        ngx_http_idem_count(dedupe_client_gone);
        return NGX_OK;
    }

    u = r->upstream;
    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    /*
     * A dedupe route's answers say until when the id is known (after the
     * answer is kept: a replay says it anew)
     */

    if (ctx->dedupe.expires && ilcf->dedupe_expires_header.name.len
        && ngx_http_idem_dedupe_expires(r, ctx, ilcf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (u != NULL && u->resolved != NULL && u->peer.name != NULL
        && !ctx->upstream.balanced && ilcf->enable
        && !ilcf->variable_upstream_logged)
    {
        /* proxy_pass with a variable naming no upstream{}: not wrapped */

        ilcf->variable_upstream_logged = 1;

        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "idem: the upstream of this location is not an "
                      "upstream{} block or host:port (a variable in "
                      "proxy_pass?): its calls get nginx's own retry "
                      "policy, not idem_retry");
    }

    return ngx_http_next_header_filter(r);
}


/*
 * nginx's own 504 for a call whose budget ran out during an attempt (or
 * its backoff) becomes the problem+json a call gets when its budget is
 * spent before the first attempt, with the execution's state: the same
 * answer for the same cause.  Only nginx's page (r->err_status), with no
 * redirect since the attempt started: an error_page of the operator's for
 * 504 has redirected the request, and its answer stays.  gRPC calls have
 * their grpc-status already.
 */

static ngx_int_t
ngx_http_idem_deadline_page(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_uint_t               unanswered;
    ngx_http_idem_problem_t  problem;

    if (ctx->grpc.on || r->err_status != NGX_HTTP_GATEWAY_TIME_OUT
        || ctx->upstream.attempt == 0
        || r->uri_changes != ctx->upstream.uri_changes
        || !ctx->deadline.set || ngx_http_idem_remaining(ctx) > 0)
    {
        return NGX_OK;
    }

    (void) ngx_http_idem_sent(r, ctx, &unanswered);

    ngx_http_idem_problem_set(r, &problem, NGX_HTTP_IDEM_P_DEADLINE_EXCEEDED,
                              NULL, "the call's budget ran out during an "
                              "attempt");

    if (unanswered) {
        ngx_str_set(&problem.state, "UNKNOWN");

    } else {
        ngx_str_set(&problem.state, "FAILED");
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem: budget spent during an attempt, 504 as a "
                   "problem (%V)", &problem.state);

    return ngx_http_idem_problem_replace(r, ctx, &problem);
}


static ngx_int_t
ngx_http_idem_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t             rc;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    if (in == NULL) {
        if (ctx != NULL && ctx->upstream.run_on && r->connection->error) {
            return NGX_OK;
        }

        return ngx_http_next_body_filter(r, in);
    }

    /* nginx's page goes, the problem comes in its place */

    if (ctx != NULL && ctx->problem_body != NULL && r == r->main) {
        in = ngx_http_idem_problem_swap(r, ctx, in);

        if (in == NULL) {
            return NGX_OK;
        }
    }

    if (ctx != NULL && ctx->answer.capture != NULL && !ctx->answer.capture_over
        && !ctx->answer.capture_done)
    {
        ngx_http_idem_answer_body(r, ctx, in);
    }

    if (ctx == NULL || !ctx->upstream.run_on) {
        return ngx_http_next_body_filter(r, in);
    }

    /* an owner that runs on: a client gone takes nothing more (above) */

    if (!r->connection->error) {
        rc = ngx_http_next_body_filter(r, in);

        if (rc != NGX_ERROR || !r->connection->error) {
            return rc;
        }

        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem: the client went during the answer, "
                       "the rest is only kept");
        ngx_http_idem_count(dedupe_client_gone);
    }

    ngx_http_idem_sink(in);

    return NGX_OK;
}


/* the buffers are taken, as a write would take them: nginx reads on */

static void
ngx_http_idem_sink(ngx_chain_t *in)
{
    for ( /* void */ ; in; in = in->next) {
        in->buf->pos = in->buf->last;

        if (in->buf->in_file) {
            in->buf->file_pos = in->buf->file_last;
        }
    }
}


static ngx_int_t
ngx_http_idem_request_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_idem_module);

    if (ctx != NULL && ctx->dedupe.md != NULL
        && (ctx->dedupe.state == NGX_HTTP_IDEM_DEDUPE_BODY
            || ctx->source.reading))
    {
        ngx_http_idem_dedupe_body_filter(r, ctx, in);
    }

    if (ctx != NULL && ctx->source.reading) {
        ngx_http_idem_source_body_filter(r, ctx, in);
    }

    return ngx_http_next_request_body_filter(r, in);
}
