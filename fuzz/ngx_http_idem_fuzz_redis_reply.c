
/*
 * Fuzz target: what Redis answers to a claim or a read, from the bytes on
 * the wire to what the client gets.  The store's real operations send the
 * commands (ngx_http_idem_store_claim, ngx_http_idem_store_read_record;
 * hiredis only takes them, nothing is written); hiredis' own parser makes
 * a redisReply of each reply; redis_op.c turns it into strings; the record
 * operations (redis_record.c) decode them: the claim script's verdict, or
 * the record and Redis's clock; and dedupe's
 * reply handler (a verdict: 409, 422, 503, a replay) or the status
 * endpoint's (200, 404, 503) makes the answer.
 *
 * Input: a flags byte (bit 0: the status endpoint's read, else a claim;
 * bit 1: the op was cancelled before its first reply; bit 2: the
 * connection went before the first reply; bit 3: no error line for a
 * while), then RESP bytes, as Redis sends them: each reply answers the
 * command outstanding (a connection's SCRIPT LOADs, a claim's script,
 * or a script sent again after NOSCRIPT); when they run out, the
 * connection goes.
 */


#include "ngx_http_idem_redis.c"
#include "ngx_http_idem_redis_node.c"
#include "ngx_http_idem_redis_op.c"
#include "ngx_http_idem_redis_batch.c"
#include "ngx_http_idem_redis_stats.c"
#include "ngx_http_idem_redis_record.c"
#include "ngx_http_idem_dedupe.c"
#include "ngx_http_idem_status.c"
#include "ngx_http_idem_record_parse.c"
#include "ngx_http_idem_resolution.c"
#include "ngx_http_idem_record_json.c"
#include "ngx_http_idem_timeline.c"
#include "ngx_http_idem_answer.c"
#include "ngx_http_idem_problem.c"
#include "ngx_http_idem_headers.c"
#include "ngx_http_idem_call_id_source.c"
#include "ngx_http_idem_json.c"
#include "ngx_http_idem_util.c"

#include "ngx_http_idem_fuzz.h"


#define NGX_HTTP_IDEM_FUZZ_COMMANDS  8


/* the commands the store gave hiredis, in order */
typedef struct {
    ngx_uint_t                   sent;
    void                        *privdata[NGX_HTTP_IDEM_FUZZ_COMMANDS];
    redisCallbackFn             *fn[NGX_HTTP_IDEM_FUZZ_COMMANDS];
} ngx_http_idem_fuzz_wire_t;


static ngx_http_idem_fuzz_wire_t  ngx_http_idem_fuzz_wire;


static void ngx_http_idem_fuzz_body(ngx_http_request_t *r);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void                        *reply;
    ngx_uint_t                   flags, i;
    redisReader                 *reader;
    redisAsyncContext            ac;
    ngx_http_idem_fuzz_t         fz;
    ngx_http_idem_store_op_t    *op;
    ngx_http_idem_fuzz_input_t   input;
    ngx_http_idem_status_ctx_t  *sctx;
    ngx_http_idem_store_conf_t   conf;
    ngx_http_idem_store_claim_t  claim;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t   node;
    ngx_log_t                   *log;

    if (ngx_http_idem_fuzz_init(&fz, data, size, &input) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    ngx_http_idem_fuzz_names(&fz);

    flags = ngx_http_idem_fuzz_byte(&input);

    if (ngx_http_idem_fuzz_resp_too_large(input.pos, input.last)) {
        ngx_http_idem_fuzz_done(&fz);
        return 0;
    }

    /* the replies, parsed by hiredis as it reads them from the socket */

    reader = redisReaderCreate();
    if (reader == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    if (redisReaderFeed(reader, (char *) input.pos, input.last - input.pos)
        != REDIS_OK)
    {
        redisReaderFree(reader);
        ngx_http_idem_fuzz_done(&fz);
        return 0;
    }

    /* the worker's store, as init_process leaves it, connected */

    ngx_memzero(&conf, sizeof(ngx_http_idem_store_conf_t));
    ngx_str_set(&conf.addr, "127.0.0.1:6379");
    conf.timeout = 1000;
    conf.max_pending = 10;

    rd = &ngx_http_idem_redis;
    log = fz.request->connection->log;

    ngx_memzero(rd, sizeof(ngx_http_idem_redis_t));

    rd->conf = &conf;
    rd->log = log;
    ngx_str_set(&rd->name, "127.0.0.1:6379");
    rd->started = 1;

    /* its one node, up: the replies come on it */

    ngx_memzero(&ac, sizeof(redisAsyncContext));
    ngx_memzero(&node, sizeof(ngx_http_idem_redis_node_t));
    node.rd = rd;
    node.state = NGX_HTTP_IDEM_REDIS_UP;
    node.name = rd->name;
    node.ac = &ac;
    ac.data = &node;
    rd->node = &node;

    /* the last error line: long ago (an error reply is logged at once) */
    rd->reported = (flags & 8) ? ngx_current_msec - 5000 : ngx_current_msec;

    rd->pending_ev.handler = ngx_http_idem_redis_pending_handler;
    rd->pending_ev.data = rd;
    rd->pending_ev.log = log;

    rd->report_ev.handler = ngx_http_idem_redis_report_handler;
    rd->report_ev.data = rd;
    rd->report_ev.log = log;
    rd->report_ev.cancelable = 1;

    ngx_memzero(&ngx_http_idem_fuzz_wire, sizeof(ngx_http_idem_fuzz_wire_t));

    if (flags & 1) {

        /* GET /calls/<id> */

        sctx = ngx_pcalloc(fz.pool, sizeof(ngx_http_idem_status_ctx_t));
        if (sctx == NULL) {
            ngx_http_idem_fuzz_abort("no memory");
        }

        sctx->request = fz.request;
        ngx_str_set(&sctx->id, "order-1234");

        op = ngx_http_idem_store_read_record(&fz.ctx->ids.call_id,
                                             ngx_http_idem_status_reply,
                                             sctx);
        sctx->op = op;

    } else {

        /* a claim on a dedupe route */

        fz.ilcf->dedupe = 1;
        ngx_str_set(&fz.ilcf->status_url, "/calls/");
        fz.ctx->dedupe.state = NGX_HTTP_IDEM_DEDUPE_CLAIM;
        fz.ctx->dedupe.resume_ev.data = fz.ctx;
        fz.ctx->dedupe.resume_ev.log = log;
        fz.ctx->record.arrival_ev.data = fz.ctx;
        fz.ctx->record.arrival_ev.log = log;

        /* as dedupe_claim makes it, from the ctx */

        ngx_str_set(&fz.ctx->record.key, "idem:c:{order-1234}");
        ngx_str_set(&fz.ctx->record.token, "aaaaaaaaaaaaaaaa");

        ngx_memzero(&claim, sizeof(ngx_http_idem_store_claim_t));

        claim.key = fz.ctx->record.key;
        claim.token = fz.ctx->record.token;
        ngx_str_set(&claim.digest, "0123456789abcdef");
        ngx_str_set(&claim.arrival, "R 1700000000000 fuzz-node");
        claim.lease = 30000;
        claim.ttl = 86400000;

        op = ngx_http_idem_store_claim(&claim, ngx_http_idem_dedupe_reply,
                                       fz.ctx);
        fz.ctx->dedupe.claim_op = op;
    }

    /* sent: one command, nobody told yet */

    ngx_http_idem_fuzz_assert(op != NULL);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_wire.sent == 1);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_wire.privdata[0] == op);
    ngx_http_idem_fuzz_assert(rd->stats.pending == 1);

    if (flags & 2) {
        ngx_http_idem_store_cancel(op);
    }

    /*
     * Each reply to the command outstanding; a handler or a NOSCRIPT may
     * send another (the op is freed when none follows); then hiredis
     * calls back what is left with no reply, as when the link goes.
     */

    for (i = 0; i < ngx_http_idem_fuzz_wire.sent; i++) {

        reply = NULL;

        if (!(i == 0 && (flags & 4))
            && (redisReaderGetReply(reader, &reply) != REDIS_OK))
        {
            reply = NULL;
        }

        ngx_http_idem_fuzz_wire.fn[i](&ac, reply,
                                      ngx_http_idem_fuzz_wire.privdata[i]);

        if (reply != NULL) {
            freeReplyObject(reply);
        }
    }

    redisReaderFree(reader);

    ngx_http_idem_fuzz_assert(rd->stats.pending == 0);

    if (flags & 2) {

        /* a cancelled op: nobody is told */

        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_answer.finalized
                                  == -100);
        ngx_http_idem_fuzz_assert(fz.ctx->dedupe.state
                                  != NGX_HTTP_IDEM_DEDUPE_DONE);

    } else if (flags & 1) {

        /* the status endpoint answered: 200 with its JSON, 404 or 503 */

        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_answer.finalized
                                  != -100);
        ngx_http_idem_fuzz_assert(sctx->op == NULL);

        if (ngx_http_idem_fuzz_answer.finalized == NGX_OK) {
            ngx_http_idem_fuzz_assert(
                ngx_http_idem_fuzz_answer.status == NGX_HTTP_OK
                || ngx_http_idem_fuzz_answer.status == NGX_HTTP_NOT_FOUND
                || ngx_http_idem_fuzz_answer.status
                   == NGX_HTTP_SERVICE_UNAVAILABLE);

            ngx_http_idem_fuzz_body(fz.request);

        } else {
            ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_answer.finalized
                                      == NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

    } else {

        /* the claim's verdict, then the request resumes with it */

        ngx_http_idem_fuzz_assert(fz.ctx->dedupe.state
                                  == NGX_HTTP_IDEM_DEDUPE_DONE);
        ngx_http_idem_fuzz_assert(fz.ctx->dedupe.claim_op == NULL);
        ngx_http_idem_fuzz_assert(fz.ctx->dedupe.resume_ev.posted);

        ngx_delete_posted_event(&fz.ctx->dedupe.resume_ev);

        if (ngx_http_idem_dedupe_answer(fz.request, fz.ctx)
            == NGX_DECLINED)
        {
            /* this request owns the call: nothing answered yet */
            ngx_http_idem_fuzz_assert(fz.ctx->dedupe.owner);
            ngx_http_idem_fuzz_assert(!ngx_http_idem_fuzz_answer.header_sent);

            /* the claim wrote its owner's arrival: nothing left to send */

            ngx_http_idem_fuzz_assert(fz.ctx->record.arrived);
            ngx_http_idem_fuzz_assert(!fz.ctx->record.arrival_ev.posted);

        } else if (!fz.ctx->answer.replayed) {
            ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_answer.finalized
                                      != -100);

            if (ngx_http_idem_fuzz_answer.header_sent) {
                ngx_http_idem_fuzz_body(fz.request);
            }
        }
    }

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}


/* the module's own answers are JSON, whole */

static void
ngx_http_idem_fuzz_body(ngx_http_request_t *r)
{
    ngx_str_t  *body;

    body = &ngx_http_idem_fuzz_answer.body;

    ngx_http_idem_fuzz_assert(r->headers_out.content_length_n
                              == (off_t) body->len);

    if (!ngx_http_idem_fuzz_json(body->data, body->len)) {
        fprintf(stderr, "not JSON: %.*s\n", (int) body->len, body->data);
        ngx_http_idem_fuzz_abort("check failed: the answer's JSON");
    }
}


/* the adapter (redis_adapter.c): no socket here */

ngx_int_t
ngx_http_idem_redis_attach(redisAsyncContext *ac, ngx_log_t *log)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_redis_attach");
    return NGX_ERROR;
}


/*
 * hiredis' side of a command: taken, never written; the target answers
 * it (this definition comes before the library's)
 */

int
redisAsyncCommandArgv(redisAsyncContext *ac, redisCallbackFn *fn,
    void *privdata, int argc, const char **argv, const size_t *argvlen)
{
    ngx_http_idem_fuzz_wire_t  *w;

    w = &ngx_http_idem_fuzz_wire;

    ngx_http_idem_fuzz_assert(argc > 0 && argv != NULL && argvlen != NULL);

    if (w->sent == NGX_HTTP_IDEM_FUZZ_COMMANDS) {
        ngx_http_idem_fuzz_abort("check failed: commands for one op");
    }

    w->fn[w->sent] = fn;
    w->privdata[w->sent] = privdata;
    w->sent++;

    return REDIS_OK;
}


void
ngx_http_idem_redis_flush(redisAsyncContext *ac)
{
}
