
/*
 * ngx_http_idem_module: call ids, trace/call pairs, deadlines, retries and
 * call records for an nginx gateway.  The module's types, no functions
 * (t/008-layout.t checks): every part that names one includes this.
 */


#ifndef _NGX_HTTP_IDEM_COMMON_H_INCLUDED_
#define _NGX_HTTP_IDEM_COMMON_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_idem_store.h"


/*
 * The types others name before their definitions below (a header of the
 * module may declare a function of them without this one's order).
 */
typedef struct ngx_http_idem_main_conf_s  ngx_http_idem_main_conf_t;
typedef struct ngx_http_idem_loc_conf_s   ngx_http_idem_loc_conf_t;
typedef struct ngx_http_idem_ctx_s        ngx_http_idem_ctx_t;
typedef struct ngx_http_idem_storm_ctx_s  ngx_http_idem_storm_ctx_t;
typedef struct ngx_http_idem_problem_s    ngx_http_idem_problem_t;
typedef struct ngx_http_idem_resend_limit_s  ngx_http_idem_resend_limit_t;


#define NGX_HTTP_IDEM_MISSING_GENERATE   0
#define NGX_HTTP_IDEM_MISSING_REJECT     1

#define NGX_HTTP_IDEM_GENERATOR_UUID     0
#define NGX_HTTP_IDEM_GENERATOR_PREFIXED 1

/* how generated call ids are written: bare, or as an RFC 8941 String */
#define NGX_HTTP_IDEM_FORM_TOKEN         0
#define NGX_HTTP_IDEM_FORM_STRING        1

/* idem_dedupe_client_abort: an owner's upstream call when its client goes */
#define NGX_HTTP_IDEM_CLIENT_ABORT_RUN   0
#define NGX_HTTP_IDEM_CLIENT_ABORT_ABORT 1

#define NGX_HTTP_IDEM_SOURCE_CLIENT      0
#define NGX_HTTP_IDEM_SOURCE_GATEWAY     1
#define NGX_HTTP_IDEM_SOURCE_VARIABLE    2   /* idem_call_id_from */
#define NGX_HTTP_IDEM_SOURCE_BODY        3   /* idem_call_id_json */

/* idem_call_id_json's default max= */
#define NGX_HTTP_IDEM_JSON_MAX           (64 * 1024)

#define NGX_HTTP_IDEM_UUID_LEN           36
#define NGX_HTTP_IDEM_TRACE_ID_LEN       32
#define NGX_HTTP_IDEM_SPAN_ID_LEN        16
#define NGX_HTTP_IDEM_TRACEPARENT_LEN    55

/* W3C tracestate: members and bytes passed on at most */
#define NGX_HTTP_IDEM_TRACESTATE_MEMBERS 32
#define NGX_HTTP_IDEM_TRACESTATE_LEN     512

/* idem_otel_sample counts in millionths: this is "1", every call */
#define NGX_HTTP_IDEM_SAMPLE_ALL         1000000
#define NGX_HTTP_IDEM_MAX_ID_LEN         255

/* idem_dedupe_wait_max: default */
#define NGX_HTTP_IDEM_DEDUPE_WAIT_MAX    4096

/* idem_receipt_header: the longest receipt kept */
#define NGX_HTTP_IDEM_RECEIPT_MAX_LEN    128

#define NGX_HTTP_IDEM_MAX_ATTEMPTS       100
#define NGX_HTTP_IDEM_MAX_REPLICAS       255

/* gRPC's TimeoutValue: at most 8 digits */
#define NGX_HTTP_IDEM_GRPC_TIMEOUT_MAX   ((ngx_msec_t) 99999999)
#define NGX_HTTP_IDEM_GRPC_TIMEOUT_LEN   9

/* execution states: they only move forward */
#define NGX_HTTP_IDEM_RECEIVED           0
#define NGX_HTTP_IDEM_PROCESSING         1
#define NGX_HTTP_IDEM_SUCCESS            2
#define NGX_HTTP_IDEM_FAILED             3
#define NGX_HTTP_IDEM_UNKNOWN            4

/* how an attempt ended */
#define NGX_HTTP_IDEM_OUTCOME_OK                0
#define NGX_HTTP_IDEM_OUTCOME_HTTP              1   /* http_NNN */
#define NGX_HTTP_IDEM_OUTCOME_CONNECT_ERROR     2
#define NGX_HTTP_IDEM_OUTCOME_TIMEOUT           3
#define NGX_HTTP_IDEM_OUTCOME_ERROR_AFTER_SEND  4
#define NGX_HTTP_IDEM_OUTCOME_CLIENT_ABORT      5
#define NGX_HTTP_IDEM_OUTCOME_DEADLINE          6
#define NGX_HTTP_IDEM_OUTCOME_NONE              7   /* still running */

/* idem_retry's defaults */
#define NGX_HTTP_IDEM_RETRY_ATTEMPTS     3
#define NGX_HTTP_IDEM_RETRY_BACKOFF      50
#define NGX_HTTP_IDEM_RETRY_MAX_BACKOFF  1000
#define NGX_HTTP_IDEM_RETRY_ON                                               \
    (NGX_HTTP_UPSTREAM_FT_ERROR|NGX_HTTP_UPSTREAM_FT_TIMEOUT                 \
     |NGX_HTTP_UPSTREAM_FT_HTTP_502|NGX_HTTP_UPSTREAM_FT_HTTP_503            \
     |NGX_HTTP_UPSTREAM_FT_HTTP_504)

/* a resend on a record-only route: where a request is (resend_limit.c) */
#define NGX_HTTP_IDEM_RESEND_NONE        0
#define NGX_HTTP_IDEM_RESEND_WAIT        1   /* for the store's answer */
#define NGX_HTTP_IDEM_RESEND_FOUND       2   /* the answer is in */
#define NGX_HTTP_IDEM_RESEND_DONE        3

/* duplicate suppression: where a request is */
#define NGX_HTTP_IDEM_DEDUPE_NONE        0
#define NGX_HTTP_IDEM_DEDUPE_BODY        1   /* reading the body */
#define NGX_HTTP_IDEM_DEDUPE_CLAIM       2   /* waiting for the claim */
#define NGX_HTTP_IDEM_DEDUPE_DONE        3   /* the verdict is known */
#define NGX_HTTP_IDEM_DEDUPE_FAILED      4   /* the body could not be read */

/* nginx 1.22 has no name for it */
#define NGX_HTTP_IDEM_UNPROCESSABLE      422

/* what a finished owner left for its duplicates (the "k:" field) */
#define NGX_HTTP_IDEM_KEEP_REPLAY        'R' /* the answer is stored */
#define NGX_HTTP_IDEM_KEEP_LARGE         'L' /* an answer, not stored */
#define NGX_HTTP_IDEM_KEEP_RELEASE       'F' /* nothing happened: rerun */
#define NGX_HTTP_IDEM_KEEP_UNKNOWN       'U'

#define NGX_HTTP_IDEM_SHA256_HEX_LEN     64

/* idem_unknown_stream's default maxlen */
#define NGX_HTTP_IDEM_STREAM_MAXLEN      100000

/* "PREFIX-" + unix ms (13 digits until 2286) + "-" + 8 hex + "-" + node */
#define NGX_HTTP_IDEM_PREFIXED_FIXED_LEN (1 + 13 + 1 + 8 + 1)


/* the counts are kept in buckets of 100 ms, over the last 60 s */
#define NGX_HTTP_IDEM_STORM_TICK         100
#define NGX_HTTP_IDEM_STORM_BUCKETS      600
#define NGX_HTTP_IDEM_STORM_MAX_WINDOW                                       \
    (NGX_HTTP_IDEM_STORM_TICK * NGX_HTTP_IDEM_STORM_BUCKETS)

/* breaker states, as the idem_breaker_state gauge shows them */
#define NGX_HTTP_IDEM_BREAKER_CLOSED     0
#define NGX_HTTP_IDEM_BREAKER_OPEN       1
#define NGX_HTTP_IDEM_BREAKER_HALF_OPEN  2

/* why no retry followed an attempt (its record says so) */
#define NGX_HTTP_IDEM_NO_RETRY_BUDGET    1


/* a location's idem_retry_budget and idem_breaker */
typedef struct {
    ngx_flag_t                budget;       /* NGX_CONF_UNSET: not set here */
    ngx_uint_t                ratio;        /* retries per 1000 calls */
    ngx_uint_t                min;          /* retries per second */
    ngx_msec_t                window;

    ngx_flag_t                breaker;      /* NGX_CONF_UNSET: not set here */
    ngx_uint_t                failures;     /* percent */
    ngx_uint_t                min_calls;
    ngx_msec_t                breaker_window;
    ngx_msec_t                open;
    ngx_uint_t                probes;

    ngx_shm_zone_t           *zone;         /* NULL: no directive anywhere */
} ngx_http_idem_storm_conf_t;


typedef struct ngx_http_idem_storm_node_s  ngx_http_idem_storm_node_t;


/*
 * A call's view of one upstream's budget and breaker.  A call that
 * reaches another upstream later (error_page, a named location,
 * X-Accel-Redirect) gets another one: each upstream counts its own part.
 */
struct ngx_http_idem_storm_ctx_s {
    ngx_http_idem_storm_node_t  *node;
    uint64_t                     serial;    /* node's, in this configuration */
    ngx_str_t                   *name;      /* the upstream's */
    ngx_http_idem_storm_conf_t  *conf;      /* the proxying location's */
    ngx_uint_t                   retry_on;  /* its idem_retry on= */
    unsigned                     probe:1;   /* let through half-open */
    unsigned                     done:1;    /* its outcome was counted */
    unsigned                     lost:1;    /* a reload freed its node */
};


/* A header name with its lowercase form and hash, computed once. */
typedef struct {
    ngx_str_t                 name;
    u_char                   *lowcase;
    ngx_uint_t                hash;
} ngx_http_idem_header_t;


/* idem_otel_*: where spans are exported (otel.c) */
typedef struct {
    ngx_str_t                 url;          /* len 0: no export */
    ngx_addr_t               *addr;         /* resolved at configuration */
    ngx_str_t                 host;         /* the Host header's value */
    ngx_str_t                 path;
    ngx_str_t                 service_name;
    size_t                    buffer;       /* queued bytes per worker */
    ngx_uint_t                batch;        /* spans per request at most */
    ngx_msec_t                flush;        /* a span waits this at most */
    ngx_msec_t                timeout;      /* one export's exchange */
} ngx_http_idem_otel_conf_t;


struct ngx_http_idem_main_conf_s {
    ngx_str_t                 node_id;

    /* headers the module owns: client copies are dropped */
    ngx_http_idem_header_t    source_header;
    ngx_http_idem_header_t    attempt_header;
    ngx_http_idem_header_t    traceparent_header;
    ngx_http_idem_header_t    tracestate_header;
    ngx_http_idem_header_t    grpc_timeout_header;

    ngx_http_idem_store_conf_t  store;      /* addr.data NULL: none */
    ngx_msec_t                record_ttl;
    ngx_uint_t                record_max_executions;
    ngx_flag_t                record_short;
    ngx_uint_t                dedupe_wait_max;  /* waiters per worker */
    ngx_str_t                 key_prefix;

    ngx_flag_t                used;         /* some "idem on" exists */

    /* every idem_resend_limit, checked once all zones are known */
    ngx_array_t              *resend_limits;

    /* the counters' zone (idem_metrics), NULL: nothing is counted */
    ngx_shm_zone_t           *metrics_zone;

    /* idem_metrics' count of unresolved UNKNOWN calls: the streams
       (ngx_str_t, every idem_unknown_stream's name once, NULL: none), how
       often and how far they are read (0: the defaults) */
    ngx_array_t              *unknown_streams;
    ngx_msec_t                metrics_unknown_interval;
    ngx_uint_t                metrics_unknown_max;

    ngx_http_idem_otel_conf_t  otel;
};


/* idem_call_id_json: where the id is in a JSON body */
typedef struct {
    ngx_str_t                 key;          /* len 0: an array's element */
    ngx_int_t                 index;        /* -1: an object's member */
} ngx_http_idem_json_step_t;


typedef struct {
    ngx_str_t                 path;         /* as written, for problems */
    ngx_array_t              *steps;        /* ngx_http_idem_json_step_t */
    size_t                    max;          /* bytes parsed at most */
    ngx_flag_t                digest;       /* an invalid id: its SHA-256 */
} ngx_http_idem_json_conf_t;


/* per upstream{} block: the balancer the module wraps */
typedef struct {
    ngx_http_upstream_init_peer_pt   original_init;
} ngx_http_idem_srv_conf_t;


struct ngx_http_idem_loc_conf_s {
    ngx_flag_t                enable;

    ngx_http_idem_header_t    call_id_header;
    ngx_http_idem_header_t    trace_id_header;

    ngx_uint_t                call_id_missing;
    ngx_uint_t                call_id_generator;
    ngx_uint_t                call_id_form;
    ngx_str_t                 call_id_prefix;
    ngx_uint_t                call_id_max_length;

#if (NGX_PCRE)
    ngx_regex_t              *call_id_pattern;
    ngx_str_t                 call_id_pattern_src;
#endif

    /* the call id from elsewhere than the header, NULL: the header's */
    ngx_http_complex_value_t *call_id_from;
    ngx_str_t                 call_id_from_src;   /* as written */
    ngx_http_idem_json_conf_t  *call_id_json;

    /* idem_otel_sample: calls marked sampled, in millionths */
    ngx_uint_t                otel_sample;

    ngx_msec_t                deadline;     /* 0: no route budget */
    ngx_http_idem_header_t    deadline_header;  /* name.len 0: off */

    ngx_flag_t                idempotent;
    ngx_flag_t                retry_unsent;
    ngx_uint_t                retry_attempts;
    ngx_msec_t                retry_backoff;
    ngx_msec_t                retry_max_backoff;
    ngx_msec_t                retry_per_try_timeout;  /* 0: none */
    ngx_uint_t                retry_on;     /* NGX_HTTP_UPSTREAM_FT_* */
    ngx_http_idem_storm_conf_t  storm;      /* retry budget, breaker */

    ngx_flag_t                record;
    ngx_msec_t                record_arrival_delay;
    ngx_str_t                 unknown_stream;   /* its name, empty: off */
    ngx_uint_t                unknown_stream_maxlen;
    ngx_http_idem_header_t    receipt_header;   /* name.len 0: off */

    ngx_flag_t                dedupe;
    ngx_http_complex_value_t *dedupe_scope;  /* NULL: off (one scope) */
    ngx_flag_t                dedupe_scope_set;
    ngx_flag_t                dedupe_fingerprint_body;
    size_t                    dedupe_store_max;
    ngx_array_t              *dedupe_replay;    /* NULL: every answer */
    ngx_uint_t                dedupe_replay_grpc;   /* bit per grpc-status,
                                                       0: every one */
    ngx_uint_t                dedupe_client_abort;
    ngx_http_idem_header_t    dedupe_expires_header;  /* name.len 0: off */
    ngx_msec_t                dedupe_lease;  /* 0: budget + 5s, or 60s */
    ngx_msec_t                dedupe_wait;   /* 0: off */
    ngx_uint_t                dedupe_durable;   /* replicas, 0: off */
    ngx_msec_t                dedupe_durable_timeout;  /* the WAIT's */
    ngx_str_t                 status_url;    /* the 409's Link, or empty */

    /* idem_resend_limit, NULL: none; NGX_CONF_UNSET_PTR: not set here */
    ngx_http_idem_resend_limit_t  *resend_limit;

    ngx_uint_t                status;       /* idem_status here */
    ngx_http_complex_value_t *status_id;    /* its ID, NULL: last segment */
    ngx_flag_t                status_resolve;   /* resolve=on: POST */
    ngx_flag_t                status_digest;    /* scope_digest=on */
    ngx_uint_t                metrics;      /* idem_metrics here */

    ngx_flag_t                variable_upstream_logged;
};


/* The module's own answers (problem.c holds status, type, title, counter) */
typedef enum {
    NGX_HTTP_IDEM_P_MISSING_CALL_ID = 0,
    NGX_HTTP_IDEM_P_INVALID_CALL_ID,
    NGX_HTTP_IDEM_P_INVALID_TRACE_ID,
    NGX_HTTP_IDEM_P_INVALID_DEADLINE,
    NGX_HTTP_IDEM_P_EMPTY_SCOPE,
    NGX_HTTP_IDEM_P_DEADLINE_EXCEEDED,
    NGX_HTTP_IDEM_P_CALL_IN_FLIGHT,
    NGX_HTTP_IDEM_P_OUTCOME_UNKNOWN,
    NGX_HTTP_IDEM_P_ANSWER_NOT_STORED,
    NGX_HTTP_IDEM_P_PAYLOAD_MISMATCH,
    NGX_HTTP_IDEM_P_DEDUPE_UNAVAILABLE,
    NGX_HTTP_IDEM_P_UPSTREAM_UNAVAILABLE,
    NGX_HTTP_IDEM_P_CALL_APPLIED,
    NGX_HTTP_IDEM_P_INVALID_RESOLUTION,
    NGX_HTTP_IDEM_P_RESOLUTION_CONFLICT,
    NGX_HTTP_IDEM_P_CLAIM_NOT_DURABLE,
    NGX_HTTP_IDEM_P_INVALID_SCOPE_DIGEST,
    NGX_HTTP_IDEM_P_RESOLUTION_EARLY,
    NGX_HTTP_IDEM_P_TOO_MANY_RESENDS,
    NGX_HTTP_IDEM_P_FORCE_REFUSED,
    NGX_HTTP_IDEM_P_CROSS_SITE,
    NGX_HTTP_IDEM_P_NO_UNKNOWN_LIST,
    NGX_HTTP_IDEM_P_INVALID_PAGE
} ngx_http_idem_problem_e;


/* A client error the module answers itself as problem+json. */
struct ngx_http_idem_problem_s {
    ngx_http_idem_problem_e   id;
    ngx_uint_t                status;
    ngx_str_t                 type;         /* slug, e.g. "invalid-call-id" */
    ngx_str_t                 title;
    ngx_str_t                 detail;
    ngx_str_t                 record;       /* JSON of the call's record */
    ngx_str_t                 state;        /* the execution's, or empty */
};


typedef struct {
    ngx_uint_t                n;
    ngx_msec_t                start;        /* ngx_current_msec */
    uint64_t                  start_ms;     /* unix ms */
    ngx_msec_t                duration;
    ngx_uint_t                status;       /* 0: no answer */
    ngx_uint_t                outcome;
    ngx_uint_t                sent;
    ngx_uint_t                no_retry;     /* why none followed, or 0 */
    ngx_int_t                 grpc_status;  /* the upstream's, or -1 */
    ngx_str_t                *peer;         /* its peer's name, or NULL */
    u_char                    span_id[NGX_HTTP_IDEM_SPAN_ID_LEN];
} ngx_http_idem_attempt_t;


/*
 * Per-request state, one part per feature, each owned by the file named
 * first above it; the others named there write a field or two of it as
 * the request's sequence goes (every file may read any part).  The
 * context is one ngx_pcalloc, so every part starts zeroed; it survives
 * internal redirects (ngx_http_idem_ctx.c).
 */

/*
 * call_id.c: the ids; headers.c: the request headers it adds; handler.c:
 * the header names, "settled".  ids_filter.c puts them in the answer.
 */
typedef struct {
    ngx_str_t                 call_id;      /* the id itself */
    ngx_str_t                 call_id_echo; /* as the header carries it */
    ngx_str_t                 trace_id;
    ngx_uint_t                source;

    /* names the ids were read under, used for the response */
    ngx_http_idem_header_t   *call_id_header;
    ngx_http_idem_header_t   *trace_id_header;

    /* request headers the module added; rewritten per attempt */
    ngx_table_elt_t          *attempt_h;
    ngx_table_elt_t          *traceparent_h;
    ngx_table_elt_t          *deadline_h;
    ngx_table_elt_t          *grpc_timeout_h;

    unsigned                  settled:1;    /* ids checked and injected */
    unsigned                  call_id_refused:1;  /* the client's, invalid */
} ngx_http_idem_ids_ctx_t;


/*
 * trace.c: the W3C trace context (the client's traceparent taken by
 * call_id.c, its tracestate, the sampling decision); headers.c: each
 * attempt's span id.  The span exporter (otel.c) sets "export" before
 * the ids are injected (ngx_http_idem_trace.h).
 */
typedef struct {
    ngx_str_t                 parent_id;    /* the client's span, len 0:
                                               none */
    ngx_str_t                 tracestate;   /* the client's, valid and
                                               combined; len 0: none */
    u_char                    span_id[NGX_HTTP_IDEM_SPAN_ID_LEN];
                                            /* the current attempt's */
    ngx_uint_t                flags;        /* trace-flags sent upstream */

    /* otel.c: the server span, where the call's spans are exported */
    u_char                    server_span[NGX_HTTP_IDEM_SPAN_ID_LEN];
    ngx_str_t                 route;        /* the location's name */
    ngx_str_t                 path;         /* r->uri then */

    unsigned                  client:1;     /* the client's traceparent
                                               was taken */
    unsigned                  sampled:1;
    unsigned                  export:1;     /* the call's spans are
                                               exported (otel.c) */
} ngx_http_idem_trace_ctx_t;


/*
 * deadline.c: the budget and the timers that end a call or an attempt
 * (upstream.c stops the per-try timer when an attempt ends)
 */
typedef struct {
    /* the budget ends when ngx_current_msec reaches "at" */
    ngx_msec_t                at;
    ngx_event_t               ev;           /* ends the call at budget */
    ngx_event_t               try_ev;       /* per_try_timeout */

    unsigned                  set:1;        /* the call has a budget */
    unsigned                  expired:1;
} ngx_http_idem_deadline_ctx_t;


/*
 * upstream.c: the wrapped balancer and the attempts; round.c (a new
 * round), storm.c (its node), headers.c (attempt back to 0 on inject),
 * deadline.c (stops the backoff at the budget)
 */
typedef struct {
    ngx_uint_t                attempt;      /* the current one, 0: none yet */
    ngx_uint_t                first_attempt;  /* the number of its first */

    /* the wrapped balancer of this request's upstream (the latest one) */
    void                     *peer_data;
    ngx_event_get_peer_pt     original_get;
    ngx_event_free_peer_pt    original_free;
    ngx_event_notify_peer_pt  original_notify;
#if (NGX_HTTP_SSL)
    ngx_event_set_peer_session_pt   original_set_session;
    ngx_event_save_peer_session_pt  original_save_session;
#endif
    ngx_int_t               (*original_process_header)(ngx_http_request_t *r);
    ngx_int_t               (*original_reinit_request)(ngx_http_request_t *r);
    ngx_msec_t                connect_timeout;
    ngx_msec_t                retry_after;  /* from a 429/503, for the next */
    ngx_uint_t                uri_changes;  /* r's, as the attempt started */
    ngx_event_t               backoff_ev;   /* delayed connect */
    ngx_http_idem_storm_ctx_t  *storm;      /* its upstream's budget, breaker */

    unsigned                  balanced:1;   /* the balancer is wrapped */
    unsigned                  expire_after_backoff:1;
    unsigned                  run_on:1;     /* a client gone is ignored */
} ngx_http_idem_upstream_ctx_t;


/*
 * grpc.c: a gRPC call's answer; handler.c says whether it is one,
 * upstream.c keeps the status it shows nginx to retry
 */
typedef struct {
    ngx_uint_t                http_status;  /* answered as grpc-status */
    ngx_uint_t                retry_status; /* 503/429 to retry it */

    unsigned                  on:1;         /* a gRPC request */
} ngx_http_idem_grpc_ctx_t;


/*
 * record.c: this execution in the call's record; handler.c and dedupe.c
 * turn it on (the claim may have written the arrival)
 */
typedef struct {
    ngx_array_t              *attempts;     /* ngx_http_idem_attempt_t */
    ngx_str_t                 token;        /* this execution, in records */
    ngx_event_t               arrival_ev;
    uint64_t                  created_ms;
    ngx_uint_t                final_state;  /* 0 until the request ends */
    ngx_str_t                 key;          /* the record's */
    ngx_str_t                 receipt;      /* the service's, len 0: none */
    ngx_uint_t                receipt_attempt;  /* whose answer had it */
    ngx_msec_t                expired;      /* its expiry last refreshed */

    /* the first write asks whether the record was there (resend_limit.c) */
    ngx_http_idem_store_known_pt  known;
    void                     *known_data;

    unsigned                  on:1;         /* the call is recorded */
    unsigned                  arrived:1;    /* the arrival was written */
    unsigned                  counted:1;    /* its first write was sent */
    unsigned                  expire_sent:1;    /* "expired" is set */
} ngx_http_idem_record_ctx_t;


/*
 * dedupe.c: duplicate suppression, the claim and its verdict; handler.c
 * makes a claim's owner (unsure)
 */
typedef struct {
    ngx_uint_t                state;        /* NGX_HTTP_IDEM_DEDUPE_* */
    ngx_uint_t                verdict;
    ngx_http_idem_store_op_t *claim_op;
    ngx_http_idem_store_claim_t   claim;    /* as sent: a waiter sends it
                                               again */
    ngx_msec_t                claimed;      /* ngx_current_msec, sent */
    ngx_event_t               bound_ev;     /* still running near it */
    ngx_event_t               resume_ev;
    ngx_str_t                 found;        /* an answer, or a record */
    void                     *md;           /* EVP_MD_CTX: the digest */

    /* a duplicate that waits for its owner (idem_dedupe_wait) */
    ngx_event_t               poll_ev;
    ngx_msec_t                wait_until;
    ngx_msec_t                poll;         /* the next delay */
    ngx_msec_t                asked;        /* the last claim sent */
    uint64_t                  asked_us;     /* the same, µs (metrics) */
    uint64_t                  claimed_us;   /* the first claim's, µs */
    ngx_msec_t                lease_end;    /* the owner's, 0: not known */
    ngx_http_idem_store_watch_t   watch;    /* woken by the final write */
    time_t                    expires;      /* the id known until, 0: ? */

    unsigned                  owner:1;      /* this request holds a claim */
    unsigned                  unsure:1;     /* or may: no answer came */
    unsigned                  md_failed:1;
    unsigned                  waiting:1;    /* counted among the waiters */
    unsigned                  wake:1;       /* its final write wakes them:
                                               its claim's location waits */
    unsigned                  short_record:1; /* its claim made the record
                                                 short: its writes add to
                                                 the string */
} ngx_http_idem_dedupe_ctx_t;


/*
 * call_id_source.c: a call id from a JSON body, read before it is settled
 * (handler.c settles it once read)
 */
typedef struct {
    ngx_buf_t                *capture;      /* the body's first bytes */
    size_t                    max;          /* bytes kept, at most */

    unsigned                  pending:1;    /* the id waits for the body */
    unsigned                  reading:1;    /* the body is being read */
    unsigned                  over:1;       /* longer than max */
} ngx_http_idem_source_ctx_t;


/*
 * resend_limit.c: a resend of a known call id, counted or refused; on a
 * record-only route, the store's word on whether the id is known
 */
typedef struct {
    time_t                    retry_after;  /* refused: seconds */
    ngx_uint_t                state;        /* NGX_HTTP_IDEM_RESEND_* */
    ngx_int_t                 found;        /* the store's answer */
    ngx_http_idem_store_op_t *read_op;      /* a record read, at the cap */
    void                     *waiter;       /* the first write's */
    void                     *count;        /* what it counted, to keep
                                               or give back */
    ngx_event_t               resume_ev;

    unsigned                  checked:1;    /* the limit was asked once */
    unsigned                  refused:1;
    unsigned                  read:1;       /* found: a read's answer */
} ngx_http_idem_resend_ctx_t;


/* answer.c: an owner's answer, kept for duplicates, or one replayed */
typedef struct {
    ngx_buf_t                *capture;      /* "status\nheaders\n\nbody" */
    size_t                    capture_max;  /* body bytes kept, at most */
    off_t                     captured;     /* body bytes seen */

    unsigned                  replayed:1;   /* answered from the store */
    unsigned                  capture_done:1;   /* the whole answer */
    unsigned                  capture_over:1;   /* not to be kept */
    unsigned                  retry_later:1;    /* 429/503 + Retry-After */
} ngx_http_idem_answer_ctx_t;


struct ngx_http_idem_ctx_s {
    ngx_http_request_t       *request;
    ngx_http_idem_loc_conf_t *conf;         /* where the call started */

    /* the module's own answer to this call: it is never forwarded */
    ngx_http_idem_problem_t  *refused;

    /* problem.c: a problem's body sent in place of nginx's own page */
    ngx_chain_t              *problem_body;

    /* µs of a monotonic clock when the module first saw the call, 0: none
       (metrics.c: idem_metrics is off) */
    uint64_t                  start_us;

    ngx_http_idem_ids_ctx_t       ids;
    ngx_http_idem_trace_ctx_t     trace;
    ngx_http_idem_deadline_ctx_t  deadline;
    ngx_http_idem_upstream_ctx_t  upstream;
    ngx_http_idem_grpc_ctx_t      grpc;
    ngx_http_idem_record_ctx_t    record;
    ngx_http_idem_dedupe_ctx_t    dedupe;
    ngx_http_idem_answer_ctx_t    answer;
    ngx_http_idem_source_ctx_t    source;
    ngx_http_idem_resend_ctx_t    resend;
};


/* What the client sent, collected in one walk over the request headers. */
typedef struct {
    ngx_table_elt_t          *call_id;
    ngx_table_elt_t          *trace_id;
    ngx_table_elt_t          *traceparent;
    ngx_table_elt_t          *tracestate;   /* the first line */
    ngx_table_elt_t          *deadline;
    ngx_table_elt_t          *grpc_timeout;
    ngx_uint_t                call_id_count;
    ngx_uint_t                trace_id_count;
    ngx_uint_t                traceparent_count;
    ngx_uint_t                tracestate_count;
    ngx_uint_t                deadline_count;
    ngx_uint_t                grpc_timeout_count;
    ngx_uint_t                owned_count;  /* copies of headers we write */

    /* a call id from idem_call_id_from or _json: where, what it is called */
    ngx_uint_t                call_id_source;   /* NGX_HTTP_IDEM_SOURCE_* */
    ngx_str_t                 call_id_name;
    ngx_table_elt_t           call_id_value;
    char                     *call_id_missing;  /* why, NULL: "missing" */
    ngx_flag_t                call_id_digest;
} ngx_http_idem_inbound_t;


/* counters, in shared memory (ngx_http_idem_metrics.c) */
typedef struct {
    ngx_atomic_t              calls;
    ngx_atomic_t              generated;
    ngx_atomic_t              invalid_call_id;
    ngx_atomic_t              missing_call_id;
    ngx_atomic_t              invalid_trace_id;
    ngx_atomic_t              invalid_deadline;
    ngx_atomic_t              deadline_exceeded;
    ngx_atomic_t              attempts;
    ngx_atomic_t              retries;
    ngx_atomic_t              record_writes;
    ngx_atomic_t              record_drops;
    ngx_atomic_t              unknown_stream_drops;
    ngx_atomic_t              status_found;
    ngx_atomic_t              status_not_found;
    ngx_atomic_t              status_unknown;
    ngx_atomic_t              empty_scope;
    ngx_atomic_t              dedupe_claims;
    ngx_atomic_t              dedupe_replays;
    ngx_atomic_t              dedupe_in_flight;
    ngx_atomic_t              dedupe_unknown;
    ngx_atomic_t              dedupe_not_stored;
    ngx_atomic_t              dedupe_mismatches;
    ngx_atomic_t              dedupe_unavailable;
    ngx_atomic_t              receipts_stored;
    ngx_atomic_t              receipts_invalid;
    ngx_atomic_t              dedupe_applied;
    ngx_atomic_t              dedupe_waits_answered;
    ngx_atomic_t              dedupe_waits_timed_out;
    ngx_atomic_t              dedupe_waits_full;
    ngx_atomic_t              dedupe_client_gone;
    ngx_atomic_t              resolved_applied;
    ngx_atomic_t              resolved_not_applied;
    ngx_atomic_t              resolve_invalid;
    ngx_atomic_t              resolve_conflict;
    ngx_atomic_t              resolve_not_found;
    ngx_atomic_t              resolve_unavailable;
    ngx_atomic_t              resolve_early;
    ngx_atomic_t              dedupe_not_durable;
    ngx_atomic_t              call_ids_client;
    ngx_atomic_t              call_ids_variable;
    ngx_atomic_t              call_ids_body;
    ngx_atomic_t              call_ids_gateway;
    ngx_atomic_t              body_ids_missing;
    ngx_atomic_t              resends_refused;
    ngx_atomic_t              resolved_forced_applied;
    ngx_atomic_t              resolved_forced_not_applied;
    ngx_atomic_t              resolve_force_refused;
    ngx_atomic_t              otel_spans_sent;
    ngx_atomic_t              otel_spans_dropped;
} ngx_http_idem_counters_t;




extern ngx_module_t  ngx_http_idem_module;


#endif /* _NGX_HTTP_IDEM_COMMON_H_INCLUDED_ */
