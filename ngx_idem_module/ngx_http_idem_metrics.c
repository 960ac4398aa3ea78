
/*
 * Counters and histograms shared by all workers (a small shared memory
 * zone, created only when some location has "idem_metrics"), what only
 * each worker knows (its Redis connections, its waiting duplicates), and
 * the content handler that shows them in Prometheus' text format.
 *
 * An observation is two atomic adds (a bucket, the sum), no lock; the
 * buckets are kept apart and made cumulative when shown, and a
 * histogram's count is the sum of its buckets.
 */


#include "ngx_http_idem_metrics.h"
#include "ngx_http_idem_storm.h"
#include "ngx_http_idem_util.h"


#define NGX_HTTP_IDEM_METRICS_ZONE_SIZE                                      \
    (sizeof(ngx_http_idem_metrics_shm_t) + 8 * ngx_pagesize)

/* a worker publishes its Redis connections this often */
#define NGX_HTTP_IDEM_METRICS_PUBLISH    1000

/* a line of a histogram or gauge, its name and labels aside */
#define NGX_HTTP_IDEM_METRICS_LINE                                           \
    (sizeof("_bucket{,le=\"\"} \n") + 2 * NGX_ATOMIC_T_LEN + 16)


typedef struct {
    char                      *name;
    char                      *help;
    char                      *label;
    char                     **values;
    size_t                     offset;     /* of its first histogram */
    ngx_uint_t                 n;
} ngx_http_idem_metrics_hist_t;


/* the Redis nodes of every worker, merged for a scrape */
typedef struct {
    ngx_str_t                  name;
    ngx_uint_t                 sentinel;
    ngx_uint_t                 workers;
    ngx_uint_t                 up;
} ngx_http_idem_metrics_redis_t;


/* the connects to a Redis node name, of every worker, added up */
typedef struct {
    ngx_str_t                  name;
    ngx_uint_t                 sentinel;
    ngx_uint_t                 connects;
    ngx_uint_t                 failures[NGX_HTTP_IDEM_STORE_FAILS];
} ngx_http_idem_metrics_connects_t;


/* idem_redis_connect_failures_total's reasons: NGX_HTTP_IDEM_STORE_FAIL_* */
static char  *ngx_http_idem_metrics_fail_reasons[] = {
    "connect", "resolve", "auth", "readonly"
};


static char *ngx_http_idem_metrics_args(ngx_conf_t *cf, ngx_command_t *cmd);
static ngx_int_t ngx_http_idem_metrics_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_int_t ngx_http_idem_metrics_handler(ngx_http_request_t *r);
static ngx_http_idem_metrics_shm_t *ngx_http_idem_metrics_shm(void);
static void ngx_http_idem_observe(ngx_http_idem_histogram_t *h, uint64_t us);
static ngx_uint_t ngx_http_idem_metrics_refusal(ngx_http_idem_ctx_t *ctx);
static u_char *ngx_http_idem_metrics_histograms(u_char *p,
    ngx_http_idem_metrics_shm_t *shm);
static ngx_array_t *ngx_http_idem_metrics_workers(ngx_http_request_t *r,
    ngx_http_idem_metrics_shm_t *shm, ngx_uint_t *waiters,
    ngx_array_t **connects);
static ngx_int_t ngx_http_idem_metrics_add_counts(ngx_http_request_t *r,
    ngx_array_t *connects, ngx_http_idem_metrics_worker_t *w);
static ngx_int_t ngx_http_idem_metrics_read_worker(
    ngx_http_idem_metrics_worker_t *w, ngx_http_idem_metrics_worker_t *copy);
static ngx_uint_t ngx_http_idem_metrics_alive(ngx_pid_t pid);
static void ngx_http_idem_metrics_publish(ngx_http_idem_metrics_shm_t *shm);
static void ngx_http_idem_metrics_publish_handler(ngx_event_t *ev);
static u_char *ngx_http_idem_metrics_label(u_char *p, ngx_str_t *value);


/* this worker's slot in the zone's workers (-1: none), and its timer */
static ngx_int_t    ngx_http_idem_metrics_slot = -1;
static ngx_event_t  ngx_http_idem_metrics_ev;


/* the buckets' upper bounds, in µs, and as shown (seconds); then +Inf */

static uint64_t  ngx_http_idem_metrics_bounds[] = {
    250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000,
    500000, 1000000, 2500000, 5000000, 10000000
};

static char  *ngx_http_idem_metrics_le[] = {
    "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025",
    "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"
};


static char  *ngx_http_idem_metrics_states[] = {
    "SUCCESS", "FAILED", "UNKNOWN"
};

static char  *ngx_http_idem_metrics_durable[] = {
    "false", "true"
};

/* NGX_HTTP_IDEM_WAITED_* */
static char  *ngx_http_idem_metrics_waits[] = {
    "replayed", "ran", "conflict", "unavailable", "timed_out", "client_gone"
};


#define ngx_http_idem_metrics_hist(name, help, label, values, field)         \
    { name, help, label, values,                                             \
      offsetof(ngx_http_idem_metrics_shm_t, field),                          \
      sizeof(values) / sizeof(char *) }


static ngx_http_idem_metrics_hist_t  ngx_http_idem_metrics_hists[] = {

    ngx_http_idem_metrics_hist("idem_call_duration_seconds",
        "Executions of calls (every call on routes with idem on, the "
        "owner's on dedupe routes; not the calls the module refused), from "
        "the module's first sight of the request to its end, by the "
        "execution's final state.", "state",
        ngx_http_idem_metrics_states, calls),
    ngx_http_idem_metrics_hist("idem_dedupe_claim_duration_seconds",
        "Dedupe claims, from sent to answered (a durable claim's WAIT "
        "included), by whether they were durable.", "durable",
        ngx_http_idem_metrics_durable, claims),
    ngx_http_idem_metrics_hist("idem_dedupe_wait_duration_seconds",
        "Duplicates that waited for their call in flight "
        "(idem_dedupe_wait), from their first claim to their answer, by "
        "how the wait ended.", "result",
        ngx_http_idem_metrics_waits, waits),
    { NULL, NULL, NULL, NULL, 0, 0 }
};


typedef struct {
    char                      *name;
    char                      *labels;
    char                      *help;
    size_t                     offset;
} ngx_http_idem_metric_t;


#define ngx_http_idem_metric(name, labels, help, field)                      \
    { name, labels, help, offsetof(ngx_http_idem_counters_t, field) }


static ngx_http_idem_metric_t  ngx_http_idem_metrics_list[] = {

    ngx_http_idem_metric("idem_calls_total", "",
        "Calls whose ids were settled on routes with idem on.", calls),
    ngx_http_idem_metric("idem_call_ids_generated_total", "",
        "Call ids the gateway generated.", generated),
    ngx_http_idem_metric("idem_call_ids_total", "source=\"client\"",
        "Calls let through, by where their call id came from.",
        call_ids_client),
    ngx_http_idem_metric("idem_call_ids_total", "source=\"variable\"",
        NULL, call_ids_variable),
    ngx_http_idem_metric("idem_call_ids_total", "source=\"body\"",
        NULL, call_ids_body),
    ngx_http_idem_metric("idem_call_ids_total", "source=\"gateway\"",
        NULL, call_ids_gateway),
    ngx_http_idem_metric("idem_body_call_ids_missing_total", "",
        "Bodies with no call id at idem_call_id_json's path (past max=, "
        "not JSON, no string or integer there).", body_ids_missing),
    ngx_http_idem_metric("idem_rejected_total", "reason=\"invalid_call_id\"",
        "Calls answered 400 by the module before they were executions (in "
        "no idem_call_duration_seconds state).", invalid_call_id),
    ngx_http_idem_metric("idem_rejected_total", "reason=\"missing_call_id\"",
        NULL, missing_call_id),
    ngx_http_idem_metric("idem_rejected_total", "reason=\"invalid_trace_id\"",
        NULL, invalid_trace_id),
    ngx_http_idem_metric("idem_rejected_total", "reason=\"invalid_deadline\"",
        NULL, invalid_deadline),
    ngx_http_idem_metric("idem_rejected_total", "reason=\"empty_scope\"",
        NULL, empty_scope),
    ngx_http_idem_metric("idem_deadline_exceeded_total", "",
        "Calls whose budget was spent before the first attempt.",
        deadline_exceeded),
    ngx_http_idem_metric("idem_attempts_total", "",
        "Upstream attempts, first ones included.", attempts),
    ngx_http_idem_metric("idem_retries_total", "",
        "Upstream attempts after the first.", retries),
    ngx_http_idem_metric("idem_record_writes_total", "result=\"queued\"",
        "Writes to call records.", record_writes),
    ngx_http_idem_metric("idem_record_writes_total", "result=\"dropped\"",
        NULL, record_drops),
    ngx_http_idem_metric("idem_unknown_stream_drops_total", "",
        "UNKNOWN executions not appended to idem_unknown_stream.",
        unknown_stream_drops),
    ngx_http_idem_metric("idem_receipts_total", "result=\"kept\"",
        "Service receipts (idem_receipt_header) kept with their execution, "
        "or not kept as invalid.", receipts_stored),
    ngx_http_idem_metric("idem_receipts_total", "result=\"invalid\"",
        NULL, receipts_invalid),
    ngx_http_idem_metric("idem_status_answers_total", "state=\"found\"",
        "Answers of the status endpoint.", status_found),
    ngx_http_idem_metric("idem_status_answers_total", "state=\"not_found\"",
        NULL, status_not_found),
    ngx_http_idem_metric("idem_status_answers_total", "state=\"unknown\"",
        NULL, status_unknown),
    ngx_http_idem_metric("idem_dedupe_total", "result=\"claimed\"",
        "Calls on dedupe routes, by what their claim found.", dedupe_claims),
    ngx_http_idem_metric("idem_dedupe_total", "result=\"replayed\"",
        NULL, dedupe_replays),
    ngx_http_idem_metric("idem_dedupe_total", "result=\"in_flight\"",
        NULL, dedupe_in_flight),
    ngx_http_idem_metric("idem_dedupe_total", "result=\"unknown\"",
        NULL, dedupe_unknown),
    ngx_http_idem_metric("idem_dedupe_total", "result=\"not_stored\"",
        NULL, dedupe_not_stored),
    ngx_http_idem_metric("idem_dedupe_total", "result=\"mismatch\"",
        NULL, dedupe_mismatches),
    ngx_http_idem_metric("idem_dedupe_total", "result=\"unavailable\"",
        NULL, dedupe_unavailable),
    ngx_http_idem_metric("idem_dedupe_total", "result=\"applied\"",
        NULL, dedupe_applied),
    ngx_http_idem_metric("idem_dedupe_total", "result=\"not_durable\"",
        NULL, dedupe_not_durable),
    ngx_http_idem_metric("idem_dedupe_waits_total", "result=\"answered\"",
        "Duplicates that waited for their call in flight (idem_dedupe_wait): "
        "until it ended, until the wait ran out, or not at all.",
        dedupe_waits_answered),
    ngx_http_idem_metric("idem_dedupe_waits_total",
        "result=\"timed_out\"", NULL, dedupe_waits_timed_out),
    ngx_http_idem_metric("idem_dedupe_waits_total", "result=\"full\"",
        NULL, dedupe_waits_full),
    ngx_http_idem_metric("idem_dedupe_client_gone_total", "",
        "Owners on dedupe routes whose answer came after nginx found their "
        "client gone: the upstream call ran on, the answer was only kept "
        "(idem_dedupe_client_abort run).", dedupe_client_gone),
    ngx_http_idem_metric("idem_resolutions_total", "outcome=\"applied\"",
        "Calls that ended UNKNOWN resolved through the status endpoint.",
        resolved_applied),
    ngx_http_idem_metric("idem_resolutions_total",
        "outcome=\"not_applied\"", NULL, resolved_not_applied),
    ngx_http_idem_metric("idem_resolutions_refused_total",
        "reason=\"invalid\"",
        "Resolutions the status endpoint refused.", resolve_invalid),
    ngx_http_idem_metric("idem_resolutions_refused_total",
        "reason=\"conflict\"", NULL, resolve_conflict),
    ngx_http_idem_metric("idem_resolutions_refused_total",
        "reason=\"not_found\"", NULL, resolve_not_found),
    ngx_http_idem_metric("idem_resolutions_refused_total",
        "reason=\"unavailable\"", NULL, resolve_unavailable),
    ngx_http_idem_metric("idem_resolutions_refused_total",
        "reason=\"early\"", NULL, resolve_early),
    ngx_http_idem_metric("idem_resolutions_refused_total",
        "reason=\"final_write\"", NULL, resolve_force_refused),
    ngx_http_idem_metric("idem_resolutions_forced_total",
        "outcome=\"applied\"",
        "Resolutions taken with force: an operator's word that the "
        "owner's gateway is gone (counted in idem_resolutions_total too).",
        resolved_forced_applied),
    ngx_http_idem_metric("idem_resolutions_forced_total",
        "outcome=\"not_applied\"", NULL, resolved_forced_not_applied),
    ngx_http_idem_metric("idem_resends_refused_total", "",
        "Resends of known call ids refused by idem_resend_limit (429).",
        resends_refused),
    ngx_http_idem_metric("idem_otel_spans_total", "result=\"sent\"",
        "Spans exported to idem_otel_endpoint, or dropped (the worker's "
        "queue full, the collector slow, away or refusing).",
        otel_spans_sent),
    ngx_http_idem_metric("idem_otel_spans_total", "result=\"dropped\"",
        NULL, otel_spans_dropped),
    { NULL, NULL, NULL, 0 }
};


char *
ngx_http_idem_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    ngx_str_t                   name;
    ngx_shm_zone_t             *shm_zone;
    ngx_http_core_loc_conf_t   *clcf;
    ngx_http_idem_main_conf_t  *imcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (clcf->handler == ngx_http_idem_metrics_handler) {
        return "is duplicate";
    }

    clcf->handler = ngx_http_idem_metrics_handler;

    /* a scrape is not a call, whatever "idem" says here (handler.c) */

    ilcf->metrics = 1;

    if (ngx_http_idem_metrics_args(cf, cmd) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    /* one zone for every location that shows the counters */

    ngx_str_set(&name, "idem_metrics");

    shm_zone = ngx_shared_memory_add(cf, &name,
                                     NGX_HTTP_IDEM_METRICS_ZONE_SIZE,
                                     &ngx_http_idem_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    shm_zone->init = ngx_http_idem_metrics_init_zone;

    /* this configuration's counters: found through its cycle */

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);
    imcf->metrics_zone = shm_zone;

    return NGX_CONF_OK;
}


/*
 * [unknown_interval=time] [unknown_max=number]: how often and how far a
 * scrape has the streams of UNKNOWN calls read.  One zone shows them for
 * every location: each location that sets them sets the same.
 */

static char *
ngx_http_idem_metrics_args(ngx_conf_t *cf, ngx_command_t *cmd)
{
    ngx_int_t                   n;
    ngx_str_t                  *value, v;
    ngx_uint_t                  i, max;
    ngx_msec_t                  interval;
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "unknown_interval=", 17) == 0) {
            v.data = value[i].data + 17;
            v.len = value[i].len - 17;

            interval = ngx_parse_time(&v, 0);

            if (interval == (ngx_msec_t) NGX_ERROR || interval == 0) {
                goto invalid;
            }

            if (imcf->metrics_unknown_interval
                && imcf->metrics_unknown_interval != interval)
            {
                goto conflict;
            }

            imcf->metrics_unknown_interval = interval;
            continue;
        }

        if (ngx_strncmp(value[i].data, "unknown_max=", 12) == 0) {
            n = ngx_atoi(value[i].data + 12, value[i].len - 12);

            if (n < 1 || n > NGX_HTTP_IDEM_UNKNOWN_MAX_LIMIT) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid value \"%V\" in \"%V\" "
                                   "directive, unknown_max takes 1 to %d",
                                   &value[i], &cmd->name,
                                   NGX_HTTP_IDEM_UNKNOWN_MAX_LIMIT);
                return NGX_CONF_ERROR;
            }

            max = (ngx_uint_t) n;

            if (imcf->metrics_unknown_max
                && imcf->metrics_unknown_max != max)
            {
                goto conflict;
            }

            imcf->metrics_unknown_max = max;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\" in \"%V\" directive",
                           &value[i], &cmd->name);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, "
                       "unknown_interval takes a time over 0",
                       &value[i], &cmd->name);
    return NGX_CONF_ERROR;

conflict:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"%V\" in \"%V\" directive differs from an "
                       "earlier idem_metrics: one zone shows every "
                       "location's", &value[i], &cmd->name);
    return NGX_CONF_ERROR;
}


/*
 * The zone of the cycle in use (ngx_cycle), or NULL when it shows none.
 * A configuration that failed to load (a reload refused at a "listen",
 * say) is never the cycle in use: its zone, freed with it, is never
 * reached, in this process or in workers forked later.
 */

static ngx_http_idem_metrics_shm_t *
ngx_http_idem_metrics_shm(void)
{
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_idem_module);

    if (imcf == NULL || imcf->metrics_zone == NULL) {
        return NULL;
    }

    return imcf->metrics_zone->data;
}


ngx_http_idem_counters_t *
ngx_http_idem_counters(void)
{
    ngx_http_idem_metrics_shm_t  *shm;

    shm = ngx_http_idem_metrics_shm();

    return (shm != NULL) ? &shm->counters : NULL;
}


/*
 * A reload keeps the counters: the zone's memory is handed over.  The
 * zone's size follows the layout's, so a module whose layout changed gets
 * a new zone; one whose size came out the same starts from zero.
 */

static ngx_int_t
ngx_http_idem_metrics_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_slab_pool_t              *shpool;
    ngx_http_idem_metrics_shm_t  *shm;

    shm = data;

    if (shm != NULL && shm->size == sizeof(ngx_http_idem_metrics_shm_t)) {
        shm_zone->data = shm;
        return NGX_OK;
    }

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm == NULL && shm_zone->shm.exists) {
        shm_zone->data = shpool->data;
        return NGX_OK;
    }

    if (shm != NULL) {
        ngx_memzero(shm, sizeof(ngx_http_idem_metrics_shm_t));

    } else {
        shm = ngx_slab_calloc(shpool, sizeof(ngx_http_idem_metrics_shm_t));
        if (shm == NULL) {
            return NGX_ERROR;
        }
    }

    shm->size = sizeof(ngx_http_idem_metrics_shm_t);

    shpool->data = shm;
    shm_zone->data = shm;

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_metrics_handler(ngx_http_request_t *r)
{
    size_t                             len;
    ngx_int_t                          rc;
    ngx_str_t                          body;
    ngx_buf_t                         *b;
    ngx_uint_t                         i, k, waiters;
    ngx_array_t                       *nodes, *connects;
    ngx_atomic_t                      *value;
    ngx_http_idem_metric_t            *m;
    ngx_http_idem_counters_t          *counters;
    ngx_http_idem_main_conf_t         *imcf;
    ngx_http_idem_metrics_shm_t       *shm;
    ngx_http_idem_metrics_hist_t      *h;
    ngx_http_idem_metrics_redis_t     *node;
    ngx_http_idem_metrics_connects_t  *count;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    /* the counters of the configuration this request runs under */

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    shm = (imcf->metrics_zone != NULL) ? imcf->metrics_zone->data : NULL;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem metrics: zone data at %p", shm);

    if (shm == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    counters = &shm->counters;

    /* the UNKNOWN calls' count: a read due starts, never waited for */

    ngx_http_idem_metrics_unknown_refresh(r, shm->streams);

    nodes = ngx_http_idem_metrics_workers(r, shm, &waiters, &connects);
    if (nodes == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = 0;

    for (m = ngx_http_idem_metrics_list; m->name; m++) {
        len += 2 * ngx_strlen(m->name) + ngx_strlen(m->labels)
               + (m->help ? ngx_strlen(m->help) : 0)
               + sizeof("# HELP  \n# TYPE  counter\n{} \n") + NGX_ATOMIC_T_LEN;
    }

    for (h = ngx_http_idem_metrics_hists; h->name; h++) {
        len += 2 * ngx_strlen(h->name) + ngx_strlen(h->help)
               + sizeof("# HELP  \n# TYPE  histogram\n");

        for (i = 0; i < h->n; i++) {
            len += (NGX_HTTP_IDEM_METRICS_BUCKETS + 2)
                   * (ngx_strlen(h->name) + ngx_strlen(h->label)
                      + ngx_strlen(h->values[i])
                      + NGX_HTTP_IDEM_METRICS_LINE);
        }
    }

    len += 1024 + NGX_ATOMIC_T_LEN;    /* the gauges' HELP and TYPE */

    node = nodes->elts;

    for (i = 0; i < nodes->nelts; i++) {
        len += 2 * (sizeof("idem_redis_connections{node=\"\","
                           "role=\"sentinel\"} \n") + 2 * node[i].name.len
                    + NGX_ATOMIC_T_LEN);
    }

    len += 1024;    /* the connects' HELP and TYPE */

    count = connects->elts;

    for (i = 0; i < connects->nelts; i++) {
        len += (1 + NGX_HTTP_IDEM_STORE_FAILS)
               * (sizeof("idem_redis_connect_failures_total{node=\"\","
                         "role=\"sentinel\",reason=\"readonly\"} \n")
                  + 2 * count[i].name.len + NGX_ATOMIC_T_LEN);
    }

    len += ngx_http_idem_storm_metrics_len(r);
    len += ngx_http_idem_metrics_unknown_len(r);

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (m = ngx_http_idem_metrics_list; m->name; m++) {
        value = (ngx_atomic_t *) ((char *) counters + m->offset);

        if (m->help) {
            b->last = ngx_sprintf(b->last, "# HELP %s %s\n# TYPE %s counter\n",
                                  m->name, m->help, m->name);
        }

        b->last = ngx_sprintf(b->last, m->labels[0] ? "%s{%s} %uA\n"
                                                     : "%s%s %uA\n",
                              m->name, m->labels, *value);
    }

    b->last = ngx_http_idem_metrics_histograms(b->last, shm);

    /* gauges: what each worker knows, added up */

    b->last = ngx_sprintf(b->last,
                  "# HELP idem_dedupe_waiters Duplicates waiting now for "
                  "their call in flight (idem_dedupe_wait), in all "
                  "workers.\n"
                  "# TYPE idem_dedupe_waiters gauge\n"
                  "idem_dedupe_waiters %ui\n", waiters);

    if (imcf->store.addr.data != NULL) {
        b->last = ngx_sprintf(b->last,
                  "# HELP idem_redis_up Whether every worker that uses the "
                  "Redis node is connected to it (1) or some worker is not "
                  "(0).\n"
                  "# TYPE idem_redis_up gauge\n");

        for (i = 0; i < nodes->nelts; i++) {
            b->last = ngx_sprintf(b->last, "idem_redis_up{node=\"");
            b->last = ngx_http_idem_metrics_label(b->last, &node[i].name);
            b->last = ngx_sprintf(b->last, "\",role=\"%s\"} %ui\n",
                                  node[i].sentinel ? "sentinel" : "data",
                                  (ngx_uint_t) (node[i].up == node[i].workers));
        }

        b->last = ngx_sprintf(b->last,
                  "# HELP idem_redis_connections Workers connected to the "
                  "Redis node now.\n"
                  "# TYPE idem_redis_connections gauge\n");

        for (i = 0; i < nodes->nelts; i++) {
            b->last = ngx_sprintf(b->last, "idem_redis_connections{node=\"");
            b->last = ngx_http_idem_metrics_label(b->last, &node[i].name);
            b->last = ngx_sprintf(b->last, "\",role=\"%s\"} %ui\n",
                                  node[i].sentinel ? "sentinel" : "data",
                                  node[i].up);
        }

        /* counters: the workers running now, each since it started */

        b->last = ngx_sprintf(b->last,
                  "# HELP idem_redis_connects_total Connections made to the "
                  "Redis node by the workers running now, each since it "
                  "started.\n"
                  "# TYPE idem_redis_connects_total counter\n");

        for (i = 0; i < connects->nelts; i++) {
            b->last = ngx_sprintf(b->last,
                                  "idem_redis_connects_total{node=\"");
            b->last = ngx_http_idem_metrics_label(b->last, &count[i].name);
            b->last = ngx_sprintf(b->last, "\",role=\"%s\"} %ui\n",
                                  count[i].sentinel ? "sentinel" : "data",
                                  count[i].connects);
        }

        b->last = ngx_sprintf(b->last,
                  "# HELP idem_redis_connect_failures_total Connects to the "
                  "Redis node that failed, by the workers running now, by "
                  "why: connect (refused, timed out), resolve (its name did "
                  "not resolve), auth (AUTH refused), readonly (a replica: "
                  "connected again).\n"
                  "# TYPE idem_redis_connect_failures_total counter\n");

        for (i = 0; i < connects->nelts; i++) {
            for (k = 0; k < NGX_HTTP_IDEM_STORE_FAILS; k++) {
                b->last = ngx_sprintf(b->last,
                                 "idem_redis_connect_failures_total{node=\"");
                b->last = ngx_http_idem_metrics_label(b->last,
                                                      &count[i].name);
                b->last = ngx_sprintf(b->last,
                                      "\",role=\"%s\",reason=\"%s\"} %ui\n",
                                      count[i].sentinel ? "sentinel" : "data",
                                      ngx_http_idem_metrics_fail_reasons[k],
                                      count[i].failures[k]);
            }
        }
    }

    b->last = ngx_http_idem_metrics_unknown_show(r, b->last, shm->streams);

    b->last = ngx_http_idem_storm_metrics(r, b->last);

    body.data = b->pos;
    body.len = b->last - b->pos;

    return ngx_http_idem_send_response(r, NGX_HTTP_OK,
                                       "text/plain; version=0.0.4", &body);
}


/* each histogram: its buckets made cumulative, its sum in seconds */

static u_char *
ngx_http_idem_metrics_histograms(u_char *p, ngx_http_idem_metrics_shm_t *shm)
{
    uint64_t                       sum;
    ngx_uint_t                     i, k, count;
    ngx_http_idem_histogram_t     *hist;
    ngx_http_idem_metrics_hist_t  *h;

    for (h = ngx_http_idem_metrics_hists; h->name; h++) {

        p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s histogram\n",
                        h->name, h->help, h->name);

        hist = (ngx_http_idem_histogram_t *) ((char *) shm + h->offset);

        for (i = 0; i < h->n; i++) {
            count = 0;

            for (k = 0; k < NGX_HTTP_IDEM_METRICS_BUCKETS; k++) {
                count += hist[i].bucket[k];

                p = ngx_sprintf(p, "%s_bucket{%s=\"%s\",le=\"%s\"} %ui\n",
                                h->name, h->label, h->values[i],
                                ngx_http_idem_metrics_le[k], count);
            }

            sum = hist[i].sum;

            p = ngx_sprintf(p, "%s_sum{%s=\"%s\"} %uL.%06uL\n"
                            "%s_count{%s=\"%s\"} %ui\n",
                            h->name, h->label, h->values[i],
                            sum / 1000000, sum % 1000000,
                            h->name, h->label, h->values[i], count);
        }
    }

    return p;
}


/* a label's value: backslash, double quote and newline escaped */

static u_char *
ngx_http_idem_metrics_label(u_char *p, ngx_str_t *value)
{
    u_char  *s, *last;

    last = value->data + value->len;

    for (s = value->data; s < last; s++) {
        if (*s == '\\' || *s == '"') {
            *p++ = '\\';
            *p++ = *s;

        } else if (*s == '\n') {
            *p++ = '\\';
            *p++ = 'n';

        } else {
            *p++ = *s;
        }
    }

    return p;
}


/*
 * The workers' own state, added up: the waiters of every worker, and each
 * Redis node with how many workers use it and how many are connected to
 * it.  A worker that died without its exit (killed) is left out: its
 * pid is gone.  This worker's connections are published first, as they
 * are now.
 */

static ngx_array_t *
ngx_http_idem_metrics_workers(ngx_http_request_t *r,
    ngx_http_idem_metrics_shm_t *shm, ngx_uint_t *waiters,
    ngx_array_t **connects)
{
    ngx_str_t                        name;
    ngx_uint_t                       i, k, j;
    ngx_array_t                     *nodes;
    ngx_http_idem_metrics_node_t    *n;
    ngx_http_idem_metrics_redis_t   *node;
    ngx_http_idem_metrics_worker_t  *w, copy;

    *waiters = 0;

    nodes = ngx_array_create(r->pool, 4, sizeof(ngx_http_idem_metrics_redis_t));
    if (nodes == NULL) {
        return NULL;
    }

    *connects = ngx_array_create(r->pool, 4,
                                 sizeof(ngx_http_idem_metrics_connects_t));
    if (*connects == NULL) {
        return NULL;
    }

    ngx_http_idem_metrics_publish(shm);

    for (i = 0; i < NGX_HTTP_IDEM_METRICS_WORKERS; i++) {
        w = &shm->workers[i];

        if (w->pid == 0 || !ngx_http_idem_metrics_alive((ngx_pid_t) w->pid)) {
            continue;
        }

        if (ngx_http_idem_metrics_read_worker(w, &copy) != NGX_OK) {
            continue;
        }

        *waiters += copy.waiters;

        if (ngx_http_idem_metrics_add_counts(r, *connects, &copy) != NGX_OK) {
            return NULL;
        }

        for (k = 0; k < copy.nnodes; k++) {
            n = &copy.nodes[k];

            name.data = n->name;
            name.len = n->len;

            node = nodes->elts;

            for (j = 0; j < nodes->nelts; j++) {
                if (node[j].sentinel == n->sentinel
                    && node[j].name.len == name.len
                    && ngx_strncmp(node[j].name.data, name.data, name.len)
                       == 0)
                {
                    break;
                }
            }

            if (j == nodes->nelts) {
                node = ngx_array_push(nodes);
                if (node == NULL) {
                    return NULL;
                }

                node->name.data = ngx_pstrdup(r->pool, &name);
                if (node->name.data == NULL) {
                    return NULL;
                }

                node->name.len = name.len;
                node->sentinel = n->sentinel;
                node->workers = 0;
                node->up = 0;

            } else {
                node = &node[j];
            }

            node->workers++;
            node->up += n->up;
        }
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem metrics: %ui redis nodes, %ui waiters",
                   nodes->nelts, *waiters);

    return nodes;
}


/* a whole copy of a worker's slot, or NGX_DECLINED: it was being written */

/* a worker's connects, added to those of the same node name and role */

static ngx_int_t
ngx_http_idem_metrics_add_counts(ngx_http_request_t *r,
    ngx_array_t *connects, ngx_http_idem_metrics_worker_t *w)
{
    ngx_str_t                          name;
    ngx_uint_t                         i, j, k;
    ngx_http_idem_metrics_count_t     *n;
    ngx_http_idem_metrics_connects_t  *c;

    for (i = 0; i < w->ncounts; i++) {
        n = &w->counts[i];

        name.data = n->name;
        name.len = n->len;

        c = connects->elts;

        for (j = 0; j < connects->nelts; j++) {
            if (c[j].sentinel == n->sentinel && c[j].name.len == name.len
                && ngx_strncmp(c[j].name.data, name.data, name.len) == 0)
            {
                break;
            }
        }

        if (j == connects->nelts) {
            c = ngx_array_push(connects);
            if (c == NULL) {
                return NGX_ERROR;
            }

            ngx_memzero(c, sizeof(ngx_http_idem_metrics_connects_t));

            c->name.data = ngx_pstrdup(r->pool, &name);
            if (c->name.data == NULL) {
                return NGX_ERROR;
            }

            c->name.len = name.len;
            c->sentinel = n->sentinel;

        } else {
            c = &c[j];
        }

        c->connects += n->connects;

        for (k = 0; k < NGX_HTTP_IDEM_STORE_FAILS; k++) {
            c->failures[k] += n->failures[k];
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_metrics_read_worker(ngx_http_idem_metrics_worker_t *w,
    ngx_http_idem_metrics_worker_t *copy)
{
    ngx_uint_t    tries;
    ngx_atomic_t  seq;

    for (tries = 0; tries < 8; tries++) {
        seq = w->seq;

        if (seq & 1) {
            ngx_cpu_pause();
            continue;
        }

        ngx_memory_barrier();

        ngx_memcpy(copy, w, sizeof(ngx_http_idem_metrics_worker_t));

        ngx_memory_barrier();

        if (w->seq == seq) {
            copy->nnodes = ngx_min(copy->nnodes, NGX_HTTP_IDEM_METRICS_NODES);
            copy->ncounts = ngx_min(copy->ncounts,
                                    NGX_HTTP_IDEM_METRICS_NODES);
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


static ngx_uint_t
ngx_http_idem_metrics_alive(ngx_pid_t pid)
{
    if (pid == ngx_pid) {
        return 1;
    }

    return kill(pid, 0) == 0 || ngx_errno == NGX_EPERM;
}


/*
 * A worker takes a slot for what only it knows: a free one, or one whose
 * worker died without giving it back.  Only where Redis is configured.
 */

ngx_int_t
ngx_http_idem_metrics_init_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                       i;
    ngx_atomic_t                     pid;
    ngx_http_idem_main_conf_t       *imcf;
    ngx_http_idem_metrics_shm_t     *shm;
    ngx_http_idem_metrics_worker_t  *w;

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    imcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_idem_module);

    if (imcf == NULL || imcf->metrics_zone == NULL
        || imcf->store.addr.data == NULL)
    {
        return NGX_OK;
    }

    shm = imcf->metrics_zone->data;

    for (i = 0; i < NGX_HTTP_IDEM_METRICS_WORKERS; i++) {
        w = &shm->workers[i];
        pid = w->pid;

        if (pid != 0 && ngx_http_idem_metrics_alive((ngx_pid_t) pid)) {
            continue;
        }

        if (!ngx_atomic_cmp_set(&w->pid, pid, (ngx_atomic_uint_t) ngx_pid)) {
            continue;
        }

        /* a worker killed while writing left it odd */

        w->seq |= 1;
        ngx_memory_barrier();

        w->nnodes = 0;
        w->waiters = 0;

        ngx_memory_barrier();
        w->seq++;

        ngx_http_idem_metrics_slot = i;
        break;
    }

    if (ngx_http_idem_metrics_slot == -1) {
        ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                      "idem: more than %d workers: this one's Redis "
                      "connections and waiters are not in idem_metrics",
                      NGX_HTTP_IDEM_METRICS_WORKERS);
        return NGX_OK;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, cycle->log, 0,
                   "idem metrics: worker slot %i",
                   ngx_http_idem_metrics_slot);

    /* cancelable: it never keeps a worker that is shutting down */

    ngx_http_idem_metrics_ev.handler = ngx_http_idem_metrics_publish_handler;
    ngx_http_idem_metrics_ev.data = cycle;   /* debug lines read its "fd" */
    ngx_http_idem_metrics_ev.log = cycle->log;
    ngx_http_idem_metrics_ev.cancelable = 1;

    ngx_add_timer(&ngx_http_idem_metrics_ev, NGX_HTTP_IDEM_METRICS_PUBLISH);

    return NGX_OK;
}


void
ngx_http_idem_metrics_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_idem_metrics_shm_t     *shm;
    ngx_http_idem_metrics_worker_t  *w;

    if (ngx_http_idem_metrics_ev.timer_set) {
        ngx_del_timer(&ngx_http_idem_metrics_ev);
    }

    shm = ngx_http_idem_metrics_shm();

    if (shm != NULL) {
        ngx_http_idem_metrics_unknown_exit(shm->streams);
    }

    if (ngx_http_idem_metrics_slot == -1 || shm == NULL) {
        return;
    }

    w = &shm->workers[ngx_http_idem_metrics_slot];

    ngx_http_idem_metrics_slot = -1;

    (void) ngx_atomic_cmp_set(&w->pid, (ngx_atomic_uint_t) ngx_pid, 0);
}


static void
ngx_http_idem_metrics_publish_handler(ngx_event_t *ev)
{
    ngx_http_idem_metrics_shm_t  *shm;

    shm = ngx_http_idem_metrics_shm();

    if (shm != NULL) {
        ngx_http_idem_metrics_publish(shm);
    }

    if (!ngx_exiting && !ngx_quit && !ngx_terminate) {
        ngx_add_timer(ev, NGX_HTTP_IDEM_METRICS_PUBLISH);
    }
}


/* this worker's Redis connections, as the store has them now */

static void
ngx_http_idem_metrics_publish(ngx_http_idem_metrics_shm_t *shm)
{
    ngx_uint_t                       i, n;
    ngx_http_idem_store_node_t       nodes[NGX_HTTP_IDEM_METRICS_NODES];
    ngx_http_idem_store_count_t      counts[NGX_HTTP_IDEM_METRICS_NODES];
    ngx_http_idem_metrics_node_t    *node;
    ngx_http_idem_metrics_count_t   *count;
    ngx_http_idem_metrics_worker_t  *w;

    if (ngx_http_idem_metrics_slot == -1) {
        return;
    }

    w = &shm->workers[ngx_http_idem_metrics_slot];

    n = ngx_http_idem_store_nodes(nodes, NGX_HTTP_IDEM_METRICS_NODES);

    w->seq++;
    ngx_memory_barrier();

    for (i = 0; i < n; i++) {
        node = &w->nodes[i];

        node->len = (u_char) ngx_min(nodes[i].name.len,
                                     NGX_HTTP_IDEM_METRICS_NAME_LEN);
        ngx_memcpy(node->name, nodes[i].name.data, node->len);
        node->sentinel = nodes[i].sentinel;
        node->up = nodes[i].up;
    }

    w->nnodes = n;

    n = ngx_http_idem_store_counts(counts, NGX_HTTP_IDEM_METRICS_NODES);

    for (i = 0; i < n; i++) {
        count = &w->counts[i];

        count->len = (u_char) ngx_min(counts[i].name.len,
                                      NGX_HTTP_IDEM_METRICS_NAME_LEN);
        ngx_memcpy(count->name, counts[i].name.data, count->len);
        count->sentinel = counts[i].sentinel;
        count->connects = counts[i].connects;
        ngx_memcpy(count->failures, counts[i].failures,
                   sizeof(count->failures));
    }

    w->ncounts = n;

    ngx_memory_barrier();
    w->seq++;
}


static void
ngx_http_idem_observe(ngx_http_idem_histogram_t *h, uint64_t us)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_IDEM_METRICS_BUCKETS - 1; i++) {
        if (us <= ngx_http_idem_metrics_bounds[i]) {
            break;
        }
    }

    (void) ngx_atomic_fetch_add(&h->bucket[i], 1);
    (void) ngx_atomic_fetch_add(&h->sum, (ngx_atomic_int_t) us);
}


/* µs of a monotonic clock (vDSO, no system call); 0 without idem_metrics */

uint64_t
ngx_http_idem_metrics_clock(void)
{
    struct timespec  ts;

    if (ngx_http_idem_metrics_shm() == NULL
        || clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
    {
        return 0;
    }

    return (uint64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}


/*
 * An execution ended (the log phase): its duration since the module first
 * saw the request (its rewrite phase), in µs of a monotonic clock, by its
 * final state.  A duplicate that a dedupe route answered itself
 * (replayed, 409, 422, 503) is not an execution and is not shown, nor is
 * a call the module refused before it existed: its ids or its budget
 * invalid, no scope, a resend over idem_resend_limit (idem_rejected_total
 * and idem_resends_refused_total count those).
 */

void
ngx_http_idem_observe_call(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    uint64_t                      now;
    ngx_http_idem_metrics_shm_t  *shm;

    shm = ngx_http_idem_metrics_shm();

    if (shm == NULL
        || ctx->record.final_state < NGX_HTTP_IDEM_SUCCESS
        || ctx->record.final_state > NGX_HTTP_IDEM_UNKNOWN
        || (ctx->dedupe.state != NGX_HTTP_IDEM_DEDUPE_NONE
            && !ctx->dedupe.owner))
    {
        return;
    }

    if (!ctx->ids.settled || ngx_http_idem_metrics_refusal(ctx)) {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem metrics: a refused call, no execution");
        return;
    }

    now = ngx_http_idem_metrics_clock();

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem metrics: execution of %uL us",
                   (ctx->start_us && now > ctx->start_us)
                   ? now - ctx->start_us : 0);

    ngx_http_idem_observe(&shm->calls[ctx->record.final_state
                                      - NGX_HTTP_IDEM_SUCCESS],
                          (ctx->start_us && now > ctx->start_us)
                          ? now - ctx->start_us : 0);
}


/*
 * The module's answer to a call that never became an execution: nothing
 * forwarded, nothing in its record.  A budget spent before the first
 * attempt (504) or a breaker's 503 is an execution: its record has it.
 */

static ngx_uint_t
ngx_http_idem_metrics_refusal(ngx_http_idem_ctx_t *ctx)
{
    if (ctx->refused == NULL) {
        return 0;
    }

    switch (ctx->refused->id) {

    case NGX_HTTP_IDEM_P_MISSING_CALL_ID:
    case NGX_HTTP_IDEM_P_INVALID_CALL_ID:
    case NGX_HTTP_IDEM_P_INVALID_TRACE_ID:
    case NGX_HTTP_IDEM_P_INVALID_DEADLINE:
    case NGX_HTTP_IDEM_P_EMPTY_SCOPE:
    case NGX_HTTP_IDEM_P_TOO_MANY_RESENDS:
        return 1;

    default:
        return 0;
    }
}


/* a claim's answer came: since it was sent, in µs */

void
ngx_http_idem_observe_claim(ngx_http_idem_ctx_t *ctx)
{
    uint64_t                      now;
    ngx_http_idem_metrics_shm_t  *shm;

    if (ctx->dedupe.asked_us == 0) {
        return;
    }

    shm = ngx_http_idem_metrics_shm();
    now = ngx_http_idem_metrics_clock();

    if (shm == NULL || now < ctx->dedupe.asked_us) {
        return;
    }

    ngx_http_idem_observe(&shm->claims[ctx->dedupe.claim.replicas ? 1 : 0],
                          now - ctx->dedupe.asked_us);

    ctx->dedupe.asked_us = 0;
}


/* a waiting duplicate's wait is over: since its first claim */

void
ngx_http_idem_observe_wait(ngx_http_idem_ctx_t *ctx, ngx_uint_t result)
{
    uint64_t                      now;
    ngx_http_idem_metrics_shm_t  *shm;

    shm = ngx_http_idem_metrics_shm();

    if (shm == NULL || result >= NGX_HTTP_IDEM_WAITED_N) {
        return;
    }

    now = ngx_http_idem_metrics_clock();

    ngx_http_idem_observe(&shm->waits[result],
                          (ctx->dedupe.claimed_us
                           && now > ctx->dedupe.claimed_us)
                          ? now - ctx->dedupe.claimed_us : 0);
}


/* how a waiter's wait ended, from the claim's answer that ended it */

ngx_uint_t
ngx_http_idem_metrics_waited(ngx_http_idem_store_found_t *found)
{
    switch (found->verdict) {

    case NGX_HTTP_IDEM_STORE_CLAIMED:
        return NGX_HTTP_IDEM_WAITED_RAN;

    case NGX_HTTP_IDEM_STORE_REPLAY:
        return found->answer.len ? NGX_HTTP_IDEM_WAITED_REPLAYED
                                 : NGX_HTTP_IDEM_WAITED_CONFLICT;

    case NGX_HTTP_IDEM_STORE_UNAVAILABLE:
    case NGX_HTTP_IDEM_STORE_NOT_DURABLE:
        return NGX_HTTP_IDEM_WAITED_UNAVAILABLE;

    case NGX_HTTP_IDEM_STORE_IN_FLIGHT:
        return NGX_HTTP_IDEM_WAITED_TIMED_OUT;

    default:
        return NGX_HTTP_IDEM_WAITED_CONFLICT;
    }
}


/* this worker's waiting duplicates, now */

void
ngx_http_idem_metrics_waiters(ngx_uint_t n)
{
    ngx_http_idem_metrics_shm_t  *shm;

    if (ngx_http_idem_metrics_slot == -1) {
        return;
    }

    shm = ngx_http_idem_metrics_shm();

    if (shm != NULL) {
        shm->workers[ngx_http_idem_metrics_slot].waiters = n;
    }
}
