
/*
 * A call's record as read back from the store, parsed.  The parser is a
 * pure function of the record's field/value pairs (no request, no store
 * type), so that the status endpoint, the 409 bodies and a fuzz target
 * share it.
 */


#ifndef _NGX_HTTP_IDEM_RECORD_PARSE_H_INCLUDED_
#define _NGX_HTTP_IDEM_RECORD_PARSE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


/* idem_record_arrival_delay: default */
#define NGX_HTTP_IDEM_RECORD_ARRIVAL_DELAY   5

/* idem_record_max_executions: default and bounds */
#define NGX_HTTP_IDEM_RECORD_MAX_EXECUTIONS  100
#define NGX_HTTP_IDEM_RECORD_MAX_LIMIT       10000

/*
 * the value of "v", a field every record has (ngx_http_idem_record.c):
 * the record's format (docs/records.md, "Record format versions"); a
 * claim taken over writes it too (ngx_http_idem_redis_claim.lua), and a
 * resolution of a record that had none (ngx_http_idem_redis_resolve.lua)
 */
#define NGX_HTTP_IDEM_RECORD_VERSION         "1"


typedef struct ngx_http_idem_record_exec_s  ngx_http_idem_record_exec_t;

/* one execution, gathered from its e:, p:, f:, l:, r: and z: fields */
struct ngx_http_idem_record_exec_s {
    ngx_str_t                        token;
    ngx_str_t                        info[6];   /* created source node
                                                   method trace_id uri */
    ngx_str_t                        state;
    ngx_str_t                        final_status;  /* len 0: none */
    uint64_t                         created_ms;
    uint64_t                         updated_ms;
    uint64_t                         lease_ms;  /* a claim lapses, 0: none */
    ngx_str_t                        receipt;   /* the service's, or empty */
    ngx_uint_t                       receipt_n; /* the attempt it came in */
    ngx_str_t                        resolved[4];   /* outcome at_ms receipt
                                                       by ("-": none); len 0:
                                                       not resolved */
    ngx_uint_t                       overridden;    /* resolved, then its
                                                       final write came */
    ngx_uint_t                       forced;    /* resolved with "force" */
    ngx_uint_t                       index;     /* 1, 2 ... by arrival */
    ngx_uint_t                       hash;
    ngx_http_idem_record_exec_t     *next;      /* same hash bucket */
};


typedef struct {
    ngx_http_idem_record_exec_t     *exec;
    ngx_uint_t                       n;
    ngx_str_t                        parts[8];  /* start dur outcome sent
                                                   status span [no_retry
                                                   [grpc_status]] */
    ngx_uint_t                       nparts;    /* 6 to 8 */
} ngx_http_idem_record_attempt_t;


typedef struct {
    ngx_http_idem_record_exec_t    **execs;     /* kept, by arrival */
    ngx_uint_t                       nexecs;
    ngx_http_idem_record_attempt_t  *attempts;  /* by execution, then n */
    ngx_uint_t                       nattempts;

    ngx_uint_t                       executions;   /* kept + summarised */
    ngx_uint_t                       summarised;

    ngx_str_t                        state;     /* the record's */
    ngx_str_t                        info[6];   /* its first execution's */
    uint64_t                         created_ms;
    uint64_t                         updated_ms;
    ngx_str_t                        final_status;  /* len 0: none */
    ngx_str_t                        receipt;   /* the newest execution's */
    ngx_http_idem_record_exec_t     *resolved;  /* the newest resolved */
} ngx_http_idem_record_t;


/*
 * elts: field, value, field, value ... (n elements); now: unix ms by the
 * store's clock (a claim lapses by it).  NGX_DECLINED: no execution.
 * The result points into elts.
 */
ngx_int_t ngx_http_idem_record_parse(ngx_pool_t *pool, ngx_str_t *elts,
    ngx_uint_t n, uint64_t now, ngx_http_idem_record_t *rec);


#endif /* _NGX_HTTP_IDEM_RECORD_PARSE_H_INCLUDED_ */
