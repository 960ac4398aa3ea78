
/*
 * ngx_http_idem_module: the command table, the configuration (create,
 * merge, postconfiguration) and the process hooks.  The request's
 * sequence is in ngx_http_idem_handler.c, the filters in _filter.c, the
 * setters in _directive.c, the context in _ctx.c.
 */


#include "ngx_http_idem_module.h"
#include "ngx_http_idem_record.h"
#include "ngx_http_idem_directive.h"
#include "ngx_http_idem_handler.h"
#include "ngx_http_idem_filter.h"


static ngx_int_t ngx_http_idem_init_process(ngx_cycle_t *cycle);
static void ngx_http_idem_exit_process(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_idem_preconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_idem_postconfiguration(ngx_conf_t *cf);
static void *ngx_http_idem_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_idem_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_idem_create_srv_conf(ngx_conf_t *cf);
static void *ngx_http_idem_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_idem_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);


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


/* idem_deadline, idem_record_ttl, idem_dedupe_lease; a header's "off" */

static ngx_http_idem_conf_bounds_t  ngx_http_idem_deadline_bounds = {
    1, NGX_MAX_INT32_VALUE
};

static ngx_http_idem_conf_bounds_t  ngx_http_idem_ttl_bounds = {
    0, (ngx_msec_t) 365 * 86400000
};

static ngx_http_idem_conf_bounds_t  ngx_http_idem_header_off = { 1, 0 };

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
      &ngx_http_idem_deadline_bounds },

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
      &ngx_http_idem_deadline_bounds },

    { ngx_string("idem_dedupe_wait_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, dedupe_wait_max),
      &ngx_http_idem_wait_max_bounds },

    { ngx_string("idem_status_url"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_status_url,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE12,
      ngx_http_idem_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_idem_metrics,
      0,
      0,
      NULL },

    { ngx_string("idem_node_id"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_id_part,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, node_id),
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

    if (imcf == NULL || imcf->store.addr.data == NULL) {
        return NGX_OK;
    }

    return ngx_http_idem_store_init_process(cycle, &imcf->store);
}


static void
ngx_http_idem_exit_process(ngx_cycle_t *cycle)
{
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
    ngx_http_core_main_conf_t  *cmcf;
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);

    /* the zone of idem_retry_budget and idem_breaker needs its size */

    if (ngx_http_idem_storm_init(cf) != NGX_OK) {
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


static void *
ngx_http_idem_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_idem_main_conf_t));
    if (imcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     imcf->node_id = { 0, NULL };
     *     imcf->source_header = { ... };
     *     imcf->attempt_header = { ... };
     *     imcf->traceparent_header = { ... };
     *     imcf->store = { ... };
     *     imcf->used = 0;
     *     imcf->metrics_zone = NULL;
     */

    imcf->record_ttl = NGX_CONF_UNSET_MSEC;
    imcf->record_max_executions = NGX_CONF_UNSET_UINT;
    imcf->record_short = NGX_CONF_UNSET;
    imcf->dedupe_wait_max = NGX_CONF_UNSET_UINT;

    return imcf;
}


static char *
ngx_http_idem_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_idem_main_conf_t *imcf = conf;

    size_t      i, len;
    u_char     *p;
    ngx_str_t   name;

    if (imcf->node_id.data == NULL) {

        /* the host name, mapped into the call id charset */

        len = ngx_min(cf->cycle->hostname.len, 64);

        p = ngx_pnalloc(cf->pool, len ? len : 1);
        if (p == NULL) {
            return NGX_CONF_ERROR;
        }

        for (i = 0; i < len; i++) {
            p[i] = cf->cycle->hostname.data[i];
            name.data = &p[i];
            name.len = 1;

            if (ngx_http_idem_check_charset(&name) != NGX_OK) {
                p[i] = '-';
            }
        }

        if (len == 0) {
            p[0] = 'n';
            len = 1;
        }

        imcf->node_id.data = p;
        imcf->node_id.len = len;
    }

    ngx_str_set(&name, "X-Call-Id-Source");
    if (ngx_http_idem_header_init(cf->pool, &imcf->source_header, &name)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_str_set(&name, "X-Call-Attempt");
    if (ngx_http_idem_header_init(cf->pool, &imcf->attempt_header, &name)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_str_set(&name, "grpc-timeout");
    ngx_conf_init_msec_value(imcf->record_ttl, 24 * 60 * 60 * 1000);
    ngx_conf_init_uint_value(imcf->record_max_executions,
                             NGX_HTTP_IDEM_RECORD_MAX_EXECUTIONS);
    ngx_conf_init_value(imcf->record_short, 1);
    ngx_conf_init_uint_value(imcf->dedupe_wait_max,
                             NGX_HTTP_IDEM_DEDUPE_WAIT_MAX);

    if (imcf->key_prefix.data == NULL) {
        ngx_str_set(&imcf->key_prefix, "idem:");
    }

    if (ngx_http_idem_header_init(cf->pool, &imcf->grpc_timeout_header,
                                  &name)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_str_set(&name, "traceparent");
    if (ngx_http_idem_header_init(cf->pool, &imcf->traceparent_header, &name)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_idem_create_srv_conf(ngx_conf_t *cf)
{
    ngx_http_idem_srv_conf_t  *iscf;

    iscf = ngx_pcalloc(cf->pool, sizeof(ngx_http_idem_srv_conf_t));
    if (iscf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     iscf->original_init = NULL;
     */

    return iscf;
}


static void *
ngx_http_idem_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_idem_loc_conf_t));
    if (ilcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     ilcf->call_id_header = { { 0, NULL }, NULL, 0 };
     *     ilcf->trace_id_header = { { 0, NULL }, NULL, 0 };
     *     ilcf->call_id_prefix = { 0, NULL };
     *     ilcf->call_id_pattern_src = { 0, NULL };
     *     ilcf->deadline_header = { { 0, NULL }, NULL, 0 };
     *     ilcf->status_id = NULL;
     *     ilcf->status_url = { 0, NULL };
     *     ilcf->dedupe_scope = NULL;
     *     ilcf->unknown_stream = { 0, NULL };
     *     ilcf->receipt_header = { { 0, NULL }, NULL, 0 };
     *     ilcf->dedupe_expires_header = { { 0, NULL }, NULL, 0 };
     *     ilcf->dedupe_durable_timeout = 0;
     *     ilcf->variable_upstream_logged = 0;
     */

    ilcf->enable = NGX_CONF_UNSET;
    ilcf->call_id_missing = NGX_CONF_UNSET_UINT;
    ilcf->call_id_generator = NGX_CONF_UNSET_UINT;
    ilcf->call_id_form = NGX_CONF_UNSET_UINT;
    ilcf->call_id_max_length = NGX_CONF_UNSET_UINT;

#if (NGX_PCRE)
    ilcf->call_id_pattern = NGX_CONF_UNSET_PTR;
#endif

    ilcf->deadline = NGX_CONF_UNSET_MSEC;
    ilcf->idempotent = NGX_CONF_UNSET;
    ilcf->retry_unsent = NGX_CONF_UNSET;
    ilcf->retry_attempts = NGX_CONF_UNSET_UINT;
    ilcf->retry_backoff = NGX_CONF_UNSET_MSEC;
    ilcf->retry_max_backoff = NGX_CONF_UNSET_MSEC;
    ilcf->retry_per_try_timeout = NGX_CONF_UNSET_MSEC;
    ilcf->retry_on = NGX_CONF_UNSET_UINT;
    ilcf->record = NGX_CONF_UNSET;
    ilcf->record_arrival_delay = NGX_CONF_UNSET_MSEC;
    ilcf->unknown_stream_maxlen = NGX_CONF_UNSET_UINT;
    ilcf->dedupe = NGX_CONF_UNSET;
    ilcf->dedupe_scope_set = NGX_CONF_UNSET;
    ilcf->dedupe_store_max = NGX_CONF_UNSET_SIZE;
    ilcf->dedupe_lease = NGX_CONF_UNSET_MSEC;
    ilcf->dedupe_wait = NGX_CONF_UNSET_MSEC;
    ilcf->dedupe_replay = NGX_CONF_UNSET_PTR;
    ilcf->dedupe_durable = NGX_CONF_UNSET_UINT;

    ngx_http_idem_storm_create_conf(&ilcf->storm);

    return ilcf;
}


static char *
ngx_http_idem_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_idem_loc_conf_t *prev = parent;
    ngx_http_idem_loc_conf_t *conf = child;

    ngx_uint_t  here, durable_here;

    /* set at this level: where a warning about them belongs */

    here = (conf->dedupe != NGX_CONF_UNSET
            || conf->call_id_missing != NGX_CONF_UNSET_UINT);
    durable_here = (conf->dedupe_durable != NGX_CONF_UNSET_UINT);

    ngx_conf_merge_value(conf->enable, prev->enable, 0);

    if (ngx_http_idem_merge_header(cf, &conf->call_id_header,
                                   &prev->call_id_header, "X-Call-Id")
        != NGX_OK
        || ngx_http_idem_merge_header(cf, &conf->trace_id_header,
                                      &prev->trace_id_header, "X-Trace-Id")
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_uint_value(conf->call_id_missing, prev->call_id_missing,
                              NGX_HTTP_IDEM_MISSING_GENERATE);
    ngx_conf_merge_uint_value(conf->call_id_generator,
                              prev->call_id_generator,
                              NGX_HTTP_IDEM_GENERATOR_UUID);
    ngx_conf_merge_uint_value(conf->call_id_form, prev->call_id_form,
                              NGX_HTTP_IDEM_FORM_TOKEN);
    ngx_conf_merge_str_value(conf->call_id_prefix, prev->call_id_prefix,
                             "gw");
    ngx_conf_merge_uint_value(conf->call_id_max_length,
                              prev->call_id_max_length, 128);

#if (NGX_PCRE)
    if (conf->call_id_pattern == NGX_CONF_UNSET_PTR) {
        conf->call_id_pattern = prev->call_id_pattern;
        conf->call_id_pattern_src = prev->call_id_pattern_src;
    }

    if (conf->call_id_pattern == NGX_CONF_UNSET_PTR) {
        conf->call_id_pattern = NULL;
    }
#endif

    ngx_conf_merge_msec_value(conf->deadline, prev->deadline, 0);

    if (ngx_http_idem_merge_header(cf, &conf->deadline_header,
                                   &prev->deadline_header, "X-Deadline-Ms")
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_value(conf->idempotent, prev->idempotent, 0);
    ngx_conf_merge_value(conf->retry_unsent, prev->retry_unsent, 0);

    /* idem_retry is one directive: its parameters are inherited together */

    if (conf->retry_attempts == NGX_CONF_UNSET_UINT) {
        conf->retry_attempts = prev->retry_attempts;
        conf->retry_backoff = prev->retry_backoff;
        conf->retry_max_backoff = prev->retry_max_backoff;
        conf->retry_per_try_timeout = prev->retry_per_try_timeout;
        conf->retry_on = prev->retry_on;
    }

    ngx_conf_merge_uint_value(conf->retry_attempts, prev->retry_attempts,
                              NGX_HTTP_IDEM_RETRY_ATTEMPTS);
    ngx_conf_merge_msec_value(conf->retry_backoff, prev->retry_backoff,
                              NGX_HTTP_IDEM_RETRY_BACKOFF);
    ngx_conf_merge_msec_value(conf->retry_max_backoff,
                              prev->retry_max_backoff,
                              NGX_HTTP_IDEM_RETRY_MAX_BACKOFF);
    ngx_conf_merge_msec_value(conf->retry_per_try_timeout,
                              prev->retry_per_try_timeout, 0);
    ngx_conf_merge_uint_value(conf->retry_on, prev->retry_on,
                              NGX_HTTP_IDEM_RETRY_ON);

    if (ngx_http_idem_storm_merge_conf(cf, &conf->storm, &prev->storm)
        != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_value(conf->record, prev->record, 0);
    ngx_conf_merge_msec_value(conf->record_arrival_delay,
                              prev->record_arrival_delay,
                              NGX_HTTP_IDEM_RECORD_ARRIVAL_DELAY);

    /* idem_unknown_stream is one directive: name and maxlen go together */

    if (conf->unknown_stream_maxlen == NGX_CONF_UNSET_UINT) {
        conf->unknown_stream = prev->unknown_stream;
        conf->unknown_stream_maxlen = prev->unknown_stream_maxlen;
    }

    ngx_conf_merge_str_value(conf->unknown_stream, prev->unknown_stream, "");
    ngx_conf_merge_uint_value(conf->unknown_stream_maxlen,
                              prev->unknown_stream_maxlen, 0);

    if (ngx_http_idem_merge_header(cf, &conf->receipt_header,
                                   &prev->receipt_header, "")
        != NGX_OK
        || ngx_http_idem_merge_header(cf, &conf->dedupe_expires_header,
                                      &prev->dedupe_expires_header,
                                      "Idempotency-Expires")
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_value(conf->dedupe, prev->dedupe, 0);
    if (conf->dedupe_scope_set == NGX_CONF_UNSET) {
        conf->dedupe_scope = prev->dedupe_scope;
    }

    ngx_conf_merge_value(conf->dedupe_scope_set, prev->dedupe_scope_set, 0);
    ngx_conf_merge_size_value(conf->dedupe_store_max, prev->dedupe_store_max,
                              64 * 1024);
    ngx_conf_merge_msec_value(conf->dedupe_lease, prev->dedupe_lease, 0);
    ngx_conf_merge_msec_value(conf->dedupe_wait, prev->dedupe_wait, 0);
    ngx_conf_merge_ptr_value(conf->dedupe_replay, prev->dedupe_replay, NULL);

    /* idem_dedupe_durable is one directive: replicas and timeout together */

    if (conf->dedupe_durable == NGX_CONF_UNSET_UINT) {
        conf->dedupe_durable = prev->dedupe_durable;
        conf->dedupe_durable_timeout = prev->dedupe_durable_timeout;
    }

    ngx_conf_merge_uint_value(conf->dedupe_durable, prev->dedupe_durable, 0);
    ngx_conf_merge_str_value(conf->status_url, prev->status_url, "");

    return ngx_http_idem_check_loc_conf(cf, conf, here, durable_here);
}
