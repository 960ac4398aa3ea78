
/*
 * ngx_http_idem_module: directives, configuration, and the hooks that run
 * on routes with "idem on" (an early phase handler and a header filter).
 */


#include "ngx_http_idem_module.h"
#include "ngx_http_idem_record.h"


static ngx_int_t ngx_http_idem_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_precontent_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_refused(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static ngx_int_t ngx_http_idem_log_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_init_process(ngx_cycle_t *cycle);
static void ngx_http_idem_exit_process(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_idem_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_idem_request_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_http_idem_ctx_t *ngx_http_idem_create_ctx(ngx_http_request_t *r);
static void ngx_http_idem_cleanup(void *data);

static char *ngx_http_idem_enable(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idem_set_header(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idem_set_enum(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idem_set_id_part(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idem_set_max_length(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idem_set_pattern(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idem_set_deadline(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idem_set_retry(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idem_set_scope(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idem_set_status_url(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idem_set_redis(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


static ngx_int_t ngx_http_idem_preconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_idem_postconfiguration(ngx_conf_t *cf);
static void *ngx_http_idem_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_idem_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_idem_create_srv_conf(ngx_conf_t *cf);
static void *ngx_http_idem_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_idem_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_idem_merge_header(ngx_conf_t *cf,
    ngx_http_idem_header_t *conf, ngx_http_idem_header_t *prev, char *def);


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


static ngx_conf_bitmask_t  ngx_http_idem_retry_on[] = {
    { ngx_string("error"), NGX_HTTP_UPSTREAM_FT_ERROR },
    { ngx_string("timeout"), NGX_HTTP_UPSTREAM_FT_TIMEOUT },
    { ngx_string("http_500"), NGX_HTTP_UPSTREAM_FT_HTTP_500 },
    { ngx_string("http_502"), NGX_HTTP_UPSTREAM_FT_HTTP_502 },
    { ngx_string("http_503"), NGX_HTTP_UPSTREAM_FT_HTTP_503 },
    { ngx_string("http_504"), NGX_HTTP_UPSTREAM_FT_HTTP_504 },
    { ngx_string("http_429"), NGX_HTTP_UPSTREAM_FT_HTTP_429 },
    { ngx_null_string, 0 }
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
      ngx_http_idem_set_deadline,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, deadline),
      NULL },

    { ngx_string("idem_deadline_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_header,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, deadline_header),
      (void *) 1 },

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

    { ngx_string("idem_unknown_stream"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE12,
      ngx_http_idem_unknown_stream,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_record_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_deadline,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idem_main_conf_t, record_ttl),
      (void *) 1 },

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
      ngx_http_idem_set_deadline,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idem_loc_conf_t, dedupe_lease),
      (void *) 1 },

    { ngx_string("idem_status_url"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idem_set_status_url,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idem_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
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


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;
static ngx_http_request_body_filter_pt   ngx_http_next_request_body_filter;


/*
 * Runs in the rewrite phase, before the rewrite module's own handlers and
 * before any access check, so that every answer (a 401, a "return", an
 * upstream's) carries the request's ids.
 */

static ngx_int_t
ngx_http_idem_handler(ngx_http_request_t *r)
{
    ngx_int_t                  rc;
    ngx_http_idem_ctx_t       *ctx;
    ngx_http_idem_problem_t    problem;
    ngx_http_idem_inbound_t    in;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (!ilcf->enable) {
        return NGX_DECLINED;
    }

    /*
     * ids are settled once per request, internal redirects included;
     * subrequests carry the main request's
     */

    if (ngx_http_idem_get_ctx(r) != NULL) {
        return NGX_DECLINED;
    }

    if (r != r->main) {

        /*
         * A subrequest (SSI, say) of a page the module never saw: it gets
         * no ids, but the client's copies of the headers the module owns
         * are dropped from its own list all the same.
         */

        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem handler: subrequest without ids");

        if (ngx_http_idem_scan_request(r, ilcf, &in) != NGX_OK
            || ngx_http_idem_drop_owned(r, ilcf, &in) != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return NGX_DECLINED;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem handler");

    ctx = ngx_http_idem_create_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;
    ctx->conf = ilcf;
    ctx->grpc = ngx_http_idem_grpc_request(r);
    ctx->call_id_header = &ilcf->call_id_header;
    ctx->trace_id_header = &ilcf->trace_id_header;

    if (ngx_http_idem_scan_request(r, ilcf, &in) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_idem_resolve_ids(r, ilcf, &in, ctx, &problem);

    if (rc == NGX_OK) {
        rc = ngx_http_idem_deadline_init(r, ilcf, &in, ctx, &problem);
    }

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idem: rejected: %V", &problem.detail);

        /* "missing-call-id", "invalid-call-id", "invalid-trace-id" ... */

        if (problem.type.data[0] == 'm') {
            ngx_http_idem_count(missing_call_id);

        } else if (problem.type.data[8] == 'c') {
            ngx_http_idem_count(invalid_call_id);

        } else if (problem.type.data[8] == 't') {
            ngx_http_idem_count(invalid_trace_id);

        } else {
            ngx_http_idem_count(invalid_deadline);
        }

        /* what the client claimed never passes on, whatever comes next */

        if (ngx_http_idem_drop_owned(r, ilcf, &in) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_idem_send_problem(r, &problem, &ctx->call_id);
    }

    if (ngx_http_idem_inject(r, ilcf, &in, ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->settled = 1;

    ngx_http_idem_count(calls);

    if (ctx->source == NGX_HTTP_IDEM_SOURCE_GATEWAY) {
        ngx_http_idem_count(generated);
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem call id: \"%V\" (%s), trace id: \"%V\"",
                   &ctx->call_id,
                   ctx->source == NGX_HTTP_IDEM_SOURCE_CLIENT
                   ? "client" : "gateway",
                   &ctx->trace_id);

    return NGX_DECLINED;
}


/*
 * After access checks, before the content handler: the call's record and
 * its claim (a duplicate is answered here); a budget spent by now is
 * answered without contacting the upstream; otherwise the call is timed
 * from here on.
 */

static ngx_int_t
ngx_http_idem_precontent_handler(ngx_http_request_t *r)
{
    ngx_int_t                  rc, rc2;
    ngx_http_idem_ctx_t       *ctx;
    ngx_http_idem_problem_t    problem;
    ngx_http_idem_loc_conf_t  *ilcf;

    if (r != r->main) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL) {
        return NGX_DECLINED;
    }

    if (ctx->refused != NULL || !ctx->settled) {
        return ngx_http_idem_refused(r, ctx);
    }

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (!ilcf->dedupe) {
        rc = ngx_http_idem_grpc_read_body(r, ctx);
        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    rc = NGX_OK;

    if (ilcf->record || ilcf->dedupe) {
        rc = ngx_http_idem_record_prepare(r, ctx);

        if (rc == NGX_ERROR) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (rc == NGX_DECLINED && ilcf->dedupe) {
            ngx_http_idem_problem_set(r, &problem, NGX_HTTP_BAD_REQUEST,
                                      "empty-dedupe-scope", "No scope",
                                      NULL, "the call's scope (who owns "
                                      "its id) is empty");
            ngx_http_idem_count(empty_scope);
            goto answer;
        }
    }

    rc2 = ngx_http_idem_dedupe(r, ctx);
    if (rc2 != NGX_DECLINED) {
        return rc2;
    }

    /* a record-only route without a scope value records nothing */

    if (rc == NGX_OK && ngx_http_idem_record_start(r, ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!ctx->has_deadline || ngx_http_idem_deadline_start(r, ctx) == NGX_OK) {
        return NGX_DECLINED;
    }

    ngx_http_idem_problem_set(r, &problem, NGX_HTTP_GATEWAY_TIME_OUT,
                              "deadline-exceeded", "Deadline exceeded",
                              NULL, "the call's budget was spent before "
                              "the first attempt");

    ngx_http_idem_count(deadline_exceeded);

answer:

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idem: %V", &problem.detail);

    rc = ngx_http_idem_send_problem(r, &problem, &ctx->call_id);

    ngx_http_finalize_request(r, rc);

    return NGX_DONE;
}


/*
 * A call the module refused (or whose ids it could not settle) reached a
 * location's content after all: error_page after an answer that failed,
 * say.  It is never forwarded: the module's answer is sent again.
 */

static ngx_int_t
ngx_http_idem_refused(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t  rc;

    if (ctx->refused == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "idem: the ids of this call were never settled, "
                      "it is not forwarded");
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idem: a refused call reached \"%V\", not forwarded: "
                  "%V", &r->uri, &ctx->refused->detail);

    if (r->header_sent) {
        return NGX_ERROR;
    }

    rc = ngx_http_idem_send_problem(r, ctx->refused, &ctx->call_id);

    ngx_http_finalize_request(r, rc);

    return NGX_DONE;
}


/* the request is over: its execution's final state, and its record */

static ngx_int_t
ngx_http_idem_log_handler(ngx_http_request_t *r)
{
    ngx_http_idem_ctx_t  *ctx;

    if (r != r->main) {
        return NGX_OK;
    }

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || ctx->call_id.len == 0) {
        return NGX_OK;
    }

    if (ctx->claim_op != NULL) {

        /*
         * The request ends while its claim is out (a worker shutting down,
         * say): the claim may be made, and is released by the final write,
         * which leaves after it on the same connection.
         */

        ctx->owner = 1;
        ctx->record = 1;
    }

    ngx_http_idem_storm_finish(r, ctx);
    ngx_http_idem_record_finish(r, ctx);

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_header_filter(ngx_http_request_t *r)
{
    ngx_http_upstream_t       *u;
    ngx_http_idem_ctx_t       *ctx;
    ngx_http_idem_loc_conf_t  *ilcf;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || ctx->call_id.len == 0) {
        return ngx_http_next_header_filter(r);
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem header filter");

    /*
     * A gRPC call answered by nginx itself gets a grpc-status (grpc.c);
     * the ids themselves are set later, after add_header (ids_filter.c).
     */

    if (ngx_http_idem_grpc_header_filter(r, ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    /* a claim's owner keeps its answer for the duplicates */

    if (ctx->owner && !ctx->replayed && ctx->capture == NULL
        && !ctx->capture_over
        && ngx_http_idem_answer_header(r, ctx) != NGX_OK)
    {
        return NGX_ERROR;
    }

    u = r->upstream;
    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (u != NULL && u->resolved != NULL && u->peer.name != NULL
        && !ctx->balanced && ilcf->enable && !ilcf->variable_upstream_logged)
    {
        /* proxy_pass with a variable naming no upstream{}: not wrapped */

        ilcf->variable_upstream_logged = 1;

        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "idem: the upstream of this location is not an "
                      "upstream{} block or host:port (a variable in "
                      "proxy_pass?): its calls get nginx's own retry "
                      "policy, not idem_retry");
    }

    return ngx_http_next_header_filter(r);
}


static ngx_int_t
ngx_http_idem_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_http_idem_ctx_t  *ctx;

    if (in == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx != NULL && ctx->capture != NULL && !ctx->capture_over
        && !ctx->capture_done)
    {
        ngx_http_idem_answer_body(r, ctx, in);
    }

    return ngx_http_next_body_filter(r, in);
}


static ngx_int_t
ngx_http_idem_request_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_idem_module);

    if (ctx != NULL && ctx->md != NULL
        && ctx->dedupe == NGX_HTTP_IDEM_DEDUPE_BODY)
    {
        ngx_http_idem_dedupe_body_filter(r, ctx, in);
    }

    return ngx_http_next_request_body_filter(r, in);
}


/*
 * Internal redirects and error pages zero module contexts; the context is
 * also kept as the data of a pool cleanup, where it is found again (the
 * technique of ngx_http_realip_module).  Subrequests share the main
 * request's context.
 */

ngx_http_idem_ctx_t *
ngx_http_idem_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t   *cln;
    ngx_http_request_t   *mr;
    ngx_http_idem_ctx_t  *ctx;

    mr = r->main;

    ctx = ngx_http_get_module_ctx(mr, ngx_http_idem_module);

    if (ctx != NULL || !(mr->internal || mr->filter_finalize)) {
        return ctx;
    }

    for (cln = mr->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_idem_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(mr, ctx, ngx_http_idem_module);
            return ctx;
        }
    }

    return NULL;
}


static ngx_http_idem_ctx_t *
ngx_http_idem_create_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t   *cln;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_idem_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_idem_cleanup;
    cln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_idem_module);

    return ctx;
}


/*
 * Runs when the request's pool goes: no timer may outlive the request.
 * (Its other job is to be found again after an internal redirect.)
 */

static void
ngx_http_idem_cleanup(void *data)
{
    ngx_http_idem_ctx_t *ctx = data;

    ngx_http_idem_timers_cleanup(ctx);
    ngx_http_idem_dedupe_cleanup(ctx);

    if (ctx->arrival_ev.posted) {
        ngx_delete_posted_event(&ctx->arrival_ev);
    }
}


static char *
ngx_http_idem_enable(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    char                       *rv;
    ngx_http_idem_main_conf_t  *imcf;

    rv = ngx_conf_set_flag_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    if (ilcf->enable) {
        imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);
        imcf->used = 1;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_idem_set_header(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t               *value;
    ngx_http_idem_header_t  *h;

    h = (ngx_http_idem_header_t *) (p + cmd->offset);

    if (h->name.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cmd->post != NULL && ngx_strcmp(value[1].data, "off") == 0) {
        ngx_str_set(&h->name, "");
        return NGX_CONF_OK;
    }

    if (ngx_http_idem_header_name_valid(&value[1]) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid header name \"%V\" in \"%V\" directive",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_idem_header_init(cf->pool, h, &value[1]) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* ngx_conf_set_enum_slot, with an error that names the directive */

static char *
ngx_http_idem_set_enum(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    u_char           *last, buf[128];
    ngx_str_t        *value;
    ngx_uint_t        i;
    ngx_uint_t       *np;
    ngx_conf_enum_t  *e;

    np = (ngx_uint_t *) (p + cmd->offset);

    if (*np != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    e = cmd->post;

    for (i = 0; e[i].name.len != 0; i++) {
        if (e[i].name.len == value[1].len
            && ngx_strcasecmp(e[i].name.data, value[1].data) == 0)
        {
            *np = e[i].value;
            return NGX_CONF_OK;
        }
    }

    last = buf;

    for (i = 0; e[i].name.len != 0; i++) {
        last = ngx_slprintf(last, buf + sizeof(buf), "%s\"%V\"",
                            i ? " or " : "", &e[i].name);
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, "
                       "it must be %*s",
                       &value[1], &cmd->name, last - buf, buf);

    return NGX_CONF_ERROR;
}


/* a string that becomes part of generated call ids: the call id charset */

static char *
ngx_http_idem_set_id_part(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t  *field, *value;

    field = (ngx_str_t *) (p + cmd->offset);

    if (field->data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0 || value[1].len > 64
        || ngx_http_idem_check_charset(&value[1]) != NGX_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be 1 to 64 characters from "
                           "A-Z a-z 0-9 - . _ ~ :",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    *field = value[1];

    return NGX_CONF_OK;
}


static char *
ngx_http_idem_set_max_length(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_int_t    n;
    ngx_str_t   *value;
    ngx_uint_t  *np;

    np = (ngx_uint_t *) (p + cmd->offset);

    if (*np != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    n = ngx_atoi(value[1].data, value[1].len);

    if (n < 1 || n > NGX_HTTP_IDEM_MAX_ID_LEN) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a number from 1 to %d",
                           &value[1], &cmd->name, NGX_HTTP_IDEM_MAX_ID_LEN);
        return NGX_CONF_ERROR;
    }

    *np = n;

    return NGX_CONF_OK;
}


static char *
ngx_http_idem_set_pattern(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
#if (NGX_PCRE)
    ngx_http_idem_loc_conf_t *ilcf = conf;

    u_char               errstr[NGX_MAX_CONF_ERRSTR];
    ngx_str_t           *value;
    ngx_regex_compile_t  rc;

    if (ilcf->call_id_pattern != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    ngx_memzero(&rc, sizeof(ngx_regex_compile_t));

    rc.pattern = value[1];
    rc.pool = cf->pool;
    rc.err.len = NGX_MAX_CONF_ERRSTR;
    rc.err.data = errstr;

    if (value[1].len == 0 || ngx_regex_compile(&rc) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive: %V",
                           &value[1], &cmd->name, &rc.err);
        return NGX_CONF_ERROR;
    }

    ilcf->call_id_pattern = rc.regex;
    ilcf->call_id_pattern_src = value[1];

    return NGX_CONF_OK;

#else

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"%V\" requires PCRE library", &cmd->name);
    return NGX_CONF_ERROR;

#endif
}


static char *
ngx_http_idem_set_deadline(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t   *value;
    ngx_msec_t  *msp;

    msp = (ngx_msec_t *) (p + cmd->offset);

    if (*msp != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;

    /* cmd->post: "off" is not a value (idem_record_ttl) */

    if (cmd->post == NULL && ngx_strcmp(value[1].data, "off") == 0) {
        *msp = 0;
        return NGX_CONF_OK;
    }

    *msp = ngx_parse_time(&value[1], 0);

    if (*msp == (ngx_msec_t) NGX_ERROR || *msp == 0
        || *msp > (cmd->post ? (ngx_msec_t) 365 * 86400000
                             : (ngx_msec_t) NGX_MAX_INT32_VALUE))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a time greater than 0%s",
                           &value[1], &cmd->name,
                           cmd->post ? "" : " or \"off\"");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* idem_retry N [backoff=T] [max_backoff=T] [per_try_timeout=T] [on=LIST] */

static char *
ngx_http_idem_set_retry(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    u_char              *p, *last;
    ngx_int_t            n;
    ngx_str_t           *value, s, v;
    ngx_uint_t           i, j;
    ngx_msec_t           ms, *msp;
    ngx_conf_bitmask_t  *b;

    if (ilcf->retry_attempts != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    n = ngx_atoi(value[1].data, value[1].len);

    if (n < 1 || n > NGX_HTTP_IDEM_MAX_ATTEMPTS) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "the number of attempts must be from 1 to %d",
                           &value[1], &cmd->name, NGX_HTTP_IDEM_MAX_ATTEMPTS);
        return NGX_CONF_ERROR;
    }

    ilcf->retry_attempts = n;
    ilcf->retry_backoff = NGX_HTTP_IDEM_RETRY_BACKOFF;
    ilcf->retry_max_backoff = NGX_HTTP_IDEM_RETRY_MAX_BACKOFF;
    ilcf->retry_per_try_timeout = 0;
    ilcf->retry_on = NGX_HTTP_IDEM_RETRY_ON;

    for (i = 2; i < cf->args->nelts; i++) {

        p = (u_char *) ngx_strchr(value[i].data, '=');
        if (p == NULL) {
            goto invalid;
        }

        s.data = value[i].data;
        s.len = p - value[i].data;
        v.data = p + 1;
        v.len = value[i].data + value[i].len - v.data;

        msp = NULL;

        if (s.len == 7 && ngx_strncmp(s.data, "backoff", 7) == 0) {
            msp = &ilcf->retry_backoff;

        } else if (s.len == 11 && ngx_strncmp(s.data, "max_backoff", 11) == 0)
        {
            msp = &ilcf->retry_max_backoff;

        } else if (s.len == 15
                   && ngx_strncmp(s.data, "per_try_timeout", 15) == 0)
        {
            msp = &ilcf->retry_per_try_timeout;

        } else if (s.len == 2 && ngx_strncmp(s.data, "on", 2) == 0) {

            ilcf->retry_on = 0;
            last = v.data + v.len;

            while (v.data < last) {
                p = ngx_strlchr(v.data, last, ',');
                s.data = v.data;
                s.len = (p ? p : last) - v.data;

                for (b = ngx_http_idem_retry_on, j = 0; b[j].name.len; j++) {
                    if (b[j].name.len == s.len
                        && ngx_strncmp(b[j].name.data, s.data, s.len) == 0)
                    {
                        break;
                    }
                }

                if (b[j].name.len == 0) {
                    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                       "invalid value \"%V\" in \"%V\" "
                                       "directive, \"on\" takes error, "
                                       "timeout, http_500, http_502, "
                                       "http_503, http_504, http_429",
                                       &s, &cmd->name);
                    return NGX_CONF_ERROR;
                }

                ilcf->retry_on |= b[j].mask;
                v.data = p ? p + 1 : last;
            }

            if (ilcf->retry_on == 0) {
                goto invalid;
            }

            continue;

        } else {
            goto invalid;
        }

        ms = ngx_parse_time(&v, 0);

        if (ms == (ngx_msec_t) NGX_ERROR || ms > NGX_MAX_INT32_VALUE
            || (ms == 0 && msp == &ilcf->retry_per_try_timeout))
        {
            goto invalid;
        }

        *msp = ms;
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" in \"%V\" directive",
                       &value[i], &cmd->name);

    return NGX_CONF_ERROR;
}


/* idem_dedupe_scope COMPLEX_VALUE | off */

static char *
ngx_http_idem_set_scope(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    ngx_str_t                         *value;
    ngx_http_compile_complex_value_t   ccv;

    if (ilcf->dedupe_scope_set != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    ilcf->dedupe_scope_set = 1;

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        return NGX_CONF_OK;
    }

    if (value[1].len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "empty value in \"%V\" directive", &cmd->name);
        return NGX_CONF_ERROR;
    }

    ilcf->dedupe_scope = ngx_palloc(cf->pool,
                                    sizeof(ngx_http_complex_value_t));
    if (ilcf->dedupe_scope == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = ilcf->dedupe_scope;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* idem_status_url URL: it goes into a Link header as "<URL<id>>" */

static char *
ngx_http_idem_set_status_url(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    u_char     *p;
    ngx_str_t  *value;

    if (ilcf->status_url.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (p = value[1].data; p < value[1].data + value[1].len; p++) {
        if (*p <= ' ' || *p >= 0x7f || *p == '<' || *p == '>' || *p == '"') {
            break;
        }
    }

    if (value[1].len == 0 || p < value[1].data + value[1].len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a URL without spaces, quotes or "
                           "angle brackets", &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    ilcf->status_url = value[1];

    return NGX_CONF_OK;
}


static char *
ngx_http_idem_set_redis(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_main_conf_t *imcf = conf;

    return ngx_http_idem_store_parse(cf, cmd, &imcf->store);
}


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
    ngx_http_idem_record_exit_process();
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

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_idem_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_idem_body_filter;

    ngx_http_next_request_body_filter = ngx_http_top_request_body_filter;
    ngx_http_top_request_body_filter = ngx_http_idem_request_body_filter;

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
    ilcf->unknown_stream_maxlen = NGX_CONF_UNSET_UINT;
    ilcf->dedupe = NGX_CONF_UNSET;
    ilcf->dedupe_scope_set = NGX_CONF_UNSET;
    ilcf->dedupe_store_max = NGX_CONF_UNSET_SIZE;
    ilcf->dedupe_lease = NGX_CONF_UNSET_MSEC;

    ngx_http_idem_storm_create_conf(&ilcf->storm);

    return ilcf;
}


static char *
ngx_http_idem_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_idem_loc_conf_t *prev = parent;
    ngx_http_idem_loc_conf_t *conf = child;

    size_t                      len;
    ngx_uint_t                  here;
    ngx_http_idem_main_conf_t  *imcf;

    /* set at this level: where a warning about them belongs */

    here = (conf->dedupe != NGX_CONF_UNSET
            || conf->call_id_missing != NGX_CONF_UNSET_UINT);

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

    /* idem_unknown_stream is one directive: name and maxlen go together */

    if (conf->unknown_stream_maxlen == NGX_CONF_UNSET_UINT) {
        conf->unknown_stream = prev->unknown_stream;
        conf->unknown_stream_maxlen = prev->unknown_stream_maxlen;
    }

    ngx_conf_merge_str_value(conf->unknown_stream, prev->unknown_stream, "");
    ngx_conf_merge_uint_value(conf->unknown_stream_maxlen,
                              prev->unknown_stream_maxlen, 0);

    ngx_conf_merge_value(conf->dedupe, prev->dedupe, 0);
    if (conf->dedupe_scope_set == NGX_CONF_UNSET) {
        conf->dedupe_scope = prev->dedupe_scope;
    }

    ngx_conf_merge_value(conf->dedupe_scope_set, prev->dedupe_scope_set, 0);
    ngx_conf_merge_size_value(conf->dedupe_store_max, prev->dedupe_store_max,
                              64 * 1024);
    ngx_conf_merge_msec_value(conf->dedupe_lease, prev->dedupe_lease, 0);
    ngx_conf_merge_str_value(conf->status_url, prev->status_url, "");

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);

    if (conf->dedupe && !conf->dedupe_scope_set) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_dedupe\" is on but \"idem_dedupe_scope\" "
                           "is not set: say who owns a call id (e.g. "
                           "$http_authorization), or \"off\" for one "
                           "shared scope");
        return NGX_CONF_ERROR;
    }

    if (conf->dedupe && imcf->store.addr.data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_dedupe\" is on but there is no "
                           "\"idem_redis\" to claim call ids in");
        return NGX_CONF_ERROR;
    }

    if (conf->dedupe && here && !conf->enable) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"idem_dedupe\" is on where \"idem\" is off: "
                           "it has no effect there");
    }

    if (conf->dedupe && here && conf->enable
        && conf->call_id_missing == NGX_HTTP_IDEM_MISSING_GENERATE)
    {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"idem_dedupe\" is on where missing call ids "
                           "are generated: a client that timed out never "
                           "learned the id its retry should carry "
                           "(\"idem_call_id_missing reject\" avoids this)");
    }

    if (conf->record && imcf->store.addr.data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_record\" is on but there is no "
                           "\"idem_redis\" to record into");
        return NGX_CONF_ERROR;
    }

    if (conf->status && imcf->store.addr.data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_status\" needs \"idem_redis\" to read "
                           "records from");
        return NGX_CONF_ERROR;
    }

    if (conf->call_id_header.hash == conf->trace_id_header.hash
        && conf->call_id_header.name.len == conf->trace_id_header.name.len
        && ngx_strncmp(conf->call_id_header.lowcase,
                       conf->trace_id_header.lowcase,
                       conf->call_id_header.name.len) == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_call_id_header\" and "
                           "\"idem_trace_id_header\" must differ, "
                           "both are \"%V\"", &conf->call_id_header.name);
        return NGX_CONF_ERROR;
    }

    if (conf->call_id_missing == NGX_HTTP_IDEM_MISSING_GENERATE) {
        len = ngx_http_idem_generated_length(conf, &imcf->node_id);

        if (len > conf->call_id_max_length) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"idem_call_id_max_length\" %ui is shorter "
                               "than the generated call ids (%uz bytes)",
                               conf->call_id_max_length, len);
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_idem_merge_header(ngx_conf_t *cf, ngx_http_idem_header_t *conf,
    ngx_http_idem_header_t *prev, char *def)
{
    ngx_str_t  name;

    if (conf->name.data != NULL) {
        return NGX_OK;
    }

    if (prev->name.data == NULL) {
        name.data = (u_char *) def;
        name.len = ngx_strlen(def);

        if (ngx_http_idem_header_init(cf->pool, prev, &name) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    *conf = *prev;

    return NGX_OK;
}
