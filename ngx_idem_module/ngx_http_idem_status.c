
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
} ngx_http_idem_status_ctx_t;


static ngx_int_t ngx_http_idem_status_handler(ngx_http_request_t *r);
static void ngx_http_idem_status_reply(void *data, ngx_int_t rc,
    ngx_http_idem_store_record_t *record);
static void ngx_http_idem_status_cleanup(void *data);
static u_char *ngx_http_idem_json_string(u_char *p, char *name,
    ngx_str_t *value);
static u_char *ngx_http_idem_json_number(u_char *p, char *name,
    ngx_str_t *value);
static ngx_int_t ngx_http_idem_status_send(ngx_http_request_t *r,
    ngx_uint_t status, ngx_str_t *body);


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
    ngx_str_t                    id, content, key;
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
        ngx_http_idem_problem_set(r, &problem, NGX_HTTP_BAD_REQUEST,
                                  "invalid-call-id", "Invalid call id",
                                  NULL, "the call id in the URI is not a "
                                  "valid call id");
        return ngx_http_idem_send_problem(r, &problem, NULL);
    }

    /* under the caller's scope, where the location has one */

    rc = ngx_http_idem_key(r, ilcf, &id, &key);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ngx_http_idem_problem_set(r, &problem, NGX_HTTP_BAD_REQUEST,
                                  "empty-dedupe-scope", "No scope",
                                  NULL, "the caller's scope (who owns "
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

    /* read after Redis's clock: a lapsed claim is UNKNOWN on every gateway */

    sctx->op = ngx_http_idem_store_read_record(&key,
                                               ngx_http_idem_status_reply,
                                               sctx);

    if (sctx->op == NULL) {
        return ngx_http_idem_status_send(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                         NULL);
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
        rc = ngx_http_idem_status_send(r, NGX_HTTP_SERVICE_UNAVAILABLE, NULL);

    } else if (rc == NGX_DECLINED) {
        rc = ngx_http_idem_status_send(r, NGX_HTTP_NOT_FOUND, NULL);

    } else {
        rc = ngx_http_idem_status_json(r, &sctx->id, record->now,
                                       record->fields, record->nfields,
                                       &body);

        if (rc == NGX_OK) {
            rc = ngx_http_idem_status_send(r, NGX_HTTP_OK, &body);

        } else if (rc == NGX_DECLINED) {
            rc = ngx_http_idem_status_send(r, NGX_HTTP_NOT_FOUND, NULL);

        } else {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


/*
 * {"call_id", "trace_id", "state", "source", "node", "method", "uri",
 *  "created_ms", "updated_ms", "final_status", "executions",
 *  "attempts": [{"execution", "n", "start_ms", "duration_ms", "outcome",
 *                "sent", "status", "span_id"}]}
 *
 * Executions are numbered in the order they arrived, those a trim
 * summarised included; "executions" counts them all.  The attempts shown
 * are those of the newest idem_record_max_executions executions: a record
 * written before the cap existed may hold many more.  NGX_DECLINED: no
 * execution.
 */

ngx_int_t
ngx_http_idem_status_json(ngx_http_request_t *r, ngx_str_t *id,
    uint64_t now, ngx_str_t *elts, ngx_uint_t n, ngx_str_t *out)
{
    u_char                          *p;
    size_t                           len;
    ngx_int_t                        rc;
    ngx_str_t                        none, *parts;
    ngx_uint_t                       i, j, k, from, shown;
    ngx_http_idem_record_t           rec;
    ngx_http_idem_main_conf_t       *imcf;
    ngx_http_idem_record_attempt_t  *a;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    rc = ngx_http_idem_record_parse(r->pool, elts, n, now, &rec);
    if (rc != NGX_OK) {
        return rc;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: \"%V\": %ui executions, %ui kept, "
                   "%ui attempts", id, rec.executions, rec.nexecs,
                   rec.nattempts);

    /* the index of the first execution whose attempts are shown */

    from = (rec.nexecs > imcf->record_max_executions)
           ? rec.execs[rec.nexecs - imcf->record_max_executions]->index : 0;

    len = sizeof("{\"call_id\":\"\",\"trace_id\":\"\",\"state\":\"\","
                 "\"source\":\"\",\"node\":\"\",\"method\":\"\",\"uri\":\"\","
                 "\"created_ms\":,\"updated_ms\":,\"final_status\":null,"
                 "\"executions\":,\"attempts\":[]}\n")
          + 6 * (id->len + rec.state.len + rec.final_status.len)
          + 3 * NGX_INT64_LEN;

    for (i = 0; i < 6; i++) {
        len += 6 * rec.info[i].len;
    }

    shown = 0;
    a = rec.attempts;

    for (i = 0; i < rec.nattempts; i++) {
        if (a[i].exec->index >= from) {
            for (k = 0; k < a[i].nparts; k++) {
                len += 6 * a[i].parts[k].len;
            }

            /* numbers: their digits, or a "null" for an empty one */

            len += 2 * NGX_INT_T_LEN + 4 * (sizeof("null") - 1)
                   + sizeof(",{\"execution\":,\"n\":,\"start_ms\":,"
                            "\"duration_ms\":,\"outcome\":\"\","
                            "\"sent\":false,\"status\":,"
                            "\"span_id\":\"\",\"no_retry\":\"\","
                            "\"grpc_status\":}");
            shown++;
        }
    }

    out->data = ngx_pnalloc(r->pool, len);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    ngx_str_null(&none);

    p = ngx_http_idem_json_string(out->data, "{\"call_id", id);
    p = ngx_http_idem_json_string(p, ",\"trace_id", &rec.info[4]);
    p = ngx_http_idem_json_string(p, ",\"state", &rec.state);
    p = ngx_http_idem_json_string(p, ",\"source", &rec.info[1]);
    p = ngx_http_idem_json_string(p, ",\"node", &rec.info[2]);
    p = ngx_http_idem_json_string(p, ",\"method", &rec.info[3]);
    p = ngx_http_idem_json_string(p, ",\"uri", &rec.info[5]);
    p = ngx_sprintf(p, ",\"created_ms\":%uL,\"updated_ms\":%uL",
                    rec.created_ms, rec.updated_ms);
    p = ngx_http_idem_json_number(p, ",\"final_status",
                                  rec.final_status.len ? &rec.final_status
                                                       : NULL);
    p = ngx_sprintf(p, ",\"executions\":%ui,\"attempts\":[", rec.executions);

    for (i = 0, j = 0; i < rec.nattempts; i++) {

        if (a[i].exec->index < from) {
            continue;
        }

        parts = a[i].parts;

        p = ngx_sprintf(p, "%s{\"execution\":%ui,\"n\":%ui",
                        j++ ? "," : "", a[i].exec->index, a[i].n);
        p = ngx_http_idem_json_number(p, ",\"start_ms", &parts[0]);
        p = ngx_http_idem_json_number(p, ",\"duration_ms", &parts[1]);
        p = ngx_http_idem_json_string(p, ",\"outcome", &parts[2]);
        p = ngx_sprintf(p, ",\"sent\":%s",
                        parts[3].len == 1 && parts[3].data[0] == '1'
                        ? "true" : "false");
        p = ngx_http_idem_json_number(p, ",\"status",
                                      parts[4].len == 1
                                      && parts[4].data[0] == '0'
                                      ? NULL : &parts[4]);
        p = ngx_http_idem_json_string(p, ",\"span_id",
                                      parts[5].len == 1
                                      && parts[5].data[0] == '-'
                                      ? &none : &parts[5]);

        /* why no retry followed (storm.c), a gRPC upstream's status */

        if (a[i].nparts > 6
            && !(parts[6].len == 1 && parts[6].data[0] == '-'))
        {
            p = ngx_http_idem_json_string(p, ",\"no_retry", &parts[6]);
        }

        if (a[i].nparts > 7) {
            p = ngx_http_idem_json_number(p, ",\"grpc_status", &parts[7]);
        }

        *p++ = '}';
    }

    p = ngx_cpymem(p, "]}\n", 3);

    out->len = p - out->data;

    if (out->len > len || j != shown) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "idem: status buffer overrun");
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* "name" starts with the separator, "{" or ",", and the opening quote */

static u_char *
ngx_http_idem_json_string(u_char *p, char *name, ngx_str_t *value)
{
    p = ngx_sprintf(p, "%s\":", name);

    if (value == NULL) {
        return ngx_cpymem(p, "null", 4);
    }

    *p++ = '"';
    p = (u_char *) ngx_escape_json(p, value->data, value->len);
    *p++ = '"';

    return p;
}


static u_char *
ngx_http_idem_json_number(u_char *p, char *name, ngx_str_t *value)
{
    ngx_uint_t  i;

    p = ngx_sprintf(p, "%s\":", name);

    if (value == NULL || value->len == 0) {
        return ngx_cpymem(p, "null", 4);
    }

    for (i = 0; i < value->len; i++) {
        if (value->data[i] < '0' || value->data[i] > '9') {
            return ngx_cpymem(p, "null", 4);
        }
    }

    return ngx_cpymem(p, value->data, value->len);
}


/* 200 with the record, 404 NOT_FOUND, 503 UNKNOWN (the store is away) */

static ngx_int_t
ngx_http_idem_status_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *body)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_str_t     text, value;
    ngx_chain_t   out;

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

    ngx_str_set(&value, "no-store");

    if (ngx_http_idem_add_response_header(r, "Cache-Control", &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = status;
    r->headers_out.content_length_n = text.len;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->pos = text.data;
    b->last = text.data + text.len;
    b->memory = 1;
    b->last_buf = 1;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}
