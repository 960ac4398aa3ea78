
/*
 * Commands that wait for a reply ("ops"): each a copy of its command, sent
 * to its node (its slot's in a cluster), or held by that node while it is
 * not up and sent behind its handshake once it is, answered once (a reply,
 * an error, a lost connection or its timeout; a write's that has left
 * also when its reply comes after its timeout), a script's NOSCRIPT
 * answered by sending its text once.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis_common.h"
#include "ngx_http_idem_redis_adapter.h"

#include <openssl/evp.h>


static ngx_int_t ngx_http_idem_redis_op_command(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, ngx_http_idem_redis_script_t *script,
    ngx_uint_t argc, ngx_str_t *argv);
static ngx_int_t ngx_http_idem_redis_noscript(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply);
static ngx_int_t ngx_http_idem_redis_wrongtype(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply);
static ngx_int_t ngx_http_idem_redis_op_through(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, ngx_http_idem_redis_script_t *script);
static ngx_int_t ngx_http_idem_redis_again_send(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op);
static void ngx_http_idem_redis_answer(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply);
static void ngx_http_idem_redis_read_timeout(ngx_event_t *ev);
static ngx_int_t ngx_http_idem_redis_park(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op);
static void ngx_http_idem_redis_op_flush(ngx_http_idem_redis_node_t *node);
static void ngx_http_idem_redis_asking_done(redisAsyncContext *ac, void *r,
    void *privdata);


/*
 * An op with room for "ext" bytes of its caller's, and its command.  A
 * script's command is "EVALSHA <sha1>" and argv.
 */

ngx_http_idem_store_op_t *
ngx_http_idem_redis_op_create(ngx_http_idem_redis_t *rd,
    ngx_http_idem_redis_script_t *script, ngx_uint_t argc, ngx_str_t *argv,
    size_t ext)
{
    ngx_http_idem_store_op_t  *op;

    op = ngx_alloc(sizeof(ngx_http_idem_store_op_t) + ext, rd->log);
    if (op == NULL) {
        rd->stats.dropped++;
        return NULL;
    }

    ngx_memzero(op, sizeof(ngx_http_idem_store_op_t));

    op->ext = ext ? (void *) &op[1] : NULL;
    op->wait = rd->durable;
    op->replicas = rd->replicas;

    op->timeout.handler = ngx_http_idem_redis_read_timeout;
    op->timeout.data = op;
    op->timeout.log = rd->log;

    if (ngx_http_idem_redis_op_command(rd, op, script, argc, argv) != NGX_OK)
    {
        ngx_free(op);
        rd->stats.dropped++;
        return NULL;
    }

    /* a record's write: its first command carries its count */

    if (rd->write_dropped != NULL) {
        op->dropped = rd->write_dropped;
        rd->write_dropped = NULL;
        rd->write_op = op;
    }

    return op;
}


/*
 * The op's command, copied; a command it had before goes once the new one
 * is copied (argv may point into it: a command sent again differently).
 */

static ngx_int_t
ngx_http_idem_redis_op_command(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, ngx_http_idem_redis_script_t *script,
    ngx_uint_t argc, ngx_str_t *argv)
{
    u_char       *p, md[EVP_MAX_MD_SIZE];
    size_t        size;
    ngx_uint_t    i, k, n, skip;
    const char  **args, **old;
    unsigned int  len;

    skip = 0;

    if (script != NULL) {
        if (!script->hashed) {
            if (EVP_Digest(script->text.data, script->text.len, md, &len,
                           EVP_sha1(), NULL)
                != 1 || len != 20)
            {
                return NGX_ERROR;
            }

            ngx_hex_dump(script->sha1, md, 20);
            script->hashed = 1;
        }

        skip = 2;
    }

    n = argc + skip;

    size = n * (sizeof(char *) + sizeof(size_t));

    for (i = 0; i < argc; i++) {
        size += argv[i].len;
    }

    args = ngx_alloc(size, rd->log);
    if (args == NULL) {
        return NGX_ERROR;
    }

    old = op->argv;

    op->script = script;
    op->resent = 0;
    op->redirects = 0;

    op->argc = n;
    op->argv = args;
    op->size = sizeof(ngx_http_idem_store_op_t) + size;
    op->lens = (size_t *) &args[n];

    p = (u_char *) &op->lens[n];

    if (script != NULL && script->eval) {

        /* no NOSCRIPT to wait for: it runs whenever Redis reads it */

        op->argv[0] = "EVAL";
        op->lens[0] = sizeof("EVAL") - 1;
        op->argv[1] = (const char *) script->text.data;
        op->lens[1] = script->text.len;
        op->resent = 1;

    } else if (script != NULL) {
        op->argv[0] = "EVALSHA";
        op->lens[0] = sizeof("EVALSHA") - 1;
        op->argv[1] = (const char *) script->sha1;
        op->lens[1] = sizeof(script->sha1);
    }

    for (i = 0; i < argc; i++) {
        op->argv[skip + i] = (const char *) p;
        op->lens[skip + i] = argv[i].len;
        p = ngx_cpymem(p, argv[i].data, argv[i].len);
    }

    if (old != NULL) {
        ngx_free(old);
    }

    k = ngx_http_idem_redis_op_key(op);

    op->key = k;

    if (k == 0 || rd->cluster == NULL) {
        op->slot = NGX_HTTP_IDEM_REDIS_ANY_SLOT;

    } else {
        op->slot = ngx_http_idem_redis_cluster_slot((u_char *) op->argv[k],
                                                    op->lens[k]);
    }

    return NGX_OK;
}


/*
 * Where the op's key is in its command: a script's first key (EVAL script
 * numkeys key ...), else the argument 1; 0: it names none.
 */

ngx_uint_t
ngx_http_idem_redis_op_key(ngx_http_idem_store_op_t *op)
{
    if (op->script != NULL) {
        return (op->argc >= 4 && !(op->lens[2] == 1 && op->argv[2][0] == '0'))
               ? 3 : 0;
    }

    return (op->argc >= 2) ? 1 : 0;
}


void
ngx_http_idem_redis_op_free(ngx_http_idem_store_op_t *op)
{
    ngx_http_idem_redis_t  *rd;

    rd = &ngx_http_idem_redis;

    /* freed without a reply that is not an error: the write is lost */

    if (op->dropped != NULL && !op->landed) {
        ngx_http_idem_redis_write_dropped(op->dropped);
    }

    if (rd->write_op == op) {
        rd->write_op = NULL;
    }

    if (op->argv != NULL) {
        ngx_free(op->argv);
    }

    ngx_free(op);
}


/*
 * An op to its node: the one Redis, or the node that holds its slot; a
 * durable one to that node's connection for its kind of durable claims.
 * A node that is not up holds it until it is, within the op's timeout
 * (op_send_to).
 */

ngx_int_t
ngx_http_idem_redis_op_send(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op)
{
    ngx_http_idem_redis_node_t  *node;

    if (rd->cluster == NULL) {
        node = rd->node;

        if (op->wait) {
            node = ngx_http_idem_redis_durable_node(rd, node, op);
        }

        if (ngx_http_idem_redis_accept(rd, node, 1) != NGX_OK) {
            return NGX_DECLINED;
        }

        return ngx_http_idem_redis_op_send_to(node, op);
    }

    node = ngx_http_idem_redis_cluster_route(rd, op);

    if (node == NULL || node->state == NGX_HTTP_IDEM_REDIS_DOWN) {

        /*
         * A failover may have given the slot to another node by now: the
         * map is read again, and the op waits for that read, once
         */

        ngx_http_idem_redis_cluster_stale(rd);

        if (ngx_http_idem_redis_park(rd, op) == NGX_OK) {
            return NGX_OK;
        }
    }

    if (op->wait) {
        node = ngx_http_idem_redis_durable_node(rd, node, op);
    }

    /* no node for the slot counts as one that is down */

    if (ngx_http_idem_redis_accept(rd, node, 1) != NGX_OK) {
        return NGX_DECLINED;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: %*s for slot %ui",
                   op->lens[0], op->argv[0], op->slot);

    return ngx_http_idem_redis_op_send_to(node, op);
}


/*
 * A read: a command, or a script (argv without "EVALSHA <sha1>").  The op
 * belongs to the store: the caller forgets it when its handler runs (the
 * op is freed right after, unless the handler sent it again with
 * ngx_http_idem_redis_again()), or when it cancels it.
 */

ngx_http_idem_store_op_t *
ngx_http_idem_redis_read(ngx_http_idem_redis_script_t *script,
    ngx_uint_t argc, ngx_str_t *argv, ngx_http_idem_redis_reply_pt handler,
    void *data, size_t ext)
{
    ngx_http_idem_redis_t     *rd;
    ngx_http_idem_store_op_t  *op;

    rd = &ngx_http_idem_redis;

    if (!rd->started || rd->closing || argc == 0) {
        rd->stats.dropped++;
        return NULL;
    }

    op = ngx_http_idem_redis_op_create(rd, script, argc, argv, ext);
    if (op == NULL) {
        return NULL;
    }

    op->handler = handler;
    op->data = data;

    if (ngx_http_idem_redis_op_send(rd, op) != NGX_OK) {
        ngx_http_idem_redis_op_free(op);
        return NULL;
    }

    /*
     * Not cancelable: a request waits on it, an exiting worker too.  A
     * durable claim may queue behind another's WAIT on its connection.
     */

    ngx_add_timer(&op->timeout, rd->conf->timeout + op->wait);

    return op;
}


/*
 * From inside the op's handler (a reply, never a timeout): the same op
 * asks again with another command, under a timeout of its own.
 */

ngx_int_t
ngx_http_idem_redis_again(ngx_http_idem_store_op_t *op,
    ngx_http_idem_redis_script_t *script, ngx_uint_t argc, ngx_str_t *argv)
{
    ngx_http_idem_redis_t  *rd;

    rd = &ngx_http_idem_redis;

    /* what it writes is not in until this answer */

    op->landed = 0;

    if (rd->closing
        || ngx_http_idem_redis_op_command(rd, op, script, argc, argv)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_idem_redis_again_send(rd, op);
}


/* the same, with the op's own command through a script (op_through) */

ngx_int_t
ngx_http_idem_redis_again_through(ngx_http_idem_store_op_t *op,
    ngx_http_idem_redis_script_t *script)
{
    ngx_http_idem_redis_t  *rd;

    rd = &ngx_http_idem_redis;

    op->landed = 0;

    if (rd->closing
        || ngx_http_idem_redis_op_through(rd, op, script) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_idem_redis_again_send(rd, op);
}


static ngx_int_t
ngx_http_idem_redis_again_send(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op)
{
    if (ngx_http_idem_redis_op_send(rd, op) != NGX_OK) {
        return NGX_ERROR;
    }

    op->done = 0;
    op->again = 1;

    ngx_add_timer(&op->timeout, rd->conf->timeout + op->wait);

    return NGX_OK;
}


void
ngx_http_idem_store_cancel(ngx_http_idem_store_op_t *op)
{
    if (op == NULL) {
        return;
    }

    if (op->timeout.timer_set) {
        ngx_del_timer(&op->timeout);
    }

    if (op->held) {

        /* never sent: nothing will answer it */

        ngx_http_idem_redis_op_unhold(op);
        ngx_http_idem_redis_op_free(op);
        return;
    }

    /* freed when its reply comes, or the connection goes */

    op->done = 1;
}


/*
 * The reply to an op.  In a cluster, MOVED and ASK send it again to the
 * node named, the same op with the same timeout.
 */

void
ngx_http_idem_redis_op_done(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply                *reply = r;
    ngx_http_idem_store_op_t  *op = privdata;

    ngx_str_t                    err;
    ngx_http_idem_redis_t       *rd;
    ngx_http_idem_redis_node_t  *node, *to;

    node = ac->data;
    rd = node->rd;

    ngx_http_idem_redis_pending_done(rd);

    if (op->flying) {
        ngx_queue_remove(&op->queue);
        op->flying = 0;
    }

    if (reply != NULL
        && reply->type == REDIS_REPLY_ERROR
        && !op->done
        && !rd->closing)
    {
        /* a cluster's redirect: the same op, sent again where it says */

        if (rd->cluster != NULL
            && ngx_http_idem_redis_cluster_redirect(rd, op, reply, &to)
               == NGX_OK
            && ngx_http_idem_redis_op_send_to(to, op) == NGX_OK)
        {
            return;
        }

        if (ngx_http_idem_redis_noscript(rd, op, reply) == NGX_OK
            || ngx_http_idem_redis_wrongtype(rd, op, reply) == NGX_OK)
        {
            return;
        }

        /*
         * a primary demoted behind its name (a DNS failover): the command
         * did not run; held, and sent once the name's new primary is
         * connected
         */

        if (ngx_http_idem_redis_node_readonly(node, reply) == NGX_OK
            && ngx_http_idem_redis_op_send_to(node, op) == NGX_OK)
        {
            return;
        }
    }

    /* a write it carries is in, even after its timeout */

    if (reply != NULL && reply->type != REDIS_REPLY_ERROR) {
        op->landed = 1;
    }

    if (op->timeout.timer_set) {
        ngx_del_timer(&op->timeout);
    }

    if (op->done || rd->closing) {

        /* timed out, cancelled, or the worker exits */

        ngx_http_idem_redis_op_free(op);
        return;
    }

    op->done = 1;
    op->node = node;

    if (reply == NULL) {
        rd->stats.failed++;
        rd->lost++;

        if (op->handler) {
            op->handler(op->data, NGX_ERROR, NULL, 0);
        }

    } else if (reply->type == REDIS_REPLY_ERROR && op->errors) {

        /* an answer its handler reads (a command Redis may refuse) */

        ngx_http_idem_redis_node_answered(node);

        if (op->handler) {
            err.data = (u_char *) reply->str;
            err.len = reply->len;
            op->handler(op->data, NGX_DECLINED, &err, 1);
        }

    } else if (reply->type == REDIS_REPLY_ERROR) {
        rd->stats.failed++;
        ngx_http_idem_redis_error_reply(rd, (u_char *) op->argv[0], op->lens[0],
                                        reply);

        if (op->handler) {
            op->handler(op->data, NGX_ERROR, NULL, 0);
        }

    } else {
        ngx_http_idem_redis_node_answered(node);

        if (op->handler) {
            ngx_http_idem_redis_answer(rd, op, reply);
        }
    }

    if (op->again) {

        /* its handler asked again (ngx_http_idem_redis_again) */

        op->again = 0;
        return;
    }

    ngx_http_idem_redis_op_free(op);
}


/*
 * NOSCRIPT to an EVALSHA: the same script sent again with its text, once,
 * to the same node (hiredis takes commands from a reply callback); the op
 * waits on under its own timer, and the node keeps the script from then
 * on.  NGX_OK: sent.
 */

static ngx_int_t
ngx_http_idem_redis_noscript(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply)
{
    if (op->script == NULL || op->resent
        || reply->len < sizeof("NOSCRIPT") - 1
        || ngx_strncmp(reply->str, "NOSCRIPT", sizeof("NOSCRIPT") - 1) != 0)
    {
        return NGX_DECLINED;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: NOSCRIPT for %*s, sending its text",
                   (size_t) sizeof(op->script->sha1), op->script->sha1);

    op->resent = 1;

    op->argv[0] = "EVAL";
    op->lens[0] = sizeof("EVAL") - 1;
    op->argv[1] = (const char *) op->script->text.data;
    op->lens[1] = op->script->text.len;

    if (ngx_http_idem_redis_op_send(rd, op) != NGX_OK) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * WRONGTYPE to a command of an op that has an "upgrade" script: the key
 * holds another form of what the command expects (a short record: see
 * ngx_http_idem_redis_record.c).  The command goes again, once, through
 * that script, which changes the form and runs the command: its reply is
 * the command's.  NGX_OK: sent.
 */

static ngx_int_t
ngx_http_idem_redis_wrongtype(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply)
{
    if (op->upgrade == NULL || op->script != NULL
        || reply->len < sizeof("WRONGTYPE") - 1
        || ngx_strncmp(reply->str, "WRONGTYPE", sizeof("WRONGTYPE") - 1)
           != 0)
    {
        return NGX_DECLINED;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: WRONGTYPE for %*s, through its script",
                   op->lens[0], op->argv[0]);

    if (ngx_http_idem_redis_op_through(rd, op, op->upgrade) != NGX_OK
        || ngx_http_idem_redis_op_send(rd, op) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * The op's own command, <command> <key> <its other arguments>, becomes
 * the arguments of a script: EVALSHA <sha1> 1 <key> <command> <its other
 * arguments>.
 */

static ngx_int_t
ngx_http_idem_redis_op_through(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, ngx_http_idem_redis_script_t *script)
{
    ngx_int_t   rc;
    ngx_str_t   argv_buf[NGX_HTTP_IDEM_REDIS_ARGS], *argv;
    ngx_uint_t  i, n;

    if (op->argc < 2) {
        return NGX_ERROR;
    }

    n = op->argc + 1;

    if (n <= NGX_HTTP_IDEM_REDIS_ARGS) {
        argv = argv_buf;

    } else {
        argv = ngx_alloc(n * sizeof(ngx_str_t), rd->log);
        if (argv == NULL) {
            return NGX_ERROR;
        }
    }

    ngx_str_set(&argv[0], "1");

    argv[1].data = (u_char *) op->argv[1];
    argv[1].len = op->lens[1];
    argv[2].data = (u_char *) op->argv[0];
    argv[2].len = op->lens[0];

    for (i = 2; i < op->argc; i++) {
        argv[i + 1].data = (u_char *) op->argv[i];
        argv[i + 1].len = op->lens[i];
    }

    rc = ngx_http_idem_redis_op_command(rd, op, script, n, argv);

    if (argv != argv_buf) {
        ngx_free(argv);
    }

    return rc;
}


/*
 * A reply as strings: an array element by element (integers in decimal,
 * nil and nested arrays as empty strings), a string or status as one
 * element, an integer as one, nil as none.
 */

static void
ngx_http_idem_redis_answer(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply)
{
    u_char      *p, num[NGX_INT64_LEN];
    size_t       i, n;
    ngx_str_t   *elts, one;
    redisReply  *e;

    switch (reply->type) {

    case REDIS_REPLY_NIL:
        op->handler(op->data, NGX_OK, NULL, 0);
        return;

    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        one.data = (u_char *) reply->str;
        one.len = reply->len;
        op->handler(op->data, NGX_OK, &one, 1);
        return;

    case REDIS_REPLY_INTEGER:
        one.data = num;
        one.len = ngx_sprintf(num, "%L", (int64_t) reply->integer) - num;
        op->handler(op->data, NGX_OK, &one, 1);
        return;

    case REDIS_REPLY_ARRAY:
        break;

    default:
        op->handler(op->data, NGX_ERROR, NULL, 0);
        return;
    }

    n = reply->elements;

    if (n == 0) {
        op->handler(op->data, NGX_OK, NULL, 0);
        return;
    }

    /* the strings first, then room for integers formatted */

    elts = ngx_alloc(n * (sizeof(ngx_str_t) + NGX_INT64_LEN), rd->log);
    if (elts == NULL) {
        op->handler(op->data, NGX_ERROR, NULL, 0);
        return;
    }

    p = (u_char *) &elts[n];

    for (i = 0; i < n; i++) {
        e = reply->element[i];

        switch (e->type) {

        case REDIS_REPLY_STRING:
        case REDIS_REPLY_STATUS:
        case REDIS_REPLY_ERROR:
            elts[i].data = (u_char *) e->str;
            elts[i].len = e->len;
            break;

        case REDIS_REPLY_INTEGER:
            elts[i].data = p;
            p = ngx_sprintf(p, "%L", (int64_t) e->integer);
            elts[i].len = p - elts[i].data;
            break;

        default:
            ngx_str_set(&elts[i], "");
            break;
        }
    }

    op->handler(op->data, NGX_OK, elts, n);

    ngx_free(elts);
}


static void
ngx_http_idem_redis_read_timeout(ngx_event_t *ev)
{
    ngx_http_idem_store_op_t *op = ev->data;

    ngx_http_idem_redis_t  *rd;

    rd = &ngx_http_idem_redis;

    if (op->held) {

        /* its node was not up in its time: dropped, as not connected */

        ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                       "idem redis: %*s held past its timeout, dropped",
                       op->lens[0], op->argv[0]);

        ngx_http_idem_redis_op_unhold(op);
        (void) ngx_http_idem_redis_drop(rd, &rd->down);

        ngx_http_idem_redis_op_failed(rd, op);
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: no reply within the timeout, %ui redirects%s",
                   op->redirects,
                   (op->write && !op->parked) ? ", a write: waited for" : "");

    if (op->write && !op->parked) {

        /*
         * A write that left for Redis: its reply may ask for more (a
         * WRONGTYPE the upgrade script answers, a SET that met a record,
         * NOSCRIPT, a redirect), which must still go when it comes late,
         * as a plain write's late WRONGTYPE does: the write is not given
         * up.  Only whoever waits for it is answered now (NGX_AGAIN, read
         * as no answer); the op stays until its reply or its connection's
         * loss, and counts as that ends.  Simpler and safer than a write
         * made to need no follow-up (a script for every owner's write,
         * which short records exist to avoid).
         */

        if (op->handler) {
            op->handler(op->data, NGX_AGAIN, NULL, 0);
        }

        return;
    }

    rd->stats.failed++;
    rd->timedout++;
    ngx_http_idem_redis_report_later(rd);

    if (op->parked) {

        /* no reply will come: it goes now */

        ngx_queue_remove(&op->queue);
        op->parked = 0;
        rd->nparked--;

        ngx_http_idem_redis_op_failed(rd, op);
        return;
    }

    /* the late reply, or the disconnect, frees the op */

    op->done = 1;

    op->handler(op->data, NGX_ERROR, NULL, 0);
}


/*
 * An op whose slot's master is down waits for the map read that this
 * started (a worker whose map still names a master that failed over
 * learns of its replica there), once: still down then, its master holds
 * it until it is up again, within the op's timeout (op_send_to).  It
 * keeps its timeout, and goes with a map read that fails too; an exiting
 * worker reads no map.
 */

static ngx_int_t
ngx_http_idem_redis_park(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op)
{
    if (op->mapped || rd->closing || ngx_exiting
        || rd->nparked >= rd->conf->max_pending)
    {
        return NGX_DECLINED;
    }

    op->parked = 1;
    op->mapped = 1;

    ngx_queue_insert_tail(&rd->parked, &op->queue);
    rd->nparked++;

    ngx_log_debug3(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: %*s for slot %ui waits for the map",
                   op->lens[0], op->argv[0], op->slot);

    return NGX_OK;
}


/* posted by a read of the map (redis_cluster.c): the parked ops go again */

void
ngx_http_idem_redis_unpark(ngx_event_t *ev)
{
    ngx_http_idem_redis_t *rd = ev->data;

    ngx_queue_t                q, *qe;
    ngx_http_idem_store_op_t  *op;

    if (rd->closing || ngx_queue_empty(&rd->parked)) {
        return;
    }

    /* the ones parked from here on wait for the next read */

    ngx_queue_init(&q);
    ngx_queue_add(&q, &rd->parked);
    ngx_queue_init(&rd->parked);

    while (!ngx_queue_empty(&q)) {
        qe = ngx_queue_head(&q);
        ngx_queue_remove(qe);

        op = ngx_queue_data(qe, ngx_http_idem_store_op_t, queue);
        op->parked = 0;
        rd->nparked--;

        if (op->done) {

            /* cancelled while it waited */

            ngx_http_idem_redis_op_free(op);
            continue;
        }

        ngx_log_debug3(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                       "idem redis: %*s for slot %ui sent again after "
                       "the map", op->lens[0], op->argv[0], op->slot);

        if (ngx_http_idem_redis_op_send(rd, op) != NGX_OK) {
            ngx_http_idem_redis_op_failed(rd, op);
        }
    }
}


/*
 * A parked op that found no node, or whose time ran out: answered as one
 * that is not taken, and freed unless its handler sent it again.
 */

void
ngx_http_idem_redis_op_failed(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op)
{
    if (op->timeout.timer_set) {
        ngx_del_timer(&op->timeout);
    }

    op->done = 1;

    if (op->handler) {
        op->handler(op->data, NGX_ERROR, NULL, 0);
    }

    if (op->again) {

        /* its handler asked again (ngx_http_idem_redis_again) */

        op->again = 0;
        return;
    }

    ngx_http_idem_redis_op_free(op);
}


/* the worker exits: nobody waits for a parked op any more */

void
ngx_http_idem_redis_parked_free(ngx_http_idem_redis_t *rd)
{
    ngx_queue_t               *qe;
    ngx_http_idem_store_op_t  *op;

    if (rd->parked_ev.posted) {
        ngx_delete_posted_event(&rd->parked_ev);
    }

    while (!ngx_queue_empty(&rd->parked)) {
        qe = ngx_queue_head(&rd->parked);
        ngx_queue_remove(qe);

        op = ngx_queue_data(qe, ngx_http_idem_store_op_t, queue);

        if (op->timeout.timer_set) {
            ngx_del_timer(&op->timeout);
        }

        ngx_http_idem_redis_op_free(op);
    }

    rd->nparked = 0;
}


/*
 * An op to a node: sent now when the node is up; else held until it is,
 * in order, under the op's own timeout (a write gets the store's), and the
 * node connects now.  What outlives its timeout there is dropped
 * (redis_op.c), counted as "not connected".  NGX_DECLINED: not taken,
 * counted.
 */

ngx_int_t
ngx_http_idem_redis_op_send_to(ngx_http_idem_redis_node_t *node,
    ngx_http_idem_store_op_t *op)
{
    size_t                  lens[1];
    const char             *argv[1];
    ngx_http_idem_redis_t  *rd;

    rd = node->rd;

    if (node->state == NGX_HTTP_IDEM_REDIS_UP && node->ac != NULL) {

        if (op->asking) {

            /* an ASK's redirect: ASKING right before the command */

            argv[0] = "ASKING";
            lens[0] = sizeof("ASKING") - 1;

            if (ngx_http_idem_redis_node_command(node,
                                           ngx_http_idem_redis_asking_done,
                                           NULL, 1, argv, lens, 1)
                != NGX_OK)
            {
                return ngx_http_idem_redis_drop(rd, &rd->down);
            }

            op->asking = 0;
        }

        /* a read someone waits for leaves now; a count may wait (lazy) */

        if (ngx_http_idem_redis_node_command(node,
                                             ngx_http_idem_redis_op_done,
                                             op, op->argc, op->argv,
                                             op->lens,
                                             op->handler != NULL
                                             && !rd->lazy)
            != NGX_OK)
        {
            return ngx_http_idem_redis_drop(rd, &rd->down);
        }

        /* what follows it on a durable claims' connection finds it */

        if (node->main != NULL) {
            ngx_queue_insert_tail(&node->flight, &op->queue);
            op->flying = 1;
        }

        return NGX_OK;
    }

    if (rd->closing || ngx_terminate) {
        return ngx_http_idem_redis_drop(rd, &rd->down);
    }

    /* a node holds a bounded number and size of commands */

    if (node->nheld >= rd->conf->max_pending
        || node->held_bytes + op->size > NGX_HTTP_IDEM_REDIS_HELD_BYTES)
    {
        return ngx_http_idem_redis_drop(rd, &rd->held_full);
    }

    op->held = 1;
    op->node = node;
    node->flush_held = ngx_http_idem_redis_op_flush;

    ngx_queue_insert_tail(&node->held, &op->queue);
    node->nheld++;
    node->held_bytes += op->size;

    /* an exiting worker stays for it */

    ngx_http_idem_redis_pending_add(rd);

    if (!op->timeout.timer_set) {
        ngx_add_timer(&op->timeout, rd->conf->timeout + op->wait);
    }

    ngx_log_debug4(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "idem redis: %*s held until \"%V\" is up, %ui held",
                   op->lens[0], op->argv[0], &node->name, node->nheld);

    ngx_http_idem_redis_node_wake(node);

    return NGX_OK;
}


/* the node is up: what it held goes, in order */

static void
ngx_http_idem_redis_op_flush(ngx_http_idem_redis_node_t *node)
{
    ngx_queue_t               *q;
    ngx_http_idem_redis_t     *rd;
    ngx_http_idem_store_op_t  *op;

    rd = node->rd;

    if (node->nheld) {
        ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                       "idem redis: \"%V\" up, sending %ui held",
                       &node->name, node->nheld);
    }

    while (!ngx_queue_empty(&node->held)
           && node->state == NGX_HTTP_IDEM_REDIS_UP)
    {
        q = ngx_queue_head(&node->held);
        op = ngx_queue_data(q, ngx_http_idem_store_op_t, queue);

        ngx_queue_remove(q);
        op->held = 0;
        node->nheld--;
        node->held_bytes -= op->size;

        /* a write waits for no reply once sent, as one sent at once */

        if (op->handler == NULL && op->timeout.timer_set) {
            ngx_del_timer(&op->timeout);
        }

        if (ngx_http_idem_redis_op_send_to(node, op) != NGX_OK) {
            ngx_http_idem_redis_op_failed(rd, op);
        }

        /* counted as sent now; the hold's count goes after */

        ngx_http_idem_redis_pending_done(rd);
    }
}


/* a held op leaves its node's queue (its timeout, or it is cancelled) */

void
ngx_http_idem_redis_op_unhold(ngx_http_idem_store_op_t *op)
{
    ngx_http_idem_redis_node_t  *node;

    if (!op->held) {
        return;
    }

    node = op->node;

    ngx_queue_remove(&op->queue);
    op->held = 0;
    node->nheld--;
    node->held_bytes -= op->size;

    ngx_http_idem_redis_pending_done(node->rd);
}


/*
 * What a node holds goes: answered as not taken ("answer": a drain that
 * gave up; requests may wait on them), or just freed (the worker exits).
 */

void
ngx_http_idem_redis_op_held_free(ngx_http_idem_redis_node_t *node,
    ngx_uint_t answer)
{
    ngx_queue_t                q, *qe;
    ngx_http_idem_store_op_t  *op;

    if (node == NULL || ngx_queue_empty(&node->held)) {
        return;
    }

    /* what a handler holds again stays for the next time */

    ngx_queue_init(&q);
    ngx_queue_add(&q, &node->held);
    ngx_queue_init(&node->held);

    while (!ngx_queue_empty(&q)) {
        qe = ngx_queue_head(&q);
        op = ngx_queue_data(qe, ngx_http_idem_store_op_t, queue);

        /* unhold() removes it from q */

        ngx_http_idem_redis_op_unhold(op);

        if (answer && !op->done) {
            ngx_http_idem_redis_op_failed(node->rd, op);
            continue;
        }

        if (op->timeout.timer_set) {
            ngx_del_timer(&op->timeout);
        }

        ngx_http_idem_redis_op_free(op);
    }
}


static void
ngx_http_idem_redis_asking_done(redisAsyncContext *ac, void *r,
    void *privdata)
{
    ngx_http_idem_redis_node_t  *node;

    node = ac->data;

    /* an error here shows in the command's own reply, which follows */

    ngx_http_idem_redis_pending_done(node->rd);
}
