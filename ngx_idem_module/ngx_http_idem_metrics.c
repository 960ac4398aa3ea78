
/*
 * Counters shared by all workers (a small shared memory zone, created only
 * when some location has "idem_metrics"), and the content handler that
 * shows them in Prometheus' text format.
 */


#include "ngx_http_idem_metrics.h"
#include "ngx_http_idem_storm.h"
#include "ngx_http_idem_util.h"


#define NGX_HTTP_IDEM_METRICS_ZONE_SIZE  (8 * ngx_pagesize)


static ngx_int_t ngx_http_idem_metrics_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_int_t ngx_http_idem_metrics_handler(ngx_http_request_t *r);


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
        "Calls answered 400 by the module.", invalid_call_id),
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
 * The counters of the cycle in use (ngx_cycle), or NULL when it shows
 * none.  A configuration that failed to load (a reload refused at a
 * "listen", say) is never the cycle in use: its zone, freed with it, is
 * never reached, in this process or in workers forked later.
 */

ngx_http_idem_counters_t *
ngx_http_idem_counters(void)
{
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_idem_module);

    if (imcf == NULL || imcf->metrics_zone == NULL) {
        return NULL;
    }

    return imcf->metrics_zone->data;
}


/* a reload keeps the counters: the zone's memory is handed over */

static ngx_int_t
ngx_http_idem_metrics_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_slab_pool_t           *shpool;
    ngx_http_idem_counters_t  *counters;

    if (data != NULL) {
        shm_zone->data = data;
        return NGX_OK;
    }

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        shm_zone->data = shpool->data;
        return NGX_OK;
    }

    counters = ngx_slab_calloc(shpool, sizeof(ngx_http_idem_counters_t));
    if (counters == NULL) {
        return NGX_ERROR;
    }

    shpool->data = counters;
    shm_zone->data = counters;

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_metrics_handler(ngx_http_request_t *r)
{
    size_t                      len;
    ngx_int_t                   rc;
    ngx_str_t                   body;
    ngx_buf_t                  *b;
    ngx_atomic_t               *value;
    ngx_http_idem_metric_t     *m;
    ngx_http_idem_counters_t   *counters;
    ngx_http_idem_main_conf_t  *imcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    /* the counters of the configuration this request runs under */

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    counters = (imcf->metrics_zone != NULL) ? imcf->metrics_zone->data
                                            : NULL;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem metrics: counters at %p", counters);

    if (counters == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = 0;

    for (m = ngx_http_idem_metrics_list; m->name; m++) {
        len += 2 * ngx_strlen(m->name) + ngx_strlen(m->labels)
               + (m->help ? ngx_strlen(m->help) : 0)
               + sizeof("# HELP  \n# TYPE  counter\n{} \n") + NGX_ATOMIC_T_LEN;
    }

    len += ngx_http_idem_storm_metrics_len(r);

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

    b->last = ngx_http_idem_storm_metrics(r, b->last);

    body.data = b->pos;
    body.len = b->last - b->pos;

    return ngx_http_idem_send_response(r, NGX_HTTP_OK,
                                       "text/plain; version=0.0.4", &body);
}
