
/*
 * Duplicate suppression.  After access checks, a call on a dedupe route
 * claims its id in the store before anything is forwarded, atomic for
 * every gateway on that store (ngx_http_idem_store_claim()): it either
 * makes this request the owner of the call or says what became of the
 * owner's execution.  A
 * duplicate is answered from that: 409 while the owner runs or when its
 * outcome is unknown, the owner's stored answer replayed, 422 when the id
 * comes with another request.  The request waits for the claim without
 * blocking: it is parked and resumed from a posted event.
 *
 * With idem_dedupe_wait, a duplicate that finds its call in flight is
 * parked instead of answered 409: it watches the record in the store
 * (ngx_http_idem_store_watch()), which wakes it when the owner's final
 * write lands (on this worker, on another, on another gateway), and then
 * sends its claim again, as it was; it gets what a duplicate arriving then
 * would: a replay, a 409, or, the claim released, the call to run itself.
 * The claim is sent again without a wake too, as a fallback for a message
 * lost: when the owner's lease ends and every 5 s; and while the store
 * hears no final writes (its subscription down) on a timer, 5 ms doubling
 * up to 100 ms, as before waking.  Until its wait, or its own budget,
 * runs out (409 call-in-flight).  A wait keeps no lease alive (the claim
 * script never extends one), and an owner that dies leaves its waiters to
 * the lease.  At most idem_dedupe_wait_max waiters per worker; a client
 * that closes its connection while waiting is let go at once.
 *
 * The claim adds these fields to the call's record (record.c):
 *
 *   o              the token of the execution that holds the claim
 *   d              SHA-256 of method, URI and body of the first claim
 *   l:<token>      when its claim lapses, Redis's clock, unix ms (a
 *                  claim of 0.6.0 wrote it relative to the record's
 *                  expiry: the store reads it the same)
 *   k:<token>      what it left for duplicates (NGX_HTTP_IDEM_KEEP_*),
 *                  written with its final state
 *   r              the stored answer (answer.c), written with "k:"
 */


#include "ngx_http_idem_dedupe.h"
#include "ngx_http_idem_answer.h"
#include "ngx_http_idem_ctx.h"
#include "ngx_http_idem_deadline.h"
#include "ngx_http_idem_metrics.h"
#include "ngx_http_idem_problem.h"
#include "ngx_http_idem_record.h"
#include "ngx_http_idem_record_json.h"
#include "ngx_http_idem_resend_limit.h"
#include "ngx_http_idem_store.h"
#include "ngx_http_idem_util.h"

#include <openssl/evp.h>


#define NGX_HTTP_IDEM_CLAIMED            0
#define NGX_HTTP_IDEM_IN_FLIGHT          1
#define NGX_HTTP_IDEM_REPLAY             2
#define NGX_HTTP_IDEM_NOT_STORED         3
#define NGX_HTTP_IDEM_OUTCOME_UNKNOWN    4
#define NGX_HTTP_IDEM_MISMATCH           5
#define NGX_HTTP_IDEM_UNAVAILABLE        6
#define NGX_HTTP_IDEM_INTERNAL           7
#define NGX_HTTP_IDEM_APPLIED            8
#define NGX_HTTP_IDEM_NOT_DURABLE        9
#define NGX_HTTP_IDEM_TOO_MANY_RESENDS   10

/* a request body read back from its file, at a time */
#define NGX_HTTP_IDEM_READ_BACK          65536

/* an unfinished claim is honoured this long past the call's budget */
#define NGX_HTTP_IDEM_LEASE_SLACK        5000
#define NGX_HTTP_IDEM_LEASE_DEFAULT      60000

/* an owner still running this long before its bound says so */
#define NGX_HTTP_IDEM_BOUND_MARGIN       1000

/* a waiting duplicate's claim again after this, doubling, up to the most */
#define NGX_HTTP_IDEM_POLL_FIRST         5
#define NGX_HTTP_IDEM_POLL_MOST          100

/* watched (woken by the final write): asked again this often at most */
#define NGX_HTTP_IDEM_POLL_WATCHED       5000

/*
 * ... and just after the owner's lease ends: the lease is Redis's clock,
 * the timer nginx's cached one, a few ms behind
 */
#define NGX_HTTP_IDEM_LEASE_MARGIN       20


/* waiting duplicates of this worker (idem_dedupe_wait_max) */
static ngx_uint_t  ngx_http_idem_dedupe_waiters;


static void ngx_http_idem_dedupe_cleanup(void *data);
static void ngx_http_idem_dedupe_body(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_dedupe_claim(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static ngx_int_t ngx_http_idem_dedupe_digest_start(ngx_http_request_t *r,
    EVP_MD_CTX *md);
static ngx_int_t ngx_http_idem_dedupe_digest(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, u_char *hex);
static void ngx_http_idem_dedupe_reply(void *data,
    ngx_http_idem_store_found_t *found);
static ngx_int_t ngx_http_idem_dedupe_wait(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static void ngx_http_idem_dedupe_poll(ngx_event_t *ev);
static void ngx_http_idem_dedupe_woken(void *data, ngx_int_t rc);
static void ngx_http_idem_dedupe_bound_start(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static void ngx_http_idem_dedupe_bound(ngx_event_t *ev);
static void ngx_http_idem_dedupe_unwait(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static ngx_int_t ngx_http_idem_dedupe_answer(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static ngx_uint_t ngx_http_idem_dedupe_resend(ngx_uint_t verdict);


/*
 * Called in the precontent phase until it says NGX_DECLINED (go on: this
 * request owns the call, or the route does not dedupe).  NGX_DONE: the
 * request waits, or was answered here.
 */

ngx_int_t
ngx_http_idem_dedupe(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t                  rc;
    ngx_pool_cleanup_t        *cln;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    switch (ctx->dedupe.state) {

    case NGX_HTTP_IDEM_DEDUPE_NONE:

        if (!ilcf->dedupe) {
            return NGX_DECLINED;
        }

        if (ctx->record.arrived) {

            /*
             * Recorded in a location before this one (a redirect after an
             * attempt): a claim now would come after the fact.
             */

            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "idem: call \"%V\" was recorded before it reached "
                          "a location with \"idem_dedupe\": not forwarded",
                          &ctx->ids.call_id);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        /* the claim writes the arrival: one not written yet is not */

        ngx_http_idem_record_unstart(ctx);

        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem dedupe: reading the body");

        ctx->dedupe.state = NGX_HTTP_IDEM_DEDUPE_BODY;

        /* the claim and the digest go with the request, whenever it goes */

        cln = ngx_pool_cleanup_add(r->pool, 0);
        if (cln == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        cln->handler = ngx_http_idem_dedupe_cleanup;
        cln->data = ctx;

        ctx->dedupe.resume_ev.handler = ngx_http_idem_ctx_resume;
        ctx->dedupe.resume_ev.data = ctx;
        ctx->dedupe.resume_ev.log = r->connection->log;

        ctx->dedupe.poll_ev.handler = ngx_http_idem_dedupe_poll;
        ctx->dedupe.poll_ev.data = ctx;
        ctx->dedupe.poll_ev.log = r->connection->log;

        ctx->dedupe.watch.handler = ngx_http_idem_dedupe_woken;
        ctx->dedupe.watch.data = ctx;

        /*
         * The body is hashed as it arrives (the request body filter), so
         * that a body spooled to a file is never read back; one read
         * before us (r->request_body) is hashed from its buffers, unless
         * a body id's read hashed it (ngx_http_idem_dedupe_digest_begin).
         * idem_dedupe_fingerprint may leave the body out.
         */

        if (r->request_body == NULL && ilcf->dedupe_fingerprint_body) {
            ctx->dedupe.md = EVP_MD_CTX_new();

            if (ctx->dedupe.md == NULL
                || EVP_DigestInit_ex(ctx->dedupe.md, EVP_sha256(), NULL) != 1
                || ngx_http_idem_dedupe_digest_start(r, ctx->dedupe.md)
                   != NGX_OK)
            {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }
        }

        /* the technique of ngx_http_mirror_module's request_body */

        rc = ngx_http_read_client_request_body(r, ngx_http_idem_dedupe_body);
        if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
            ctx->dedupe.state = NGX_HTTP_IDEM_DEDUPE_FAILED;
            return rc;
        }

        ngx_http_finalize_request(r, NGX_DONE);
        return NGX_DONE;

    case NGX_HTTP_IDEM_DEDUPE_DONE:
        return ngx_http_idem_dedupe_answer(r, ctx);

    case NGX_HTTP_IDEM_DEDUPE_CLAIM:
        return NGX_DONE;

    case NGX_HTTP_IDEM_DEDUPE_BODY:

        /*
         * Back here while reading: only through an error page, after the
         * body could not be read (too large, malformed).  Nothing was
         * claimed, so nothing may be forwarded from a dedupe location.
         */

        ctx->dedupe.state = NGX_HTTP_IDEM_DEDUPE_FAILED;

        /* fall through */

    default: /* NGX_HTTP_IDEM_DEDUPE_FAILED */

        if (!ilcf->dedupe) {
            return NGX_DECLINED;
        }

        return r->err_status ? (ngx_int_t) r->err_status
                             : NGX_HTTP_BAD_REQUEST;
    }
}


/*
 * The digest started before the body is read for a body id (handler.c):
 * the request body filter feeds it as for dedupe's own read.
 */

ngx_int_t
ngx_http_idem_dedupe_digest_begin(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx)
{
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_idem_dedupe_cleanup;
    cln->data = ctx;

    ctx->dedupe.md = EVP_MD_CTX_new();

    if (ctx->dedupe.md == NULL
        || EVP_DigestInit_ex(ctx->dedupe.md, EVP_sha256(), NULL) != 1
        || ngx_http_idem_dedupe_digest_start(r, ctx->dedupe.md) != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem dedupe: digest started before the body id's read");

    return NGX_OK;
}


/* the request body filter: the body goes into the digest as it arrives */

void
ngx_http_idem_dedupe_body_filter(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_chain_t *in)
{
    ngx_buf_t  *b;

    for ( /* void */ ; in; in = in->next) {
        b = in->buf;

        if (ngx_buf_in_memory(b) && b->last > b->pos
            && EVP_DigestUpdate(ctx->dedupe.md, b->pos, b->last - b->pos) != 1)
        {
            ctx->dedupe.md_failed = 1;
        }
    }
}


/* the pool of a request that goes while its claim is out */

static void
ngx_http_idem_dedupe_cleanup(void *data)
{
    ngx_http_idem_ctx_t *ctx = data;

    if (ctx->dedupe.claim_op != NULL) {
        ngx_http_idem_store_cancel(ctx->dedupe.claim_op);
        ctx->dedupe.claim_op = NULL;
    }

    if (ctx->dedupe.md != NULL) {
        EVP_MD_CTX_free(ctx->dedupe.md);
        ctx->dedupe.md = NULL;
    }

    /* its timer goes with the context's (ctx.c) */

    ngx_http_idem_store_unwatch(&ctx->dedupe.watch);

    if (ctx->dedupe.waiting) {
        ngx_http_idem_observe_wait(ctx, NGX_HTTP_IDEM_WAITED_CLIENT_GONE);
        ctx->dedupe.waiting = 0;
        ngx_http_idem_dedupe_waiters--;
        ngx_http_idem_metrics_waiters(ngx_http_idem_dedupe_waiters);
    }
}


static void
ngx_http_idem_dedupe_body(ngx_http_request_t *r)
{
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    r->write_event_handler = ngx_http_core_run_phases;

    ctx->dedupe.state = NGX_HTTP_IDEM_DEDUPE_CLAIM;

    if (ngx_http_idem_dedupe_claim(r, ctx) != NGX_OK) {

        /* not even sent: answered at once, from a posted event */

        ctx->dedupe.state = NGX_HTTP_IDEM_DEDUPE_DONE;
        ngx_post_event(&ctx->dedupe.resume_ev, &ngx_posted_events);
    }
}


static ngx_int_t
ngx_http_idem_dedupe_claim(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    u_char                       *p;
    ngx_msec_int_t                lease;
    ngx_http_idem_loc_conf_t     *ilcf;
    ngx_http_idem_main_conf_t    *imcf;
    ngx_http_idem_store_claim_t   claim;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);
    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    ctx->dedupe.verdict = NGX_HTTP_IDEM_INTERNAL;

    p = ngx_pnalloc(r->pool, NGX_HTTP_IDEM_SHA256_HEX_LEN
                             + ngx_http_idem_record_arrival_len(r, ctx));
    if (p == NULL) {
        return NGX_ERROR;
    }

    /* the lease: the directive's, else the budget and some slack */

    if (ilcf->dedupe_lease) {
        lease = ilcf->dedupe_lease;

    } else if (ctx->deadline.set) {
        lease = ngx_max(ngx_http_idem_remaining(ctx), 0)
                + NGX_HTTP_IDEM_LEASE_SLACK;

    } else {
        lease = NGX_HTTP_IDEM_LEASE_DEFAULT;
    }

    /*
     * How long its owner may answer: the budget ends its wait for the
     * upstream, and its final write follows; the slack covers that write.
     * Without a budget nothing bounds it (0), whatever the lease says: a
     * lapsed lease is when duplicates stop waiting, not proof that the
     * owner has gone, so a resolution waits for the bound.
     */

    claim.bound = ctx->deadline.set
                  ? (ngx_msec_t) ngx_max(ngx_http_idem_remaining(ctx), 0)
                    + NGX_HTTP_IDEM_LEASE_SLACK
                  : 0;

    claim.key = ctx->record.key;
    claim.token = ctx->record.token;
    claim.lease = (ngx_msec_t) lease;
    claim.ttl = imcf->record_ttl;

    /* durable: forwarded only once that many replicas have the claim */

    claim.replicas = ilcf->dedupe_durable;
    claim.wait = ilcf->dedupe_durable_timeout;

    /* a new id's claim may make the record short, as its only write would */

    claim.short_record = imcf->record_short ? 1 : 0;

    claim.digest.data = p;
    claim.digest.len = NGX_HTTP_IDEM_SHA256_HEX_LEN;

    if (ngx_http_idem_dedupe_digest(r, ctx, p) != NGX_OK) {
        return NGX_ERROR;
    }

    ctx->dedupe.claimed = ngx_current_msec;

    p += NGX_HTTP_IDEM_SHA256_HEX_LEN;

    claim.arrival.data = p;
    p = ngx_http_idem_record_arrival(r, ctx, p, 'R');
    claim.arrival.len = p - claim.arrival.data;

    ctx->dedupe.verdict = NGX_HTTP_IDEM_UNAVAILABLE;

    /* a duplicate that waits sends it again */

    ctx->dedupe.claim = claim;
    ctx->dedupe.asked = ngx_current_msec;

    /* a waiter's claim again finds the record there: the script at once */

    ctx->dedupe.claim.short_record = 0;
    ctx->dedupe.asked_us = ngx_http_idem_metrics_clock();
    ctx->dedupe.claimed_us = ctx->dedupe.asked_us;

    /*
     * Decided here, not by the location the request ends in (an
     * error_page, try_files or X-Accel-Redirect may take it elsewhere):
     * the duplicates of a claim made here wait for its final write.
     */

    ctx->dedupe.wake = ilcf->dedupe_wait ? 1 : 0;

    ctx->dedupe.claim_op = ngx_http_idem_store_claim(&claim,
                                                     ngx_http_idem_dedupe_reply,
                                                     ctx);
    if (ctx->dedupe.claim_op == NULL) {
        return NGX_ERROR;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem dedupe: claim of \"%V\" sent, lease %M, "
                   "bound %M, %ui replicas", &ctx->record.key, claim.lease,
                   claim.bound, claim.replicas);

    return NGX_OK;
}


/* the digest starts with "<method> <uri>\n", the body follows */

static ngx_int_t
ngx_http_idem_dedupe_digest_start(ngx_http_request_t *r, EVP_MD_CTX *md)
{
    if (EVP_DigestUpdate(md, r->method_name.data, r->method_name.len) != 1
        || EVP_DigestUpdate(md, " ", 1) != 1
        || EVP_DigestUpdate(md, r->unparsed_uri.data, r->unparsed_uri.len)
           != 1
        || EVP_DigestUpdate(md, "\n", 1) != 1)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * SHA-256 of "<method> <uri>\n<body>", as hex.  Normally the body went
 * into it as it arrived; a body read before this module asked for it is
 * taken from its buffers (a file buffer read back, as nginx's own filters
 * do).
 */

static ngx_int_t
ngx_http_idem_dedupe_digest(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    u_char *hex)
{
    u_char                    *buf, md[EVP_MAX_MD_SIZE];
    off_t                      pos;
    size_t                     size;
    ssize_t                    n;
    ngx_int_t                  rc;
    ngx_buf_t                 *b;
    EVP_MD_CTX                *mdctx;
    ngx_chain_t               *cl;
    unsigned int               len;
    ngx_http_idem_loc_conf_t  *ilcf;

    if (ctx->dedupe.md != NULL) {
        mdctx = ctx->dedupe.md;
        ctx->dedupe.md = NULL;

        if (ctx->dedupe.md_failed) {
            EVP_MD_CTX_free(mdctx);
            return NGX_ERROR;
        }

        goto final;
    }

    mdctx = EVP_MD_CTX_new();
    if (mdctx == NULL) {
        return NGX_ERROR;
    }

    if (EVP_DigestInit_ex(mdctx, EVP_sha256(), NULL) != 1
        || ngx_http_idem_dedupe_digest_start(r, mdctx) != NGX_OK)
    {
        EVP_MD_CTX_free(mdctx);
        return NGX_ERROR;
    }

    buf = NULL;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    for (cl = (r->request_body && ilcf->dedupe_fingerprint_body)
              ? r->request_body->bufs : NULL;
         cl;
         cl = cl->next)
    {
        b = cl->buf;

        if (ngx_buf_in_memory(b)) {
            if (EVP_DigestUpdate(mdctx, b->pos, b->last - b->pos) != 1) {
                goto failed;
            }

            continue;
        }

        if (!b->in_file) {
            continue;
        }

        if (buf == NULL) {
            buf = ngx_palloc(r->pool, NGX_HTTP_IDEM_READ_BACK);
            if (buf == NULL) {
                goto failed;
            }
        }

        for (pos = b->file_pos; pos < b->file_last; pos += n) {
            size = (size_t) ngx_min(b->file_last - pos,
                                    (off_t) NGX_HTTP_IDEM_READ_BACK);

            n = ngx_read_file(b->file, buf, size, pos);

            if (n != (ssize_t) size) {
                ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                              "idem: could not read the request body back "
                              "from \"%V\"", &b->file->name);
                goto failed;
            }

            if (EVP_DigestUpdate(mdctx, buf, n) != 1) {
                goto failed;
            }
        }
    }

final:

    rc = NGX_ERROR;

    if (EVP_DigestFinal_ex(mdctx, md, &len) == 1 && len == 32) {
        ngx_hex_dump(hex, md, 32);
        rc = NGX_OK;
    }

    EVP_MD_CTX_free(mdctx);

    return rc;

failed:

    EVP_MD_CTX_free(mdctx);

    return NGX_ERROR;
}


/* the claim's answer; the strings live during this call only */

static void
ngx_http_idem_dedupe_reply(void *data, ngx_http_idem_store_found_t *found)
{
    ngx_http_idem_ctx_t *ctx = data;

    ngx_http_request_t  *r;

    r = ctx->request;

    ctx->dedupe.claim_op = NULL;

    ngx_http_idem_observe_claim(ctx);

    /* until when the id is known: the record's, or a new one's full TTL */

    if (found->ttl) {
        ctx->dedupe.expires = ngx_time() + (found->ttl + 999) / 1000;

    } else if (found->verdict == NGX_HTTP_IDEM_STORE_CLAIMED) {
        ctx->dedupe.expires = ngx_time()
                              + (ctx->dedupe.claim.ttl + 999) / 1000;
    }

    /*
     * A resend: the id is known, in flight or finished.  The limit is
     * asked before a waiter slot is taken or an answer replayed, and only
     * for the first verdict (a waiter's claims, sent again, are not new
     * resends).  A claim won (a new id, or one whose execution sent
     * nothing) is a first call.
     */

    if (!ctx->resend.checked
        && ngx_http_idem_dedupe_resend(found->verdict)
        && ngx_http_idem_resend_check(r, ctx, 0) != NGX_OK)
    {
        ctx->dedupe.verdict = ctx->resend.refused
                              ? NGX_HTTP_IDEM_TOO_MANY_RESENDS
                              : NGX_HTTP_IDEM_INTERNAL;
        ctx->dedupe.state = NGX_HTTP_IDEM_DEDUPE_DONE;

        ngx_post_event(&ctx->dedupe.resume_ev, &ngx_posted_events);
        return;
    }

    if (found->verdict == NGX_HTTP_IDEM_STORE_IN_FLIGHT) {

        /*
         * when the owner's lease ends: a waiter asks again then.  The
         * lease's rest was read on Redis's clock while the claim ran, so
         * it counts from its answer, never before that read: counted from
         * when the claim was sent (a slow turn, a connect), the waiter
         * asked again before the lease had ended
         */

        ctx->dedupe.lease_end = found->left
                                ? ngx_current_msec + found->left : 0;

        if (ngx_http_idem_dedupe_wait(r, ctx) == NGX_OK) {
            return;
        }
    }

    if (ctx->dedupe.waiting) {
        ngx_http_idem_count(dedupe_waits_answered);
        ngx_http_idem_observe_wait(ctx, ngx_http_idem_metrics_waited(found));
        ngx_http_idem_dedupe_unwait(r, ctx);
    }

    ctx->dedupe.state = NGX_HTTP_IDEM_DEDUPE_DONE;

    ngx_post_event(&ctx->dedupe.resume_ev, &ngx_posted_events);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem dedupe: claim of \"%V\": verdict %d", &ctx->record.key,
                   (int) found->verdict);

    switch (found->verdict) {

    case NGX_HTTP_IDEM_STORE_CLAIMED:
        ctx->dedupe.verdict = NGX_HTTP_IDEM_CLAIMED;

        /* the claim made the record: its first execution, not counted */

        if (found->made) {
            ctx->record.counted = 1;
            ctx->dedupe.short_record = found->short_record;
        }

        /* the claim wrote the arrival and set the record's expiry */

        ngx_http_idem_record_expiring(ctx);
        return;

    case NGX_HTTP_IDEM_STORE_NOT_DURABLE:

        /*
         * Made, but a failover may lose it: the call is not forwarded,
         * and its final write releases the claim
         */

        ctx->dedupe.verdict = NGX_HTTP_IDEM_NOT_DURABLE;
        ctx->dedupe.owner = 1;

        if (found->made) {
            ctx->record.counted = 1;
            ctx->dedupe.short_record = found->short_record;
        }

        ngx_http_idem_record_expiring(ctx);
        ctx->record.arrived = 1;

        return;

    case NGX_HTTP_IDEM_STORE_MISMATCH:
        ctx->dedupe.verdict = NGX_HTTP_IDEM_MISMATCH;
        return;

    case NGX_HTTP_IDEM_STORE_IN_FLIGHT:

        /*
         * Retry-After stays 1: the owner usually ends long before its
         * lease (its budget and some slack), and the Link says more
         */

        ctx->dedupe.verdict = NGX_HTTP_IDEM_IN_FLIGHT;
        return;

    case NGX_HTTP_IDEM_STORE_REPLAY:
        if (found->answer.len == 0) {
            ctx->dedupe.verdict = NGX_HTTP_IDEM_NOT_STORED;
            return;
        }

        ctx->dedupe.verdict = NGX_HTTP_IDEM_REPLAY;

        ctx->dedupe.found.data = ngx_pstrdup(r->pool, &found->answer);
        if (ctx->dedupe.found.data == NULL) {
            ctx->dedupe.verdict = NGX_HTTP_IDEM_INTERNAL;
            return;
        }

        ctx->dedupe.found.len = found->answer.len;
        return;

    case NGX_HTTP_IDEM_STORE_NOT_STORED:
    case NGX_HTTP_IDEM_STORE_UNKNOWN:
    case NGX_HTTP_IDEM_STORE_APPLIED:
        ctx->dedupe.verdict =
                         (found->verdict == NGX_HTTP_IDEM_STORE_NOT_STORED)
                         ? NGX_HTTP_IDEM_NOT_STORED
                         : (found->verdict == NGX_HTTP_IDEM_STORE_UNKNOWN)
                           ? NGX_HTTP_IDEM_OUTCOME_UNKNOWN
                           : NGX_HTTP_IDEM_APPLIED;

        /* the record goes with the 409: what the caller reconciles with */

        if (found->record.fields == NULL
            || ngx_http_idem_record_json(r, &ctx->ids.call_id,
                                         found->record.now,
                                         found->record.fields,
                                         found->record.nfields,
                                         &ctx->dedupe.found)
               != NGX_OK)
        {
            ngx_str_null(&ctx->dedupe.found);
        }

        return;

    default: /* NGX_HTTP_IDEM_STORE_UNAVAILABLE */

        /*
         * The claim may have been made: the final write releases it, and
         * writes nothing if another execution holds the call (unsure)
         */

        ctx->dedupe.verdict = NGX_HTTP_IDEM_UNAVAILABLE;
        ctx->dedupe.owner = 1;
        ctx->dedupe.unsure = 1;
        return;
    }
}


/*
 * The owner of a claim with a bound: a resolution waits for the bound
 * (resolve.lua), but an answer whose header came before the budget ran
 * out is never cut, and may still be on its way to a slow client when
 * the bound passes.  So an owner still running a little before its bound
 * says so: "b:<token>" becomes "-", and a resolution waits for its final
 * write.  One write, for the rare owner that outlives its budget.
 */

static void
ngx_http_idem_dedupe_bound_start(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx)
{
    ngx_msec_int_t  left;

    if (ctx->dedupe.claim.bound == 0) {
        return;     /* no bound: "-" already */
    }

    ctx->dedupe.bound_ev.handler = ngx_http_idem_dedupe_bound;
    ctx->dedupe.bound_ev.data = ctx;
    ctx->dedupe.bound_ev.log = r->connection->log;
    ctx->dedupe.bound_ev.cancelable = 1;

    /* by this worker's clock, from the claim sent: before Redis's bound */

    left = (ngx_msec_int_t) (ctx->dedupe.claimed + ctx->dedupe.claim.bound
                             - NGX_HTTP_IDEM_BOUND_MARGIN - ngx_current_msec);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem dedupe: owner's bound in %i ms", (ngx_int_t) left);

    ngx_add_timer(&ctx->dedupe.bound_ev, (ngx_msec_t) ngx_max(left, 1));
}


static void
ngx_http_idem_dedupe_bound(ngx_event_t *ev)
{
    ngx_http_idem_ctx_t *ctx = ev->data;

    u_char                       *p;
    ngx_str_t                     fields[2];
    ngx_http_request_t           *r;
    ngx_http_idem_counters_t     *counters;
    ngx_http_idem_store_write_t   w;

    r = ctx->request;

    if (ctx->record.final_state) {
        return;     /* its final write went: it says how the call ended */
    }

    p = ngx_pnalloc(r->pool, 2 + ctx->record.token.len);
    if (p == NULL) {
        return;
    }

    fields[0].data = p;
    fields[0].len = ngx_sprintf(p, "b:%V", &ctx->record.token) - p;
    ngx_str_set(&fields[1], "-");

    ngx_memzero(&w, sizeof(ngx_http_idem_store_write_t));

    w.key = ctx->record.key;
    w.token = ctx->record.token;
    w.fields = fields;
    w.nfields = 2;

    /* given up, at once or later: the store counts it there */

    counters = ngx_http_idem_counters();
    w.dropped = (counters != NULL) ? &counters->record_drops : NULL;

    ngx_log_error(NGX_LOG_INFO, ev->log, 0,
                  "idem: call \"%V\" still running at its bound: its "
                  "resolution waits for its final write", &ctx->ids.call_id);

    if (ngx_http_idem_store_write(&w) == NGX_OK) {
        ngx_http_idem_count(record_writes);
    }
}


/*
 * The call is in flight: wait for it (idem_dedupe_wait), the claim sent
 * again after the next delay.  NGX_DECLINED: no more waiting, it is
 * answered as in flight now.
 */

static ngx_int_t
ngx_http_idem_dedupe_wait(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_msec_t                  now, wait, delay;
    ngx_msec_int_t              left, lease;
    ngx_http_idem_loc_conf_t   *ilcf;
    ngx_http_idem_main_conf_t  *imcf;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);
    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    now = ngx_current_msec;

    if (!ctx->dedupe.waiting) {

        if (ilcf->dedupe_wait == 0 || r->connection->error) {
            return NGX_DECLINED;
        }

        wait = ilcf->dedupe_wait;

        if (ctx->deadline.set) {
            left = ngx_http_idem_remaining(ctx);
            wait = ngx_min(wait, (ngx_msec_t) ngx_max(left, 0));
        }

        if (wait == 0) {
            return NGX_DECLINED;
        }

        if (ngx_http_idem_dedupe_waiters >= imcf->dedupe_wait_max) {
            ngx_http_idem_count(dedupe_waits_full);

            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "idem: call \"%V\" in flight: %ui duplicates "
                          "wait already in this worker "
                          "(idem_dedupe_wait_max), not this one",
                          &ctx->ids.call_id, ngx_http_idem_dedupe_waiters);
            return NGX_DECLINED;
        }

        ngx_http_idem_dedupe_waiters++;
        ngx_http_idem_metrics_waiters(ngx_http_idem_dedupe_waiters);
        ctx->dedupe.waiting = 1;
        ctx->dedupe.wait_until = now + wait;
        ctx->dedupe.poll = NGX_HTTP_IDEM_POLL_FIRST;

        /* a client that goes is let go at once (finalized as 499) */

        r->read_event_handler = ngx_http_test_reading;

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem dedupe: \"%V\" in flight, waits %M ms",
                       &ctx->ids.call_id, wait);

    }

    left = (ngx_msec_int_t) (ctx->dedupe.wait_until - now);

    if (left <= 0) {
        ngx_http_idem_count(dedupe_waits_timed_out);
        ngx_http_idem_observe_wait(ctx, NGX_HTTP_IDEM_WAITED_TIMED_OUT);

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem dedupe: \"%V\" still in flight, the wait is "
                       "over", &ctx->ids.call_id);

        ngx_http_idem_dedupe_unwait(r, ctx);
        return NGX_DECLINED;
    }

    ctx->dedupe.watch.key = ctx->record.key;

    switch (ngx_http_idem_store_watch(&ctx->dedupe.watch, ctx->dedupe.asked)) {

    case NGX_OK:

        /*
         * Woken by the owner's final write; asked again without it when
         * the owner's lease ends (an owner that died writes nothing) and
         * every 5 s, in case a message was lost
         */

        delay = NGX_HTTP_IDEM_POLL_WATCHED;

        if (ctx->dedupe.lease_end) {
            lease = (ngx_msec_int_t) (ctx->dedupe.lease_end - now);
            delay = ngx_min(delay, (ngx_msec_t) ngx_max(lease, 0)
                                   + NGX_HTTP_IDEM_LEASE_MARGIN);
        }

        ctx->dedupe.poll = NGX_HTTP_IDEM_POLL_FIRST;

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem dedupe: \"%V\" watched, asked again in %M ms "
                       "unless woken", &ctx->ids.call_id,
                       ngx_min(delay, (ngx_msec_t) left));
        break;

    case NGX_AGAIN:

        /* its owner's final write was heard while the claim was out */

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem dedupe: \"%V\" written meanwhile, asks again",
                       &ctx->ids.call_id);

        delay = 0;
        break;

    default: /* NGX_DECLINED: nobody wakes it, it polls */

        delay = ctx->dedupe.poll;

        ctx->dedupe.poll = ngx_min(2 * ctx->dedupe.poll,
                                   NGX_HTTP_IDEM_POLL_MOST);
        break;
    }

    if (delay == 0) {
        ngx_post_event(&ctx->dedupe.poll_ev, &ngx_posted_events);
        return NGX_OK;
    }

    ngx_add_timer(&ctx->dedupe.poll_ev, ngx_min(delay, (ngx_msec_t) left));

    return NGX_OK;
}


/*
 * The store says the owner's final write landed (NGX_OK: the claim goes
 * again now), or that it hears none any more (the waiter polls)
 */

static void
ngx_http_idem_dedupe_woken(void *data, ngx_int_t rc)
{
    ngx_http_idem_ctx_t *ctx = data;

    ngx_msec_int_t       left;
    ngx_http_request_t  *r;

    r = ctx->request;

    if (!ctx->dedupe.waiting || ctx->dedupe.claim_op != NULL) {
        return;
    }

    if (ctx->dedupe.poll_ev.timer_set) {
        ngx_del_timer(&ctx->dedupe.poll_ev);
    }

    if (rc == NGX_OK) {
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem dedupe: \"%V\" woken by its owner's final "
                       "write, %M ms after its claim", &ctx->ids.call_id,
                       ngx_current_msec - ctx->dedupe.asked);

        ngx_post_event(&ctx->dedupe.poll_ev, &ngx_posted_events);
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem dedupe: \"%V\" not woken any more: it polls",
                   &ctx->ids.call_id);

    left = (ngx_msec_int_t) (ctx->dedupe.wait_until - ngx_current_msec);

    ngx_add_timer(&ctx->dedupe.poll_ev,
                  ngx_min(ctx->dedupe.poll, (ngx_msec_t) ngx_max(left, 1)));
}


/* a waiting duplicate's claim, again */

static void
ngx_http_idem_dedupe_poll(ngx_event_t *ev)
{
    ngx_http_idem_ctx_t *ctx = ev->data;

    ngx_http_request_t  *r;

    r = ctx->request;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem dedupe: \"%V\" asks again", &ctx->ids.call_id);

    /* a wake while the claim is out is heard by the next watch */

    ngx_http_idem_store_unwatch(&ctx->dedupe.watch);

    ctx->dedupe.verdict = NGX_HTTP_IDEM_UNAVAILABLE;
    ctx->dedupe.asked = ngx_current_msec;
    ctx->dedupe.asked_us = ngx_http_idem_metrics_clock();

    ctx->dedupe.claim_op = ngx_http_idem_store_claim(&ctx->dedupe.claim,
                                                     ngx_http_idem_dedupe_reply,
                                                     ctx);
    if (ctx->dedupe.claim_op != NULL) {
        return;
    }

    /* not even sent: the store is away, as for a first claim */

    ngx_http_idem_observe_wait(ctx, NGX_HTTP_IDEM_WAITED_UNAVAILABLE);
    ngx_http_idem_dedupe_unwait(r, ctx);

    ctx->dedupe.state = NGX_HTTP_IDEM_DEDUPE_DONE;
    ngx_post_event(&ctx->dedupe.resume_ev, &ngx_posted_events);
}


static void
ngx_http_idem_dedupe_unwait(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    if (!ctx->dedupe.waiting) {
        return;
    }

    ctx->dedupe.waiting = 0;
    ngx_http_idem_dedupe_waiters--;
    ngx_http_idem_metrics_waiters(ngx_http_idem_dedupe_waiters);

    ngx_http_idem_store_unwatch(&ctx->dedupe.watch);

    r->read_event_handler = ngx_http_block_reading;
}


static ngx_int_t
ngx_http_idem_dedupe_answer(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    u_char                    *p;
    ngx_int_t                  rc;
    ngx_str_t                  value;
    ngx_http_idem_problem_t    problem;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem dedupe: \"%V\": verdict %ui", &ctx->ids.call_id,
                   ctx->dedupe.verdict);

    switch (ctx->dedupe.verdict) {

    case NGX_HTTP_IDEM_CLAIMED:

        if (!ctx->dedupe.owner) {
            ctx->dedupe.owner = 1;
            ctx->record.on = 1;

            ngx_http_idem_count(dedupe_claims);

            ngx_http_idem_dedupe_bound_start(r, ctx);

            ctx->record.arrived = 1;   /* the claim wrote the arrival */

            /*
             * Marked PROCESSING only once the call has run the arrival
             * delay: one over sooner has its final write say it all
             * (2 commands a call: the claim, the end)
             */

            if (ilcf->record_arrival_delay) {
                ngx_add_timer(&ctx->record.arrival_ev,
                              ilcf->record_arrival_delay);
            }
        }

        return NGX_DECLINED;

    case NGX_HTTP_IDEM_REPLAY:

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idem: call \"%V\" answered from its stored answer",
                      &ctx->ids.call_id);

        ngx_http_idem_count(dedupe_replays);

        rc = ngx_http_idem_answer_replay(r, ctx, &ctx->dedupe.found);

        ngx_http_finalize_request(r, rc);
        return NGX_DONE;

    case NGX_HTTP_IDEM_IN_FLIGHT:
        ngx_http_idem_problem_set(r, &problem,
                                  NGX_HTTP_IDEM_P_CALL_IN_FLIGHT, NULL,
                                  "an execution of this call id is in "
                                  "progress; retry later or ask for its "
                                  "status");
        break;

    case NGX_HTTP_IDEM_OUTCOME_UNKNOWN:
        ngx_http_idem_problem_set(r, &problem,
                                  NGX_HTTP_IDEM_P_OUTCOME_UNKNOWN, NULL,
                                  "an execution of this call id may have "
                                  "taken effect without an answer; it is "
                                  "not run again: reconcile with its record");
        problem.record = ctx->dedupe.found;
        break;

    case NGX_HTTP_IDEM_NOT_STORED:
        ngx_http_idem_problem_set(r, &problem,
                                  NGX_HTTP_IDEM_P_ANSWER_NOT_STORED, NULL,
                                  "this call id was executed, but its "
                                  "answer was not kept for replay");
        problem.record = ctx->dedupe.found;
        break;

    case NGX_HTTP_IDEM_APPLIED:
        ngx_http_idem_problem_set(r, &problem,
                                  NGX_HTTP_IDEM_P_CALL_APPLIED, NULL,
                                  "an execution of this call id took "
                                  "effect, as the service resolved it; it "
                                  "is not run again: see its receipt");
        problem.record = ctx->dedupe.found;
        break;

    case NGX_HTTP_IDEM_TOO_MANY_RESENDS:
        return ngx_http_idem_resend_refuse(r, ctx);

    case NGX_HTTP_IDEM_MISMATCH:
        ngx_http_idem_problem_set(r, &problem,
                                  NGX_HTTP_IDEM_P_PAYLOAD_MISMATCH, NULL,
                                  "this call id was used with another "
                                  "method, URI or body");
        break;

    case NGX_HTTP_IDEM_UNAVAILABLE:
        ngx_http_idem_problem_set(r, &problem,
                                  NGX_HTTP_IDEM_P_DEDUPE_UNAVAILABLE, NULL,
                                  "the call id could not be claimed: "
                                  "nothing was forwarded");

        /*
         * a claim sent and not answered is released by the final write,
         * if it was made
         */

        ctx->record.on = ctx->dedupe.owner;
        break;

    case NGX_HTTP_IDEM_NOT_DURABLE:
        ngx_http_idem_problem_set(r, &problem,
                                  NGX_HTTP_IDEM_P_CLAIM_NOT_DURABLE, NULL,
                                  "the call id was claimed, but fewer Redis "
                                  "replicas than required confirmed the "
                                  "claim in time: nothing was forwarded, "
                                  "the claim is released");

        /* the final write says nothing was sent: a retry claims again */

        ctx->record.on = 1;
        break;

    default: /* NGX_HTTP_IDEM_INTERNAL */
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_idem_problem_count(&problem);

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idem: call \"%V\": %V", &ctx->ids.call_id, &problem.detail);

    if (problem.status != NGX_HTTP_IDEM_UNPROCESSABLE) {
        ngx_str_set(&value, "1");

        if (problem.status != NGX_HTTP_CONFLICT
            || ctx->dedupe.verdict == NGX_HTTP_IDEM_IN_FLIGHT)
        {
            if (ngx_http_idem_add_response_header(r, "Retry-After", &value)
                != NGX_OK)
            {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }
        }
    }

    if (problem.status == NGX_HTTP_CONFLICT && ilcf->status_url.len) {
        value.len = sizeof("<>; rel=\"status\"") - 1 + ilcf->status_url.len
                    + ctx->ids.call_id.len;

        value.data = ngx_pnalloc(r->pool, value.len);
        if (value.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        p = ngx_sprintf(value.data, "<%V%V>; rel=\"status\"",
                        &ilcf->status_url, &ctx->ids.call_id);
        value.len = p - value.data;

        if (ngx_http_idem_add_response_header(r, "Link", &value) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    rc = ngx_http_idem_send_problem(r, &problem, &ctx->ids.call_id);

    ngx_http_finalize_request(r, rc);
    return NGX_DONE;
}


/* the claim found the id known: a resend, for idem_resend_limit */

static ngx_uint_t
ngx_http_idem_dedupe_resend(ngx_uint_t verdict)
{
    switch (verdict) {

    case NGX_HTTP_IDEM_STORE_IN_FLIGHT:
    case NGX_HTTP_IDEM_STORE_REPLAY:
    case NGX_HTTP_IDEM_STORE_NOT_STORED:
    case NGX_HTTP_IDEM_STORE_UNKNOWN:
    case NGX_HTTP_IDEM_STORE_APPLIED:
    case NGX_HTTP_IDEM_STORE_MISMATCH:
        return 1;

    default:
        return 0;
    }
}


/*
 * The answer's "Idempotency-Expires: <IMF-fixdate>" (idem_dedupe_expires_
 * header): until when the call id is known, so that a client knows how
 * long a resend is a duplicate; one the upstream sent is replaced.
 */

ngx_int_t
ngx_http_idem_dedupe_expires(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_idem_loc_conf_t *ilcf)
{
    ngx_str_t         value;
    ngx_table_elt_t  *h;

    h = ngx_http_idem_header_find(&r->headers_out.headers,
                             (char *) ilcf->dedupe_expires_header.name.data,
                             ilcf->dedupe_expires_header.name.len);
    if (h != NULL) {
        h->hash = 0;
    }

    value.data = ngx_pnalloc(r->pool, sizeof("Mon, 28 Sep 1970 06:00:00 GMT"));
    if (value.data == NULL) {
        return NGX_ERROR;
    }

    value.len = ngx_http_time(value.data, ctx->dedupe.expires) - value.data;

    /* a directive's argument, or the default: NUL-terminated */

    return ngx_http_idem_add_response_header(r,
                             (char *) ilcf->dedupe_expires_header.name.data,
                             &value);
}
