
/*
 * ngx_http_idem_module: the command table, postconfiguration and the
 * process hooks.  The configuration is created and merged in
 * ngx_http_idem_conf.c, its setters are in _directive.c; the request's
 * sequence is in _handler.c, the filters in _filter.c, the context in
 * _ctx.c.  The store is in store/ (HACKING.md, "Layout").
 */


#include "ngx_http_idem_common.h"
#include "ngx_http_idem_conf.h"
#include "ngx_http_idem_call_id_source.h"
#include "ngx_http_idem_directive.h"
#include "ngx_http_idem_filter.h"
#include "ngx_http_idem_handler.h"
#include "ngx_http_idem_metrics.h"
#include "ngx_http_idem_otel.h"
#include "ngx_http_idem_record.h"
#include "ngx_http_idem_resend_limit.h"
#include "ngx_http_idem_status.h"
#include "ngx_http_idem_store.h"
#include "ngx_http_idem_storm.h"
#include "ngx_http_idem_stream.h"
#include "ngx_http_idem_trace.h"
#include "ngx_http_idem_upstream.h"
#include "ngx_http_idem_variables.h"


static ngx_int_t ngx_http_idem_init_process(ngx_cycle_t *cycle);
static void ngx_http_idem_exit_process(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_idem_preconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_idem_postconfiguration(ngx_conf_t *cf);


static ngx_conf_enum_t  ngx_http_idem_missing[] = {
    { ngx_string("generate"), NGX_HTTP_IDEM_MISSING_GENERATE },
    { ngx_string("reject"), NGX_HTTP_IDEM_MISSING_REJECT },
    { ngx_null_string, 0 }
};


static ngx_conf_enum_t  ngx_http_idem_generators[] = {
    { ngx_string("uuid"), NGX_HTTP_IDEM_GENERATOR_UUID },
    { ngx_string("prefixed"), NGX_HTTP_IDEM_GENERATOR_PREFIXED },
    { ngx_null_string, 0 }
};


static ngx_conf_enum_t  ngx_http_idem_forms[] = {
    { ngx_string("token"), NGX_HTTP_IDEM_FORM_TOKEN },
    { ngx_string("string"), NGX_HTTP_IDEM_FORM_STRING },
    { ngx_null_string, 0 }
};


static ngx_conf_enum_t  ngx_http_idem_client_aborts[] = {
    { ngx_string("run"), NGX_HTTP_IDEM_CLIENT_ABORT_RUN },
    { ngx_string("abort"), NGX_HTTP_IDEM_CLIENT_ABORT_ABORT },
    { ngx_null_string, 0 }
};


/*
 * idem_deadline (a budget over 10 minutes is most likely a unit mistake:
 * a warning), idem_dedupe_wait, idem_record_ttl, idem_dedupe_lease; a
 * header's "off"
 */

static ngx_http_idem_conf_bounds_t  ngx_http_idem_budget_bounds = {
    1, NGX_MAX_INT32_VALUE, 10 * 60 * 1000
};

static ngx_http_idem_conf_bounds_t  ngx_http_idem_wait_bounds = {
    1, NGX_MAX_INT32_VALUE, 0
};

static ngx_http_idem_conf_bounds_t  ngx_http_idem_ttl_bounds = {
    0, (ngx_msec_t) 365 * 86400000, 0
};

static ngx_http_idem_conf_bounds_t  ngx_http_idem_header_off = { 1, 0, 0 };

/* idem_dedupe_wait_max */
static ngx_conf_num_bounds_t  ngx_http_idem_wait_max_bounds = {
    ngx_conf_check_num_bounds, 0, 1000000
};


static ngx_command_t  ngx_http_idem_commands[] = {

    { ngx_string("idem"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_http_idem_enable,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, enable),
      NULL },

    { ngx_string("idem_call_id_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_header,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, call_id_header),
      NULL },

    { ngx_string("idem_trace_id_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_header,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, trace_id_header),
      NULL },

    { ngx_string("idem_otel_sample"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_trace_set_sample,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, otel_sample),
      NULL },

    { ngx_string("idem_call_id_from"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_call_id_from,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_call_id_json"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE123,
      ngx_http_idem_set_call_id_json,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_call_id_missing"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, call_id_missing),
      &ngx_http_idem_missing },

    { ngx_string("idem_call_id_generator"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, call_id_generator),
      &ngx_http_idem_generators },

    { ngx_string("idem_call_id_form"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, call_id_form),
      &ngx_http_idem_forms },

    { ngx_string("idem_call_id_prefix"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_id_part,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, call_id_prefix),
      NULL },

    { ngx_string("idem_call_id_max_length"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_max_length,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, call_id_max_length),
      NULL },

    { ngx_string("idem_call_id_pattern"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_pattern,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_deadline"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_time,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, deadline),
      &ngx_http_idem_budget_bounds },

    { ngx_string("idem_deadline_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_header,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, deadline_header),
      &ngx_http_idem_header_off },

    { ngx_string("idem_idempotent"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, idempotent),
      NULL },

    { ngx_string("idem_retry"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_idem_set_retry,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_retry_budget"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_idem_storm_set_budget,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, storm),
      NULL },

    { ngx_string("idem_breaker"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_ANY,
      ngx_http_idem_storm_set_breaker,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, storm),
      NULL },

    { ngx_string("idem_retry_unsent"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, retry_unsent),
      NULL },

    { ngx_string("idem_redis"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_idem_set_redis,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_record"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, record),
      NULL },

    { ngx_string("idem_record_arrival_delay"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, record_arrival_delay),
      NULL },

    { ngx_string("idem_unknown_stream"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE12,
      ngx_http_idem_unknown_stream,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_receipt_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_header,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, receipt_header),
      &ngx_http_idem_header_off },

    { ngx_string("idem_record_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_time,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, record_ttl),
      &ngx_http_idem_ttl_bounds },

    { ngx_string("idem_record_short"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, record_short),
      NULL },

    { ngx_string("idem_record_max_executions"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_record_max_executions,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_key_prefix"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_id_part,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, key_prefix),
      NULL },

    { ngx_string("idem_dedupe"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, dedupe),
      NULL },

    { ngx_string("idem_dedupe_scope"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_scope,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_dedupe_fingerprint"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE23,
      ngx_http_idem_set_fingerprint,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_dedupe_store_max"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, dedupe_store_max),
      NULL },

    { ngx_string("idem_dedupe_lease"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_time,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, dedupe_lease),
      &ngx_http_idem_ttl_bounds },

    { ngx_string("idem_dedupe_replay"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_idem_set_replay,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_dedupe_client_abort"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_enum,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, dedupe_client_abort),
      &ngx_http_idem_client_aborts },

    { ngx_string("idem_dedupe_durable"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE12,
      ngx_http_idem_set_durable,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_dedupe_expires_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_header,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, dedupe_expires_header),
      &ngx_http_idem_header_off },

    { ngx_string("idem_dedupe_wait"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_time,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, dedupe_wait),
      &ngx_http_idem_wait_bounds },

    { ngx_string("idem_dedupe_wait_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, dedupe_wait_max),
      &ngx_http_idem_wait_max_bounds },

    { ngx_string("idem_resend_limit_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE23,
      ngx_http_idem_resend_limit_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_resend_limit"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE123,
      ngx_http_idem_resend_limit,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_status_url"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_status_url,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE123,
      ngx_http_idem_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE12,
      ngx_http_idem_metrics,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_node_id"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_id_part,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, node_id),
      NULL },

    { ngx_string("idem_otel_endpoint"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_otel_endpoint,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_otel_service_name"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, otel.service_name),
      NULL },

    { ngx_string("idem_otel_buffer"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, otel.buffer),
      NULL },

    { ngx_string("idem_otel_batch"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, otel.batch),
      NULL },

    { ngx_string("idem_otel_flush"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, otel.flush),
      NULL },

    { ngx_string("idem_otel_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, otel.timeout),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_idem_module_ctx = {
    ngx_http_idem_preconfiguration,        /* preconfiguration */
    ngx_http_idem_postconfiguration,       /* postconfiguration */

    ngx_http_idem_create_main_conf,        /* create main configuration */
    ngx_http_idem_init_main_conf,          /* init main configuration */

    ngx_http_idem_create_srv_conf,         /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_idem_create_loc_conf,         /* create location configuration */
    ngx_http_idem_merge_loc_conf           /* merge location configuration */
};


ngx_module_t  ngx_http_idem_module = {
    NGX_MODULE_V1,
    &ngx_http_idem_module_ctx,             /* module context */
    ngx_http_idem_commands,                /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_idem_init_process,            /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_idem_exit_process,            /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_int_t
ngx_http_idem_init_process(ngx_cycle_t *cycle)
{
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_idem_module);

    /* the worker's span exporter, when idem_otel_endpoint is set */

    if (ngx_http_idem_otel_init_process(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    if (imcf == NULL || imcf->store.addr.data == NULL) {
        return NGX_OK;
    }

    if (ngx_http_idem_store_init_process(cycle, &imcf->store) != NGX_OK) {
        return NGX_ERROR;
    }

    /* the worker's own state shown by idem_metrics: its Redis nodes */

    return ngx_http_idem_metrics_init_process(cycle);
}


static void
ngx_http_idem_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_idem_metrics_exit_process(cycle);
    ngx_http_idem_store_exit_process(cycle);
}


static ngx_int_t
ngx_http_idem_preconfiguration(ngx_conf_t *cf)
{
    return ngx_http_idem_add_variables(cf);
}


/*
 * Hooks are installed only when some location says "idem on": a loaded but
 * unused module adds nothing to any request.
 */

static ngx_int_t
ngx_http_idem_postconfiguration(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    ngx_http_core_loc_conf_t   *clcf;
    ngx_http_core_main_conf_t  *cmcf;
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);

    /* a Redis named by a host name is resolved with http{}'s resolver */

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    imcf->store.resolver = clcf->resolver;
    imcf->store.resolver_timeout = clcf->resolver_timeout;

    if (ngx_http_idem_store_check(cf, &imcf->store) != NGX_OK) {
        return NGX_ERROR;
    }

    /* the zone of idem_retry_budget and idem_breaker needs its size */

    if (ngx_http_idem_storm_init(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    /* every idem_resend_limit names a zone that exists, and limits */

    if (ngx_http_idem_resend_limit_init(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    if (!imcf->used) {
        return NGX_OK;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_REWRITE_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_idem_handler;

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PRECONTENT_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_idem_precontent_handler;

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_idem_log_handler;

    if (ngx_http_idem_upstream_init(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_http_idem_filter_init();

    return NGX_OK;
}
