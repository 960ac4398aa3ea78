
/*
 * The status endpoint: "what happened to call X?", answered from its record
 * in the store.  Not knowing (the store is down or slow) is answered as
 * such, never as "not found".
 */


#include "ngx_http_idem_module.h"


typedef struct {
    ngx_http_request_t         *request;
    ngx_http_idem_store_op_t   *op;
} ngx_http_idem_status_ctx_t;


typedef struct {
    ngx_uint_t                  execution;
    ngx_uint_t                  n;
    ngx_str_t                   value;      /* "start dur outcome sent ..." */
} ngx_http_idem_status_attempt_t;


static ngx_int_t ngx_http_idem_status_handler(ngx_http_request_t *r);
static void ngx_http_idem_status_reply(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static void ngx_http_idem_status_cleanup(void *data);
static ngx_int_t ngx_http_idem_status_json(ngx_http_request_t *r,
    ngx_str_t *elts, ngx_uint_t n, ngx_str_t *out);
static ngx_str_t *ngx_http_idem_status_field(ngx_str_t *elts, ngx_uint_t n,
    char *name, size_t len);
static u_char *ngx_http_idem_json_string(u_char *p, char *name,
    ngx_str_t *value);
static u_char *ngx_http_idem_json_number(u_char *p, char *name,
    ngx_str_t *value);
static int ngx_libc_cdecl ngx_http_idem_status_cmp(const void *one,
    const void *two);
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
    u_char                      *p;
    ngx_int_t                    rc;
    ngx_str_t                    id, argv[2];
    ngx_pool_cleanup_t          *cln;
    ngx_http_idem_problem_t      problem;
    ngx_http_idem_loc_conf_t    *ilcf;
    ngx_http_idem_main_conf_t   *imcf;
    ngx_http_idem_status_ctx_t  *sctx;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);
    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

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

    if (id.len == 0 || id.len > ilcf->call_id_max_length
        || ngx_http_idem_check_charset(&id) != NGX_OK)
    {
        ngx_http_idem_problem_set(r, &problem, NGX_HTTP_BAD_REQUEST,
                                  "invalid-call-id", "Invalid call id",
                                  NULL, "the call id in the URI is not a "
                                  "valid call id");
        return ngx_http_idem_send_problem(r, &problem, NULL);
    }

    argv[1].len = imcf->key_prefix.len + sizeof("c:{}") - 1 + id.len;
    argv[1].data = ngx_pnalloc(r->pool, argv[1].len);
    if (argv[1].data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_sprintf(argv[1].data, "%Vc:{%V}", &imcf->key_prefix, &id);
    ngx_str_set(&argv[0], "HGETALL");

    sctx = ngx_pcalloc(r->pool, sizeof(ngx_http_idem_status_ctx_t));
    if (sctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sctx->request = r;

    sctx->op = ngx_http_idem_store_read(2, argv, ngx_http_idem_status_reply,
                                        sctx, 0);

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
ngx_http_idem_status_reply(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_status_ctx_t *sctx = data;

    ngx_str_t            body;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = sctx->request;
    c = r->connection;

    sctx->op = NULL;

    if (rc != NGX_OK) {
        rc = ngx_http_idem_status_send(r, NGX_HTTP_SERVICE_UNAVAILABLE, NULL);

    } else if (n == 0) {
        rc = ngx_http_idem_status_send(r, NGX_HTTP_NOT_FOUND, NULL);

    } else if (ngx_http_idem_status_json(r, elts, n, &body) != NGX_OK) {
        rc = NGX_HTTP_INTERNAL_SERVER_ERROR;

    } else {
        rc = ngx_http_idem_status_send(r, NGX_HTTP_OK, &body);
    }

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


/*
 * {"call_id", "trace_id", "state", "source", "node", "method", "uri",
 *  "created_ms", "updated_ms", "final_status", "executions",
 *  "attempts": [{"execution", "n", "start_ms", "duration_ms", "outcome",
 *                "sent", "status", "span_id"}]}
 */

static ngx_int_t
ngx_http_idem_status_json(ngx_http_request_t *r, ngx_str_t *elts,
    ngx_uint_t n, ngx_str_t *out)
{
    u_char                          *p, *v, *last, fname[NGX_INT_T_LEN + 2];
    size_t                           len;
    ngx_int_t                        execs, i, e;
    ngx_str_t                       *f, parts[6], none;
    ngx_uint_t                       j, k, na;
    ngx_http_idem_status_attempt_t  *a;

    len = sizeof("{\"attempts\":[]}") + 16 * 32;

    for (j = 0; j < n; j++) {
        len += 6 * elts[j].len + 160;
    }

    out->data = ngx_pnalloc(r->pool, len);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    a = ngx_palloc(r->pool, (n / 2 + 1)
                            * sizeof(ngx_http_idem_status_attempt_t));
    if (a == NULL) {
        return NGX_ERROR;
    }

    ngx_str_null(&none);

    p = ngx_cpymem(out->data, "{", 1);

    p = ngx_http_idem_json_string(p, "call_id",
            ngx_http_idem_status_field(elts, n, "call_id", 7));
    p = ngx_http_idem_json_string(p, ",\"trace_id",
            ngx_http_idem_status_field(elts, n, "trace_id", 8));
    p = ngx_http_idem_json_string(p, ",\"state",
            ngx_http_idem_status_field(elts, n, "state", 5));
    p = ngx_http_idem_json_string(p, ",\"source",
            ngx_http_idem_status_field(elts, n, "source", 6));
    p = ngx_http_idem_json_string(p, ",\"node",
            ngx_http_idem_status_field(elts, n, "node", 4));
    p = ngx_http_idem_json_string(p, ",\"method",
            ngx_http_idem_status_field(elts, n, "method", 6));
    p = ngx_http_idem_json_string(p, ",\"uri",
            ngx_http_idem_status_field(elts, n, "uri", 3));
    p = ngx_http_idem_json_number(p, ",\"created_ms",
            ngx_http_idem_status_field(elts, n, "created_ms", 10));
    p = ngx_http_idem_json_number(p, ",\"updated_ms",
            ngx_http_idem_status_field(elts, n, "updated_ms", 10));

    /* the final status of the latest execution that has one */

    f = ngx_http_idem_status_field(elts, n, "executions", 10);
    execs = f ? ngx_atoi(f->data, f->len) : 0;

    f = NULL;

    for (i = execs; i > 0 && f == NULL; i--) {
        last = ngx_sprintf(fname, "f:%i", i);
        f = ngx_http_idem_status_field(elts, n, (char *) fname,
                                       last - fname);
    }

    p = ngx_http_idem_json_number(p, ",\"final_status", f);
    p = ngx_sprintf(p, ",\"executions\":%i,\"attempts\":[",
                    execs > 0 ? execs : 0);

    /* attempts: "a:<execution>:<n>" = "start dur outcome sent status span" */

    na = 0;

    for (j = 0; j + 1 < n; j += 2) {
        v = elts[j].data;
        last = v + elts[j].len;

        if (elts[j].len < 5 || v[0] != 'a' || v[1] != ':') {
            continue;
        }

        v = ngx_strlchr(v + 2, last, ':');
        if (v == NULL) {
            continue;
        }

        e = ngx_atoi(elts[j].data + 2, v - elts[j].data - 2);
        i = ngx_atoi(v + 1, last - v - 1);

        if (e <= 0 || i <= 0) {
            continue;
        }

        a[na].execution = e;
        a[na].n = i;
        a[na].value = elts[j + 1];
        na++;
    }

    ngx_qsort(a, na, sizeof(ngx_http_idem_status_attempt_t),
              ngx_http_idem_status_cmp);

    for (j = 0; j < na; j++) {

        /* split the value in its six parts */

        v = a[j].value.data;
        last = v + a[j].value.len;

        for (k = 0; k < 6; k++) {
            parts[k].data = v;
            v = ngx_strlchr(v, last, ' ');
            parts[k].len = (v ? v : last) - parts[k].data;
            v = v ? v + 1 : last;
        }

        p = ngx_sprintf(p, "%s{\"execution\":%ui,\"n\":%ui",
                        j ? "," : "", a[j].execution, a[j].n);
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
        *p++ = '}';
    }

    p = ngx_cpymem(p, "]}\n", 3);

    out->len = p - out->data;

    return NGX_OK;
}


static ngx_str_t *
ngx_http_idem_status_field(ngx_str_t *elts, ngx_uint_t n, char *name,
    size_t len)
{
    ngx_uint_t  i;

    for (i = 0; i + 1 < n; i += 2) {
        if (elts[i].len == len && ngx_strncmp(elts[i].data, name, len) == 0)
        {
            return &elts[i + 1];
        }
    }

    return NULL;
}


/* "name" starts with the separator and the opening quote, if any */

static u_char *
ngx_http_idem_json_string(u_char *p, char *name, ngx_str_t *value)
{
    if (name[0] != ',') {
        *p++ = '"';
    }

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


static int ngx_libc_cdecl
ngx_http_idem_status_cmp(const void *one, const void *two)
{
    const ngx_http_idem_status_attempt_t  *a = one;
    const ngx_http_idem_status_attempt_t  *b = two;

    if (a->execution != b->execution) {
        return a->execution < b->execution ? -1 : 1;
    }

    if (a->n != b->n) {
        return a->n < b->n ? -1 : 1;
    }

    return 0;
}


/* 200 with the record, 404 NOT_FOUND, 503 UNKNOWN (the store is away) */

static ngx_int_t
ngx_http_idem_status_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *body)
{
    ngx_int_t         rc;
    ngx_buf_t        *b;
    ngx_str_t         text;
    ngx_chain_t       out;
    ngx_table_elt_t  *h;

    if (body != NULL) {
        text = *body;

    } else if (status == NGX_HTTP_NOT_FOUND) {
        ngx_str_set(&text, "{\"state\":\"NOT_FOUND\"}\n");

    } else {
        ngx_str_set(&text, "{\"state\":\"UNKNOWN\"}\n");

        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        h->hash = 1;
        ngx_str_set(&h->key, "Retry-After");
        ngx_str_set(&h->value, "1");
        h->lowcase_key = (u_char *) "retry-after";
    }

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Cache-Control");
    ngx_str_set(&h->value, "no-store");
    h->lowcase_key = (u_char *) "cache-control";

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
