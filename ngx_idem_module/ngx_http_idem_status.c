
/*
 * The status endpoint: "what happened to call X?", answered from its record
 * in the store.  Not knowing (the store is down or slow) is answered as
 * such, never as "not found".  With resolve=on it also takes the
 * service's word on a call that ended UNKNOWN (POST): the truth goes back
 * into the record.
 */


#include "ngx_http_idem_status.h"
#include "ngx_http_idem_call_id.h"
#include "ngx_http_idem_calls_list.h"
#include "ngx_http_idem_metrics.h"
#include "ngx_http_idem_problem.h"
#include "ngx_http_idem_record.h"
#include "ngx_http_idem_record_json.h"
#include "ngx_http_idem_resolution.h"
#include "ngx_http_idem_store.h"
#include "ngx_http_idem_timeline.h"
#include "ngx_http_idem_util.h"


/* a resolution refused as too early: its detail's room */
#define NGX_HTTP_IDEM_EARLY_DETAIL  320

/* a forced one refused as in flight: the lease is never overridden */
#define NGX_HTTP_IDEM_FORCE_LAPSED                                          \
    " (a forced one too: its claim must have lapsed)"


typedef struct {
    ngx_http_request_t         *request;
    ngx_http_idem_store_op_t   *op;
    ngx_str_t                   id;
    ngx_str_t                   key;    /* the record's */
    ngx_uint_t                  html;   /* a page (timeline.c), not JSON */
    ngx_uint_t                  applied;    /* a resolution's outcome */
    ngx_uint_t                  force;      /* ... forced by an operator */
    ngx_uint_t                  form;       /* ... posted as a form */
    ngx_str_t                   digest;     /* scope_digest given, or
                                               empty */
} ngx_http_idem_status_ctx_t;


static ngx_int_t ngx_http_idem_status_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_status_digest(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_str_t *digest,
    ngx_http_idem_problem_t *problem);
static ngx_int_t ngx_http_idem_status_refused(ngx_http_request_t *r,
    ngx_http_idem_status_ctx_t *sctx, ngx_http_idem_problem_t *problem);
static void ngx_http_idem_status_reply(void *data, ngx_int_t rc,
    ngx_http_idem_store_record_t *record);
static void ngx_http_idem_status_resolve(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_status_body(ngx_http_request_t *r,
    ngx_str_t *body);
static void ngx_http_idem_status_resolved(void *data, ngx_int_t rc,
    ngx_str_t *state, ngx_http_idem_store_record_t *record);
static ngx_int_t ngx_http_idem_status_refuse(ngx_http_request_t *r,
    ngx_http_idem_status_ctx_t *sctx, ngx_http_idem_problem_e id,
    ngx_str_t *detail);
static ngx_int_t ngx_http_idem_status_early(ngx_http_request_t *r,
    ngx_http_idem_status_ctx_t *sctx, ngx_str_t *left);
static ngx_int_t ngx_http_idem_status_cross_site(ngx_http_request_t *r);
static ngx_uint_t ngx_http_idem_status_same_origin(ngx_http_request_t *r,
    ngx_str_t *origin);
static ngx_int_t ngx_http_idem_status_see_other(ngx_http_request_t *r,
    ngx_http_idem_status_ctx_t *sctx);
static void ngx_http_idem_status_cleanup(void *data);
static ngx_int_t ngx_http_idem_status_send(ngx_http_request_t *r,
    ngx_http_idem_status_ctx_t *sctx, ngx_uint_t status, ngx_str_t *body);


/* idem_status [ID] [resolve=on|off] [scope_digest=on|off] */

char *
ngx_http_idem_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    u_char                            *eq;
    ngx_str_t                         *value, *param;
    ngx_uint_t                         n;
    ngx_flag_t                        *flag;
    ngx_http_core_loc_conf_t          *clcf;
    ngx_http_compile_complex_value_t   ccv;

    if (ilcf->status) {
        return "is duplicate";
    }

    ilcf->status = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_idem_status_handler;

    value = cf->args->elts;
    n = cf->args->nelts;

    /* the parameters come after the id, in any order */

    while (n > 1) {
        param = &value[n - 1];

        if (ngx_strncmp(param->data, "resolve=", 8) == 0) {
            flag = &ilcf->status_resolve;

        } else if (ngx_strncmp(param->data, "scope_digest=", 13) == 0) {
            flag = &ilcf->status_digest;

        } else {
            break;
        }

        eq = (u_char *) ngx_strchr(param->data, '=');

        if (ngx_strcmp(eq + 1, "on") == 0) {
            *flag = 1;

        } else if (ngx_strcmp(eq + 1, "off") != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%V\" in \"%V\" directive, "
                               "it must be \"%*s=on\" or \"%*s=off\"",
                               param, &cmd->name, eq - param->data,
                               param->data, eq - param->data, param->data);
            return NGX_CONF_ERROR;
        }

        n--;
    }

    if (n == 1) {
        return NGX_CONF_OK;
    }

    if (n > 2) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\" in \"%V\" directive",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    ilcf->status_id = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (ilcf->status_id == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = ilcf->status_id;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_idem_status_handler(ngx_http_request_t *r)
{
    u_char                      *p, err[64];
    ngx_int_t                    rc;
    ngx_str_t                    id, content, key, value, digest;
    ngx_pool_cleanup_t          *cln;
    ngx_http_idem_problem_t      problem;
    ngx_http_idem_loc_conf_t    *ilcf;
    ngx_http_idem_status_ctx_t  *sctx;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))
        && !(r->method == NGX_HTTP_POST && ilcf->status_resolve))
    {
        return NGX_HTTP_NOT_ALLOWED;
    }

    if (r->method != NGX_HTTP_POST) {
        rc = ngx_http_discard_request_body(r);
        if (rc != NGX_OK) {
            return rc;
        }

    } else {
        /* a resolution from another site's page: refused, nothing read */

        rc = ngx_http_idem_status_cross_site(r);
        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    /* every answer from here is JSON, problem+json or a page: as said */

    ngx_str_set(&value, "nosniff");

    if (ngx_http_idem_add_response_header(r, "X-Content-Type-Options",
                                          &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ilcf->status_id != NULL) {
        if (ngx_http_complex_value(r, ilcf->status_id, &id) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

    } else {
        /* the last segment of the URI */

        p = r->uri.data + r->uri.len;

        while (p > r->uri.data && *(p - 1) != '/') {
            p--;
        }

        id.data = p;
        id.len = r->uri.data + r->uri.len - p;
    }

    /* no id: the calls that need a person (calls_list.c) */

    if (id.len == 0 && r->method != NGX_HTTP_POST) {
        return ngx_http_idem_calls_list(r, ilcf,
                                        ngx_http_idem_timeline_wanted(r));
    }

    if (id.len && id.data[0] == '"') {

        /* "abc" and abc are one call id (RFC 8941 String form) */

        content.data = ngx_pnalloc(r->pool, id.len);
        if (content.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (ngx_http_idem_parse_sf_string(&id, &content, err, sizeof(err))
            == NGX_OK)
        {
            id = content;
        }
    }

    if (id.len == 0 || id.len > ilcf->call_id_max_length
        || ngx_http_idem_check_charset(&id) != NGX_OK)
    {
        ngx_http_idem_problem_set(r, &problem,
                                  NGX_HTTP_IDEM_P_INVALID_CALL_ID, NULL,
                                  "the call id in the URI is not a "
                                  "valid call id");
        return ngx_http_idem_send_problem(r, &problem, NULL);
    }

    /*
     * Under the scope the request names by its digest, where the location
     * takes one (scope_digest=on: for operators); else under the caller's
     * scope, where the location has one.
     */

    rc = ngx_http_idem_status_digest(r, ilcf, &digest, &problem);

    if (rc != NGX_OK) {
        ngx_str_null(&digest);
    }

    if (rc == NGX_OK) {
        rc = ngx_http_idem_record_key_digest(r,
                              ngx_http_idem_str_is(&digest,
                                                   NGX_HTTP_IDEM_SCOPE_NONE)
                              ? NULL : &digest,
                              &id, &key);

    } else if (rc == NGX_DECLINED) {
        rc = ngx_http_idem_record_key(r, ilcf, &id, &key);

        if (rc == NGX_DECLINED) {
            ngx_http_idem_problem_empty_scope(r, &problem, ilcf,
                                              "the caller's scope (who "
                                              "owns call ids)");
            rc = NGX_ABORT;
        }
    }

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sctx = ngx_pcalloc(r->pool, sizeof(ngx_http_idem_status_ctx_t));
    if (sctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sctx->id = id;
    sctx->digest = digest;
    sctx->html = ngx_http_idem_timeline_wanted(r);

    if (rc == NGX_ABORT) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idem status: refused: %V", &problem.detail);

        return ngx_http_idem_status_refused(r, sctx, &problem);
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sctx->request = r;
    sctx->key = key;

    /* a request gone before the answer cancels its read */

    cln->handler = ngx_http_idem_status_cleanup;
    cln->data = sctx;

    if (r->method == NGX_HTTP_POST) {

        /*
         * the body first: the resolution goes on in its handler, which
         * finds this context as its pool cleanup's data (the module's
         * context slot is the call's, ctx.c)
         */

        r->request_body_in_single_buf = 1;

        rc = ngx_http_read_client_request_body(r,
                                               ngx_http_idem_status_resolve);

        if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
            return rc;
        }

        return NGX_DONE;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: reading call \"%V\" for %s", &id,
                   sctx->html ? "a page" : "JSON");

    /* read after Redis's clock: a lapsed claim is UNKNOWN on every gateway */

    sctx->op = ngx_http_idem_store_read_record(&key,
                                               ngx_http_idem_status_reply,
                                               sctx);

    if (sctx->op == NULL) {
        return ngx_http_idem_status_send(r, sctx,
                                         NGX_HTTP_SERVICE_UNAVAILABLE, NULL);
    }

    r->main->count++;

    return NGX_DONE;
}


/*
 * The scope_digest argument: the hex SHA-256 of a scope's value, as a
 * record's key and the UNKNOWN stream's "key" carry it, so that an
 * operator (a browser, the UNKNOWN consumer) reads or resolves a scoped
 * call without the scope's value; or "none", a call recorded without a
 * scope, where the location has one of its own (the list links so).
 * Taken only where the location says scope_digest=on; anywhere else it
 * is refused, never ignored: a client cannot name another scope's calls,
 * and a consumer pointed at the wrong location learns it.  NGX_OK: a
 * digest (lowercased) or "none"; NGX_DECLINED: none given; NGX_ABORT:
 * refused with "problem".
 */

static ngx_int_t
ngx_http_idem_status_digest(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_str_t *digest,
    ngx_http_idem_problem_t *problem)
{
    ngx_str_t   arg;
    ngx_uint_t  i;

    if (ngx_http_arg(r, (u_char *) "scope_digest",
                     sizeof("scope_digest") - 1, &arg)
        != NGX_OK)
    {
        return NGX_DECLINED;
    }

    if (!ilcf->status_digest) {
        ngx_http_idem_problem_set(r, problem,
                                  NGX_HTTP_IDEM_P_INVALID_SCOPE_DIGEST, NULL,
                                  "this location reads calls under the "
                                  "caller's own scope: it takes no "
                                  "scope_digest");
        return NGX_ABORT;
    }

    if (arg.len == sizeof(NGX_HTTP_IDEM_SCOPE_NONE) - 1
        && ngx_strncasecmp(arg.data, (u_char *) NGX_HTTP_IDEM_SCOPE_NONE,
                           arg.len)
           == 0)
    {
        ngx_str_set(digest, NGX_HTTP_IDEM_SCOPE_NONE);

        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem status: a call recorded without a scope");

        return NGX_OK;
    }

    if (arg.len != NGX_HTTP_IDEM_SHA256_HEX_LEN) {
        goto invalid;
    }

    digest->data = ngx_pnalloc(r->pool, arg.len);
    if (digest->data == NULL) {
        return NGX_ERROR;
    }

    digest->len = arg.len;

    for (i = 0; i < arg.len; i++) {
        digest->data[i] = ngx_tolower(arg.data[i]);

        if (!((digest->data[i] >= '0' && digest->data[i] <= '9')
              || (digest->data[i] >= 'a' && digest->data[i] <= 'f')))
        {
            goto invalid;
        }
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: under the scope of digest %V", digest);

    return NGX_OK;

invalid:

    ngx_http_idem_problem_set(r, problem,
                              NGX_HTTP_IDEM_P_INVALID_SCOPE_DIGEST, NULL,
                              "scope_digest must be the 64 hex digits of "
                              "a scope's SHA-256, or none (a call recorded "
                              "without a scope)");
    return NGX_ABORT;
}


/*
 * A read refused before the store is asked: problem+json, or a page for a
 * browser (the operator who opened the link sees what is missing)
 */

static ngx_int_t
ngx_http_idem_status_refused(ngx_http_request_t *r,
    ngx_http_idem_status_ctx_t *sctx, ngx_http_idem_problem_t *problem)
{
    ngx_str_t  page, value;

    if (!sctx->html) {
        return ngx_http_idem_send_problem(r, problem, NULL);
    }

    /* a GET's body was discarded at the handler's start */

    if (r->method == NGX_HTTP_POST
        && ngx_http_discard_request_body(r) != NGX_OK)
    {
        r->keepalive = 0;
    }

    if (ngx_http_idem_timeline_refused(r, &sctx->id, &problem->title,
                                       &problem->detail, &page)
        != NGX_OK
        || ngx_http_idem_timeline_headers(r, 1) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&value, "no-store");

    if (ngx_http_idem_add_response_header(r, "Cache-Control", &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_idem_send_response(r, problem->status,
                                       "text/html; charset=utf-8", &page);
}

static void
ngx_http_idem_status_cleanup(void *data)
{
    ngx_http_idem_status_ctx_t *sctx = data;

    if (sctx->op != NULL) {
        ngx_http_idem_store_cancel(sctx->op);
        sctx->op = NULL;
    }
}


static void
ngx_http_idem_status_reply(void *data, ngx_int_t rc,
    ngx_http_idem_store_record_t *record)
{
    ngx_http_idem_status_ctx_t *sctx = data;

    ngx_str_t                  body;
    ngx_uint_t                 flags;
    ngx_connection_t          *c;
    ngx_http_request_t        *r;
    ngx_http_idem_loc_conf_t  *ilcf;

    r = sctx->request;
    c = r->connection;

    sctx->op = NULL;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    /* the form where it is taken, the list where there is one */

    flags = ilcf->status_resolve ? NGX_HTTP_IDEM_TIMELINE_FORM : 0;

    if (ilcf->unknown_stream.len && ilcf->status_id == NULL) {
        flags |= NGX_HTTP_IDEM_TIMELINE_LIST;
    }

    if (rc == NGX_ERROR) {
        rc = ngx_http_idem_status_send(r, sctx, NGX_HTTP_SERVICE_UNAVAILABLE,
                                       NULL);

    } else if (rc == NGX_DECLINED) {
        rc = ngx_http_idem_status_send(r, sctx, NGX_HTTP_NOT_FOUND, NULL);

    } else {
        rc = sctx->html
             ? ngx_http_idem_timeline_page(r, &sctx->id, record->now,
                                           record->fields, record->nfields,
                                           flags, &body)
             : ngx_http_idem_record_json(r, &sctx->id, record->now,
                                         record->fields, record->nfields,
                                         &body);

        if (rc == NGX_OK) {
            rc = ngx_http_idem_status_send(r, sctx, NGX_HTTP_OK, &body);

        } else if (rc == NGX_DECLINED) {
            rc = ngx_http_idem_status_send(r, sctx, NGX_HTTP_NOT_FOUND, NULL);

        } else {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


/*
 * 200 with the record, 404 NOT_FOUND, 503 UNKNOWN (the store is away); as
 * JSON, or as a page for a browser (timeline.c)
 */

static ngx_int_t
ngx_http_idem_status_send(ngx_http_request_t *r,
    ngx_http_idem_status_ctx_t *sctx, ngx_uint_t status, ngx_str_t *body)
{
    ngx_str_t  text, value;

    if (body != NULL) {
        text = *body;
        ngx_http_idem_count(status_found);

    } else if (status == NGX_HTTP_NOT_FOUND) {
        ngx_str_set(&text, "{\"state\":\"NOT_FOUND\"}\n");
        ngx_http_idem_count(status_not_found);

    } else {
        ngx_http_idem_count(status_unknown);

        ngx_str_set(&text, "{\"state\":\"UNKNOWN\"}\n");
        ngx_str_set(&value, "1");

        if (ngx_http_idem_add_response_header(r, "Retry-After", &value)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    if (body == NULL && sctx->html) {
        if (ngx_http_idem_timeline_answer(r, &sctx->id, status, &text)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    if (ngx_http_idem_timeline_headers(r, sctx->html) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&value, "no-store");

    if (ngx_http_idem_add_response_header(r, "Cache-Control", &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_idem_send_response(r, status,
                                       sctx->html ? "text/html; charset=utf-8"
                                                  : "application/json",
                                       &text);
}


/* POST, resolve=on: the body is in */

static void
ngx_http_idem_status_resolve(ngx_http_request_t *r)
{
    u_char                            err[128], *p;
    ngx_int_t                         rc;
    ngx_str_t                         body, detail;
    ngx_pool_cleanup_t               *cln;
    ngx_http_idem_resolution_t        res;
    ngx_http_idem_status_ctx_t       *sctx;
    ngx_http_idem_store_resolution_t  sr;

    sctx = NULL;

    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_idem_status_cleanup) {
            sctx = cln->data;
            break;
        }
    }

    if (sctx == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rc = ngx_http_idem_status_body(r, &body);

    if (rc == NGX_ERROR) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (rc == NGX_DECLINED) {
        ngx_str_set(&detail, "the body is more than 4096 bytes");
        ngx_http_finalize_request(r,
                     ngx_http_idem_status_refuse(r, sctx,
                                     NGX_HTTP_IDEM_P_INVALID_RESOLUTION,
                                     &detail));
        return;
    }

    /*
     * The page's form, or JSON: whatever else the body says it is, and
     * a JSON object said to be a form too (curl -d sends any body so)
     */

    for (p = body.data; p < body.data + body.len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            break;
        }
    }

    sctx->form = (!(p < body.data + body.len && *p == '{')
                  && r->headers_in.content_type != NULL
                  && r->headers_in.content_type->value.len
                     >= sizeof("application/x-www-form-urlencoded") - 1
                  && ngx_strncasecmp(r->headers_in.content_type->value.data,
                                 (u_char *) "application/x-www-form-urlencoded",
                                 sizeof("application/x-www-form-urlencoded")
                                 - 1)
                     == 0);

    rc = sctx->form
         ? ngx_http_idem_resolution_parse_form(&body, &res, err, sizeof(err))
         : ngx_http_idem_resolution_parse(&body, &res, err, sizeof(err));

    if (rc != NGX_OK) {
        detail.data = err;
        detail.len = ngx_strlen(err);

        ngx_http_finalize_request(r,
                     ngx_http_idem_status_refuse(r, sctx,
                                     NGX_HTTP_IDEM_P_INVALID_RESOLUTION,
                                     &detail));
        return;
    }

    sctx->applied = res.applied;
    sctx->force = res.force;

    sr.outcome = res.outcome;
    sr.receipt = res.receipt;
    sr.by = res.by;
    sr.force = res.force;

    sctx->op = ngx_http_idem_store_resolve(&sctx->key, &sr,
                                           ngx_http_idem_status_resolved,
                                           sctx);

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: \"%V\" resolved \"%V\"%s by \"%V\"",
                   &sctx->id, &res.outcome, res.force ? " (forced)" : "",
                   &res.by);

    if (sctx->op == NULL) {
        ngx_http_idem_count(resolve_unavailable);
        ngx_http_finalize_request(r,
                     ngx_http_idem_status_send(r, sctx,
                                               NGX_HTTP_SERVICE_UNAVAILABLE,
                                               NULL));
        return;
    }

    /* the request waits for the store, its body read; finalized once */
}


/*
 * The request body in one piece, at most NGX_HTTP_IDEM_RESOLUTION_MAX_BODY
 * bytes; NGX_DECLINED: more (or kept in a file: client_body_buffer_size
 * is smaller than that).
 */

static ngx_int_t
ngx_http_idem_status_body(ngx_http_request_t *r, ngx_str_t *body)
{
    size_t        len;
    u_char       *p;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    ngx_str_null(body);

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return NGX_OK;
    }

    if (r->request_body->temp_file) {
        return NGX_DECLINED;
    }

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (b->in_file) {
            return NGX_DECLINED;
        }

        len += b->last - b->pos;
    }

    if (len > NGX_HTTP_IDEM_RESOLUTION_MAX_BODY) {
        return NGX_DECLINED;
    }

    p = ngx_pnalloc(r->pool, len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    body->data = p;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        p = ngx_cpymem(p, cl->buf->pos, cl->buf->last - cl->buf->pos);
    }

    body->len = p - body->data;

    return NGX_OK;
}


/* the store's word on the resolution; the strings live during this call */

static void
ngx_http_idem_status_resolved(void *data, ngx_int_t rc, ngx_str_t *state,
    ngx_http_idem_store_record_t *record)
{
    ngx_http_idem_status_ctx_t *sctx = data;

    u_char              *p;
    ngx_str_t            detail;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = sctx->request;
    c = r->connection;

    sctx->op = NULL;

    switch (rc) {

    case NGX_OK:
        if (sctx->applied) {
            ngx_http_idem_count(resolved_applied);

        } else {
            ngx_http_idem_count(resolved_not_applied);
        }

        if (sctx->force) {
            if (sctx->applied) {
                ngx_http_idem_count(resolved_forced_applied);

            } else {
                ngx_http_idem_count(resolved_forced_not_applied);
            }
        }

        ngx_log_error(NGX_LOG_NOTICE, c->log, 0,
                      "idem: call \"%V\" resolved: %s%s", &sctx->id,
                      sctx->applied ? "applied" : "not applied",
                      sctx->force ? ", forced" : "");

        if (sctx->form) {
            /* a browser goes on to the call's page, which a reload
               never posts again */
            rc = ngx_http_idem_status_see_other(r, sctx);
            break;
        }

        /* the record as it is now, as a read would show it */

        ngx_http_idem_status_reply(sctx, NGX_OK, record);
        return;

    case NGX_DECLINED:
        ngx_http_idem_count(resolve_not_found);
        rc = ngx_http_idem_status_send(r, sctx, NGX_HTTP_NOT_FOUND, NULL);
        break;

    case NGX_BUSY:
        detail.len = sizeof("the call's latest execution is , not UNKNOWN: "
                            "only an UNKNOWN one is resolved, once")
                     + sizeof(NGX_HTTP_IDEM_FORCE_LAPSED) + state->len;

        detail.data = ngx_pnalloc(r->pool, detail.len);
        if (detail.data == NULL) {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
            break;
        }

        p = ngx_snprintf(detail.data, detail.len,
                         "the call's latest execution is %V, not UNKNOWN: "
                         "only an UNKNOWN one is resolved, once%s", state,
                         sctx->force ? NGX_HTTP_IDEM_FORCE_LAPSED : "");
        detail.len = p - detail.data;

        rc = ngx_http_idem_status_refuse(r, sctx,
                                         NGX_HTTP_IDEM_P_RESOLUTION_CONFLICT,
                                         &detail);
        break;

    case NGX_ABORT:
        detail.len = sizeof("the call's latest execution has a final write "
                            "(): its owner said how it ended, and force "
                            "never overrides that; resolve an UNKNOWN one "
                            "without force")
                     + state->len;

        detail.data = ngx_pnalloc(r->pool, detail.len);
        if (detail.data == NULL) {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
            break;
        }

        p = ngx_snprintf(detail.data, detail.len,
                         "the call's latest execution has a final write "
                         "(%V): its owner said how it ended, and force "
                         "never overrides that; resolve an UNKNOWN one "
                         "without force", state);
        detail.len = p - detail.data;

        rc = ngx_http_idem_status_refuse(r, sctx,
                                         NGX_HTTP_IDEM_P_FORCE_REFUSED,
                                         &detail);
        break;

    case NGX_AGAIN:
        rc = ngx_http_idem_status_early(r, sctx, state);
        break;

    default:
        ngx_http_idem_count(resolve_unavailable);
        rc = ngx_http_idem_status_send(r, sctx, NGX_HTTP_SERVICE_UNAVAILABLE,
                                       NULL);
        break;
    }

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


/*
 * 400 invalid-resolution, 409 resolution-conflict: problem+json; a page
 * for the page's form in a browser (its status, title and detail)
 */

static ngx_int_t
ngx_http_idem_status_refuse(ngx_http_request_t *r,
    ngx_http_idem_status_ctx_t *sctx, ngx_http_idem_problem_e id,
    ngx_str_t *detail)
{
    ngx_http_idem_problem_t  problem;

    ngx_http_idem_problem_set(r, &problem, id, NULL, "");
    problem.detail = *detail;

    ngx_http_idem_problem_count(&problem);

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idem: resolution refused: %V", detail);

    if (sctx->form && sctx->html) {
        return ngx_http_idem_status_refused(r, sctx, &problem);
    }

    return ngx_http_idem_send_problem(r, &problem, NULL);
}


/*
 * CSRF: a resolution is a write, and a browser sends the operator's
 * credentials (cookies, client certificates, an allow-listed address)
 * with a form another site's page posts.  A POST that says it comes from
 * another site is refused before its body is read: an Origin that is
 * not this location's own, or Sec-Fetch-Site: cross-site.  A client that
 * sends neither (curl, the example consumer) is no browser.  NGX_DECLINED:
 * not refused.
 */

static ngx_int_t
ngx_http_idem_status_cross_site(ngx_http_request_t *r)
{
    char                         *why;
    ngx_str_t                     none = ngx_string("-");
    ngx_uint_t                    origins;
    ngx_table_elt_t              *h, *origin;
    ngx_http_idem_problem_t       problem;
    ngx_http_idem_header_iter_t   it;

    why = NULL;
    origin = NULL;
    origins = 0;

    for (h = ngx_http_idem_header_first(&it, &r->headers_in.headers);
         h != NULL;
         h = ngx_http_idem_header_next(&it))
    {
        if (h->key.len == sizeof("Origin") - 1
            && ngx_strncasecmp(h->key.data, (u_char *) "Origin",
                               sizeof("Origin") - 1)
               == 0)
        {
            origin = h;
            origins++;

        } else if (h->key.len == sizeof("Sec-Fetch-Site") - 1
                   && ngx_strncasecmp(h->key.data, (u_char *) "Sec-Fetch-Site",
                                      sizeof("Sec-Fetch-Site") - 1)
                      == 0
                   && h->value.len == sizeof("cross-site") - 1
                   && ngx_strncasecmp(h->value.data, (u_char *) "cross-site",
                                      sizeof("cross-site") - 1)
                      == 0)
        {
            why = "the request says it comes from another site "
                  "(Sec-Fetch-Site: cross-site)";
        }
    }

    if (why == NULL && origin != NULL
        && (origins > 1
            || !ngx_http_idem_status_same_origin(r, &origin->value)))
    {
        why = "its Origin is not this location's own (scheme, host and "
              "port of the request)";
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: POST, origin \"%V\"%s",
                   origin ? &origin->value : &none,
                   why ? ": cross-site" : "");

    if (why == NULL) {
        return NGX_DECLINED;
    }

    /* nothing is read, nothing written: the body goes */

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        r->keepalive = 0;
    }

    ngx_http_idem_problem_set(r, &problem, NGX_HTTP_IDEM_P_CROSS_SITE, NULL,
                              why);

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idem: resolution refused: %V", &problem.detail);

    return ngx_http_idem_send_problem(r, &problem, NULL);
}


/*
 * Is "origin" (scheme://host[:port]) this request's own: its scheme (the
 * connection's) and its Host, default ports left out on both sides?
 */

static ngx_uint_t
ngx_http_idem_status_same_origin(ngx_http_request_t *r, ngx_str_t *origin)
{
    size_t      n;
    ngx_str_t   scheme, host, port;

#if (NGX_HTTP_SSL)
    if (r->connection->ssl) {
        ngx_str_set(&scheme, "https://");
        ngx_str_set(&port, ":443");

    } else
#endif
    {
        ngx_str_set(&scheme, "http://");
        ngx_str_set(&port, ":80");
    }

    if (r->headers_in.host == NULL
        || origin->len < scheme.len
        || ngx_strncasecmp(origin->data, scheme.data, scheme.len) != 0)
    {
        return 0;
    }

    host = r->headers_in.host->value;

    if (host.len > port.len
        && ngx_strncmp(host.data + host.len - port.len, port.data, port.len)
           == 0)
    {
        host.len -= port.len;
    }

    n = origin->len - scheme.len;

    if (n > port.len
        && ngx_strncmp(origin->data + origin->len - port.len, port.data,
                       port.len)
           == 0)
    {
        n -= port.len;
    }

    return n == host.len
           && ngx_strncasecmp(origin->data + scheme.len, host.data, n) == 0;
}


/*
 * A form's resolution taken: 303 to the call's page (its scope digest
 * kept, or "none"), which a browser then reads with GET
 */

static ngx_int_t
ngx_http_idem_status_see_other(ngx_http_request_t *r,
    ngx_http_idem_status_ctx_t *sctx)
{
    u_char           *p;
    ngx_str_t         path, body;
    ngx_table_elt_t  *h;

    /* the normalised path: the raw one may name another host */

    if (ngx_http_idem_link_path(r, &path) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_pnalloc(r->pool, path.len + sizeof("?scope_digest=") - 1
                             + sctx->digest.len);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Location");
    h->value.data = p;

    p = ngx_cpymem(p, path.data, path.len);

    if (sctx->digest.len) {
        p = ngx_sprintf(p, "?scope_digest=%V", &sctx->digest);
    }

    h->value.len = p - h->value.data;

    r->headers_out.location = h;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: form resolution: see \"%V\"", &h->value);

    ngx_str_set(&body, "no-store");

    if (ngx_http_idem_add_response_header(r, "Cache-Control", &body)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&body, "Resolved: see the call's page.\n");

    return ngx_http_idem_send_response(r, NGX_HTTP_SEE_OTHER,
                                       "text/plain; charset=utf-8", &body);
}


/*
 * 409 resolution-too-early: the latest execution's claim lapsed, but its
 * owner may still answer (store: "left", the ms until its bound passes,
 * or "-": nothing bounds it: no deadline, still running at it, or a
 * claim that does not say, as 0.6.0's).
 * Not settled: a resolver asks again later (Retry-After, where the bound
 * is known).
 */

static ngx_int_t
ngx_http_idem_status_early(ngx_http_request_t *r,
    ngx_http_idem_status_ctx_t *sctx, ngx_str_t *left)
{
    u_char      *p;
    ngx_int_t    ms;
    ngx_str_t    detail, value;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: resolution too early, \"%V\" left", left);

    ms = (left->len && left->data[0] != '-')
         ? ngx_atoi(left->data, left->len) : NGX_ERROR;

    p = ngx_pnalloc(r->pool, NGX_HTTP_IDEM_EARLY_DETAIL + NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    detail.data = p;

    if (ms == NGX_ERROR) {
        p = ngx_snprintf(p, NGX_HTTP_IDEM_EARLY_DETAIL,
                         "the call's latest execution has no final state "
                         "and its owner may still answer: its claim lapsed, "
                         "but nothing bounds its owner (no deadline, still "
                         "running at it, or a claim that does not say); "
                         "only its final write settles it, or \"force\": "
                         "true once its owner's gateway is known to be "
                         "gone");

    } else {
        p = ngx_snprintf(p, NGX_HTTP_IDEM_EARLY_DETAIL,
                         "the call's latest execution has no final state "
                         "and its owner may still answer: its claim lapsed, "
                         "but its deadline passes for certain in %i ms; "
                         "resolve it after that", ms);

        /* whole seconds, rounded up: asked again once the bound passed */

        value.data = p;
        value.len = ngx_sprintf(p, "%i", (ms + 999) / 1000) - p;

        if (ngx_http_idem_add_response_header(r, "Retry-After", &value)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    detail.len = p - detail.data;

    return ngx_http_idem_status_refuse(r, sctx,
                                       NGX_HTTP_IDEM_P_RESOLUTION_EARLY,
                                       &detail);
}
