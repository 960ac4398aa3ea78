
/*
 * The record store's operations on Redis: a record's fields written, a
 * call id claimed, a record read, an execution counted and a record
 * trimmed.  A record is a hash (its fields: ngx_http_idem_record.c), or
 * short: a call whose one write made its record leaves a string of that
 * write's fields, "<field> <length> <value>\n" each, set with its expiry
 * in one SET ... PX ... NX.  A command that needs the hash (HSET,
 * HINCRBY: another execution) meets a short record as WRONGTYPE and goes
 * through the upgrade script, which makes the string the hash
 * it stands for first (redis_op.c); so does a short write that meets a
 * record there already; the other scripts read both forms.
 *
 * What a call costs Redis, on the common path:
 *
 *   a recorded call  over within idem_record_arrival_delay, its id new:
 *                    SET (short: arrival and end in one write, with the
 *                    expiry); longer: HSET + PEXPIRE ... NX
 *                    (arrival; a record there before: PEXPIRE after the
 *                    HSET's reply, see write_fields), HSET (end; PEXPIRE
 *                    only when the expiry must move);
 *                    HINCRBY (the count) only when the record was there
 *                    before the call
 *   a new claim      the take script: the owner, its digest, lease,
 *                    bound and arrival, and the expiry, in one write (a
 *                    duplicate never meets half a claim); at the end the
 *                    owner's final write, plain commands in one round
 *                    trip: HSET of its fields, PEXPIRE only when the
 *                    expiry must move, PUBLISH only where waiters may be
 *   a durable one    the same, and WAIT after the claim, both on the
 *                    node's connection for durable claims
 *
 * A claim made by 0.6.0 (HSETNX of "o", then the rest with the arrival)
 * writes its lease as "+<lease> <ttl>", relative to the PEXPIRE with it;
 * the scripts read that form from the record's PTTL
 * (ngx_http_idem_redis_record.lua), a claim of theirs by Redis's clock.
 * The scripts (ngx_http_idem_redis_*.lua) run by SHA1
 * (ngx_http_idem_redis.c); the claim's is loaded on every data connection
 * as it is made.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis_common.h"
#include "ngx_http_idem_redis_lua.h"


/* an execution's first write on its way: what its reply is checked with */
typedef struct {
    ngx_uint_t                       max_executions;
    ngx_uint_t                       nfields;    /* a field and its value */
    ngx_http_idem_store_known_pt     known;      /* told, NULL: not asked */
    void                            *known_data;
    ngx_msec_t                       expiry;     /* the TTL set after the
                                                    reply: an APPEND's
                                                    that found no record,
                                                    a record-only HSET's
                                                    that found one */
    size_t                           length;     /* an APPEND's: what it
                                                    adds */
    unsigned                         wake:1;     /* a final write, heard */
    unsigned                         count:1;    /* an execution's first
                                                    write: counted */
} ngx_http_idem_redis_first_t;


/*
 * A claim on its way: the request may go before the reply.  take: the
 * take script's arguments, copied, for a short claim that found the
 * record there (the rare paths decide).
 */
typedef struct {
    ngx_http_idem_store_claim_pt     handler;
    void                            *data;
    ngx_uint_t                       replicas;   /* durable, 0: not */
    ngx_str_t                        key;        /* a copy, for the logs */
    ngx_str_t                        take[8];
    unsigned                         made:1;     /* the record, new */
    unsigned                         short_record:1; /* SET ... NX GET */
} ngx_http_idem_redis_claim_t;


/* a record read's caller */
typedef struct {
    ngx_http_idem_store_record_pt    handler;
    void                            *data;
} ngx_http_idem_redis_reader_t;


/* a resolution's caller */
typedef struct {
    ngx_http_idem_store_resolved_pt  handler;
    void                            *data;
} ngx_http_idem_redis_solver_t;


/* a stream entry's caller */
typedef struct {
    ngx_http_idem_store_done_pt      handler;
    void                            *data;
} ngx_http_idem_redis_appender_t;


static ngx_http_idem_store_op_t *ngx_http_idem_redis_claim_short(
    ngx_http_idem_store_claim_t *claim, ngx_str_t *argv, size_t ext);
static ngx_int_t ngx_http_idem_redis_claim_set(ngx_http_idem_store_op_t *op,
    ngx_int_t rc, ngx_str_t *elts, ngx_uint_t n,
    ngx_http_idem_store_found_t *found);
static ngx_uint_t ngx_http_idem_redis_syntax_error(ngx_str_t *err);
static void ngx_http_idem_redis_claim_verdict(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static void ngx_http_idem_redis_claim_waited(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static void ngx_http_idem_redis_appended(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static void ngx_http_idem_redis_record_read(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static void ngx_http_idem_redis_resolved(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static ngx_int_t ngx_http_idem_redis_short_value(ngx_str_t *fields,
    ngx_uint_t nfields, ngx_str_t *value);
static ngx_int_t ngx_http_idem_redis_write_short(
    ngx_http_idem_store_write_t *w);
static ngx_int_t ngx_http_idem_redis_write_final(
    ngx_http_idem_store_write_t *w);
static ngx_int_t ngx_http_idem_redis_write_append(
    ngx_http_idem_store_write_t *w);
static void ngx_http_idem_redis_appended_short(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static ngx_int_t ngx_http_idem_redis_write_owned(
    ngx_http_idem_store_write_t *w);
static void ngx_http_idem_redis_final_written(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static void ngx_http_idem_redis_owned_written(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static void ngx_http_idem_redis_short_written(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static void ngx_http_idem_redis_first_written(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static void ngx_http_idem_redis_fields_written(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static ngx_int_t ngx_http_idem_redis_expire_nx(ngx_str_t *key,
    ngx_str_t *ttl);
static void ngx_http_idem_redis_expired_nx(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static void ngx_http_idem_redis_counted(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static ngx_http_idem_store_op_t *ngx_http_idem_redis_write_read(
    ngx_uint_t argc,
    ngx_str_t *argv, ngx_http_idem_redis_reply_pt handler,
    ngx_uint_t max_executions, ngx_uint_t nfields,
    ngx_http_idem_store_write_t *w, ngx_uint_t lazy);
static void ngx_http_idem_redis_trimmed(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static ngx_int_t ngx_http_idem_redis_ms(ngx_str_t *value, uint64_t *ms);
static ngx_int_t ngx_http_idem_redis_write_fields(
    ngx_http_idem_store_write_t *w);
static void ngx_http_idem_redis_ttl(ngx_http_idem_store_found_t *found,
    ngx_str_t *elts, ngx_uint_t n, ngx_uint_t want);


/*
 * The claim: its common path (take) first, then the preludes and its rare
 * paths (claim), which a new id never reaches: it runs none of their
 * definitions.  One per call: every data connection loads it as it is
 * made (redis_node.c), so that its EVALSHA runs whenever Redis reads it,
 * even if its reply comes too late to send the text.
 */

ngx_http_idem_redis_script_t  ngx_http_idem_redis_take_lua = {
    ngx_string(NGX_HTTP_IDEM_REDIS_LUA_TAKE NGX_HTTP_IDEM_REDIS_LUA_SHORT
               NGX_HTTP_IDEM_REDIS_LUA_RECORD NGX_HTTP_IDEM_REDIS_LUA_CLAIM),
    { 0 }, 0, 0
};

static ngx_http_idem_redis_script_t  ngx_http_idem_redis_read_lua = {
    ngx_string(NGX_HTTP_IDEM_REDIS_LUA_SHORT NGX_HTTP_IDEM_REDIS_LUA_RECORD
               NGX_HTTP_IDEM_REDIS_LUA_READ),
    { 0 }, 0, 0
};

static ngx_http_idem_redis_script_t  ngx_http_idem_redis_resolve_lua = {
    ngx_string(NGX_HTTP_IDEM_REDIS_LUA_SHORT NGX_HTTP_IDEM_REDIS_LUA_RECORD
               NGX_HTTP_IDEM_REDIS_LUA_RESOLVE),
    { 0 }, 0, 0
};

static ngx_http_idem_redis_script_t  ngx_http_idem_redis_trim_lua = {
    ngx_string(NGX_HTTP_IDEM_REDIS_LUA_SHORT NGX_HTTP_IDEM_REDIS_LUA_TRIM),
    { 0 }, 0, 0
};

static ngx_http_idem_redis_script_t  ngx_http_idem_redis_upgrade_lua = {
    ngx_string(NGX_HTTP_IDEM_REDIS_LUA_SHORT NGX_HTTP_IDEM_REDIS_LUA_UPGRADE),
    { 0 }, 0, 0
};

/* sent with its text: it must run even when its reply comes too late */

static ngx_http_idem_redis_script_t  ngx_http_idem_redis_owned_lua = {
    ngx_string(NGX_HTTP_IDEM_REDIS_LUA_SHORT NGX_HTTP_IDEM_REDIS_LUA_OWNED),
    { 0 }, 0, 1
};


/*
 * HSET key fields, PEXPIRE key ttl: both of them or none; a whole
 * execution's, one SET (short); the claim's owner's last, the same and
 * PUBLISH; an execution's last whose claim got no answer, one script.  An
 * execution's first write is a read in passing: its reply (how many
 * fields were new) says whether the execution is counted, and, asked
 * (w->known), whether the call id was known.
 */

ngx_int_t
ngx_http_idem_store_write(ngx_http_idem_store_write_t *w)
{
    ngx_int_t               rc;
    ngx_http_idem_redis_t  *rd;

    rd = &ngx_http_idem_redis;

    /*
     * Its first command carries its count of writes given up: what
     * becomes of that command is what becomes of the write (the fields;
     * a PEXPIRE after them is lost at worst).  Not taken at all, or only
     * partly: counted now, and the command sent keeps no count.
     */

    rd->write_dropped = w->dropped;
    rd->write_op = NULL;

    rc = ngx_http_idem_redis_write_fields(w);

    if (rc != NGX_OK && w->dropped != NULL) {

        if (rd->write_op != NULL) {
            rd->write_op->dropped = NULL;
        }

        if (rd->write_dropped != NULL || rd->write_op != NULL) {
            ngx_http_idem_redis_write_dropped(w->dropped);
        }
    }

    rd->write_dropped = NULL;
    rd->write_op = NULL;

    if (rc != NGX_OK || w->wake.len == 0) {
        return rc;
    }

    /*
     * A final write that waiters may wait for: PUBLISH <channel> <key>
     * after it, on its connection (the durable claims' one for a durable
     * owned write), so that Redis has run the write when the message
     * goes out (a final write sent again goes on without it: it publishes
     * once more when it is in).  Lost or not, the write stands: waiters
     * poll at last.
     */

    ngx_http_idem_redis_durable(w->replicas, w->owned ? w->wait : 0);

    (void) ngx_http_idem_redis_publish(&w->wake, &w->key);

    ngx_http_idem_redis_durable(0, 0);

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_redis_write_fields(ngx_http_idem_store_write_t *w)
{
    u_char                        ttl[NGX_INT64_LEN];
    ngx_int_t                     rc;
    ngx_str_t                     argv_buf[NGX_HTTP_IDEM_REDIS_ARGS], *argv,
                                  cmd[3];
    ngx_uint_t                    n, i, nx;
    ngx_http_idem_store_op_t     *known_op;
    ngx_http_idem_redis_first_t  *first;

    known_op = NULL;

    n = (w->nfields ? 1 : 0) + (w->ttl ? 1 : 0);

    if (n == 0) {
        return NGX_OK;
    }

    if (w->owned && w->nfields) {
        return ngx_http_idem_redis_write_owned(w);
    }

    if (w->short_record && w->nfields) {
        return ngx_http_idem_redis_write_append(w);
    }

    if (w->final && w->nfields) {
        return ngx_http_idem_redis_write_final(w);
    }

    if (w->whole && w->first && w->ttl && w->nfields) {
        return ngx_http_idem_redis_write_short(w);
    }

    if (ngx_http_idem_redis_room(n) != NGX_OK) {
        return NGX_DECLINED;
    }

    /*
     * Not a short claim's owner's write (those are APPENDs): its PEXPIRE
     * must not move the expiry of a short claim there, from which the
     * claim's lease counts (NX), before its HSET has made the record a
     * hash, the lease then in Redis's time; the refresh follows the
     * HSET's reply (fields_written).
     */

    nx = (w->ttl && w->nfields && !ngx_http_idem_redis.no_expire_nx);

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: write \"%V\": %ui fields, ttl %M%s, "
                   "first %d", &w->key, w->nfields / 2, w->ttl,
                   nx ? " (NX, then after the fields)" : "", (int) w->first);

    rc = NGX_OK;

    if (w->nfields) {
        i = w->nfields + 2;

        if (i <= NGX_HTTP_IDEM_REDIS_ARGS) {
            argv = argv_buf;

        } else {
            argv = ngx_alloc(i * sizeof(ngx_str_t), ngx_cycle->log);
            if (argv == NULL) {
                return NGX_DECLINED;
            }
        }

        ngx_str_set(&argv[0], "HSET");
        argv[1] = w->key;

        for (i = 0; i < w->nfields; i++) {
            argv[2 + i] = w->fields[i];
        }

        i += 2;

        if (w->first || nx) {
            known_op = ngx_http_idem_redis_write_read(i, argv,
                                            ngx_http_idem_redis_fields_written,
                                            w->first ? w->max_executions : 0,
                                            (i - 2) / 2, w->first ? w : NULL,
                                            1);
            rc = (known_op != NULL) ? NGX_OK : NGX_ERROR;

            if (known_op != NULL) {
                first = known_op->ext;
                first->count = w->first;
                first->expiry = nx ? w->ttl : 0;
            }

        } else {
            rc = ngx_http_idem_redis_write(i, argv,
                                           &ngx_http_idem_redis_upgrade_lua);
        }

        if (argv != argv_buf) {
            ngx_free(argv);
        }

        if (rc != NGX_OK) {
            goto failed;
        }
    }

    if (w->ttl) {
        ngx_str_set(&cmd[0], "PEXPIRE");
        cmd[1] = w->key;
        cmd[2].data = ttl;
        cmd[2].len = ngx_sprintf(ttl, "%M", w->ttl) - ttl;

        rc = nx ? ngx_http_idem_redis_expire_nx(&w->key, &cmd[2])
                : ngx_http_idem_redis_write(3, cmd, NULL);

        if (rc != NGX_OK) {
            goto failed;
        }
    }

    return NGX_OK;

failed:

    /* dropped: its caller is not told, though the fields may land */

    if (known_op) {
        first = known_op->ext;
        first->known = NULL;
    }

    return NGX_DECLINED;
}


/*
 * Fields (names and values in turn) in a short record's form,
 * "<field> <length> <value>\n" each (a field name has no space), which
 * the scripts read (ngx_http_idem_redis_short.lua): a short write's
 * value, a short claim's, or what an owner adds to its short claim.
 * Allocated: the caller frees it.
 */

static ngx_int_t
ngx_http_idem_redis_short_value(ngx_str_t *fields, ngx_uint_t nfields,
    ngx_str_t *value)
{
    u_char      *p;
    size_t       len;
    ngx_uint_t   i;

    len = 0;

    for (i = 0; i + 1 < nfields; i += 2) {
        len += fields[i].len + sizeof("  \n") - 1 + NGX_SIZE_T_LEN
               + fields[i + 1].len;
    }

    value->data = ngx_alloc(len, ngx_cycle->log);
    if (value->data == NULL) {
        return NGX_ERROR;
    }

    p = value->data;

    for (i = 0; i + 1 < nfields; i += 2) {
        p = ngx_sprintf(p, "%V %uz %V\n", &fields[i], fields[i + 1].len,
                        &fields[i + 1]);
    }

    value->len = p - value->data;

    return NGX_OK;
}


/*
 * SET key value PX ttl NX: the execution's only write, which makes a
 * record of a call id used once, as most are, in one command and short:
 * its fields as "<field> <length> <value>\n" each (a field name has no
 * space), which the scripts read (ngx_http_idem_redis_short.lua).
 */

static ngx_int_t
ngx_http_idem_redis_write_short(ngx_http_idem_store_write_t *w)
{
    u_char      ttl[NGX_INT64_LEN];
    ngx_int_t   rc;
    ngx_str_t   argv[6];

    if (ngx_http_idem_redis_room(1) != NGX_OK) {
        return NGX_DECLINED;
    }

    ngx_str_set(&argv[0], "SET");
    argv[1] = w->key;

    if (ngx_http_idem_redis_short_value(w->fields, w->nfields, &argv[2])
        != NGX_OK)
    {
        return NGX_DECLINED;
    }

    ngx_str_set(&argv[3], "PX");
    argv[4].data = ttl;
    argv[4].len = ngx_sprintf(ttl, "%M", w->ttl) - ttl;
    ngx_str_set(&argv[5], "NX");

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: write \"%V\": short, %ui fields",
                   &w->key, w->nfields / 2);

    rc = (ngx_http_idem_redis_write_read(6, argv,
                                         ngx_http_idem_redis_short_written,
                                         w->max_executions, w->nfields / 2,
                                         NULL, 1)
          != NULL) ? NGX_OK : NGX_ERROR;

    ngx_free(argv[2].data);

    return (rc == NGX_OK) ? NGX_OK : NGX_DECLINED;
}


/*
 * The last write of the execution that owns the call's claim: HSET of its
 * fields, then PEXPIRE when the expiry must move, in the same round trip
 * (at the end of this turn where waiters may wait for it, instead of
 * within the moment other writes get to leave with it)
 * (the claim gave the record its expiry: a PEXPIRE lost keeps that one);
 * ngx_http_idem_store_write() adds the PUBLISH to its waiters after them.
 * Plain commands, not a script: a script costs Redis about 10 us of Lua
 * whatever it does (docs/performance.md).  Its reply counts the
 * execution as an execution's first write does, when it is one; a short
 * record met there (a rare race: WRONGTYPE) becomes the hash first
 * (the upgrade script).
 */

static ngx_int_t
ngx_http_idem_redis_write_final(ngx_http_idem_store_write_t *w)
{
    u_char                        ttl[NGX_INT64_LEN];
    ngx_str_t                     argv_buf[NGX_HTTP_IDEM_REDIS_ARGS], *argv,
                                  cmd[3];
    ngx_uint_t                    argc;
    ngx_http_idem_store_op_t     *op;
    ngx_http_idem_redis_first_t  *first;

    if (ngx_http_idem_redis_room(w->ttl ? 2 : 1) != NGX_OK) {
        return NGX_DECLINED;
    }

    argc = 2 + w->nfields;

    if (argc <= NGX_HTTP_IDEM_REDIS_ARGS) {
        argv = argv_buf;

    } else {
        argv = ngx_alloc(argc * sizeof(ngx_str_t), ngx_cycle->log);
        if (argv == NULL) {
            return NGX_DECLINED;
        }
    }

    ngx_str_set(&argv[0], "HSET");
    argv[1] = w->key;
    ngx_memcpy(&argv[2], w->fields, w->nfields * sizeof(ngx_str_t));

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: write \"%V\": final, %ui fields, ttl %M, "
                   "heard: %d", &w->key, w->nfields / 2, w->ttl,
                   (int) (w->wake.len != 0));

    op = ngx_http_idem_redis_write_read(argc, argv,
                                        ngx_http_idem_redis_final_written,
                                        w->first ? w->max_executions : 0,
                                        w->nfields / 2, NULL,
                                        w->wake.len == 0);

    if (argv != argv_buf) {
        ngx_free(argv);
    }

    if (op == NULL) {
        return NGX_DECLINED;
    }

    first = op->ext;
    first->wake = (w->wake.len != 0);

    if (w->ttl) {
        ngx_str_set(&cmd[0], "PEXPIRE");
        cmd[1] = w->key;
        cmd[2].data = ttl;
        cmd[2].len = ngx_sprintf(ttl, "%M", w->ttl) - ttl;

        /* lost: the fields stand, with the expiry the claim set */

        (void) ngx_http_idem_redis_write(3, cmd, NULL);
    }

    return NGX_OK;
}


/*
 * The final HSET's answer: the fields that were new.  Sent again (a short
 * record made a hash first, a cluster's redirect), it landed after the
 * PUBLISH sent with it: its waiters are told once more.
 */

static void
ngx_http_idem_redis_final_written(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    ngx_str_t                     key;
    ngx_uint_t                    k;
    ngx_http_idem_redis_t        *rd;
    ngx_http_idem_redis_first_t  *first;

    rd = &ngx_http_idem_redis;
    first = op->ext;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: final write: rc %i, %ui elements, "
                   "%ui redirects", rc, n, op->redirects);

    k = ngx_http_idem_redis_op_key(op);

    if (first->wake && rc == NGX_OK && k
        && (op->script != NULL || op->redirects))
    {
        key.data = (u_char *) op->argv[k];
        key.len = op->lens[k];

        (void) ngx_http_idem_redis_publish(&rd->conf->wake, &key);
    }

    if (first->max_executions) {
        ngx_http_idem_redis_first_written(data, rc, elts, n);
    }
}


/*
 * A write of the owner whose claim made a short record: APPEND of its
 * fields in the short form, then PEXPIRE when the expiry must move, in
 * one round trip; plain, as the claim was (a record's fields are written
 * once, so that adding them to the string is what HSET does to the
 * hash).  A hash there by now (a duplicate's claim script, a resolution
 * or an older gateway made it one: WRONGTYPE) takes them through the
 * upgrade script, as HSET.  ngx_http_idem_store_write() adds the PUBLISH
 * to its waiters after them.
 */

static ngx_int_t
ngx_http_idem_redis_write_append(ngx_http_idem_store_write_t *w)
{
    u_char                        ttl[NGX_INT64_LEN];
    ngx_str_t                     argv[3], cmd[3];
    ngx_http_idem_store_op_t     *op;
    ngx_http_idem_redis_first_t  *first;

    if (ngx_http_idem_redis_room(w->ttl ? 2 : 1) != NGX_OK) {
        return NGX_DECLINED;
    }

    ngx_str_set(&argv[0], "APPEND");
    argv[1] = w->key;

    if (ngx_http_idem_redis_short_value(w->fields, w->nfields, &argv[2])
        != NGX_OK)
    {
        return NGX_DECLINED;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: write \"%V\": added to the short record, "
                   "%ui fields, ttl %M, final %d", &w->key, w->nfields / 2,
                   w->ttl, (int) w->final);

    /* waiters may wait for it: it leaves at the end of this turn */

    ngx_http_idem_redis_lazy(w->wake.len == 0);

    op = ngx_http_idem_redis_read(NULL, 3, argv,
                                  ngx_http_idem_redis_appended_short, NULL,
                                  sizeof(ngx_http_idem_redis_first_t));

    ngx_http_idem_redis_lazy(0);

    ngx_free(argv[2].data);

    if (op == NULL) {
        return NGX_DECLINED;
    }

    op->data = op;
    op->upgrade = &ngx_http_idem_redis_upgrade_lua;
    op->write = 1;

    first = op->ext;
    first->max_executions = 0;
    first->nfields = w->nfields / 2;
    first->known = NULL;
    first->wake = (w->wake.len != 0);
    first->expiry = w->expiry;
    first->length = argv[2].len;

    if (w->ttl) {
        ngx_str_set(&cmd[0], "PEXPIRE");
        cmd[1] = w->key;
        cmd[2].data = ttl;
        cmd[2].len = ngx_sprintf(ttl, "%M", w->ttl) - ttl;

        /* lost: the fields stand, with the expiry the claim set */

        (void) ngx_http_idem_redis_write(3, cmd, NULL);
    }

    return NGX_OK;
}


/*
 * APPEND's answer, the string's length: only what it added, the record
 * was gone (expired, or lost with a Redis that restarted) and APPEND made
 * a string without expiry: it gets the record's.  Through the upgrade
 * script (a hash there), it landed after the PUBLISH sent with it: its
 * waiters are told once more.
 */

static void
ngx_http_idem_redis_appended_short(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    u_char                        ttl[NGX_INT64_LEN];
    ngx_int_t                     len;
    ngx_str_t                     cmd[3];
    ngx_http_idem_redis_first_t  *first;

    first = op->ext;

    if (op->script != NULL || op->redirects) {
        ngx_http_idem_redis_final_written(data, rc, elts, n);
        return;
    }

    len = (rc == NGX_OK && n == 1) ? ngx_atoi(elts[0].data, elts[0].len)
                                   : NGX_ERROR;

    if (len == NGX_ERROR || (size_t) len != first->length
        || first->expiry == 0)
    {
        return;
    }

    ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                  "idem: the record \"%*s\" was gone when its owner wrote "
                  "to it (expired, or lost by Redis): it holds only that "
                  "write now", op->lens[1], op->argv[1]);

    ngx_str_set(&cmd[0], "PEXPIRE");
    cmd[1].data = (u_char *) op->argv[1];
    cmd[1].len = op->lens[1];
    cmd[2].data = ttl;
    cmd[2].len = ngx_sprintf(ttl, "%M", first->expiry) - ttl;

    (void) ngx_http_idem_redis_write(3, cmd, NULL);
}


/*
 * An execution's last write whose claim got no answer, by script, in one
 * command (ngx_http_idem_redis_owned.lua): its fields and the record's
 * expiry ("0": left as it is), written only where the record's claim
 * names the execution (its token, the argument after the key); it goes
 * where the claim went: to the durable claims' connection when the claim
 * was durable.  Its reply counts the execution as an execution's first
 * write does, when it is one.
 */

static ngx_int_t
ngx_http_idem_redis_write_owned(ngx_http_idem_store_write_t *w)
{
    u_char                        ttl[NGX_INT64_LEN];
    ngx_str_t                     argv_buf[NGX_HTTP_IDEM_REDIS_ARGS], *argv;
    ngx_uint_t                    argc;
    ngx_http_idem_store_op_t     *op;
    ngx_http_idem_redis_first_t  *first;

    /* numkeys, the key, the token, the ttl, the fields */

    argc = 4 + w->nfields;

    if (argc <= NGX_HTTP_IDEM_REDIS_ARGS) {
        argv = argv_buf;

    } else {
        argv = ngx_alloc(argc * sizeof(ngx_str_t), ngx_cycle->log);
        if (argv == NULL) {
            return NGX_DECLINED;
        }
    }

    ngx_str_set(&argv[0], "1");
    argv[1] = w->key;
    argv[2] = w->token;
    argv[3].data = ttl;
    argv[3].len = ngx_sprintf(ttl, "%M", w->ttl) - ttl;

    ngx_memcpy(&argv[4], w->fields, w->nfields * sizeof(ngx_str_t));

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: write \"%V\": %ui fields, if its claim "
                   "is \"%V\"'s", &w->key, w->nfields / 2, &w->token);

    ngx_http_idem_redis_lazy(1);
    ngx_http_idem_redis_durable(w->replicas, w->wait);

    op = ngx_http_idem_redis_read(&ngx_http_idem_redis_owned_lua, argc, argv,
                                  ngx_http_idem_redis_owned_written, NULL,
                                  sizeof(ngx_http_idem_redis_first_t));

    ngx_http_idem_redis_durable(0, 0);
    ngx_http_idem_redis_lazy(0);

    if (argv != argv_buf) {
        ngx_free(argv);
    }

    if (op == NULL) {
        return NGX_DECLINED;
    }

    op->data = op;
    op->write = 1;

    first = op->ext;
    first->max_executions = w->first ? w->max_executions : 0;
    first->nfields = w->nfields / 2;
    first->known = NULL;
    first->wake = 0;

    return NGX_OK;
}


/* the owned script's answer: -1, nothing written (not the owner's claim) */

static void
ngx_http_idem_redis_owned_written(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    ngx_http_idem_redis_first_t  *first;

    first = op->ext;

    /* a store that did not answer says so itself */

    if (rc != NGX_OK || n != 1) {
        return;
    }

    if (elts[0].len && elts[0].data[0] == '-') {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "idem store: the claim is another execution's: "
                       "nothing written");
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: the claim was made: written, %V new",
                   &elts[0]);

    if (first->max_executions) {
        ngx_http_idem_redis_first_written(data, rc, elts, n);
    }
}


/*
 * OK: the write made the record.  Nil: a record is there (an execution
 * before this one), and the write goes to it as to a hash, through the
 * upgrade script, which makes a short record a hash first; its reply is
 * then that of an execution's first write.
 */

static void
ngx_http_idem_redis_short_written(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    /* a store that did not answer says so itself */

    if (rc != NGX_OK || n != 0 || op->argc != 6) {
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: \"%*s\" there already: written as a hash",
                   op->lens[1], op->argv[1]);

    op->handler = ngx_http_idem_redis_first_written;

    (void) ngx_http_idem_redis_again_through(op,
                                             &ngx_http_idem_redis_upgrade_lua);
}


/*
 * An execution's first write is in: every field of it new (the one all
 * records have too), it made the record and is not counted, as a record
 * holds its first execution; else HINCRBY key n 1.  So "n" is the
 * executions after the first, and a call id used once, as most are,
 * costs no count.
 */

static void
ngx_http_idem_redis_first_written(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    ngx_int_t                     added;
    ngx_str_t                     cmd[4];
    ngx_uint_t                    k;
    ngx_http_idem_redis_first_t  *first;

    first = op->ext;

    /* a store that did not answer says so itself */

    added = (rc == NGX_OK && n == 1) ? ngx_atoi(elts[0].data, elts[0].len)
                                     : NGX_ERROR;

    /* every field new: the write made the record, the call id is new */

    if (first->known) {
        first->known(first->known_data,
                     (added == NGX_ERROR) ? NGX_ERROR
                     : ((ngx_uint_t) added == first->nfields) ? NGX_OK
                                                               : NGX_DECLINED);
        first->known = NULL;
    }

    k = ngx_http_idem_redis_op_key(op);

    if (added == NGX_ERROR || (ngx_uint_t) added == first->nfields || k == 0)
    {
        return;
    }

    ngx_str_set(&cmd[0], "HINCRBY");
    cmd[1].data = (u_char *) op->argv[k];
    cmd[1].len = op->lens[k];
    ngx_str_set(&cmd[2], "n");
    ngx_str_set(&cmd[3], "1");

    (void) ngx_http_idem_redis_write_read(4, cmd, ngx_http_idem_redis_counted,
                                          first->max_executions, 0, NULL, 1);
}


/*
 * A record-only route's HSET is in, through the upgrade script if it met
 * a short record (the record a hash now, a short claim's lease in Redis's
 * time): an execution's first write is counted, and the expiry, which
 * its PEXPIRE ... NX set only on a record the HSET made, is refreshed now
 * where the record was there before (its fields not all new).  Lost with
 * the connection, the record keeps the expiry it had.
 */

static void
ngx_http_idem_redis_fields_written(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    u_char                        ttl[NGX_INT64_LEN];
    ngx_int_t                     added;
    ngx_str_t                     cmd[3];
    ngx_uint_t                    k;
    ngx_http_idem_redis_first_t  *first;

    first = op->ext;

    added = (rc == NGX_OK && n == 1) ? ngx_atoi(elts[0].data, elts[0].len)
                                     : NGX_ERROR;

    if (first->count) {
        ngx_http_idem_redis_first_written(data, rc, elts, n);
    }

    k = ngx_http_idem_redis_op_key(op);

    if (added == NGX_ERROR || first->expiry == 0 || k == 0
        || (first->count && (ngx_uint_t) added == first->nfields))
    {
        return;
    }

    ngx_str_set(&cmd[0], "PEXPIRE");
    cmd[1].data = (u_char *) op->argv[k];
    cmd[1].len = op->lens[k];
    cmd[2].data = ttl;
    cmd[2].len = ngx_sprintf(ttl, "%M", first->expiry) - ttl;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: \"%V\" was there: its expiry refreshed "
                   "after the fields, %M ms", &cmd[1], first->expiry);

    (void) ngx_http_idem_redis_write(3, cmd, NULL);
}


/*
 * PEXPIRE key ttl NX, with a record-only route's HSET: a record that HSET
 * makes gets its expiry in the same round trip, and an expiry there is
 * left alone, a short claim's above all, whose lease counts from it
 * ("+<ms> <ttl>"): nothing but its owner's writes may move that.  Redis
 * takes NX from 7.0 on, as SET with NX and GET, without which there are
 * no short claims: refused (5, 6), it goes plainly, and every one after.
 */

static ngx_int_t
ngx_http_idem_redis_expire_nx(ngx_str_t *key, ngx_str_t *ttl)
{
    ngx_str_t                  argv[4];
    ngx_http_idem_store_op_t  *op;

    ngx_str_set(&argv[0], "PEXPIRE");
    argv[1] = *key;
    argv[2] = *ttl;
    ngx_str_set(&argv[3], "NX");

    ngx_http_idem_redis_lazy(1);

    op = ngx_http_idem_redis_read(NULL, 4, argv,
                                  ngx_http_idem_redis_expired_nx, NULL, 0);

    ngx_http_idem_redis_lazy(0);

    if (op == NULL) {
        return NGX_DECLINED;
    }

    op->data = op;
    op->errors = 1;
    op->write = 1;

    return NGX_OK;
}


static void
ngx_http_idem_redis_expired_nx(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    ngx_str_t               cmd[3];
    ngx_http_idem_redis_t  *rd;

    rd = &ngx_http_idem_redis;

    /* set, an expiry there kept, or no answer (said where it is counted) */

    if (rc != NGX_DECLINED || op->argc != 4) {
        return;
    }

    if (!rd->no_expire_nx && n == 1 && elts[0].len >= sizeof("ERR ") - 1
        && ngx_strncmp(elts[0].data, "ERR ", sizeof("ERR ") - 1) == 0)
    {
        ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                      "idem: Redis refused PEXPIRE with NX (\"%V\"): "
                      "expiries are set without it from now on (Redis 7.0 "
                      "takes it; before 7.0 no claim is short)", &elts[0]);
        rd->no_expire_nx = 1;
    }

    ngx_str_set(&cmd[0], "PEXPIRE");
    cmd[1].data = (u_char *) op->argv[1];
    cmd[1].len = op->lens[1];
    cmd[2].data = (u_char *) op->argv[2];
    cmd[2].len = op->lens[2];

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: PEXPIRE ... NX of \"%V\" refused: sent "
                   "without NX", &cmd[1]);

    (void) ngx_http_idem_redis_write(3, cmd, NULL);
}


/*
 * A write whose reply is looked at: it leaves with the writes (no request
 * waits for it), and the cap on executions and the write's fields go with
 * the op, as the request may be gone by the time the reply is in; an
 * execution's first write (w) may be asked whether it made the record
 * (w->known: its caller copes with a request gone).
 */

static ngx_http_idem_store_op_t *
ngx_http_idem_redis_write_read(ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_idem_redis_reply_pt handler, ngx_uint_t max_executions,
    ngx_uint_t nfields, ngx_http_idem_store_write_t *w, ngx_uint_t lazy)
{
    ngx_http_idem_store_op_t     *op;
    ngx_http_idem_redis_first_t  *first;

    ngx_http_idem_redis_lazy(lazy);

    op = ngx_http_idem_redis_read(NULL, argc, argv, handler, NULL,
                                  sizeof(ngx_http_idem_redis_first_t));

    ngx_http_idem_redis_lazy(0);

    if (op == NULL) {
        return NULL;
    }

    op->data = op;
    op->upgrade = &ngx_http_idem_redis_upgrade_lua;
    op->write = 1;

    first = op->ext;
    first->max_executions = max_executions;
    first->nfields = nfields;
    first->known = w ? w->known : NULL;
    first->known_data = w ? w->known_data : NULL;
    first->wake = 0;

    return op;
}


/*
 * The executions after the first: past the cap by a quarter, the record
 * is trimmed.  A trim reads the whole record (some 0.7 ms of Redis for
 * 100 executions): done once a quarter of the cap more has been counted,
 * not for every call of an id sent over and over.
 */

static void
ngx_http_idem_redis_counted(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    u_char                        buf[NGX_INT_T_LEN];
    ngx_int_t                     count, max;
    ngx_str_t                     argv[3];
    ngx_uint_t                    k;
    ngx_http_idem_store_op_t     *trim;
    ngx_http_idem_redis_first_t  *first;

    first = op->ext;

    /* a store that did not answer says so itself */

    count = (rc == NGX_OK && n == 1) ? ngx_atoi(elts[0].data, elts[0].len)
                                     : NGX_ERROR;
    max = first->max_executions;
    k = ngx_http_idem_redis_op_key(op);

    if (count == NGX_ERROR || count + 1 <= max + max / 4 || k == 0) {
        return;
    }

    ngx_str_set(&argv[0], "1");
    argv[1].data = (u_char *) op->argv[k];
    argv[1].len = op->lens[k];
    argv[2].data = buf;
    argv[2].len = ngx_sprintf(buf, "%i", max) - buf;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: \"%V\" has %i executions, over %i: trim",
                   &argv[1], count + 1, max);

    trim = ngx_http_idem_redis_read(&ngx_http_idem_redis_trim_lua, 3, argv,
                                    ngx_http_idem_redis_trimmed, NULL, 0);

    if (trim != NULL) {
        trim->write = 1;
    }
}


static void
ngx_http_idem_redis_trimmed(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: trimmed: rc %i, %ui dropped", rc,
                   (rc == NGX_OK && n == 1)
                   ? (ngx_uint_t) ngx_atoi(elts[0].data, elts[0].len) : 0);
}


/*
 * The claim of a new call id, one command and one round trip: the owner,
 * its digest, lease, bound and arrival, a short record made with its
 * expiry in one SET ... PX ... NX GET, plain and the cheapest write Redis
 * has (docs/performance.md); the lease and the bound relative to that
 * expiry ("+<ms> <ttl>"), as Redis's clock is not at hand.  GET tells a
 * loser what is there: then, or when Redis refuses the command (before
 * 7.0: NX with GET) or finds a hash, the same op asks the claim script
 * (take.lua, then claim.lua's rare paths), which decides from the whole
 * record.  Without short records (idem_record_short off), the script
 * first.
 *
 * A durable claim goes on the node's connection for durable claims; when
 * it makes the owner, WAIT follows there.  The replicas confirm the whole
 * claim, as it is one write.
 */

ngx_http_idem_store_op_t *
ngx_http_idem_store_claim(ngx_http_idem_store_claim_t *claim,
    ngx_http_idem_store_claim_pt handler, void *data)
{
    u_char                       *p, lease[NGX_INT64_LEN], ttl[NGX_INT64_LEN],
                                  bound[NGX_INT64_LEN];
    size_t                        size;
    ngx_str_t                     argv[8], set[7];
    ngx_uint_t                    i;
    ngx_http_idem_redis_t        *rd;
    ngx_http_idem_store_op_t     *op;
    ngx_http_idem_redis_claim_t  *cl;

    rd = &ngx_http_idem_redis;

    ngx_str_set(&argv[0], "1");
    argv[1] = claim->key;
    argv[2] = claim->token;
    argv[3] = claim->digest;
    argv[4].data = lease;
    argv[4].len = ngx_sprintf(lease, "%M", claim->lease) - lease;
    argv[5].data = ttl;
    argv[5].len = ngx_sprintf(ttl, "%M", claim->ttl) - ttl;
    argv[6] = claim->arrival;

    /* how long its owner may answer: a resolution waits for that */

    if (claim->bound) {
        argv[7].data = bound;
        argv[7].len = ngx_sprintf(bound, "%M", claim->bound) - bound;

    } else {
        ngx_str_set(&argv[7], "-");
    }

    size = sizeof(ngx_http_idem_redis_claim_t) + claim->key.len;

    for (i = 0; i < 8; i++) {
        size += argv[i].len;
    }

    ngx_http_idem_redis_durable(claim->replicas,
                                claim->replicas ? claim->wait : 0);

    if (claim->short_record && !rd->no_set_get) {
        op = ngx_http_idem_redis_claim_short(claim, set, size);

    } else {
        op = ngx_http_idem_redis_read(&ngx_http_idem_redis_take_lua, 8, argv,
                                      ngx_http_idem_redis_claim_verdict,
                                      NULL, size);
    }

    ngx_http_idem_redis_durable(0, 0);

    if (op == NULL) {
        return NULL;
    }

    cl = op->ext;
    op->data = op;

    cl->handler = handler;
    cl->data = data;
    cl->replicas = claim->replicas;
    cl->made = 0;
    cl->short_record = (op->script == NULL);

    /* the key, for the logs, and the script's arguments: copies */

    p = (u_char *) &cl[1];
    cl->key.data = p;
    cl->key.len = claim->key.len;
    p = ngx_cpymem(p, claim->key.data, claim->key.len);

    for (i = 0; i < 8; i++) {
        cl->take[i].data = p;
        cl->take[i].len = argv[i].len;
        p = ngx_cpymem(p, argv[i].data, argv[i].len);
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: claim of \"%V\" sent, %ui replicas, %s",
                   &claim->key, claim->replicas,
                   cl->short_record ? "short" : "by script");

    return op;
}


/*
 * SET key <the claim's fields, as a short record's> PX ttl NX GET; its
 * error replies are the verdict's to read (the script asks then).
 */

static ngx_http_idem_store_op_t *
ngx_http_idem_redis_claim_short(ngx_http_idem_store_claim_t *claim,
    ngx_str_t *argv, size_t ext)
{
    u_char                    *names, ttl[NGX_INT64_LEN],
                               lease[2 * NGX_INT64_LEN + 2],
                               bound[2 * NGX_INT64_LEN + 2];
    ngx_int_t                  rc;
    ngx_str_t                  f[12], value;
    ngx_uint_t                 i;
    ngx_http_idem_store_op_t  *op;

    /* "l:", "b:", "e:" and the owner's token */

    names = ngx_alloc(3 * (2 + claim->token.len), ngx_cycle->log);
    if (names == NULL) {
        return NULL;
    }

    for (i = 0; i < 3; i++) {
        f[4 + 2 * i].data = names + i * (2 + claim->token.len);
        f[4 + 2 * i].len = ngx_sprintf(f[4 + 2 * i].data, "%c:%V",
                                       "lbe"[i], &claim->token)
                           - f[4 + 2 * i].data;
    }

    ngx_str_set(&f[0], "o");
    f[1] = claim->token;
    ngx_str_set(&f[2], "d");
    f[3] = claim->digest;

    /* "+<ms> <ttl>": from the expiry this SET sets (record.lua's lease_at) */

    f[5].data = lease;
    f[5].len = ngx_sprintf(lease, "+%M %M", claim->lease, claim->ttl) - lease;

    if (claim->bound) {
        f[7].data = bound;
        f[7].len = ngx_sprintf(bound, "+%M %M", claim->bound, claim->ttl)
                   - bound;

    } else {
        ngx_str_set(&f[7], "-");
    }

    f[9] = claim->arrival;

    /* 'v': NGX_HTTP_IDEM_RECORD_VERSION, as this write makes the record */

    ngx_str_set(&f[10], "v");
    ngx_str_set(&f[11], "1");

    rc = ngx_http_idem_redis_short_value(f, 12, &value);

    ngx_free(names);

    if (rc != NGX_OK) {
        return NULL;
    }

    ngx_str_set(&argv[0], "SET");
    argv[1] = claim->key;
    argv[2] = value;
    ngx_str_set(&argv[3], "PX");
    argv[4].data = ttl;
    argv[4].len = ngx_sprintf(ttl, "%M", claim->ttl) - ttl;
    ngx_str_set(&argv[5], "NX");
    ngx_str_set(&argv[6], "GET");

    op = ngx_http_idem_redis_read(NULL, 7, argv,
                                  ngx_http_idem_redis_claim_verdict, NULL,
                                  ext);

    ngx_free(value.data);

    if (op != NULL) {
        op->errors = 1;
    }

    return op;
}


/*
 * The claim script's answer: {"claimed"} ({"claimed", "1"}: it made the
 * record), {"mismatch"}, {"inflight", ms},
 * {"replay", answer}, {"large" | "unknown" | "applied", now, fields ...},
 * the last three kinds followed by the record's PTTL.
 */

static void
ngx_http_idem_redis_claim_verdict(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    ngx_int_t                     left;
    ngx_http_idem_redis_claim_t  *cl;
    ngx_http_idem_store_found_t   found;

    cl = op->ext;

    ngx_memzero(&found, sizeof(ngx_http_idem_store_found_t));

    found.verdict = NGX_HTTP_IDEM_STORE_UNAVAILABLE;

    if (cl->short_record) {
        switch (ngx_http_idem_redis_claim_set(op, rc, elts, n, &found)) {

        case NGX_AGAIN:

            /* the script asks: this handler reads its answer */
            return;

        case NGX_OK:

            /* made: a durable one waits for its replicas */

            if (cl->replicas == 0) {
                break;
            }

            op->handler = ngx_http_idem_redis_claim_waited;

            if (ngx_http_idem_redis_batch_add(op, cl->replicas) == NGX_OK) {
                return;
            }

            found.verdict = NGX_HTTP_IDEM_STORE_NOT_DURABLE;
            break;

        default:
            break;
        }

        goto done;
    }

    if (rc != NGX_OK || n == 0) {
        goto done;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: claim: \"%V\", %ui elements", &elts[0], n);

    switch (elts[0].len ? elts[0].data[0] : '\0') {

    case 'c':
        found.verdict = NGX_HTTP_IDEM_STORE_CLAIMED;

        /* a new record: its first execution, not counted */

        found.made = (n > 1 && elts[1].len == 1 && elts[1].data[0] == '1');
        cl->made = found.made;

        if (cl->replicas == 0) {
            break;
        }

        /* durable: made, and held once the replicas have it */

        op->handler = ngx_http_idem_redis_claim_waited;

        if (ngx_http_idem_redis_batch_add(op, cl->replicas) == NGX_OK) {
            return;
        }

        found.verdict = NGX_HTTP_IDEM_STORE_NOT_DURABLE;
        break;

    case 'm':
        found.verdict = NGX_HTTP_IDEM_STORE_MISMATCH;
        break;

    case 'i':
        found.verdict = NGX_HTTP_IDEM_STORE_IN_FLIGHT;
        ngx_http_idem_redis_ttl(&found, elts, n, 3);

        /* what is left of the owner's lease: a waiter asks again then */

        if (n > 1) {
            left = ngx_atoi(elts[1].data, elts[1].len);
            found.left = (left > 0) ? (ngx_msec_t) left : 0;
        }

        break;

    case 'r':
        found.verdict = NGX_HTTP_IDEM_STORE_REPLAY;

        if (n > 1) {
            found.answer = elts[1];
        }

        ngx_http_idem_redis_ttl(&found, elts, n, 3);
        break;

    case 'l':
    case 'u':
    case 'a':
        found.verdict = (elts[0].data[0] == 'l')
                        ? NGX_HTTP_IDEM_STORE_NOT_STORED
                        : (elts[0].data[0] == 'u')
                          ? NGX_HTTP_IDEM_STORE_UNKNOWN
                          : NGX_HTTP_IDEM_STORE_APPLIED;

        if (n > 2 && ngx_http_idem_redis_ms(&elts[1], &found.record.now)
                     == NGX_OK)
        {
            /* fields and values in pairs, then the PTTL */

            found.record.fields = &elts[2];
            found.record.nfields = (n - 2) & ~(ngx_uint_t) 1;

            if ((n - 2) % 2) {
                ngx_http_idem_redis_ttl(&found, elts, n, 0);
            }
        }

        break;

    default:
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "idem: unexpected answer to a claim: \"%V\"",
                      &elts[0]);
        break;
    }

done:

    cl->handler(cl->data, &found);
}


/*
 * The short claim's answer.  Nil: the claim made the record, short
 * (NGX_OK).  The record there (its value: a short record), a hash there
 * (WRONGTYPE), a Redis that refuses NX with GET (before 7.0: short claims
 * off in this worker), or another error reply (this claim only): the
 * claim script, asked by the same op, decides (NGX_AGAIN).  NGX_ERROR:
 * no answer.
 */

static ngx_int_t
ngx_http_idem_redis_claim_set(ngx_http_idem_store_op_t *op, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n, ngx_http_idem_store_found_t *found)
{
    ngx_http_idem_redis_t        *rd;
    ngx_http_idem_redis_claim_t  *cl;

    rd = &ngx_http_idem_redis;
    cl = op->ext;

    if (rc == NGX_OK && n == 0) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "idem store: claim of \"%V\": made, short",
                       &cl->key);

        found->verdict = NGX_HTTP_IDEM_STORE_CLAIMED;
        found->made = 1;
        found->short_record = 1;
        cl->made = 1;

        return NGX_OK;
    }

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED && n == 1
        && ngx_http_idem_redis_syntax_error(&elts[0]))
    {
        /*
         * The command itself is refused: only that turns short claims
         * off.  Any other error (OOM, LOADING, READONLY, BUSY,
         * CLUSTERDOWN ...) is this Redis now, not its version: this
         * claim asks by script as after a WRONGTYPE (the script answers
         * a duplicate that needs no write, or meets the same error: a
         * store error), the next claims are short again.
         */

        if (!rd->no_set_get) {
            ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                          "idem: Redis refused a short claim (\"%V\"): "
                          "claims go by script from now on (Redis 7.0 "
                          "takes SET with NX and GET)",
                          n ? &elts[0] : &cl->key);
            rd->no_set_get = 1;
        }
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: claim of \"%V\": the record is there%s, "
                   "asked by script", &cl->key,
                   (rc == NGX_DECLINED) ? " (not short)" : "");

    cl->short_record = 0;
    op->errors = 0;

    if (ngx_http_idem_redis_again(op, &ngx_http_idem_redis_take_lua, 8,
                                  cl->take)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_AGAIN;
}


/*
 * "ERR syntax error": what Redis before 7.0 answers SET with NX and GET
 * (6.2 takes GET, not with NX); a fork may word it a little otherwise.
 */

static ngx_uint_t
ngx_http_idem_redis_syntax_error(ngx_str_t *err)
{
    if (err->len < sizeof("ERR ") - 1
        || ngx_strncmp(err->data, "ERR ", sizeof("ERR ") - 1) != 0)
    {
        return 0;
    }

    return ngx_strlcasestrn(err->data + 4, err->data + err->len,
                            (u_char *) "syntax", sizeof("syntax") - 2)
           != NULL;
}


/*
 * WAIT's answer to a durable claim: how many replicas have it.  Fewer
 * than asked, or no answer: the claim is made, but a failover may lose
 * it.
 */

static void
ngx_http_idem_redis_claim_waited(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    ngx_int_t                     acked;
    ngx_http_idem_redis_claim_t  *cl;
    ngx_http_idem_store_found_t   found;

    cl = op->ext;

    ngx_memzero(&found, sizeof(ngx_http_idem_store_found_t));

    acked = (rc == NGX_OK && n == 1) ? ngx_atoi(elts[0].data, elts[0].len)
                                     : NGX_ERROR;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: claim of \"%V\": %i of %ui replicas",
                   &cl->key, acked, cl->replicas);

    found.verdict = (acked != NGX_ERROR && (ngx_uint_t) acked >= cl->replicas)
                    ? NGX_HTTP_IDEM_STORE_CLAIMED
                    : NGX_HTTP_IDEM_STORE_NOT_DURABLE;
    found.made = cl->made;
    found.short_record = cl->short_record;

    cl->handler(cl->data, &found);
}


/* the record, without its stored answer, and Redis's time */

ngx_http_idem_store_op_t *
ngx_http_idem_store_read_record(ngx_str_t *key,
    ngx_http_idem_store_record_pt handler, void *data)
{
    ngx_str_t                      argv[2];
    ngx_http_idem_store_op_t      *op;
    ngx_http_idem_redis_reader_t  *rdr;

    ngx_str_set(&argv[0], "1");
    argv[1] = *key;

    op = ngx_http_idem_redis_read(&ngx_http_idem_redis_read_lua, 2, argv,
                                  ngx_http_idem_redis_record_read, NULL,
                                  sizeof(ngx_http_idem_redis_reader_t));

    if (op == NULL) {
        return NULL;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: read of \"%V\" sent", key);

    op->data = op;

    rdr = op->ext;
    rdr->handler = handler;
    rdr->data = data;

    return op;
}


static void
ngx_http_idem_redis_record_read(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    ngx_http_idem_redis_reader_t  *rdr;
    ngx_http_idem_store_record_t   record;

    rdr = op->ext;

    ngx_memzero(&record, sizeof(ngx_http_idem_store_record_t));

    if (rc != NGX_OK || n == 0
        || ngx_http_idem_redis_ms(&elts[0], &record.now) != NGX_OK)
    {
        rdr->handler(rdr->data, NGX_ERROR, &record);
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: record read, %ui strings", n - 1);

    if (n == 1) {
        rdr->handler(rdr->data, NGX_DECLINED, &record);
        return;
    }

    record.fields = &elts[1];
    record.nfields = n - 1;

    rdr->handler(rdr->data, NGX_OK, &record);
}


/*
 * A resolution of the call's latest execution (resolve.lua): the record
 * as read back after it, or what stood in its way.
 */

ngx_http_idem_store_op_t *
ngx_http_idem_store_resolve(ngx_str_t *key,
    ngx_http_idem_store_resolution_t *res,
    ngx_http_idem_store_resolved_pt handler, void *data)
{
    ngx_str_t                      argv[6];
    ngx_http_idem_store_op_t      *op;
    ngx_http_idem_redis_solver_t  *sv;

    ngx_str_set(&argv[0], "1");
    argv[1] = *key;
    argv[2] = res->outcome;
    argv[3] = res->receipt;
    argv[4] = res->by;

    if (res->force) {
        ngx_str_set(&argv[5], "force");

    } else {
        ngx_str_set(&argv[5], "-");
    }

    op = ngx_http_idem_redis_read(&ngx_http_idem_redis_resolve_lua, 6, argv,
                                  ngx_http_idem_redis_resolved, NULL,
                                  sizeof(ngx_http_idem_redis_solver_t));

    if (op == NULL) {
        return NULL;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: resolution \"%V\"%s of \"%V\" sent",
                   &res->outcome, res->force ? " (forced)" : "", key);

    op->data = op;

    sv = op->ext;
    sv->handler = handler;
    sv->data = data;

    return op;
}


/*
 * {"resolved", now, fields ...}, {"none"}, {"conflict", state},
 * {"early", ms left or "-"}, {"final", state}
 */

static void
ngx_http_idem_redis_resolved(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    ngx_str_t                      state;
    ngx_http_idem_redis_solver_t  *sv;
    ngx_http_idem_store_record_t   record;

    sv = op->ext;

    ngx_memzero(&record, sizeof(ngx_http_idem_store_record_t));
    ngx_str_null(&state);

    if (rc != NGX_OK || n == 0 || elts[0].len == 0) {
        sv->handler(sv->data, NGX_ERROR, &state, &record);
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: resolution: \"%V\", %ui elements",
                   &elts[0], n);

    switch (elts[0].data[0]) {

    case 'r':
        if (n < 2 || ngx_http_idem_redis_ms(&elts[1], &record.now) != NGX_OK)
        {
            break;
        }

        record.fields = &elts[2];
        record.nfields = n - 2;

        sv->handler(sv->data, NGX_OK, &state, &record);
        return;

    case 'n':
        sv->handler(sv->data, NGX_DECLINED, &state, &record);
        return;

    case 'c':
        if (n > 1) {
            state = elts[1];
        }

        sv->handler(sv->data, NGX_BUSY, &state, &record);
        return;

    case 'e':

        /* its owner may still answer: ms until it certainly has not */

        if (n > 1) {
            state = elts[1];
        }

        sv->handler(sv->data, NGX_AGAIN, &state, &record);
        return;

    case 'f':

        /* forced, but its owner's final write is in: never overridden */

        if (n > 1) {
            state = elts[1];
        }

        sv->handler(sv->data, NGX_ABORT, &state, &record);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "idem: unexpected answer to a resolution: \"%V\"",
                  &elts[0]);

    sv->handler(sv->data, NGX_ERROR, &state, &record);
}


/* XADD stream MAXLEN ~ maxlen * fields: approximate trimming is cheap */

ngx_int_t
ngx_http_idem_store_append(ngx_http_idem_store_entry_t *entry,
    ngx_http_idem_store_done_pt handler, void *data)
{
    u_char                           num[NGX_INT_T_LEN];
    ngx_str_t                        argv_buf[NGX_HTTP_IDEM_REDIS_ARGS],
                                    *argv;
    ngx_uint_t                       i, argc;
    ngx_http_idem_store_op_t        *op;
    ngx_http_idem_redis_appender_t  *ap;

    argc = 6 + entry->nfields;

    if (argc <= NGX_HTTP_IDEM_REDIS_ARGS) {
        argv = argv_buf;

    } else {
        argv = ngx_alloc(argc * sizeof(ngx_str_t), ngx_cycle->log);
        if (argv == NULL) {
            return NGX_DECLINED;
        }
    }

    ngx_str_set(&argv[0], "XADD");
    argv[1] = entry->stream;
    ngx_str_set(&argv[2], "MAXLEN");
    ngx_str_set(&argv[3], "~");
    argv[4].data = num;
    argv[4].len = ngx_sprintf(num, "%ui", entry->maxlen) - num;
    ngx_str_set(&argv[5], "*");

    for (i = 0; i < entry->nfields; i++) {
        argv[6 + i] = entry->fields[i];
    }

    op = ngx_http_idem_redis_read(NULL, argc, argv,
                                  ngx_http_idem_redis_appended, NULL,
                                  sizeof(ngx_http_idem_redis_appender_t));

    if (argv != argv_buf) {
        ngx_free(argv);
    }

    if (op == NULL) {
        return NGX_DECLINED;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: entry of \"%V\" sent, %ui fields",
                   &entry->stream, entry->nfields / 2);

    op->data = op;

    ap = op->ext;
    ap->handler = handler;
    ap->data = data;

    return NGX_OK;
}


/* the entry's id, or an error reply / no reply (redis.c logs which) */

static void
ngx_http_idem_redis_appended(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    ngx_http_idem_redis_appender_t  *ap;

    ap = op->ext;

    if (rc != NGX_OK || n != 1) {
        ap->handler(ap->data, NGX_ERROR);
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: entry \"%V\" added", &elts[0]);

    ap->handler(ap->data, NGX_OK);
}


static ngx_int_t
ngx_http_idem_redis_ms(ngx_str_t *value, uint64_t *ms)
{
    ngx_int_t  n;

    n = ngx_atoi(value->data, value->len);
    if (n == NGX_ERROR) {
        return NGX_ERROR;
    }

    *ms = (uint64_t) n;

    return NGX_OK;
}


/*
 * The record's PTTL, the last of "want" elements of a claim's answer (0:
 * any number): until when the call id is known.  -1 or -2 (no expiry, no
 * key): not known.
 */

static void
ngx_http_idem_redis_ttl(ngx_http_idem_store_found_t *found, ngx_str_t *elts,
    ngx_uint_t n, ngx_uint_t want)
{
    ngx_int_t  ms;

    if (n < 2 || (want && n != want)) {
        return;
    }

    ms = ngx_atoi(elts[n - 1].data, elts[n - 1].len);

    if (ms > 0) {
        found->ttl = (ngx_msec_t) ms;
    }
}
