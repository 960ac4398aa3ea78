
/*
 * Call records: every execution of a call id and each of its attempts,
 * written to the store as they happen, so that "what happened to call X?"
 * has an answer.  Writes are fire and forget: they never delay an answer.
 *
 * A record is a Redis hash under <prefix>c:{<call id>}, or under
 * <prefix>s:{<SHA-256 of the scope>:<call id>} where the route has a
 * scope (dedupe.c, which adds the claim's fields); a call over in one
 * write, as most are, makes it short, one string of the same fields
 * (ngx_http_idem_redis_record.c).  Every field is
 * written once and never changed, so that states only move forward
 * whatever order the writes arrive in, and a write is one cheap store
 * write (with the TTL refreshed in the same turn):
 *
 *   e:<token>      an execution arrived: "<R|P> <created_ms> <source> <node>
 *                  <method> <trace id> <uri>" (P: its first attempt had
 *                  already started when this was written)
 *   p:<token>      its first attempt started: "<unix ms>"
 *   f:<token>      it ended: "<state> <final status> <unix ms>", then the
 *                  arrival's fields again (the arrival may have been lost)
 *   a:<token>:<n>  its attempt n: "<start_ms> <duration_ms> <outcome>
 *                  <sent> <status> <span id>[ <no retry>[ <grpc-status>]]"
 *                  (<no retry>: "retry_budget" when the retry budget
 *                  refused the next attempt, else "-"; <grpc-status>: a
 *                  gRPC upstream's, when it gave one)
 *   r:<token>      the service's receipt (idem_receipt_header), with its
 *                  end: "<n> <receipt>", n the attempt whose answer had it
 *
 * <token> names one execution (random, per request).  The record's state
 * and the order of executions are derived when it is read
 * (ngx_http_idem_record_parse.c).  A write sets fields and refreshes the
 * record's TTL, unless this request refreshed it a moment ago
 * (ngx_http_idem_store_write()).
 *
 * A record keeps the newest idem_record_max_executions (N) executions.
 * An execution's first write counts it, unless that write made the
 * record (a call id used once, as most are, costs no count); when the
 * count passes N + N/4, the store drops the oldest executions down to N
 * and folds them into a summary:
 *
 *   v              "1", written by every execution's first write: a
 *                  write to which every field is new made the record
 *   n              its executions after the first, as counted (one
 *                  increment each), set to those kept less one by a trim
 *   x              the dropped ones: "<count> <successes> <unknowns>
 *                  <updated_ms> <final status|-> <created_ms> <source>
 *                  <node> <method> <trace id> <uri>", the last six of the
 *                  record's first execution
 *
 * so that the record's state rule (SUCCESS if any execution succeeded,
 * else UNKNOWN if any was UNKNOWN, else the latest's) and its first
 * execution survive the trim.  An execution dropped before it finished
 * counts as UNKNOWN: it may have run.  The claim's fields of the execution
 * that holds the dedupe claim ("o": "l:", "k:" and its resolution "z:")
 * stay: duplicates are answered from them.
 */


#include "ngx_http_idem_record.h"
#include "ngx_http_idem_answer.h"
#include "ngx_http_idem_call_id.h"
#include "ngx_http_idem_call_id_source.h"
#include "ngx_http_idem_deadline.h"
#include "ngx_http_idem_grpc.h"
#include "ngx_http_idem_metrics.h"
#include "ngx_http_idem_record_parse.h"
#include "ngx_http_idem_store.h"
#include "ngx_http_idem_util.h"


/*
 * A write refreshes the record's expiry, unless this request refreshed it
 * less than this part of the TTL ago (at most a second): a call's writes
 * a moment apart cost one expiry refresh, not one each.
 */
#define NGX_HTTP_IDEM_RECORD_EXPIRE_SLACK(ttl)  ngx_min((ttl) / 100, 1000)


static void ngx_http_idem_arrival_handler(ngx_event_t *ev);
static void ngx_http_idem_record_cancel_arrival(ngx_http_idem_ctx_t *ctx);
static ngx_int_t ngx_http_idem_record_write(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t state, ngx_uint_t final);
static ngx_uint_t ngx_http_idem_final_state(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static void ngx_http_idem_record_uri(ngx_http_request_t *r, ngx_str_t *uri);
static void ngx_http_idem_receipt(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_http_upstream_t *u, ngx_uint_t n);


static ngx_str_t  ngx_http_idem_states[] = {
    ngx_string("RECEIVED"),
    ngx_string("PROCESSING"),
    ngx_string("SUCCESS"),
    ngx_string("FAILED"),
    ngx_string("UNKNOWN")
};


static ngx_str_t  ngx_http_idem_outcomes[] = {
    ngx_string("ok"),
    ngx_string("http"),                 /* written as http_NNN */
    ngx_string("connect_error"),
    ngx_string("timeout"),
    ngx_string("error_after_send"),
    ngx_string("client_abort"),
    ngx_string("deadline")
};


/*
 * "<prefix>c:{<id>}", or "<prefix>s:{<hex SHA-256 of the scope>:<id>}"
 * where the location has a scope: the raw scope (a credential, often)
 * never reaches the store.  NGX_DECLINED: the scope's value is empty.
 */

ngx_int_t
ngx_http_idem_record_key(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_str_t *id, ngx_str_t *key)
{
    u_char      hex[NGX_HTTP_IDEM_SHA256_HEX_LEN];
    ngx_str_t   scope, digest;

    if (ilcf->dedupe_scope == NULL) {
        return ngx_http_idem_record_key_digest(r, NULL, id, key);
    }

    if (ngx_http_complex_value(r, ilcf->dedupe_scope, &scope) != NGX_OK) {
        return NGX_ERROR;
    }

    if (scope.len == 0) {
        return NGX_DECLINED;
    }

    if (ngx_http_idem_sha256_hex(hex, &scope, 1) != NGX_OK) {
        return NGX_ERROR;
    }

    digest.data = hex;
    digest.len = NGX_HTTP_IDEM_SHA256_HEX_LEN;

    return ngx_http_idem_record_key_digest(r, &digest, id, key);
}


/*
 * A scoped record's key from the scope's digest (64 lowercase hex
 * digits, as in the key itself and in the UNKNOWN stream's "key"): the
 * status endpoint's scope_digest=on reads a record by it.  digest NULL:
 * the key of a call recorded without a scope (scope_digest=none).
 */

ngx_int_t
ngx_http_idem_record_key_digest(ngx_http_request_t *r, ngx_str_t *digest,
    ngx_str_t *id, ngx_str_t *key)
{
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    if (digest == NULL) {
        key->data = ngx_pnalloc(r->pool, imcf->key_prefix.len
                                         + sizeof("c:{}") - 1 + id->len);
        if (key->data == NULL) {
            return NGX_ERROR;
        }

        key->len = ngx_sprintf(key->data, "%Vc:{%V}", &imcf->key_prefix, id)
                   - key->data;
        return NGX_OK;
    }

    key->data = ngx_pnalloc(r->pool, imcf->key_prefix.len
                                     + sizeof("s:{:}") - 1 + digest->len
                                     + id->len);
    if (key->data == NULL) {
        return NGX_ERROR;
    }

    key->len = ngx_sprintf(key->data, "%Vs:{%V:%V}", &imcf->key_prefix,
                           digest, id)
               - key->data;

    return NGX_OK;
}


/*
 * After access checks: this execution of the call is recorded.  The
 * arrival is written once the call has run idem_record_arrival_delay
 * (0: at the end of this turn of the event loop), as PROCESSING if its
 * first attempt has started by then; a call over sooner has its arrival
 * go with its final state, one write instead of two.
 */

ngx_int_t
ngx_http_idem_record_start(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (!ilcf->record || ctx->record.on) {
        return NGX_OK;
    }

    ctx->record.on = 1;

    if (ilcf->record_arrival_delay) {
        ngx_add_timer(&ctx->record.arrival_ev, ilcf->record_arrival_delay);

    } else {
        ngx_post_event(&ctx->record.arrival_ev, &ngx_posted_events);
    }

    return NGX_OK;
}


/*
 * What an execution is known by in its record: the record's key, after
 * the scope of the location it is in, and a token of its own.  The key
 * is settled again after a redirect, until the call is claimed or its
 * arrival written.  NGX_DECLINED: the location has a scope, and its value
 * is empty here.
 */

ngx_int_t
ngx_http_idem_record_prepare(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t                  rc;
    ngx_str_t                  key;
    ngx_http_idem_loc_conf_t  *ilcf;

    if (ctx->dedupe.state != NGX_HTTP_IDEM_DEDUPE_NONE) {
        return NGX_OK;
    }

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    rc = ngx_http_idem_record_key(r, ilcf, &ctx->ids.call_id, &key);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ctx->record.key.len == key.len
        && ngx_strncmp(ctx->record.key.data, key.data, key.len) == 0)
    {
        return NGX_OK;
    }

    if (ctx->record.arrived) {

        /* never a record split between two scopes */

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "idem: call \"%V\" is recorded under another scope "
                      "than the one of this location", &ctx->ids.call_id);
        return NGX_ERROR;
    }

    /* an arrival not written yet goes under the new key, if at all */

    ngx_http_idem_record_unstart(ctx);
    ctx->record.key = key;

    if (ctx->record.token.len) {
        return NGX_OK;
    }

    ctx->record.token.data = ngx_pnalloc(r->pool, NGX_HTTP_IDEM_SPAN_ID_LEN);
    if (ctx->record.token.data == NULL) {
        return NGX_ERROR;
    }

    ngx_http_idem_random_hex(ctx->record.token.data, NGX_HTTP_IDEM_SPAN_ID_LEN);
    ctx->record.token.len = NGX_HTTP_IDEM_SPAN_ID_LEN;

    ctx->record.arrival_ev.handler = ngx_http_idem_arrival_handler;
    ctx->record.arrival_ev.data = ctx;
    ctx->record.arrival_ev.log = r->connection->log;

    ctx->record.created_ms = ngx_http_idem_unix_ms();

    return NGX_OK;
}


/*
 * The arrival written now, before the call is forwarded, the store asked
 * whether the call's record was there (idem_resend_limit on a record-only
 * route: a resend is known before it is forwarded, at the cost of a
 * round trip).  NGX_OK: written, "known" is called once; NGX_DECLINED:
 * not written (the store dropped it, or it is written already).
 */

ngx_int_t
ngx_http_idem_record_arrive(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_idem_store_known_pt known, void *data)
{
    ngx_int_t                  rc;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (!ilcf->record || ctx->record.on || ctx->record.counted) {
        return NGX_DECLINED;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem record: \"%V\": the arrival before the call, "
                   "asked whether it is known", &ctx->ids.call_id);

    ctx->record.on = 1;
    ctx->record.known = known;
    ctx->record.known_data = data;

    rc = ngx_http_idem_record_write(r, ctx, NGX_HTTP_IDEM_RECEIVED, 0);

    /* not asked again by a later write, whatever became of this one */

    ctx->record.known = NULL;

    return rc;
}


/* recording is not started after all: an arrival not written is not */

void
ngx_http_idem_record_unstart(ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_record_cancel_arrival(ctx);

    ctx->record.on = 0;
}


/* an arrival waiting to be written: posted, or on its delay */

static void
ngx_http_idem_record_cancel_arrival(ngx_http_idem_ctx_t *ctx)
{
    if (ctx->record.arrival_ev.timer_set) {
        ngx_del_timer(&ctx->record.arrival_ev);
    }

    if (ctx->record.arrival_ev.posted) {
        ngx_delete_posted_event(&ctx->record.arrival_ev);
    }
}


/* the record's expiry was just refreshed, by a write or a claim */

void
ngx_http_idem_record_expiring(ngx_http_idem_ctx_t *ctx)
{
    ctx->record.expired = ngx_current_msec;
    ctx->record.expire_sent = 1;
}


static void
ngx_http_idem_arrival_handler(ngx_event_t *ev)
{
    ngx_http_idem_ctx_t  *ctx;

    ctx = ev->data;

    if (ctx->record.arrived
        && (ctx->record.attempts == NULL || ctx->record.attempts->nelts == 0))
    {
        /* the claim's arrival says RECEIVED already: nothing new */
        return;
    }

    (void) ngx_http_idem_record_write(ctx->request, ctx,
                                      ctx->record.attempts
                                      && ctx->record.attempts->nelts
                                      ? NGX_HTTP_IDEM_PROCESSING
                                      : NGX_HTTP_IDEM_RECEIVED, 0);
}


/* the upstream was chosen for an attempt: it starts now */

ngx_int_t
ngx_http_idem_attempt_start(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_attempt_t  *a;

    if (ctx->record.attempts == NULL) {
        ctx->record.attempts = ngx_array_create(r->pool, 2,
                                            sizeof(ngx_http_idem_attempt_t));
        if (ctx->record.attempts == NULL) {
            return NGX_ERROR;
        }
    }

    a = ngx_array_push(ctx->record.attempts);
    if (a == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(a, sizeof(ngx_http_idem_attempt_t));

    a->grpc_status = -1;

    a->n = ctx->upstream.attempt;
    a->start = ngx_current_msec;

    ngx_http_idem_count(attempts);

    if (a->n > 1) {
        ngx_http_idem_count(retries);
    }

    a->start_ms = ngx_http_idem_unix_ms();
    a->outcome = NGX_HTTP_IDEM_OUTCOME_NONE;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem attempt %ui of \"%V\" starts, %i ms left",
                   a->n, &ctx->ids.call_id,
                   ctx->deadline.set ? (ngx_int_t) ngx_http_idem_remaining(ctx)
                                     : (ngx_int_t) -1);

    /* the attempt's own span, whichever parent its upstream got */

    if (ctx->ids.traceparent_h != NULL) {
        ngx_memcpy(a->span_id, ctx->trace.span_id, NGX_HTTP_IDEM_SPAN_ID_LEN);
    }

    /*
     * An arrival already written said RECEIVED: now it is in progress,
     * unless the arrival delay is still running (a claim's arrival), which
     * says so then if the call is still running
     */

    if (ctx->record.on && a->n == 1 && ctx->record.arrived
        && !ctx->record.arrival_ev.timer_set)
    {
        (void) ngx_http_idem_record_write(r, ctx, NGX_HTTP_IDEM_PROCESSING,
                                          0);
    }

    return NGX_OK;
}


/* the attempt is over: nginx has released its peer */

void
ngx_http_idem_attempt_end(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_peer_connection_t *pc)
{
    ngx_connection_t         *c;
    ngx_http_upstream_t      *u;
    ngx_http_idem_attempt_t  *a;

    if (ctx->record.attempts == NULL || ctx->record.attempts->nelts == 0) {
        return;
    }

    a = (ngx_http_idem_attempt_t *) ctx->record.attempts->elts
        + ctx->record.attempts->nelts - 1;

    if (a->outcome != NGX_HTTP_IDEM_OUTCOME_NONE) {
        return;
    }

    u = r->upstream;
    c = pc->connection;

    a->duration = ngx_current_msec - a->start;
    a->sent = u->request_sent;
    a->peer = pc->name;
    a->status = u->headers_in.status_n;

    if (ctx->grpc.on) {
        a->grpc_status = ngx_http_idem_grpc_upstream_status(u);
    }

    if (a->status) {
        ngx_http_idem_receipt(r, ctx, u, a->n);
    }

    if (ctx->deadline.expired) {
        a->outcome = NGX_HTTP_IDEM_OUTCOME_DEADLINE;
        a->status = 0;

    } else if (a->status) {
        a->outcome = (a->status < NGX_HTTP_BAD_REQUEST)
                     ? NGX_HTTP_IDEM_OUTCOME_OK : NGX_HTTP_IDEM_OUTCOME_HTTP;

    } else if (r->connection->error && !ctx->upstream.run_on) {
        a->outcome = NGX_HTTP_IDEM_OUTCOME_CLIENT_ABORT;

    } else if (c != NULL && (c->read->timedout || c->write->timedout)) {
        a->outcome = NGX_HTTP_IDEM_OUTCOME_TIMEOUT;

    } else if (!a->sent) {
        a->outcome = NGX_HTTP_IDEM_OUTCOME_CONNECT_ERROR;

    } else {
        a->outcome = NGX_HTTP_IDEM_OUTCOME_ERROR_AFTER_SEND;
    }

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem attempt %ui ends: outcome %ui, status %ui, "
                   "sent %ui, %M ms", a->n, a->outcome, a->status,
                   (ngx_uint_t) a->sent, a->duration);
}


/*
 * The service's receipt for the call (idem_receipt_header) in an
 * attempt's answer, its headers or, for gRPC, its trailers: copied, as
 * the next attempt reuses the upstream's buffer.  A later attempt's
 * replaces an earlier one's.  Bounded and of a call id's charset, as it
 * goes into records, JSON, a stream and a page; else not kept.
 */

static void
ngx_http_idem_receipt(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_upstream_t *u, ngx_uint_t n)
{
    ngx_table_elt_t           *h;
    ngx_http_idem_header_t    *name;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ctx->conf;
    name = &ilcf->receipt_header;

    if (name->name.len == 0 || !ctx->record.on) {
        return;
    }

    h = ngx_http_idem_header_find(&u->headers_in.headers,
                                  (char *) name->name.data, name->name.len);

    if (h == NULL && ctx->grpc.on) {
        h = ngx_http_idem_header_find(&u->headers_in.trailers,
                                      (char *) name->name.data,
                                      name->name.len);
    }

    if (h == NULL) {
        return;
    }

    if (h->value.len == 0 || h->value.len > NGX_HTTP_IDEM_RECEIPT_MAX_LEN
        || ngx_http_idem_check_charset(&h->value) != NGX_OK)
    {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idem: the \"%V\" of call \"%V\" is not kept: at "
                      "most %d bytes of A-Z a-z 0-9 - . _ ~ :",
                      &name->name, &ctx->ids.call_id,
                      NGX_HTTP_IDEM_RECEIPT_MAX_LEN);

        ngx_http_idem_count(receipts_invalid);
        return;
    }

    ctx->record.receipt.data = ngx_pnalloc(r->pool, h->value.len);
    if (ctx->record.receipt.data == NULL) {
        ctx->record.receipt.len = 0;
        return;
    }

    ngx_memcpy(ctx->record.receipt.data, h->value.data, h->value.len);
    ctx->record.receipt.len = h->value.len;
    ctx->record.receipt_attempt = n;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem call \"%V\": receipt \"%V\" in attempt %ui",
                   &ctx->ids.call_id, &ctx->record.receipt, n);
}


/* the request is done (log phase): the execution's final state */

ngx_int_t
ngx_http_idem_record_finish(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    /*
     * an upstream the module's balancer did not wrap (proxy_pass with a
     * variable) made no attempt of the record's: its answer's receipt
     */

    if ((ctx->record.attempts == NULL || ctx->record.attempts->nelts == 0)
        && r->upstream != NULL && r->upstream->headers_in.status_n)
    {
        ngx_http_idem_receipt(r, ctx, r->upstream, 0);
    }

    ctx->record.final_state = ngx_http_idem_final_state(r, ctx);

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem call \"%V\" ends %V after %ui attempts",
                   &ctx->ids.call_id,
                   ngx_http_idem_state_name(ctx->record.final_state),
                   ctx->record.attempts ? ctx->record.attempts->nelts : 0);

    if (!ctx->record.on) {
        return NGX_DECLINED;
    }

    /* an arrival not written yet goes with the final state */

    ngx_http_idem_record_cancel_arrival(ctx);

    return ngx_http_idem_record_write(r, ctx, ctx->record.final_state, 1);
}


/*
 * SUCCESS: the final answer was 1xx-3xx.  UNKNOWN: no success, and some
 * attempt sent the request without getting an answer (a timeout, a reset,
 * a client gone): it may have taken effect.  FAILED: an answer 4xx/5xx, or
 * nothing was ever sent.
 */

static ngx_uint_t
ngx_http_idem_final_state(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t   code;
    ngx_uint_t  status, sent, unanswered;

    /* an answer the module or nginx made for a gRPC client: its status */

    status = ctx->grpc.http_status ? ctx->grpc.http_status
             : r->err_status ? r->err_status : r->headers_out.status;

    sent = ngx_http_idem_sent(r, ctx, &unanswered);

    if (ctx->grpc.on && !ctx->grpc.http_status && status == NGX_HTTP_OK) {

        /*
         * A gRPC service answers 200 and says how the call went in
         * grpc-status: CANCELLED and DEADLINE_EXCEEDED (it enforces the
         * grpc-timeout it was sent) may have taken effect; no grpc-status
         * at all is an answer cut short.
         */

        code = ngx_http_idem_grpc_status(r);

        if (code == 0) {
            return NGX_HTTP_IDEM_SUCCESS;
        }

        if (code == 1 || code == 4 || code == -1) {
            return sent ? NGX_HTTP_IDEM_UNKNOWN : NGX_HTTP_IDEM_FAILED;
        }

        return NGX_HTTP_IDEM_FAILED;
    }

    if (status >= 100 && status < NGX_HTTP_BAD_REQUEST) {
        return NGX_HTTP_IDEM_SUCCESS;
    }

    return unanswered ? NGX_HTTP_IDEM_UNKNOWN : NGX_HTTP_IDEM_FAILED;
}


/*
 * How many attempts sent the request, and how many of those got no
 * answer.  An upstream the module's balancer does not see (proxy_pass
 * with a variable naming no upstream{}) has no attempts of the module's:
 * nginx's own per-try states tell the same.
 */

ngx_uint_t
ngx_http_idem_sent(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_uint_t *unanswered)
{
    ngx_uint_t                  i, sent;
    ngx_http_idem_attempt_t    *a;
    ngx_http_upstream_state_t  *state;

    sent = 0;
    *unanswered = 0;

    if (ctx->record.attempts != NULL) {
        a = ctx->record.attempts->elts;

        for (i = 0; i < ctx->record.attempts->nelts; i++) {
            if (a[i].sent) {
                sent++;

                if (a[i].status == 0) {
                    (*unanswered)++;
                }
            }
        }

        return sent;
    }

    if (r->upstream_states == NULL) {
        return 0;
    }

    state = r->upstream_states->elts;

    for (i = 0; i < r->upstream_states->nelts; i++) {
        if (state[i].bytes_sent > 0) {
            sent++;

            if (state[i].header_time == (ngx_msec_t) -1) {
                (*unanswered)++;
            }
        }
    }

    return sent;
}


ngx_str_t *
ngx_http_idem_state_name(ngx_uint_t state)
{
    return &ngx_http_idem_states[state];
}


/* how an attempt ended, as records say it ("http" for http_NNN) */

ngx_str_t *
ngx_http_idem_outcome_name(ngx_http_request_t *r, ngx_http_idem_attempt_t *a)
{
    if (a->outcome == NGX_HTTP_IDEM_OUTCOME_NONE) {
        /* still running when the request ended: nginx gave up on it */
        return &ngx_http_idem_outcomes[
                   r->connection->error
                   ? NGX_HTTP_IDEM_OUTCOME_CLIENT_ABORT
                   : NGX_HTTP_IDEM_OUTCOME_ERROR_AFTER_SEND];
    }

    return &ngx_http_idem_outcomes[a->outcome];
}


/*
 * The state of this execution, as the request sees it now.  Once the
 * answer has started, it is the final state to be: access_log runs before
 * the module's own log handler.
 */

ngx_uint_t
ngx_http_idem_current_state(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    if (ctx->record.final_state) {
        return ctx->record.final_state;
    }

    if (r->main->header_sent) {
        return ngx_http_idem_final_state(r->main, ctx);
    }

    if (ctx->record.attempts && ctx->record.attempts->nelts) {
        return NGX_HTTP_IDEM_PROCESSING;
    }

    return NGX_HTTP_IDEM_RECEIVED;
}


static ngx_int_t
ngx_http_idem_record_write(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_uint_t state, ngx_uint_t final)
{
    u_char                      keep, *p, *last;
    size_t                      len;
    ngx_int_t                   rc;
    ngx_str_t                  *argv, answer, *outcome;
    ngx_uint_t                  i, n, argc, status, unanswered;
    ngx_http_idem_attempt_t     *a;
    ngx_http_idem_counters_t    *counters;
    ngx_http_idem_main_conf_t   *imcf;
    ngx_http_idem_store_write_t  w;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    n = (final && ctx->record.attempts) ? ctx->record.attempts->nelts : 0;

    /*
     * ttl, the execution's field and value, two per attempt, the receipt,
     * then what a claim's owner keeps for duplicates: "k:" and "r", and "v"
     */

    argv = ngx_palloc(r->pool, (11 + 2 * n) * sizeof(ngx_str_t));
    if (argv == NULL) {
        return NGX_ERROR;
    }

    keep = 0;
    ngx_str_null(&answer);

    if (final && ctx->dedupe.owner) {
        keep = ngx_http_idem_answer_keep(r, ctx, state,
                                         ngx_http_idem_sent(r, ctx,
                                                            &unanswered),
                                         ctx->grpc.on
                                         ? ngx_http_idem_grpc_status(r) : -1,
                                         &answer);
    }

    len = 2 + ctx->record.token.len
          + sizeof("UNKNOWN 999  ") - 1 + NGX_INT64_LEN
          + ngx_http_idem_record_arrival_len(r, ctx)
          + n * (sizeof("a:::") + ctx->record.token.len + 5 * NGX_INT64_LEN
                 + sizeof("error_after_send 1  ")
                 + NGX_HTTP_IDEM_SPAN_ID_LEN + sizeof(" retry_budget")
                 + 1 + NGX_INT_T_LEN)
          + (keep ? sizeof("k:R") + ctx->record.token.len : 0)
          + (final ? sizeof("r:  ") + ctx->record.token.len + NGX_INT_T_LEN
                     + ctx->record.receipt.len
                   : 0);

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    last = p + len;

    argv[0].len = 0;

    argv[1].data = p;
    *p++ = final ? 'f'
                 : (state == NGX_HTTP_IDEM_PROCESSING && ctx->record.arrived)
                   ? 'p' : 'e';
    *p++ = ':';
    p = ngx_cpymem(p, ctx->record.token.data, ctx->record.token.len);
    argv[1].len = p - argv[1].data;

    argv[2].data = p;

    if (final) {
        status = r->err_status ? r->err_status : r->headers_out.status;
        p = ngx_sprintf(p, "%V %ui %uL ", &ngx_http_idem_states[state],
                        status, ngx_http_idem_unix_ms());
        p = ngx_http_idem_record_arrival(r, ctx, p, '\0');

    } else if (argv[1].data[0] == 'p') {
        p = ngx_sprintf(p, "%uL", ngx_http_idem_unix_ms());

    } else {
        p = ngx_http_idem_record_arrival(r, ctx, p,
                                         state == NGX_HTTP_IDEM_PROCESSING
                                         ? 'P' : 'R');
    }

    argv[2].len = p - argv[2].data;

    a = n ? ctx->record.attempts->elts : NULL;

    for (i = 0; i < n; i++) {
        argc = 3 + 2 * i;

        argv[argc].data = p;
        p = ngx_sprintf(p, "a:%V:%ui", &ctx->record.token, a[i].n);
        argv[argc].len = p - argv[argc].data;

        outcome = ngx_http_idem_outcome_name(r, &a[i]);

        argv[argc + 1].data = p;
        p = ngx_sprintf(p, "%uL %M ", a[i].start_ms, a[i].duration);

        if (a[i].outcome == NGX_HTTP_IDEM_OUTCOME_HTTP) {
            p = ngx_sprintf(p, "http_%03ui", a[i].status);

        } else {
            p = ngx_cpymem(p, outcome->data, outcome->len);
        }

        p = ngx_sprintf(p, " %ui %ui ", a[i].sent ? 1 : 0, a[i].status);

        if (a[i].span_id[0]) {
            p = ngx_cpymem(p, a[i].span_id, NGX_HTTP_IDEM_SPAN_ID_LEN);

        } else {
            *p++ = '-';
        }

        /* why no retry followed it (storm.c), and a gRPC status */

        if (a[i].no_retry == NGX_HTTP_IDEM_NO_RETRY_BUDGET) {
            p = ngx_cpymem(p, " retry_budget", sizeof(" retry_budget") - 1);

        } else if (a[i].grpc_status >= 0) {
            p = ngx_cpymem(p, " -", 2);
        }

        if (a[i].grpc_status >= 0) {
            p = ngx_sprintf(p, " %i", a[i].grpc_status);
        }

        argv[argc + 1].len = p - argv[argc + 1].data;
    }

    argc = 3 + 2 * n;

    if (final && ctx->record.receipt.len) {
        argv[argc].data = p;
        p = ngx_sprintf(p, "r:%V", &ctx->record.token);
        argv[argc].len = p - argv[argc].data;

        argv[argc + 1].data = p;
        p = ngx_sprintf(p, "%ui %V", ctx->record.receipt_attempt,
                        &ctx->record.receipt);
        argv[argc + 1].len = p - argv[argc + 1].data;

        argc += 2;

        ngx_http_idem_count(receipts_stored);
    }

    if (keep) {

        /* what the execution leaves for the duplicates of its call */

        argv[argc].data = p;
        p = ngx_sprintf(p, "k:%V", &ctx->record.token);
        argv[argc].len = p - argv[argc].data;

        argv[argc + 1].data = p;
        *p++ = keep;
        argv[argc + 1].len = 1;

        argc += 2;

        if (keep == NGX_HTTP_IDEM_KEEP_REPLAY) {
            ngx_str_set(&argv[argc], "r");
            argv[argc + 1] = answer;
            argc += 2;
        }
    }

    if (p > last) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "idem: record buffer overrun");
        return NGX_ERROR;
    }

    if (!final && argv[1].data[0] == 'e') {
        ctx->record.arrived = 1;
    }

    ngx_memzero(&w, sizeof(ngx_http_idem_store_write_t));

    w.key = ctx->record.key;
    w.token = ctx->record.token;
    w.fields = &argv[1];
    w.nfields = argc - 1;

    /* given up, at once or later: the store counts it there */

    counters = ngx_http_idem_counters();
    w.dropped = (counters != NULL) ? &counters->record_drops : NULL;

    if (!ctx->record.expire_sent
        || ngx_current_msec - ctx->record.expired
           >= NGX_HTTP_IDEM_RECORD_EXPIRE_SLACK(imcf->record_ttl))
    {
        w.ttl = imcf->record_ttl;
    }

    if (final && ctx->dedupe.owner && ctx->dedupe.wake) {

        /* duplicates may wait for this write (dedupe.c): they hear of it */

        w.wake = imcf->store.wake;
    }

    if (final && ctx->dedupe.unsure) {

        /*
         * Its claim got no answer: an execution only if the claim was
         * made, else the record stays the owner's.  A durable claim's
         * write goes after it, on its connection.
         */

        w.owned = 1;
        w.replicas = ctx->dedupe.claim.replicas;
        w.wait = ctx->dedupe.claim.replicas ? ctx->dedupe.claim.wait : 0;

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem call \"%V\": its claim got no answer: written "
                       "only if it was made", &ctx->ids.call_id);
    }

    if (final && ctx->dedupe.owner && !w.owned) {

        /* the claim's owner is done: its fields and expiry at once */

        w.final = 1;
    }

    if (ctx->dedupe.short_record && ctx->dedupe.owner && !w.owned) {

        /* its claim made the record short: added to, as the claim was */

        w.short_record = 1;
        w.expiry = imcf->record_ttl;
    }

    if (!ctx->record.counted && (final || ctx->dedupe.claim_op == NULL)) {

        /*
         * The execution's first write counts it, unless it made the
         * record: "v" is a field every record has, so that every field
         * new means a new record.  Past the cap, the store trims it.
         * Not while its claim is out: a claim that makes the record
         * makes it its first execution (dedupe.c).
         */

        ngx_str_set(&argv[argc], "v");
        ngx_str_set(&argv[argc + 1], NGX_HTTP_IDEM_RECORD_VERSION);
        w.nfields += 2;

        w.first = 1;
        w.max_executions = imcf->record_max_executions;

        /* over before its arrival was written, and no claim: short */

        w.whole = final && !ctx->dedupe.owner
                  && imcf->record_short;

        /* lost or not, never counted twice */

        ctx->record.counted = 1;

        /* whether the call id was known: its reply says (resend_limit.c) */

        if (ctx->record.known && !w.whole) {
            w.known = ctx->record.known;
            w.known_data = ctx->record.known_data;
        }
    }

    ctx->record.known = NULL;

    rc = ngx_http_idem_store_write(&w);

    /* a drop is counted by the store, and logged by it, rate limited */

    if (rc == NGX_OK) {
        if (w.ttl) {
            ngx_http_idem_record_expiring(ctx);
        }

        ngx_http_idem_count(record_writes);
    }

    return (rc == NGX_OK) ? NGX_OK : NGX_DECLINED;
}


/*
 * "<R|P> <created_ms> <source> <node> <method> <trace id> <uri>"; state
 * '\0': without its first letter (a final state's value goes on so).
 */

u_char *
ngx_http_idem_record_arrival(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    u_char *p, u_char state)
{
    ngx_str_t                   uri;
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    if (state) {
        *p++ = state;
        *p++ = ' ';
    }

    ngx_http_idem_record_uri(r, &uri);

    return ngx_sprintf(p, "%uL %V %V %V %V %V", ctx->record.created_ms,
                       ngx_http_idem_source_name(ctx->ids.source),
                       &imcf->node_id, &r->method_name, &ctx->ids.trace_id,
                       &uri);
}


size_t
ngx_http_idem_record_arrival_len(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx)
{
    ngx_str_t                   uri;
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    ngx_http_idem_record_uri(r, &uri);

    /* "variable", the longest source name */

    return sizeof("R  variable     ") - 1 + NGX_INT64_LEN + imcf->node_id.len
           + r->method_name.len + ctx->ids.trace_id.len + uri.len;
}


/* the path only: a query string may hold what nobody should keep */

static void
ngx_http_idem_record_uri(ngx_http_request_t *r, ngx_str_t *uri)
{
    u_char  *q;

    *uri = r->unparsed_uri;

    q = ngx_strlchr(uri->data, uri->data + uri->len, '?');
    if (q != NULL) {
        uri->len = q - uri->data;
    }
}


char *
ngx_http_idem_record_max_executions(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idem_main_conf_t *imcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;

    if (imcf->record_max_executions != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    n = ngx_atoi(value[1].data, value[1].len);

    if (n < 1 || n > NGX_HTTP_IDEM_RECORD_MAX_LIMIT) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a number from 1 to %d",
                           &value[1], &cmd->name,
                           NGX_HTTP_IDEM_RECORD_MAX_LIMIT);
        return NGX_CONF_ERROR;
    }

    imcf->record_max_executions = n;

    return NGX_CONF_OK;
}
