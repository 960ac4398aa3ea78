
/*
 * The record store: what the rest of the module sees of Redis.  One client
 * per worker process, on nginx's event loop; nothing here ever blocks.
 * Behind it: one Redis, the master a set of sentinels names, or a Redis
 * Cluster (every key the module writes is tagged, one call is one slot).
 */


#ifndef _NGX_HTTP_IDEM_STORE_H_INCLUDED_
#define _NGX_HTTP_IDEM_STORE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


#define NGX_HTTP_IDEM_STORE_SINGLE    0
#define NGX_HTTP_IDEM_STORE_CLUSTER   1
#define NGX_HTTP_IDEM_STORE_SENTINEL  2


/* an IP and port, or a unix socket */
typedef struct {
    ngx_str_t                  addr;           /* as written */
    ngx_str_t                  host;           /* an IP, or empty */
    ngx_int_t                  port;
    ngx_str_t                  unix_path;      /* "unix:/path": the path */
    ngx_uint_t                 resolve;        /* host is a name */
} ngx_http_idem_store_addr_t;


/*
 * A kind of durable claim, as routes ask for it: its replicas and its
 * WAIT's timeout.  Each kind has a connection of its own to each node, so
 * that one kind's WAIT never holds up another's claims.
 */
typedef struct {
    ngx_uint_t                 replicas;
    ngx_msec_t                 wait;
} ngx_http_idem_store_durable_t;


/*
 * What AUTH sends: "AUTH password", or "AUTH user password" for an ACL
 * user (Redis 6+).  The password is written in nginx.conf or read from a
 * file when the configuration is read; empty: no AUTH.
 */
typedef struct {
    ngx_str_t                  user;           /* empty: the default user */
    ngx_str_t                  password;
} ngx_http_idem_store_auth_t;


/*
 * Where the store is, from "idem_redis ADDR [db=N] [password=S] ...",
 * "idem_redis cluster ADDR ..." or "idem_redis sentinel=NAME ADDR ...".
 */
typedef struct {
    ngx_str_t                  addr;           /* as written, or the mode */
    ngx_str_t                  host;           /* an IP, a name, or empty */
    ngx_int_t                  port;
    ngx_str_t                  unix_path;      /* "unix:/path": the path */
    ngx_uint_t                 resolve;        /* host is a name */
    ngx_resolver_t            *resolver;       /* http{}'s, for a name */
    ngx_msec_t                 resolver_timeout;
    ngx_uint_t                 mode;           /* NGX_HTTP_IDEM_STORE_* */
    ngx_array_t               *seeds;          /* cluster nodes, sentinels */
    ngx_str_t                  master_name;    /* sentinel=NAME */
    ngx_http_idem_store_auth_t sentinel_auth;  /* the sentinels' */
    ngx_int_t                  db;             /* SELECT, 0: none */
    ngx_http_idem_store_auth_t auth;           /* the data nodes' */
    ngx_msec_t                 connect_timeout;
    ngx_msec_t                 timeout;        /* reads: answer within */
    ngx_uint_t                 max_pending;    /* outstanding commands */
    ngx_array_t               *durable;        /* the kinds of durable
                                                  claims, NULL: none */
    ngx_str_t                  wake;           /* the channel of final
                                                  writes, empty: no route
                                                  waits (watch) */
} ngx_http_idem_store_conf_t;


typedef struct ngx_http_idem_store_op_s  ngx_http_idem_store_op_t;


/* what a claim found (ngx_http_idem_store_claim) */
typedef enum {
    NGX_HTTP_IDEM_STORE_CLAIMED = 0,    /* this execution owns the call */
    NGX_HTTP_IDEM_STORE_IN_FLIGHT,      /* another one does, unfinished */
    NGX_HTTP_IDEM_STORE_REPLAY,         /* its answer: "answer" */
    NGX_HTTP_IDEM_STORE_NOT_STORED,     /* it ended, answer not kept */
    NGX_HTTP_IDEM_STORE_UNKNOWN,        /* it may have run: the record */
    NGX_HTTP_IDEM_STORE_MISMATCH,       /* the id came with another call */
    NGX_HTTP_IDEM_STORE_UNAVAILABLE,    /* no answer: it may be claimed */
    NGX_HTTP_IDEM_STORE_APPLIED,        /* resolved as applied: the record */
    NGX_HTTP_IDEM_STORE_NOT_DURABLE     /* claimed, fewer replicas have it */
} ngx_http_idem_store_verdict_e;


/*
 * A record as the store holds it: Redis's clock when it was read (unix
 * ms), and its fields as field, value, ... (ngx_http_idem_record.c names
 * them), the stored answer left out.
 */
typedef struct {
    uint64_t                   now;
    ngx_str_t                 *fields;
    ngx_uint_t                 nfields;        /* strings, 2 a field */
} ngx_http_idem_store_record_t;


/*
 * A claim of a call id, for one execution of it.  Durable (replicas set):
 * it holds only once that many replicas of the store have it, within
 * "wait"; a claim made that they do not all confirm in time is
 * NOT_DURABLE, which the caller releases with its final write.
 */
typedef struct {
    ngx_str_t                  key;            /* the record's */
    ngx_str_t                  token;          /* the execution's */
    ngx_str_t                  digest;         /* method, URI and body */
    ngx_str_t                  arrival;        /* its "e:" value */
    ngx_msec_t                 lease;          /* held this long, at most */
    ngx_msec_t                 bound;          /* its owner may answer this
                                                  long, 0: no bound */
    ngx_msec_t                 ttl;            /* the record's */
    ngx_uint_t                 replicas;       /* durable, 0: not */
    ngx_msec_t                 wait;           /* for the replicas */
    unsigned                   short_record:1; /* a new id's claim may
                                                  make a short record */
} ngx_http_idem_store_claim_t;


/*
 * What a claim found; the strings are valid during the handler only.
 * CLAIMED: the claim holds, whole (its owner, digest, lease, bound and
 * the execution's arrival, one write); NOT_DURABLE: made, but not
 * confirmed by the replicas, for the caller to release.  "made" (CLAIMED,
 * NOT_DURABLE): the claim made the record, with the execution's arrival
 * and "v": its first execution, which is not counted.
 */
typedef struct {
    ngx_http_idem_store_verdict_e  verdict;
    ngx_str_t                      answer;     /* REPLAY */
    ngx_msec_t                     ttl;        /* the record's, 0: not
                                                  known */
    ngx_http_idem_store_record_t   record;     /* NOT_STORED, UNKNOWN,
                                                  APPLIED */
    ngx_msec_t                     left;       /* IN_FLIGHT: of the lease,
                                                  0: not known */
    unsigned                       made:1;
    unsigned                       short_record:1; /* made, short: the
                                                      owner's writes add
                                                      to it */
} ngx_http_idem_store_found_t;


/*
 * An execution's first write, asked whether its record was there before
 * (idem_resend_limit on a record-only route): NGX_OK, the write made the
 * record (a new call id); NGX_DECLINED, the record was there (the id is
 * known); NGX_ERROR, no answer.
 */
typedef void (*ngx_http_idem_store_known_pt)(void *data, ngx_int_t rc);


/*
 * A write of a record's fields, fire and forget.  first, not whole, with
 * known set: known is called exactly once, with whether the record was
 * there, if the write was queued (NGX_OK).  ttl 0: the record's
 * expiry is left as it is (the caller set it a moment ago); first: the
 * execution's first write, which counts it in the record and trims the
 * record past max_executions (+ a quarter), unless every field it wrote
 * was new (the fields include one that every record has: the write made
 * the record); whole: the execution's first write is its only one, and
 * no claim needs its record (a record it makes may take a cheaper form);
 * owned:
 * written only if the record's claim is this execution's (token), else
 * not at all: the execution's claim got no answer, it may have been made
 * or not (wait: that claim was durable, for these replicas with this WAIT
 * timeout: the write goes after it, on its connection); final: the last
 * write of the execution that owns the call's claim, its fields and the
 * expiry in one round trip, after which its waiters may be told.
 */
typedef struct {
    ngx_str_t                  key;
    ngx_str_t                  token;          /* owned */
    ngx_str_t                 *fields;         /* field, value, ... */
    ngx_uint_t                 nfields;        /* strings, 2 a field */
    ngx_msec_t                 ttl;
    ngx_uint_t                 max_executions;
    ngx_uint_t                 replicas;       /* owned: the claim's */
    ngx_msec_t                 wait;           /* owned, 0: not durable */
    ngx_str_t                  wake;           /* a final write: the
                                                  channel its waiters hear
                                                  it on, empty: none */
    ngx_http_idem_store_known_pt  known;       /* first, NULL: not asked */
    void                      *known_data;
    unsigned                   first:1;
    unsigned                   whole:1;
    ngx_msec_t                 expiry;         /* short_record: the
                                                  record's TTL, should it
                                                  be gone meanwhile */
    unsigned                   owned:1;
    unsigned                   final:1;
    unsigned                   short_record:1; /* the owner's, whose claim
                                                  made it short */
    ngx_atomic_t              *dropped;        /* one added when the write
                                                  is given up, at once
                                                  (NGX_DECLINED) or later;
                                                  NULL: not counted */
} ngx_http_idem_store_write_t;


/*
 * The service's word on a call that ended UNKNOWN (idem_status
 * resolve=on): outcome "applied" or "not_applied", receipt and by ("-":
 * none), all of a call id's characters.  force: an operator's word that
 * the owner's gateway is gone, taken on a lapsed claim with no final
 * write whatever its bound says, and recorded as forced.
 */
typedef struct {
    ngx_str_t                  outcome;
    ngx_str_t                  receipt;
    ngx_str_t                  by;
    ngx_uint_t                 force;
} ngx_http_idem_store_resolution_t;


/* an entry of a follow-up stream (idem_unknown_stream), capped near maxlen */
typedef struct {
    ngx_str_t                  stream;         /* its key */
    ngx_uint_t                 maxlen;
    ngx_str_t                 *fields;         /* field, value, ... */
    ngx_uint_t                 nfields;        /* strings, 2 a field */
} ngx_http_idem_store_entry_t;


/*
 * An entry of a stream as read back (ngx_http_idem_store_read_stream):
 * its id ("<ms>-<n>") and its fields; the strings live during the
 * handler only.
 */
typedef struct {
    ngx_str_t                  id;
    ngx_str_t                 *fields;         /* field, value, ... */
    ngx_uint_t                 nfields;        /* strings, 2 a field */
} ngx_http_idem_store_read_entry_t;


typedef void (*ngx_http_idem_store_claim_pt)(void *data,
    ngx_http_idem_store_found_t *found);

/* rc: NGX_OK (the store took it), NGX_ERROR (it did not say so) */
typedef void (*ngx_http_idem_store_done_pt)(void *data, ngx_int_t rc);

/* rc: NGX_OK, NGX_DECLINED (no record), NGX_ERROR (no answer) */
typedef void (*ngx_http_idem_store_record_pt)(void *data, ngx_int_t rc,
    ngx_http_idem_store_record_t *record);

/*
 * rc: NGX_OK (resolved: the record after it), NGX_DECLINED (no record),
 * NGX_BUSY (the latest execution is not UNKNOWN, or resolved already:
 * "state" says which), NGX_AGAIN (its claim lapsed but its owner may
 * still answer: "state" is the ms until its bound passes, or "-": none),
 * NGX_ABORT (forced, but the latest execution has a final write: "state"
 * is its state), NGX_ERROR (no answer)
 */
typedef void (*ngx_http_idem_store_resolved_pt)(void *data, ngx_int_t rc,
    ngx_str_t *state, ngx_http_idem_store_record_t *record);


/*
 * rc: NGX_OK (n entries, newest first, none: the stream is empty or
 * absent; now: Redis's clock, unix ms), NGX_ERROR (no answer)
 */
typedef void (*ngx_http_idem_store_entries_pt)(void *data, ngx_int_t rc,
    uint64_t now, ngx_http_idem_store_read_entry_t *entries, ngx_uint_t n);


/*
 * Waiting for a record's final write (idem_dedupe_wait).  A watch names
 * the record's key; the store calls its handler at most once, from the
 * event loop, having forgotten the watch: NGX_OK, a final write of the
 * key landed (a write with "wake" on this worker, whose reply came, or
 * its message heard from the store); NGX_DECLINED, the store stopped
 * hearing final writes (its subscription was lost): poll.  The caller
 * keeps the struct until the handler runs or it unwatches it.
 */
typedef void (*ngx_http_idem_store_wake_pt)(void *data, ngx_int_t rc);

typedef struct {
    ngx_queue_t                  queue;
    ngx_str_t                    key;
    uint32_t                     hash;
    ngx_http_idem_store_wake_pt  handler;
    void                        *data;
    unsigned                     on:1;
} ngx_http_idem_store_watch_t;


/*
 * A connection of this worker's store, as idem_metrics shows it: a data
 * node (the Redis, the master a sentinel names, a cluster master that
 * serves slots) or a sentinel, and whether it is up now.  The name lives
 * as long as the node.
 */
typedef struct {
    ngx_str_t                    name;
    unsigned                     sentinel:1;
    unsigned                     up:1;
} ngx_http_idem_store_node_t;


/*
 * The connections made to a node of this worker's store (by its name,
 * as idem_redis_up shows it), and the connects that failed, by why (the
 * NGX_HTTP_IDEM_STORE_FAIL_*, idem_redis_connect_failures_total's reason):
 * since the worker started.
 */
#define NGX_HTTP_IDEM_STORE_FAIL_CONNECT   0   /* refused, timed out */
#define NGX_HTTP_IDEM_STORE_FAIL_RESOLVE   1   /* its name did not resolve */
#define NGX_HTTP_IDEM_STORE_FAIL_AUTH      2   /* AUTH refused */
#define NGX_HTTP_IDEM_STORE_FAIL_READONLY  3   /* a replica: connected again */
#define NGX_HTTP_IDEM_STORE_FAILS          4

typedef struct {
    ngx_str_t                    name;
    ngx_uint_t                   connects;
    ngx_uint_t                   failures[NGX_HTTP_IDEM_STORE_FAILS];
    unsigned                     sentinel:1;
} ngx_http_idem_store_count_t;


/* configuration time: "idem_redis ADDR ..." (messages name the directive) */
char *ngx_http_idem_store_parse(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_http_idem_store_conf_t *conf);
ngx_int_t ngx_http_idem_store_check(ngx_conf_t *cf,
    ngx_http_idem_store_conf_t *conf);

/* worker start and exit (a NULL conf: no store configured) */
ngx_int_t ngx_http_idem_store_init_process(ngx_cycle_t *cycle,
    ngx_http_idem_store_conf_t *conf);
void ngx_http_idem_store_exit_process(ngx_cycle_t *cycle);

/*
 * NGX_OK: queued; NGX_DECLINED: dropped (the store logs why).  Either way
 * a write given up, then or later (held past its timeout, its connection
 * lost before its answer, an error reply), is counted once in w->dropped.
 */
ngx_int_t ngx_http_idem_store_write(ngx_http_idem_store_write_t *w);

/*
 * A claim, and a read of a record.  The handler is called exactly once,
 * never from inside these calls, unless the op is cancelled first.  NULL:
 * could not even be queued.
 */
ngx_http_idem_store_op_t *ngx_http_idem_store_claim(
    ngx_http_idem_store_claim_t *claim, ngx_http_idem_store_claim_pt handler,
    void *data);
ngx_http_idem_store_op_t *ngx_http_idem_store_read_record(ngx_str_t *key,
    ngx_http_idem_store_record_pt handler, void *data);
void ngx_http_idem_store_cancel(ngx_http_idem_store_op_t *op);

/* the same contract as a read's */
ngx_http_idem_store_op_t *ngx_http_idem_store_resolve(ngx_str_t *key,
    ngx_http_idem_store_resolution_t *res,
    ngx_http_idem_store_resolved_pt handler, void *data);

/*
 * A page of a stream: its newest "count" entries older than the entry id
 * "before" (empty: from the newest), one bounded read; the same contract
 * as a read's.
 */
ngx_http_idem_store_op_t *ngx_http_idem_store_read_stream(ngx_str_t *stream,
    ngx_str_t *before, ngx_uint_t count,
    ngx_http_idem_store_entries_pt handler, void *data);

/*
 * An entry appended to a stream, after the writes queued before it on the
 * same connection (a record's final write).  NGX_DECLINED: not queued;
 * else the handler says whether the store took it.
 */
ngx_int_t ngx_http_idem_store_append(ngx_http_idem_store_entry_t *entry,
    ngx_http_idem_store_done_pt handler, void *data);


/*
 * NGX_OK: watched; NGX_AGAIN: a final write of the key was heard since
 * "since" (ngx_current_msec, when the caller last read the record): read
 * it again now; NGX_DECLINED: the store hears no final writes now (none
 * configured, or its subscription is down): poll.
 */
ngx_int_t ngx_http_idem_store_watch(ngx_http_idem_store_watch_t *w,
    ngx_msec_t since);
void ngx_http_idem_store_unwatch(ngx_http_idem_store_watch_t *w);

/* this worker's connections, n at most: how many were filled in */
ngx_uint_t ngx_http_idem_store_nodes(ngx_http_idem_store_node_t *nodes,
    ngx_uint_t n);

/* this worker's counts of connects, n at most: how many were filled in */
ngx_uint_t ngx_http_idem_store_counts(ngx_http_idem_store_count_t *counts,
    ngx_uint_t n);


#endif /* _NGX_HTTP_IDEM_STORE_H_INCLUDED_ */
