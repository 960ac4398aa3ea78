
/*
 * The status endpoint: "what happened to call X?", answered from its record
 * in the store.  Not knowing (the store is down or slow) is answered as
 * such, never as "not found".
 */


#include "ngx_http_idem_module.h"
#include "ngx_http_idem_record.h"


typedef struct {
    ngx_http_request_t         *request;
    ngx_http_idem_store_op_t   *op;
    ngx_str_t                   id;
    ngx_uint_t                  html;   /* a page (timeline.c), not JSON */
} ngx_http_idem_status_ctx_t;


static ngx_int_t ngx_http_idem_status_handler(ngx_http_request_t *r);
static void ngx_http_idem_status_reply(void *data, ngx_int_t rc,
    ngx_http_idem_store_record_t *record);
static void ngx_http_idem_status_cleanup(void *data);
static ngx_int_t ngx_http_idem_status_send(ngx_http_request_t *r,
    ngx_http_idem_status_ctx_t *sctx, ngx_uint_t status, ngx_str_t *body);


char *
ngx_http_idem_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    ngx_str_t                         *value;
    ngx_http_core_loc_conf_t          *clcf;
    ngx_http_compile_complex_value_t   ccv;

    if (ilcf->status) {
        return "is duplicate";
    }

    ilcf->status = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_idem_status_handler;

    if (cf->args->nelts == 1) {
        return NGX_CONF_OK;
    }

    value = cf->args->elts;

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
    ngx_str_t                    id, content, key, value;
    ngx_pool_cleanup_t          *cln;
    ngx_http_idem_problem_t      problem;
    ngx_http_idem_loc_conf_t    *ilcf;
    ngx_http_idem_status_ctx_t  *sctx;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    /* every answer from here is JSON, problem+json or a page: as said */

    ngx_str_set(&value, "nosniff");

    if (ngx_http_idem_add_response_header(r, "X-Content-Type-Options",
                                          &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

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

    /* under the caller's scope, where the location has one */

    rc = ngx_http_idem_record_key(r, ilcf, &id, &key);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ngx_http_idem_problem_set(r, &problem,
                                  NGX_HTTP_IDEM_P_EMPTY_SCOPE, NULL,
                                  "the caller's scope (who owns "
                                  "call ids) is empty");
        return ngx_http_idem_send_problem(r, &problem, NULL);
    }

    sctx = ngx_pcalloc(r->pool, sizeof(ngx_http_idem_status_ctx_t));
    if (sctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sctx->request = r;
    sctx->id = id;
    sctx->html = ngx_http_idem_timeline_wanted(r);

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

    /* a request gone before the answer cancels its read */

    cln->handler = ngx_http_idem_status_cleanup;
    cln->data = sctx;

    r->main->count++;

    return NGX_DONE;
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

    ngx_str_t            body;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = sctx->request;
    c = r->connection;

    sctx->op = NULL;

    if (rc == NGX_ERROR) {
        rc = ngx_http_idem_status_send(r, sctx, NGX_HTTP_SERVICE_UNAVAILABLE,
                                       NULL);

    } else if (rc == NGX_DECLINED) {
        rc = ngx_http_idem_status_send(r, sctx, NGX_HTTP_NOT_FOUND, NULL);

    } else {
        rc = sctx->html
             ? ngx_http_idem_timeline_page(r, &sctx->id, record->now,
                                           record->fields, record->nfields,
                                           &body)
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
