
/*
 * $idem_* variables, for log_format, proxy_set_header and the like.
 */


#include "ngx_http_idem_module.h"


static ngx_int_t ngx_http_idem_variable_str(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_idem_variable_source(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_idem_variable_attempts(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_idem_variable_remaining(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_idem_variable_state(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


static ngx_http_variable_t  ngx_http_idem_vars[] = {

    { ngx_string("idem_call_id"), NULL, ngx_http_idem_variable_str,
      offsetof(ngx_http_idem_ctx_t, call_id), NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idem_call_id_source"), NULL,
      ngx_http_idem_variable_source, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idem_trace_id"), NULL, ngx_http_idem_variable_str,
      offsetof(ngx_http_idem_ctx_t, trace_id), NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idem_attempts"), NULL, ngx_http_idem_variable_attempts,
      0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idem_deadline_remaining"), NULL,
      ngx_http_idem_variable_remaining, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idem_state"), NULL, ngx_http_idem_variable_state,
      0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


ngx_int_t
ngx_http_idem_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_idem_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_variable_str(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t            *s;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    s = (ngx_str_t *) ((char *) ctx + data);

    if (s->len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->len = s->len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = s->data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_variable_source(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || ctx->call_id.len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    if (ctx->source == NGX_HTTP_IDEM_SOURCE_CLIENT) {
        v->len = sizeof("client") - 1;
        v->data = (u_char *) "client";

    } else {
        v->len = sizeof("gateway") - 1;
        v->data = (u_char *) "gateway";
    }

    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


/* attempts made so far (0 before the upstream is contacted) */

static ngx_int_t
ngx_http_idem_variable_attempts(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char               *p;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%ui", ctx->attempt) - p;
    v->data = p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


/* ms left of the budget, never negative; empty without a budget */

static ngx_int_t
ngx_http_idem_variable_remaining(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char               *p;
    ngx_msec_int_t        left;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || !ctx->has_deadline) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    left = ngx_max(ngx_http_idem_remaining(ctx), 0);

    v->len = ngx_sprintf(p, "%M", (ngx_msec_t) left) - p;
    v->data = p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


/* this execution's state: RECEIVED, PROCESSING, then its final state */

static ngx_int_t
ngx_http_idem_variable_state(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t            *s;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || ctx->call_id.len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    s = ngx_http_idem_state_name(ngx_http_idem_current_state(r, ctx));

    v->len = s->len;
    v->data = s->data;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}
