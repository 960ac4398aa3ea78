
/*
 * $idem_* variables, for log_format, proxy_set_header and the like.
 */


#include "ngx_http_idem_variables.h"
#include "ngx_http_idem_call_id_source.h"
#include "ngx_http_idem_ctx.h"
#include "ngx_http_idem_deadline.h"
#include "ngx_http_idem_record.h"


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
static void ngx_http_idem_variable_value(ngx_http_variable_value_t *v,
    u_char *data, size_t len);
static ngx_int_t ngx_http_idem_variable_number(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, ngx_uint_t n);


static ngx_http_variable_t  ngx_http_idem_vars[] = {

    { ngx_string("idem_call_id"), NULL, ngx_http_idem_variable_str,
      offsetof(ngx_http_idem_ctx_t, ids.call_id), NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idem_call_id_source"), NULL,
      ngx_http_idem_variable_source, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idem_trace_id"), NULL, ngx_http_idem_variable_str,
      offsetof(ngx_http_idem_ctx_t, ids.trace_id),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

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

    ngx_http_idem_variable_value(v, s->data, s->len);

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_variable_source(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t            *name;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || ctx->ids.call_id.len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    /* client (the header), variable, body or gateway */

    name = ngx_http_idem_source_name(ctx->ids.source);

    ngx_http_idem_variable_value(v, name->data, name->len);

    return NGX_OK;
}


/* attempts made so far (0 before the upstream is contacted) */

static ngx_int_t
ngx_http_idem_variable_attempts(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    return ngx_http_idem_variable_number(r, v, ctx->upstream.attempt);
}


/* ms left of the budget, never negative; empty without a budget */

static ngx_int_t
ngx_http_idem_variable_remaining(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || !ctx->deadline.set) {
        v->not_found = 1;
        return NGX_OK;
    }

    return ngx_http_idem_variable_number(r, v,
                           (ngx_uint_t) ngx_max(ngx_http_idem_remaining(ctx),
                                                0));
}


/* this execution's state: RECEIVED, PROCESSING, then its final state */

static ngx_int_t
ngx_http_idem_variable_state(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t            *s;
    ngx_http_idem_ctx_t  *ctx;

    ctx = ngx_http_idem_get_ctx(r);

    if (ctx == NULL || ctx->ids.call_id.len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    s = ngx_http_idem_state_name(ngx_http_idem_current_state(r, ctx));

    ngx_http_idem_variable_value(v, s->data, s->len);

    return NGX_OK;
}


/* the values change during a request: never cached */

static void
ngx_http_idem_variable_value(ngx_http_variable_value_t *v, u_char *data,
    size_t len)
{
    v->len = len;
    v->data = data;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
}


static ngx_int_t
ngx_http_idem_variable_number(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, ngx_uint_t n)
{
    u_char  *p;

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ngx_http_idem_variable_value(v, p, ngx_sprintf(p, "%ui", n) - p);

    return NGX_OK;
}
