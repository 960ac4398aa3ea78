
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
} ngx_http_idem_store_addr_t;


/*
 * Where the store is, from "idem_redis ADDR [db=N] [password=S] ...",
 * "idem_redis cluster ADDR ..." or "idem_redis sentinel=NAME ADDR ...".
 */
typedef struct {
    ngx_str_t                  addr;           /* as written, or the mode */
    ngx_str_t                  host;           /* an IP, or empty */
    ngx_int_t                  port;
    ngx_str_t                  unix_path;      /* "unix:/path": the path */
    ngx_uint_t                 mode;           /* NGX_HTTP_IDEM_STORE_* */
    ngx_array_t               *seeds;          /* cluster nodes, sentinels */
    ngx_str_t                  master_name;    /* sentinel=NAME */
    ngx_str_t                  sentinel_password;
    ngx_int_t                  db;             /* SELECT, 0: none */
    ngx_str_t                  password;       /* AUTH, empty: none */
    ngx_msec_t                 connect_timeout;
    ngx_msec_t                 timeout;        /* reads: answer within */
    ngx_uint_t                 max_pending;    /* outstanding commands */
} ngx_http_idem_store_conf_t;


typedef struct ngx_http_idem_store_op_s  ngx_http_idem_store_op_t;


/*
 * The answer to a read.  rc: NGX_OK with the reply's elements (for HGETALL:
 * field, value, field, value ...; n == 0 when the key does not exist);
 * NGX_ERROR when the store could not answer (down, error reply,
 * disconnected, timed out).  The strings are valid during the call only.
 */
typedef void (*ngx_http_idem_store_read_pt)(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);


/* configuration time: "idem_redis ADDR ..." (messages name the directive) */
char *ngx_http_idem_store_parse(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_http_idem_store_conf_t *conf);

/* worker start and exit (a NULL conf: no store configured) */
ngx_int_t ngx_http_idem_store_init_process(ngx_cycle_t *cycle,
    ngx_http_idem_store_conf_t *conf);
void ngx_http_idem_store_exit_process(ngx_cycle_t *cycle);

/*
 * Fire and forget: HSET key field value ..., then PEXPIRE key ttl (ms).
 * NGX_OK: queued; NGX_DECLINED: dropped.
 */
ngx_int_t ngx_http_idem_store_hset(ngx_str_t *key, ngx_str_t *ttl,
    ngx_uint_t argc, ngx_str_t *argv);

/*
 * A read.  The handler is called exactly once, never from inside this call,
 * unless the op is cancelled first.  NULL: could not even be queued.
 */
ngx_http_idem_store_op_t *ngx_http_idem_store_read(ngx_uint_t argc,
    ngx_str_t *argv, ngx_http_idem_store_read_pt handler, void *data,
    ngx_msec_t timeout);
void ngx_http_idem_store_cancel(ngx_http_idem_store_op_t *op);


#endif /* _NGX_HTTP_IDEM_STORE_H_INCLUDED_ */
