
/*
 * The status endpoint: "what happened to call X?", answered from its record
 * in the store.  Not knowing (the store is down or slow) is answered as
 * such, never as "not found".
 */


#include "ngx_http_idem_module.h"


typedef struct {
    ngx_http_request_t         *request;
    ngx_http_idem_store_op_t   *op;
    ngx_str_t                   id;
} ngx_http_idem_status_ctx_t;


/* one execution, gathered from its e:, p: and f: fields */
typedef struct {
    ngx_str_t                   token;
    ngx_str_t                   info[6];    /* created source node method
                                               trace_id uri */
    ngx_str_t                   state;
    ngx_str_t                   final_status;
    uint64_t                    created_ms;
    uint64_t                    updated_ms;
    uint64_t                    lease_ms;   /* a claim lapses, 0: none */
    ngx_uint_t                  index;      /* 1, 2 ... by arrival */
} ngx_http_idem_status_exec_t;


typedef struct {
    ngx_http_idem_status_exec_t  *exec;
    ngx_uint_t                    n;
    ngx_str_t                     value;    /* "start dur outcome sent ..." */
} ngx_http_idem_status_attempt_t;


static ngx_int_t ngx_http_idem_status_handler(ngx_http_request_t *r);
static void ngx_http_idem_status_reply(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);
static void ngx_http_idem_status_cleanup(void *data);
static ngx_http_idem_status_exec_t *ngx_http_idem_status_exec(
    ngx_array_t *execs, ngx_str_t *token, ngx_uint_t create);
static ngx_uint_t ngx_http_idem_status_split(ngx_str_t *value,
    ngx_str_t *parts, ngx_uint_t n);
static uint64_t ngx_http_idem_status_ms(ngx_str_t *value);
static int ngx_libc_cdecl ngx_http_idem_exec_cmp(const void *one,
    const void *two);
static u_char *ngx_http_idem_json_string(u_char *p, char *name,
    ngx_str_t *value);
static u_char *ngx_http_idem_json_number(u_char *p, char *name,
    ngx_str_t *value);
static int ngx_libc_cdecl ngx_http_idem_status_cmp(const void *one,
    const void *two);
static ngx_int_t ngx_http_idem_status_send(ngx_http_request_t *r,
    ngx_uint_t status, ngx_str_t *body);


/*
 * The record, without a stored answer (dedupe.c), after Redis's clock:
 * a claim that lapsed reads as UNKNOWN by that clock, on every gateway.
 */

static ngx_str_t  ngx_http_idem_status_lua = ngx_string(
    NGX_HTTP_IDEM_LUA_RECORD
    "return fields({string.format('%.0f', now)})\n");


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
    ngx_str_t                    id, content, argv[4];
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

    rc = ngx_http_idem_key(r, ilcf, &id, &argv[3]);

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

    ngx_str_set(&argv[0], "EVAL");
    argv[1] = ngx_http_idem_status_lua;
    ngx_str_set(&argv[2], "1");

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

    sctx->op = ngx_http_idem_store_read(4, argv, ngx_http_idem_status_reply,
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

    ngx_int_t            now;
    ngx_str_t            body;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = sctx->request;
    c = r->connection;

    sctx->op = NULL;

    /* Redis's time, then the record's fields */

    now = (rc == NGX_OK && n > 0) ? ngx_atoi(elts[0].data, elts[0].len)
                                  : NGX_ERROR;

    if (now == NGX_ERROR) {
        rc = ngx_http_idem_status_send(r, NGX_HTTP_SERVICE_UNAVAILABLE, NULL);

    } else if (n == 1) {
        rc = ngx_http_idem_status_send(r, NGX_HTTP_NOT_FOUND, NULL);

    } else {
        rc = ngx_http_idem_status_json(r, &sctx->id, now, &elts[1], n - 1,
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
 * Executions are numbered in the order they arrived.  The record's state:
 * SUCCESS if any execution succeeded, else UNKNOWN if any was UNKNOWN,
 * else the latest execution's.  An unfinished execution whose claim lapsed
 * by "now" (Redis's clock) is UNKNOWN.  NGX_DECLINED: no execution.
 */

ngx_int_t
ngx_http_idem_status_json(ngx_http_request_t *r, ngx_str_t *id,
    uint64_t now, ngx_str_t *elts, ngx_uint_t n, ngx_str_t *out)
{
    u_char                          *p, *v, *last;
    size_t                           len;
    uint64_t                         updated;
    ngx_str_t                        token, parts[9], none, *fs;
    ngx_str_t                        success, unknown_state, *state;
    ngx_uint_t                       i, na, np, ok, unknown;
    ngx_array_t                      execs;
    ngx_http_idem_status_exec_t     *e, *first;
    ngx_http_idem_status_attempt_t  *a;

    if (ngx_array_init(&execs, r->pool, 4,
                       sizeof(ngx_http_idem_status_exec_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    a = ngx_palloc(r->pool, (n / 2 + 1)
                            * sizeof(ngx_http_idem_status_attempt_t));
    if (a == NULL) {
        return NGX_ERROR;
    }

    /* executions first: attempts refer to them by token */

    for (i = 0; i + 1 < n; i += 2) {
        v = elts[i].data;

        if (elts[i].len < 3 || v[1] != ':'
            || (v[0] != 'e' && v[0] != 'p' && v[0] != 'f' && v[0] != 'l'))
        {
            continue;
        }

        token.data = v + 2;
        token.len = elts[i].len - 2;

        e = ngx_http_idem_status_exec(&execs, &token, 1);
        if (e == NULL) {
            return NGX_ERROR;
        }

        if (v[0] == 'l') {
            e->lease_ms = ngx_http_idem_status_ms(&elts[i + 1]);
            continue;
        }

        if (v[0] == 'p') {
            if (e->state.len == 0 || e->state.data[0] == 'R') {
                ngx_str_set(&e->state, "PROCESSING");
            }

            e->updated_ms = ngx_max(e->updated_ms,
                                    ngx_http_idem_status_ms(&elts[i + 1]));
            continue;
        }

        if (v[0] == 'e') {
            if (ngx_http_idem_status_split(&elts[i + 1], parts, 7) != 7) {
                continue;
            }

            if (e->final_status.len == 0) {
                if (parts[0].data[0] == 'P' || e->state.len) {
                    ngx_str_set(&e->state, "PROCESSING");

                } else {
                    ngx_str_set(&e->state, "RECEIVED");
                }
            }

            ngx_memcpy(e->info, &parts[1], 6 * sizeof(ngx_str_t));

        } else {
            if (ngx_http_idem_status_split(&elts[i + 1], parts, 9) != 9) {
                continue;
            }

            /* a final state wins over whatever came before it */

            e->state = parts[0];
            e->final_status = parts[1];
            e->updated_ms = ngx_max(e->updated_ms,
                                    ngx_http_idem_status_ms(&parts[2]));
            ngx_memcpy(e->info, &parts[3], 6 * sizeof(ngx_str_t));
        }

        e->created_ms = ngx_http_idem_status_ms(&e->info[0]);
        e->updated_ms = ngx_max(e->updated_ms, e->created_ms);
    }

    /* an execution known by its "p:" field only has no arrival: drop it */

    e = execs.elts;

    for (i = 0; i < execs.nelts; /* void */) {
        if (e[i].info[0].len == 0) {
            e[i] = e[--execs.nelts];
            continue;
        }

        i++;
    }

    if (execs.nelts == 0) {
        return NGX_DECLINED;
    }

    ngx_qsort(e, execs.nelts, sizeof(ngx_http_idem_status_exec_t),
              ngx_http_idem_exec_cmp);

    ok = 0;
    unknown = 0;
    updated = 0;
    fs = NULL;

    for (i = 0; i < execs.nelts; i++) {
        e[i].index = i + 1;
        updated = ngx_max(updated, e[i].updated_ms);

        if (e[i].final_status.len == 0 && e[i].lease_ms
            && now >= e[i].lease_ms)
        {
            /* its gateway never said how it ended: it may have run */
            ngx_str_set(&e[i].state, "UNKNOWN");
        }

        if (e[i].state.len == 7
            && ngx_strncmp(e[i].state.data, "SUCCESS", 7) == 0)
        {
            ok++;

        } else if (e[i].state.len == 7
                   && ngx_strncmp(e[i].state.data, "UNKNOWN", 7) == 0)
        {
            unknown++;
        }

        if (e[i].final_status.len) {
            fs = &e[i].final_status;
        }
    }

    first = &e[0];

    ngx_str_set(&success, "SUCCESS");
    ngx_str_set(&unknown_state, "UNKNOWN");

    state = ok ? &success
               : (unknown ? &unknown_state : &e[execs.nelts - 1].state);

    /* attempts: "a:<token>:<n>" = "start dur outcome sent status span" */

    na = 0;
    len = 512 + 6 * id->len;

    for (i = 0; i + 1 < n; i += 2) {
        len += 6 * elts[i + 1].len + 160;

        v = elts[i].data;
        last = v + elts[i].len;

        if (elts[i].len < 5 || v[0] != 'a' || v[1] != ':') {
            continue;
        }

        v = ngx_strlchr(v + 2, last, ':');
        if (v == NULL) {
            continue;
        }

        token.data = elts[i].data + 2;
        token.len = v - token.data;

        a[na].exec = ngx_http_idem_status_exec(&execs, &token, 0);
        a[na].n = ngx_atoi(v + 1, last - v - 1);
        a[na].value = elts[i + 1];

        if (a[na].exec == NULL || a[na].exec->index == 0
            || a[na].n == (ngx_uint_t) NGX_ERROR)
        {
            /* an attempt of an execution that left no other trace */
            continue;
        }

        na++;
    }

    ngx_qsort(a, na, sizeof(ngx_http_idem_status_attempt_t),
              ngx_http_idem_status_cmp);

    out->data = ngx_pnalloc(r->pool, len);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    ngx_str_null(&none);

    p = ngx_http_idem_json_string(out->data, "{\"call_id", id);
    p = ngx_http_idem_json_string(p, ",\"trace_id", &first->info[4]);
    p = ngx_http_idem_json_string(p, ",\"state", state);
    p = ngx_http_idem_json_string(p, ",\"source", &first->info[1]);
    p = ngx_http_idem_json_string(p, ",\"node", &first->info[2]);
    p = ngx_http_idem_json_string(p, ",\"method", &first->info[3]);
    p = ngx_http_idem_json_string(p, ",\"uri", &first->info[5]);
    p = ngx_sprintf(p, ",\"created_ms\":%uL,\"updated_ms\":%uL",
                    first->created_ms, updated);
    p = ngx_http_idem_json_number(p, ",\"final_status", fs);
    p = ngx_sprintf(p, ",\"executions\":%ui,\"attempts\":[", execs.nelts);

    for (i = 0; i < na; i++) {

        /* a 7th part says why no retry followed (the retry budget) */

        np = ngx_http_idem_status_split(&a[i].value, parts, 7);

        if (np < 6) {
            continue;
        }

        p = ngx_sprintf(p, "%s{\"execution\":%ui,\"n\":%ui",
                        i ? "," : "", a[i].exec->index, a[i].n);
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

        if (np == 7) {
            p = ngx_http_idem_json_string(p, ",\"no_retry", &parts[6]);
        }

        *p++ = '}';
    }

    p = ngx_cpymem(p, "]}\n", 3);

    out->len = p - out->data;

    return NGX_OK;
}


static ngx_http_idem_status_exec_t *
ngx_http_idem_status_exec(ngx_array_t *execs, ngx_str_t *token,
    ngx_uint_t create)
{
    ngx_uint_t                    i;
    ngx_http_idem_status_exec_t  *e;

    e = execs->elts;

    for (i = 0; i < execs->nelts; i++) {
        if (e[i].token.len == token->len
            && ngx_strncmp(e[i].token.data, token->data, token->len) == 0)
        {
            return &e[i];
        }
    }

    if (!create) {
        return NULL;
    }

    e = ngx_array_push(execs);
    if (e == NULL) {
        return NULL;
    }

    ngx_memzero(e, sizeof(ngx_http_idem_status_exec_t));
    e->token = *token;

    return e;
}


/* space separated; the last part takes the rest (a URI) */

static ngx_uint_t
ngx_http_idem_status_split(ngx_str_t *value, ngx_str_t *parts, ngx_uint_t n)
{
    u_char      *p, *last, *sp;
    ngx_uint_t   i;

    p = value->data;
    last = p + value->len;

    for (i = 0; i < n; i++) {
        sp = (i == n - 1) ? NULL : ngx_strlchr(p, last, ' ');

        parts[i].data = p;
        parts[i].len = (sp ? sp : last) - p;

        if (sp == NULL) {
            return i + 1;
        }

        p = sp + 1;
    }

    return i;
}


static uint64_t
ngx_http_idem_status_ms(ngx_str_t *value)
{
    off_t  n;

    n = ngx_atoof(value->data, value->len);

    return n > 0 ? (uint64_t) n : 0;
}


static int ngx_libc_cdecl
ngx_http_idem_exec_cmp(const void *one, const void *two)
{
    const ngx_http_idem_status_exec_t  *a = one;
    const ngx_http_idem_status_exec_t  *b = two;

    ngx_int_t  rc;

    if (a->created_ms != b->created_ms) {
        return a->created_ms < b->created_ms ? -1 : 1;
    }

    rc = ngx_memn2cmp(a->token.data, b->token.data, a->token.len,
                      b->token.len);

    return rc < 0 ? -1 : (rc > 0);
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


static int ngx_libc_cdecl
ngx_http_idem_status_cmp(const void *one, const void *two)
{
    const ngx_http_idem_status_attempt_t  *a = one;
    const ngx_http_idem_status_attempt_t  *b = two;

    if (a->exec->index != b->exec->index) {
        return a->exec->index < b->exec->index ? -1 : 1;
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
