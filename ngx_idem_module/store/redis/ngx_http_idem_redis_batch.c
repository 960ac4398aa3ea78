
/*
 * Group commit of durable claims.  A durable claim that made its request
 * the owner holds once enough replicas have it, which WAIT tells; one
 * WAIT per claim, in series on one connection, made each claim wait for
 * the ones before it.  Here the claims of one connection share WAITs:
 * every claim whose reply came while no WAIT of its connection is in
 * flight joins the next one, sent at the end of the event-loop turn (a
 * posted event), so that the claims answered in one read of Redis's
 * replies leave with one WAIT.  A claim whose reply comes while a WAIT is
 * in flight was sent before that WAIT (its reply would come after the
 * WAIT's otherwise): the WAIT counts its write, and answers it too.
 *
 * The WAIT goes on the connection the claims were made on, never another:
 * WAIT counts the writes of its own connection only (a connection that
 * wrote nothing may be answered at once, whatever the replicas have).  So
 * a batch's claims, and its WAIT, are on one connection, and a claim whose
 * connection is lost before its WAIT left is not durable.
 *
 * A connection takes one kind of durable claim only (replicas, timeout:
 * redis_node.c has two for each kind the routes ask for), and its WAIT
 * asks for exactly those: a claim's answer never depends on the claims
 * of another kind, which neither share its WAIT nor queue behind theirs
 * (a WAIT for 2 replicas within 3 s held up every claim for 1 within
 * 500 ms behind it, on one connection, until their own timers ran out).
 * A kind's connections take turns: a claim goes on one with no WAIT in
 * flight, and waits behind one only when each has one, behind the one
 * that left first (the WAITs are numbered as they leave).  Its own timer
 * (its timeout and the store's) ends its wait.  A claim whose request
 * went meanwhile is cancelled (done): it is freed with its batch.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis_common.h"


static void ngx_http_idem_redis_batch_init(ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_batch_lost(ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_batch_flush(ngx_event_t *ev);
static void ngx_http_idem_redis_batch_timeout(ngx_event_t *ev);
static void ngx_http_idem_redis_batch_waited(redisAsyncContext *ac, void *r,
    void *privdata);
static void ngx_http_idem_redis_batch_answer(ngx_queue_t *q, ngx_int_t acked);


/* the WAITs sent, numbered: the one that left first returns first */
static ngx_uint_t  ngx_http_idem_redis_batch_turns;


static void
ngx_http_idem_redis_batch_init(ngx_http_idem_redis_node_t *node)
{
    ngx_http_idem_redis_batch_t  *b;

    b = &node->batch;

    ngx_queue_init(&b->next);
    ngx_queue_init(&b->sent);

    b->flush.handler = ngx_http_idem_redis_batch_flush;
    b->flush.data = node;
    b->flush.log = node->rd->log;

    /* called by redis_node.c, which calls nothing here by name */

    b->lost = ngx_http_idem_redis_batch_lost;

    b->ready = 1;
}


/*
 * From inside a durable claim's handler (its reply, never a timeout): the
 * claim made the owner, and waits for the next WAIT of the connection
 * that answered it.  Its handler is called once more, with the WAIT's
 * answer (the replicas that have it), or NGX_ERROR.
 */

ngx_int_t
ngx_http_idem_redis_batch_add(ngx_http_idem_store_op_t *op,
    ngx_uint_t replicas)
{
    ngx_http_idem_redis_t        *rd;
    ngx_http_idem_redis_node_t   *node;
    ngx_http_idem_redis_batch_t  *b;

    rd = &ngx_http_idem_redis;
    node = op->node;

    if (rd->closing || node == NULL || node->ac == NULL || op->wait == 0) {
        return NGX_ERROR;
    }

    b = &node->batch;

    if (!b->ready) {
        ngx_http_idem_redis_batch_init(node);
    }

    op->replicas = replicas;

    if (b->waiting) {

        /*
         * Answered while the WAIT is in flight: sent before it (Redis
         * answers a connection's commands in order, and runs none behind
         * a WAIT until it returns), so that WAIT counts its write
         */

        ngx_queue_insert_tail(&b->sent, &op->queue);
        b->nsent++;

    } else {
        ngx_queue_insert_tail(&b->next, &op->queue);
        b->nnext++;
    }

    /*
     * The op lives on after this reply: the batch frees it.  Its own
     * wait, which may end before a WAIT for others does, is not Redis's
     * failure: it has a timeout handler of its own.
     */

    op->done = 0;
    op->again = 1;
    op->timeout.handler = ngx_http_idem_redis_batch_timeout;

    ngx_add_timer(&op->timeout, rd->conf->timeout + op->wait);

    ngx_log_debug5(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: a durable claim for %ui replicas waits on "
                   "\"%V\" #%ui: %ui for the WAIT %s", replicas, &node->name,
                   node->turn, b->waiting ? b->nsent : b->nnext,
                   b->waiting ? "in flight" : "next");

    if (!b->waiting && !b->flush.posted) {
        ngx_post_event(&b->flush, &ngx_posted_events);
    }

    return NGX_OK;
}


/*
 * A claim's own wait is over before its WAIT's answer: not durable in its
 * time.  It stays in its batch, done, until the batch is answered.
 */

static void
ngx_http_idem_redis_batch_timeout(ngx_event_t *ev)
{
    ngx_http_idem_store_op_t *op = ev->data;

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, ev->log, 0,
                   "idem redis: a durable claim for %ui replicas: no WAIT "
                   "answer within %M ms", op->replicas, op->wait);

    op->done = 1;

    op->handler(op->data, NGX_ERROR, NULL, 0);
}


/* the end of the turn: the claims in, one WAIT for them all */

static void
ngx_http_idem_redis_batch_flush(ngx_event_t *ev)
{
    ngx_http_idem_redis_node_t *node = ev->data;

    u_char                        n[NGX_INT_T_LEN], ms[NGX_INT_T_LEN];
    size_t                        lens[3];
    ngx_uint_t                    count;
    ngx_queue_t                  *q, *next;
    const char                   *argv[3];
    ngx_http_idem_redis_t        *rd;
    ngx_http_idem_store_op_t     *op;
    ngx_http_idem_redis_batch_t  *b;

    rd = node->rd;
    b = &node->batch;

    if (b->waiting || ngx_queue_empty(&b->next)) {
        return;
    }

    /* the claims still waiting; the cancelled ones go */

    count = 0;

    for (q = ngx_queue_head(&b->next);
         q != ngx_queue_sentinel(&b->next);
         q = next)
    {
        next = ngx_queue_next(q);
        op = ngx_queue_data(q, ngx_http_idem_store_op_t, queue);

        if (op->done) {
            ngx_queue_remove(q);
            b->nnext--;
            ngx_http_idem_redis_op_free(op);
            continue;
        }

        count++;
    }

    if (count == 0) {
        return;
    }

    if (rd->closing || node->ac == NULL
        || ngx_http_idem_redis_accept(rd, node, 1) != NGX_OK)
    {
        ngx_http_idem_redis_batch_answer(&b->next, NGX_ERROR);
        b->nnext = 0;
        return;
    }

    argv[0] = "WAIT";
    lens[0] = sizeof("WAIT") - 1;
    argv[1] = (const char *) n;
    lens[1] = ngx_sprintf(n, "%ui", node->replicas) - n;
    argv[2] = (const char *) ms;
    lens[2] = ngx_sprintf(ms, "%M", node->wait) - ms;

    ngx_log_debug5(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: WAIT %ui %M on \"%V\" for %ui claims, "
                   "connection #%ui", node->replicas, node->wait,
                   &node->name, count, node->turn);

    if (ngx_http_idem_redis_node_command(node,
                                         ngx_http_idem_redis_batch_waited,
                                         NULL, 3, argv, lens, 1)
        != NGX_OK)
    {
        (void) ngx_http_idem_redis_drop(rd, &rd->down);

        ngx_http_idem_redis_batch_answer(&b->next, NGX_ERROR);
        b->nnext = 0;
        return;
    }

    /* the next claims wait for the one after it */

    ngx_queue_add(&b->sent, &b->next);
    ngx_queue_init(&b->next);

    b->nsent = b->nnext;
    b->nnext = 0;
    b->waiting = 1;

    /* the kind's next claims go where no WAIT is, or behind the oldest */

    b->turn = ++ngx_http_idem_redis_batch_turns;
}


/*
 * WAIT's answer: how many replicas have the connection's writes, the
 * batch's claims among them.  No answer (the connection lost, an error):
 * none of them is durable.
 */

static void
ngx_http_idem_redis_batch_waited(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply *reply = r;

    ngx_int_t                     acked;
    ngx_http_idem_redis_t        *rd;
    ngx_http_idem_redis_node_t   *node;
    ngx_http_idem_redis_batch_t  *b;

    node = ac->data;
    rd = node->rd;
    b = &node->batch;

    ngx_http_idem_redis_pending_done(rd);

    b->waiting = 0;
    acked = NGX_ERROR;

    if (reply == NULL) {
        rd->stats.failed++;
        rd->lost++;

    } else if (reply->type == REDIS_REPLY_INTEGER && reply->integer >= 0) {
        ngx_http_idem_redis_node_answered(node);
        acked = (ngx_int_t) reply->integer;

    } else if (reply->type == REDIS_REPLY_ERROR) {
        rd->stats.failed++;
        ngx_http_idem_redis_error_reply(rd, (u_char *) "WAIT",
                                        sizeof("WAIT") - 1, reply);
    }

    ngx_log_debug5(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: WAIT on \"%V\": %i replicas, for %ui claims, "
                   "%ui for the next, connection #%ui",
                   &node->name, acked, b->nsent, b->nnext, node->turn);

    b->nsent = 0;

    ngx_http_idem_redis_batch_answer(&b->sent, acked);

    if (!ngx_queue_empty(&b->next) && !rd->closing && !b->flush.posted) {
        ngx_post_event(&b->flush, &ngx_posted_events);
    }
}


/*
 * The connection went: its claims still waiting for a WAIT are not
 * durable, as a WAIT on the next connection would not count their writes
 * (those of the WAIT in flight are answered by hiredis, with NULL).
 */

static void
ngx_http_idem_redis_batch_lost(ngx_http_idem_redis_node_t *node)
{
    ngx_http_idem_redis_batch_t  *b;

    b = &node->batch;

    if (b->flush.posted) {
        ngx_delete_posted_event(&b->flush);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, node->rd->log, 0,
                   "idem redis: \"%V\" lost, %ui claims waiting for a WAIT",
                   &node->name, b->nnext);

    b->nnext = 0;

    ngx_http_idem_redis_batch_answer(&b->next, NGX_ERROR);
}


/* each claim of the queue told, unless it was cancelled, and freed */

static void
ngx_http_idem_redis_batch_answer(ngx_queue_t *queue, ngx_int_t acked)
{
    u_char                     buf[NGX_INT_T_LEN];
    ngx_str_t                  elt;
    ngx_queue_t               *q;
    ngx_http_idem_redis_t     *rd;
    ngx_http_idem_store_op_t  *op;

    rd = &ngx_http_idem_redis;

    elt.data = buf;
    elt.len = (acked == NGX_ERROR) ? 0 : ngx_sprintf(buf, "%i", acked) - buf;

    while (!ngx_queue_empty(queue)) {
        q = ngx_queue_head(queue);
        ngx_queue_remove(q);

        op = ngx_queue_data(q, ngx_http_idem_store_op_t, queue);

        if (op->timeout.timer_set) {
            ngx_del_timer(&op->timeout);
        }

        if (!op->done && !rd->closing) {
            op->done = 1;

            if (acked == NGX_ERROR) {
                op->handler(op->data, NGX_ERROR, NULL, 0);

            } else {
                op->handler(op->data, NGX_OK, &elt, 1);
            }
        }

        ngx_http_idem_redis_op_free(op);
    }
}
