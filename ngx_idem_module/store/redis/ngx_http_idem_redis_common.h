
/*
 * Inside the Redis store: one worker's store (counters, reports, what is
 * outstanding) and its connections, "nodes".  ngx_http_idem_redis.c owns
 * both; ngx_http_idem_redis_cluster.c and ngx_http_idem_redis_sentinel.c
 * decide which node a command goes to.  Only store/redis/ includes this
 * (it is not on the include path: t/008-layout.t checks).
 */


#ifndef _NGX_HTTP_IDEM_REDIS_COMMON_H_INCLUDED_
#define _NGX_HTTP_IDEM_REDIS_COMMON_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "ngx_http_idem_store.h"


#define NGX_HTTP_IDEM_REDIS_DOWN             0
#define NGX_HTTP_IDEM_REDIS_CONNECTING       1
#define NGX_HTTP_IDEM_REDIS_UP               2

/*
 * A connection that is up takes commands now; one that is down or being
 * made holds them (ngx_http_idem_redis_op_send_to()) until it is up.
 */
#define ngx_http_idem_redis_node_takes(node)                                  \
    ((node) != NULL && (node)->state == NGX_HTTP_IDEM_REDIS_UP)

/* node roles */
#define NGX_HTTP_IDEM_REDIS_DATA             0
#define NGX_HTTP_IDEM_REDIS_SENTINEL         1

#define NGX_HTTP_IDEM_REDIS_ERRSTR_LEN       128
#define NGX_HTTP_IDEM_REDIS_ERRCMD_LEN       16
/* a host name as DNS has them; a node's name, for logs: host:port */
#define NGX_HTTP_IDEM_REDIS_HOST_LEN         253
#define NGX_HTTP_IDEM_REDIS_NAME_LEN         (NGX_HTTP_IDEM_REDIS_HOST_LEN + 8)

/* the first delay before connecting again, doubled up to 5 s */
#define NGX_HTTP_IDEM_REDIS_BACKOFF_MIN      100

/* the longest delay before connecting again while commands are held */
#define NGX_HTTP_IDEM_REDIS_HELD_RETRY       100

/* the bytes of commands one node may hold while it is not up */
#define NGX_HTTP_IDEM_REDIS_HELD_BYTES       (8 * 1024 * 1024)

/* command arguments kept on the stack */
#define NGX_HTTP_IDEM_REDIS_ARGS             16

/* connections of one worker: cluster masters, replicas, sentinels */
#define NGX_HTTP_IDEM_REDIS_MAX_NODES        64

/*
 * A data node's connections for each kind of durable claim, taking turns:
 * while a WAIT blocks one, the next claims go on another (redis_node.c)
 */
#define NGX_HTTP_IDEM_REDIS_DURABLE_TURNS    2


typedef struct ngx_http_idem_redis_s          ngx_http_idem_redis_t;
typedef struct ngx_http_idem_redis_node_s     ngx_http_idem_redis_node_t;
typedef struct ngx_http_idem_redis_cluster_s  ngx_http_idem_redis_cluster_t;
typedef struct ngx_http_idem_redis_sentinel_s ngx_http_idem_redis_sentinel_t;

typedef void (*ngx_http_idem_redis_node_pt)(ngx_http_idem_redis_node_t *node);


/* the store's own counters, per worker */
typedef struct {
    ngx_uint_t                       sent;       /* commands written */
    ngx_uint_t                       failed;     /* error replies */
    ngx_uint_t                       dropped;    /* not sent: down/full */
    ngx_uint_t                       connects;   /* successful connects */
    ngx_uint_t                       pending;    /* outstanding now */
    ngx_uint_t                       redirects;  /* MOVED, ASK followed */
} ngx_http_idem_store_stats_t;


/*
 * The answer to an op: NGX_OK with the reply's elements (an array element
 * by element, integers in decimal, nil as empty; a string, status or
 * integer as one element; nil as none); NGX_ERROR when the store could not
 * answer (down, error reply, disconnected, timed out); NGX_AGAIN to a
 * write's op (op->write) past its timeout, its reply still to come (the
 * handler is called again with it).  The strings are valid during the
 * call only.
 */
typedef void (*ngx_http_idem_redis_reply_pt)(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);


/*
 * A Lua script (ngx_idem_module/ngx_http_idem_redis_*.lua, made into C by
 * the config script), run by its SHA1: EVALSHA, and EVAL once a node says
 * NOSCRIPT (a restart, a failover, another cluster node), after which that
 * node keeps it.  A script of a rare path whose reply may come too late to
 * be sent again ("eval") goes as EVAL with its text at once.
 */
typedef struct {
    ngx_str_t                        text;
    u_char                           sha1[40];   /* hex, at first use */
    unsigned                         hashed:1;
    unsigned                         eval:1;     /* always with its text */
} ngx_http_idem_redis_script_t;


/*
 * A command whose reply someone waits for: a read, or in a cluster any
 * command (it may have to be sent again to another node).  malloc()ed with
 * room for its caller's own data ("ext") and a copy of the command (the
 * caller's strings are gone by the time a MOVED or a NOSCRIPT comes back),
 * it outlives the request that asked for it.
 */
struct ngx_http_idem_store_op_s {
    ngx_http_idem_redis_reply_pt     handler;    /* NULL: a write */
    void                            *data;
    ngx_event_t                      timeout;

    /* the command, kept for MOVED, ASK and NOSCRIPT */
    ngx_uint_t                       argc;
    const char                     **argv;
    size_t                          *lens;
    ngx_uint_t                       slot;
    ngx_uint_t                       key;        /* its argument, 0: none */
    ngx_uint_t                       redirects;
    size_t                           size;       /* of the command */

    ngx_http_idem_redis_script_t    *script;
    ngx_http_idem_redis_script_t    *upgrade;    /* WRONGTYPE: run by it */
    void                            *ext;        /* the caller's */

    /* a record's write that it carries: given up, one added here */
    ngx_atomic_t                    *dropped;

    /* durable: its kind's connections to the nodes, and its WAIT's */
    ngx_msec_t                       wait;       /* 0: not durable */
    ngx_uint_t                       replicas;   /* needed */
    ngx_http_idem_redis_node_t      *node;       /* answered it, holds it */

    /*
     * A cluster's: in rd->parked until the map is read again.  One whose
     * node is not up: in node->held until it is.  One sent on a durable
     * claims' connection: in its node->flight until its reply.  A
     * durable claim made: in its connection's batch (redis_batch.c).
     */
    ngx_queue_t                      queue;

    unsigned                         done:1;     /* answered or cancelled */
    unsigned                         resent:1;   /* as EVAL, after NOSCRIPT */
    unsigned                         again:1;    /* re-armed by its handler */
    unsigned                         parked:1;   /* in rd->parked now */
    unsigned                         mapped:1;   /* waited for a map once */
    unsigned                         held:1;     /* in node->held now */
    unsigned                         asking:1;   /* ASKING first, held */
    unsigned                         errors:1;   /* error replies to its
                                                    handler, NGX_DECLINED,
                                                    neither logged nor
                                                    counted */
    unsigned                         flying:1;   /* in node->flight now */
    unsigned                         write:1;    /* waited for past its
                                                    timeout (redis_op.c) */
    unsigned                         landed:1;   /* a reply, not an error */
};


/*
 * The durable claims of one connection that wait for a WAIT there
 * (ngx_http_idem_redis_batch.c): those made while none is in flight share
 * the next one, sent at the end of the event-loop turn; those made while
 * one is in flight, the one after it.
 */
typedef struct {
    ngx_queue_t                      next;       /* ops, for the next WAIT */
    ngx_queue_t                      sent;       /* ops, the WAIT in flight */
    ngx_uint_t                       nnext;
    ngx_uint_t                       nsent;
    ngx_event_t                      flush;      /* posted: WAIT goes */
    ngx_uint_t                       turn;       /* the WAIT's, in order */
    ngx_http_idem_redis_node_pt      lost;       /* its connection went */
    unsigned                         ready:1;    /* queues set up */
    unsigned                         waiting:1;  /* a WAIT in flight */
} ngx_http_idem_redis_batch_t;


/*
 * The connects of one node name (and role) since the worker started, for
 * idem_metrics (redis_stats.c): a few names, as idem_redis_up shows.
 */
#define NGX_HTTP_IDEM_REDIS_COUNTS           16

typedef struct {
    u_char                           name[NGX_HTTP_IDEM_REDIS_NAME_LEN];
    size_t                           len;        /* 0: free */
    ngx_uint_t                       role;
    ngx_uint_t                       connects;
    ngx_uint_t                       failures[NGX_HTTP_IDEM_STORE_FAILS];
} ngx_http_idem_redis_count_t;


/* one connection: the Redis, a cluster master, or a sentinel */
struct ngx_http_idem_redis_node_s {
    ngx_http_idem_redis_t           *rd;
    redisAsyncContext               *ac;

    ngx_str_t                        name;       /* for logs */
    u_char                           host[NGX_SOCKADDR_STRLEN + 1];
    ngx_int_t                        port;       /* 0: no address yet */
    ngx_str_t                        unix_path;
    ngx_http_idem_store_auth_t      *auth;       /* NULL: no AUTH */
    ngx_int_t                        db;         /* SELECT, 0: none */
    ngx_uint_t                       role;

    ngx_uint_t                       state;
    ngx_msec_t                       backoff;    /* the next delay */
    ngx_msec_t                       retry_in;   /* the delay armed */
    ngx_uint_t                       attempts;   /* failures in a row */
    ngx_msec_t                       conn_logged;

    ngx_event_t                      connect_ev; /* connect timeout */
    ngx_event_t                      reconnect_ev;

    ngx_str_t                        resolve;    /* a host name, resolved
                                                    at each connect; empty:
                                                    an IP or a path */
    ngx_resolver_ctx_t              *resolving;
    time_t                           valid;      /* until: the answer's */
    ngx_event_t                      resolve_ev; /* its answer's validity
                                                    ended: asked again */

    /* the cluster's or the sentinel's: up, and down or failed */
    ngx_http_idem_redis_node_pt      up;
    ngx_http_idem_redis_node_pt      down;
    void                            *data;

    /*
     * A data node's connections for durable claims only, a few (_TURNS)
     * for each kind (replicas, timeout) the routes ask for, side by side
     * in the list: a WAIT blocks the connection it is sent on, and must
     * hold up neither the other commands, nor the claims of another
     * kind, nor those of its kind that another of its connections can
     * take.  They follow their node (address, connect, close).
     */
    ngx_http_idem_redis_node_t      *durable;    /* the first */
    ngx_http_idem_redis_node_t      *main;       /* durable's: its node */
    ngx_http_idem_redis_node_t      *next;       /* durable's: the next */
    ngx_uint_t                       replicas;   /* durable's: its kind */
    ngx_msec_t                       wait;
    ngx_uint_t                       turn;       /* durable's: 0, 1 ... */
    ngx_http_idem_redis_batch_t      batch;      /* its claims' WAITs */

    /*
     * A durable claims' connection's ops sent and not answered yet: what
     * follows one of them (a claim's release when its answer did not
     * come, the PUBLISH after it) goes on the same connection, behind it.
     */
    ngx_queue_t                      flight;

    /*
     * Ops sent while it was not up, in order, each under its own timeout
     * (redis_op.c); flush_held sends them behind the handshake once it is.
     */
    ngx_queue_t                      held;
    ngx_uint_t                       nheld;
    size_t                           held_bytes;
    ngx_http_idem_redis_node_pt      flush_held;

    u_char                           name_buf[NGX_HTTP_IDEM_REDIS_NAME_LEN];
    u_char                           resolve_buf[NGX_HTTP_IDEM_REDIS_HOST_LEN];

    unsigned                         dropping:1; /* we free the context */
    unsigned                         resolved:1; /* host is the name's, now:
                                                    the next connect uses it */
    unsigned                         failing:1;  /* not up since a loss */
    unsigned                         idle:1;     /* no reconnects */
    unsigned                         serving:1;  /* cluster: has slots */
    unsigned                         subscriber:1;   /* pub/sub's */
};


/* the store of this worker process */
struct ngx_http_idem_redis_s {
    ngx_http_idem_store_conf_t      *conf;
    ngx_log_t                       *log;
    ngx_str_t                        name;       /* for report lines */

    ngx_http_idem_redis_node_t      *node;       /* one Redis, sentinel's */
    ngx_http_idem_redis_cluster_t   *cluster;
    ngx_http_idem_redis_sentinel_t  *sentinel;

    ngx_http_idem_redis_node_t      *nodes[NGX_HTTP_IDEM_REDIS_MAX_NODES];
    ngx_uint_t                       nnodes;

    ngx_msec_t                       drain_start;
    ngx_event_t                      pending_ev;
    ngx_event_t                      report_ev;

    /*
     * Ops whose slot's master was down, waiting for the next read of the
     * cluster's map (redis_op.c); that read posts parked_ev.
     */
    ngx_queue_t                      parked;
    ngx_uint_t                       nparked;
    ngx_event_t                      parked_ev;

    /* counted since the last report line */
    ngx_msec_t                       reported;
    ngx_uint_t                       down;
    ngx_uint_t                       full;
    ngx_uint_t                       held_full;  /* a node held too much */
    ngx_uint_t                       errors;
    ngx_uint_t                       timedout;
    ngx_uint_t                       lost;
    size_t                           errstr_len;
    u_char                           errstr[NGX_HTTP_IDEM_REDIS_ERRSTR_LEN];
    size_t                           errcmd_len;  /* its command */
    u_char                           errcmd[NGX_HTTP_IDEM_REDIS_ERRCMD_LEN];

    ngx_http_idem_store_stats_t      stats;
    ngx_http_idem_redis_count_t      counts[NGX_HTTP_IDEM_REDIS_COUNTS];

    unsigned                         started:1;
    unsigned                         closing:1;  /* exit_process */
    unsigned                         draining:1; /* exiting, pending */
    unsigned                         lazy:1;     /* reads: may wait */
    unsigned                         no_set_get:1; /* SET ... NX GET
                                                      refused: Redis < 7 */
    unsigned                         no_expire_nx:1; /* PEXPIRE ... NX
                                                        refused: Redis < 7 */

    ngx_msec_t                       durable;    /* reads: durable, WAIT */
    ngx_uint_t                       replicas;   /* ... for so many */

    /*
     * A record's write on its way (store_write): its counter of writes
     * given up, which its first command takes (write_op, if an op).
     */
    ngx_atomic_t                    *write_dropped;
    ngx_http_idem_store_op_t        *write_op;
};


/* ngx_http_idem_redis_node.c */
ngx_http_idem_redis_node_t *ngx_http_idem_redis_node_create(
    ngx_http_idem_redis_t *rd, ngx_uint_t role);
ngx_http_idem_redis_node_t *ngx_http_idem_redis_node_alloc(
    ngx_http_idem_redis_t *rd, ngx_uint_t role);
void ngx_http_idem_redis_node_set_addr(ngx_http_idem_redis_node_t *node,
    u_char *host, size_t len, ngx_int_t port);
void ngx_http_idem_redis_node_set_name(ngx_http_idem_redis_node_t *node,
    u_char *name, size_t len, ngx_int_t port);
void ngx_http_idem_redis_node_connect(ngx_http_idem_redis_node_t *node);
void ngx_http_idem_redis_node_close(ngx_http_idem_redis_node_t *node);
ngx_int_t ngx_http_idem_redis_host_name(ngx_str_t *host);
ngx_int_t ngx_http_idem_redis_node_readonly(ngx_http_idem_redis_node_t *node,
    redisReply *reply);
void ngx_http_idem_redis_node_drop(ngx_http_idem_redis_node_t *node);
ngx_int_t ngx_http_idem_redis_node_command(ngx_http_idem_redis_node_t *node,
    redisCallbackFn *fn, void *privdata, ngx_uint_t argc, const char **argv,
    size_t *lens, ngx_uint_t now);
void ngx_http_idem_redis_node_answered(ngx_http_idem_redis_node_t *node);
ngx_http_idem_redis_node_t *ngx_http_idem_redis_durable_node(
    ngx_http_idem_redis_t *rd, ngx_http_idem_redis_node_t *node,
    ngx_http_idem_store_op_t *op);
void ngx_http_idem_redis_node_wake(ngx_http_idem_redis_node_t *node);

/* ngx_http_idem_redis_batch.c */
ngx_int_t ngx_http_idem_redis_batch_add(ngx_http_idem_store_op_t *op,
    ngx_uint_t replicas);

/* ngx_http_idem_redis_stats.c */
void ngx_http_idem_redis_pending_add(ngx_http_idem_redis_t *rd);
void ngx_http_idem_redis_pending_done(ngx_http_idem_redis_t *rd);
ngx_int_t ngx_http_idem_redis_accept(ngx_http_idem_redis_t *rd,
    ngx_http_idem_redis_node_t *node, ngx_uint_t n);
ngx_int_t ngx_http_idem_redis_drop(ngx_http_idem_redis_t *rd,
    ngx_uint_t *why);
void ngx_http_idem_redis_error_reply(ngx_http_idem_redis_t *rd,
    u_char *cmd, size_t len, redisReply *reply);
void ngx_http_idem_redis_write_dropped(ngx_atomic_t *dropped);
void ngx_http_idem_redis_count_connect(ngx_http_idem_redis_node_t *node);
void ngx_http_idem_redis_count_failure(ngx_http_idem_redis_node_t *node,
    ngx_uint_t reason);
void ngx_http_idem_redis_report_later(ngx_http_idem_redis_t *rd);
void ngx_http_idem_redis_report_handler(ngx_event_t *ev);
void ngx_http_idem_redis_report(ngx_http_idem_redis_t *rd);

/* ngx_http_idem_redis_op.c, ngx_http_idem_redis.c */
void ngx_http_idem_redis_op_done(redisAsyncContext *ac, void *r,
    void *privdata);
ngx_http_idem_store_op_t *ngx_http_idem_redis_read(
    ngx_http_idem_redis_script_t *script, ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_idem_redis_reply_pt handler, void *data, size_t ext);
ngx_int_t ngx_http_idem_redis_again(ngx_http_idem_store_op_t *op,
    ngx_http_idem_redis_script_t *script, ngx_uint_t argc, ngx_str_t *argv);
ngx_int_t ngx_http_idem_redis_again_through(ngx_http_idem_store_op_t *op,
    ngx_http_idem_redis_script_t *script);
ngx_int_t ngx_http_idem_redis_write(ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_idem_redis_script_t *upgrade);
ngx_int_t ngx_http_idem_redis_room(ngx_uint_t n);
void ngx_http_idem_redis_lazy(ngx_uint_t lazy);
void ngx_http_idem_redis_durable(ngx_uint_t replicas, ngx_msec_t wait);

/* ngx_http_idem_redis_cluster.c */
ngx_int_t ngx_http_idem_redis_cluster_init(ngx_http_idem_redis_t *rd,
    ngx_cycle_t *cycle);
void ngx_http_idem_redis_cluster_exit(ngx_http_idem_redis_t *rd);
ngx_http_idem_redis_node_t *ngx_http_idem_redis_cluster_route(
    ngx_http_idem_redis_t *rd, ngx_http_idem_store_op_t *op);
ngx_int_t ngx_http_idem_redis_cluster_redirect(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply,
    ngx_http_idem_redis_node_t **to);
ngx_uint_t ngx_http_idem_redis_cluster_slot(u_char *key, size_t len);
void ngx_http_idem_redis_cluster_stale(ngx_http_idem_redis_t *rd);

/* ngx_http_idem_redis_subscribe.c */
ngx_int_t ngx_http_idem_redis_subscribe_init(ngx_http_idem_redis_t *rd);
void ngx_http_idem_redis_subscribe_exit(ngx_http_idem_redis_t *rd);
ngx_int_t ngx_http_idem_redis_publish(ngx_str_t *channel, ngx_str_t *key);
ngx_int_t ngx_http_idem_redis_wake_message(ngx_str_t *channel,
    redisReply *reply, ngx_str_t *key);

/* ngx_http_idem_redis_sentinel.c */
ngx_int_t ngx_http_idem_redis_sentinel_init(ngx_http_idem_redis_t *rd,
    ngx_cycle_t *cycle);


/* "idem_redis" defaults */
#define NGX_HTTP_IDEM_REDIS_CONNECT_TIMEOUT  1000
#define NGX_HTTP_IDEM_REDIS_TIMEOUT          1000
#define NGX_HTTP_IDEM_REDIS_MAX_PENDING      10000
#define NGX_HTTP_IDEM_REDIS_BACKOFF_MAX      5000

/* at most one error line a second for what requests run into */
#define NGX_HTTP_IDEM_REDIS_REPORT           1000

/* outstanding commands are looked at this often, and when exiting */
#define NGX_HTTP_IDEM_REDIS_WATCH            1000
#define NGX_HTTP_IDEM_REDIS_DRAIN_CHECK      100
#define NGX_HTTP_IDEM_REDIS_DRAIN_TIMEOUTS   5

/* handshake replies, told apart by their privdata */
#define NGX_HTTP_IDEM_REDIS_AUTH             0
#define NGX_HTTP_IDEM_REDIS_SELECT           1

/* a command without a key: any node of a cluster */
#define NGX_HTTP_IDEM_REDIS_ANY_SLOT         16384


/* the store of this worker process (ngx_http_idem_redis.c) */
extern ngx_http_idem_redis_t  ngx_http_idem_redis;

/* a call's script, loaded on connect (ngx_http_idem_redis_record.c) */
extern ngx_http_idem_redis_script_t  ngx_http_idem_redis_take_lua;


/* shared by redis.c, redis_node.c and redis_op.c */
void ngx_http_idem_redis_free_all(ngx_http_idem_redis_t *rd);
const char **ngx_http_idem_redis_argv(ngx_http_idem_redis_t *rd,
    ngx_uint_t n, const char **args_buf, size_t *lens_buf, size_t **lens);
void ngx_http_idem_redis_written(redisAsyncContext *ac, void *r,
    void *privdata);
ngx_http_idem_store_op_t *ngx_http_idem_redis_op_create(
    ngx_http_idem_redis_t *rd, ngx_http_idem_redis_script_t *script,
    ngx_uint_t argc, ngx_str_t *argv, size_t ext);
void ngx_http_idem_redis_op_free(ngx_http_idem_store_op_t *op);
ngx_uint_t ngx_http_idem_redis_op_key(ngx_http_idem_store_op_t *op);
ngx_int_t ngx_http_idem_redis_op_send(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op);
void ngx_http_idem_redis_unpark(ngx_event_t *ev);
void ngx_http_idem_redis_parked_free(ngx_http_idem_redis_t *rd);
void ngx_http_idem_redis_op_failed(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op);
ngx_int_t ngx_http_idem_redis_op_send_to(ngx_http_idem_redis_node_t *node,
    ngx_http_idem_store_op_t *op);
void ngx_http_idem_redis_op_unhold(ngx_http_idem_store_op_t *op);
void ngx_http_idem_redis_op_held_free(ngx_http_idem_redis_node_t *node,
    ngx_uint_t answer);


#endif /* _NGX_HTTP_IDEM_REDIS_COMMON_H_INCLUDED_ */
