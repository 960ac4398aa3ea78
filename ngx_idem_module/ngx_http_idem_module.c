
/*
 * ngx_http_idem_module: directives, configuration, and the hooks that run
 * on routes with "idem on" (an early phase handler and a header filter).
 */


#include "ngx_http_idem_module.h"


static ngx_int_t ngx_http_idem_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_header_filter(ngx_http_request_t *r);
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

static ngx_int_t ngx_http_idem_preconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_idem_postconfiguration(ngx_conf_t *cf);
static void *ngx_http_idem_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_idem_init_main_conf(ngx_conf_t *cf, void *conf);
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

    NULL,                                  /* create server configuration */
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
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;


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

    if (!ilcf->enable || r != r->main) {
        return NGX_DECLINED;
    }

    /* ids are settled once per request, internal redirects included */

    if (ngx_http_idem_get_ctx(r) != NULL) {
        return NGX_DECLINED;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem handler");

    ctx = ngx_http_idem_create_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->call_id_header = &ilcf->call_id_header;
    ctx->trace_id_header = &ilcf->trace_id_header;

    if (ngx_http_idem_scan_request(r, ilcf, &in) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_idem_resolve_ids(r, ilcf, &in, ctx, &problem);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idem: rejected: %V", &problem.detail);

        return ngx_http_idem_send_problem(r, &problem, &ctx->call_id);
    }

    if (ngx_http_idem_inject(r, &in, ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem call id: \"%V\" (%s), trace id: \"%V\"",
                   &ctx->call_id,
                   ctx->source == NGX_HTTP_IDEM_SOURCE_CLIENT
                   ? "client" : "gateway",
                   &ctx->trace_id);

    return NGX_DECLINED;
}


static ngx_int_t
ngx_http_idem_header_filter(ngx_http_request_t *r)
{
    ngx_http_idem_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || ctx->call_id.len == 0) {
        return ngx_http_next_header_filter(r);
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem header filter");

    if (ngx_http_idem_set_response_headers(r, ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_next_header_filter(r);
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


static void
ngx_http_idem_cleanup(void *data)
{
    /*
     * Nothing to release yet: the cleanup exists so that the context can be
     * found again after an internal redirect.
     */
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

    if (!imcf->used) {
        return NGX_OK;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_REWRITE_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_idem_handler;

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_idem_header_filter;

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
     *     imcf->used = 0;
     */

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

    ngx_str_set(&name, "traceparent");
    if (ngx_http_idem_header_init(cf->pool, &imcf->traceparent_header, &name)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
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
     */

    ilcf->enable = NGX_CONF_UNSET;
    ilcf->call_id_missing = NGX_CONF_UNSET_UINT;
    ilcf->call_id_generator = NGX_CONF_UNSET_UINT;
    ilcf->call_id_max_length = NGX_CONF_UNSET_UINT;

#if (NGX_PCRE)
    ilcf->call_id_pattern = NGX_CONF_UNSET_PTR;
#endif

    return ilcf;
}


static char *
ngx_http_idem_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_idem_loc_conf_t *prev = parent;
    ngx_http_idem_loc_conf_t *conf = child;

    size_t                      len;
    ngx_http_idem_main_conf_t  *imcf;

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
        imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);

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
