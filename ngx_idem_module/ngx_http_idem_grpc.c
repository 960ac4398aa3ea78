
/*
 * gRPC requests: the module's own answers as gRPC statuses (Trailers-Only),
 * an upstream's grpc-status as the call's outcome, and gRPC's retryable
 * statuses and grpc-retry-pushback-ms as the retry rule's signals.
 */


#include "ngx_http_idem_grpc.h"
#include "ngx_http_idem_util.h"


#define NGX_HTTP_IDEM_GRPC_UNKNOWN             2
#define NGX_HTTP_IDEM_GRPC_INVALID_ARGUMENT    3
#define NGX_HTTP_IDEM_GRPC_DEADLINE_EXCEEDED   4
#define NGX_HTTP_IDEM_GRPC_RESOURCE_EXHAUSTED  8
#define NGX_HTTP_IDEM_GRPC_FAILED_PRECONDITION 9
#define NGX_HTTP_IDEM_GRPC_ABORTED             10
#define NGX_HTTP_IDEM_GRPC_INTERNAL            13
#define NGX_HTTP_IDEM_GRPC_UNAVAILABLE         14


static ngx_uint_t ngx_http_idem_grpc_code(ngx_uint_t status,
    ngx_str_t *type);
static ngx_int_t ngx_http_idem_grpc_message(ngx_http_request_t *r,
    ngx_str_t *title, ngx_str_t *detail, ngx_str_t *out);
static void ngx_http_idem_grpc_body_read(ngx_http_request_t *r);


/* "application/grpc", alone or followed by "+proto", ";..." and the like */

ngx_uint_t
ngx_http_idem_grpc_request(ngx_http_request_t *r)
{
    ngx_str_t  *ct;

    if (r->headers_in.content_type == NULL) {
        return 0;
    }

    ct = &r->headers_in.content_type->value;

    return ct->len >= sizeof("application/grpc") - 1
           && ngx_strncasecmp(ct->data, (u_char *) "application/grpc",
                              sizeof("application/grpc") - 1)
              == 0
           && (ct->len == sizeof("application/grpc") - 1
               || ct->data[sizeof("application/grpc") - 1] == '+'
               || ct->data[sizeof("application/grpc") - 1] == ';');
}


/*
 * nginx's gRPC proxy streams the request body (it cannot be sent twice),
 * so nginx never retries a gRPC call once its request went out.  On a
 * route that may retry it, the whole request is read first, as dedupe
 * does (the technique of ngx_http_mirror_module): a body read before the
 * proxy starts is buffered, and can be sent again.  Streaming calls do
 * not belong on such routes (docs/grpc.md).
 */

ngx_int_t
ngx_http_idem_grpc_read_body(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_int_t                  rc;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (!ctx->grpc.on || !ilcf->idempotent || ilcf->retry_attempts < 2
        || r->request_body != NULL || r->discard_body)
    {
        return NGX_DECLINED;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem grpc: reading the request before the first attempt");

    rc = ngx_http_read_client_request_body(r, ngx_http_idem_grpc_body_read);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    ngx_http_finalize_request(r, NGX_DONE);

    return NGX_DONE;
}


static void
ngx_http_idem_grpc_body_read(ngx_http_request_t *r)
{
    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem grpc: request read");

    r->preserve_body = 1;

    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}


/*
 * What a gRPC client is told instead of an HTTP status: a 409 in flight
 * is ABORTED (the caller's own conflict), never UNAVAILABLE, which gRPC
 * clients retry by themselves.
 */

static ngx_uint_t
ngx_http_idem_grpc_code(ngx_uint_t status, ngx_str_t *type)
{
    switch (status) {

    case NGX_HTTP_BAD_REQUEST:
        return NGX_HTTP_IDEM_GRPC_INVALID_ARGUMENT;

    case NGX_HTTP_GATEWAY_TIME_OUT:
        return NGX_HTTP_IDEM_GRPC_DEADLINE_EXCEEDED;

    case NGX_HTTP_CONFLICT:
        if (type != NULL
            && type->len == sizeof("call-outcome-unknown") - 1
            && ngx_strncmp(type->data, "call-outcome-unknown",
                           type->len) == 0)
        {
            return NGX_HTTP_IDEM_GRPC_UNAVAILABLE;
        }

        return NGX_HTTP_IDEM_GRPC_ABORTED;

    case NGX_HTTP_IDEM_UNPROCESSABLE:
        return NGX_HTTP_IDEM_GRPC_FAILED_PRECONDITION;

    case NGX_HTTP_TOO_MANY_REQUESTS:
        return NGX_HTTP_IDEM_GRPC_RESOURCE_EXHAUSTED;

    case NGX_HTTP_BAD_GATEWAY:
    case NGX_HTTP_SERVICE_UNAVAILABLE:
        return NGX_HTTP_IDEM_GRPC_UNAVAILABLE;

    case NGX_HTTP_INTERNAL_SERVER_ERROR:
        return NGX_HTTP_IDEM_GRPC_INTERNAL;

    default:
        return NGX_HTTP_IDEM_GRPC_UNKNOWN;
    }
}


/*
 * Turns the answer being sent into a gRPC Trailers-Only one: HTTP 200,
 * application/grpc, grpc-status and grpc-message in the headers, no body
 * (over HTTP/2 one HEADERS frame that ends the stream; over HTTP/1.x the
 * same headers with Content-Length: 0, a whole message).  A Retry-After
 * already set becomes grpc-retry-pushback-ms on UNAVAILABLE.  "status" is
 * the HTTP status the answer would have had: the call's record keeps it.
 */

ngx_int_t
ngx_http_idem_grpc_trailers_only(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t status, ngx_str_t *type,
    ngx_str_t *title, ngx_str_t *detail)
{
    u_char           *p;
    ngx_int_t         n;
    ngx_str_t         value;
    ngx_uint_t        code;
    ngx_table_elt_t  *h;

    code = ngx_http_idem_grpc_code(status, type);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem grpc: status %ui answered as grpc-status %ui",
                   status, code);

    if (ctx != NULL) {
        ctx->grpc.http_status = status;
    }

    r->headers_out.status = NGX_HTTP_OK;
    ngx_str_null(&r->headers_out.status_line);
    r->err_status = 0;

    ngx_str_set(&r->headers_out.content_type, "application/grpc");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;
    ngx_str_null(&r->headers_out.charset);

    if (r->headers_out.content_length) {
        r->headers_out.content_length->hash = 0;
        r->headers_out.content_length = NULL;
    }

    /*
     * Trailers-Only is HTTP/2's (and HTTP/3's): over HTTP/1.x no length
     * would make nginx frame it as chunked, and send no last chunk
     */

    if (r->http_version < NGX_HTTP_VERSION_20) {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem grpc: HTTP/1.x, Content-Length: 0");

        r->headers_out.content_length_n = 0;

    } else {
        r->headers_out.content_length_n = -1;
    }

    r->header_only = 1;

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    value.data = p;
    value.len = ngx_sprintf(p, "%ui", code) - p;

    if (ngx_http_idem_add_response_header(r, "grpc-status", &value)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_idem_grpc_message(r, title, detail, &value) != NGX_OK
        || ngx_http_idem_add_response_header(r, "grpc-message", &value)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    h = ngx_http_idem_header_find(&r->headers_out.headers, "Retry-After",
                                sizeof("Retry-After") - 1);

    if (h == NULL) {
        return NGX_OK;
    }

    h->hash = 0;

    if (code != NGX_HTTP_IDEM_GRPC_UNAVAILABLE) {
        return NGX_OK;
    }

    n = ngx_atoi(h->value.data, h->value.len);
    if (n == NGX_ERROR || n > NGX_MAX_INT32_VALUE / 1000) {
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    value.data = p;
    value.len = ngx_sprintf(p, "%i", n * 1000) - p;

    return ngx_http_idem_add_response_header(r, "grpc-retry-pushback-ms",
                                             &value);
}


/* "title: detail", percent-encoded as gRPC asks of grpc-message */

static ngx_int_t
ngx_http_idem_grpc_message(ngx_http_request_t *r, ngx_str_t *title,
    ngx_str_t *detail, ngx_str_t *out)
{
    u_char      c, *p, *src, *last;
    size_t      len;
    ngx_uint_t  i;
    ngx_str_t  *part[2];

    part[0] = title;
    part[1] = detail;

    len = 2;

    for (i = 0; i < 2; i++) {
        if (part[i] != NULL) {
            len += 3 * part[i]->len;
        }
    }

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;

    for (i = 0; i < 2; i++) {
        if (part[i] == NULL || part[i]->len == 0) {
            continue;
        }

        if (p != out->data) {
            *p++ = ':';
            *p++ = ' ';
        }

        last = part[i]->data + part[i]->len;

        for (src = part[i]->data; src < last; src++) {
            c = *src;

            /* printable ASCII but '%' passes; the rest is %XX */

            if (c >= 0x20 && c <= 0x7e && c != '%') {
                *p++ = c;
                continue;
            }

            *p++ = '%';
            *p++ = "0123456789ABCDEF"[c >> 4];
            *p++ = "0123456789ABCDEF"[c & 0x0f];
        }
    }

    out->len = p - out->data;

    return NGX_OK;
}


/*
 * nginx's own 502, 503 and 504 (no answer from the upstream) on a gRPC
 * call the module owns: the client gets UNAVAILABLE or DEADLINE_EXCEEDED
 * instead of an HTML page it cannot read.  An upstream's Trailers-Only
 * answer that the module let nginx see as a 503 or 429 (to retry it) and
 * that ends up as the client's answer gets its own status back.
 */

ngx_int_t
ngx_http_idem_grpc_header_filter(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx)
{
    ngx_str_t             title;
    ngx_uint_t            status;
    ngx_http_upstream_t  *u;

    if (!ctx->grpc.on || ctx->grpc.http_status) {
        return NGX_OK;
    }

    u = r->upstream;
    status = r->headers_out.status;

    if (u != NULL && u->headers_in.status_n) {

        if (ctx->grpc.retry_status && status == ctx->grpc.retry_status) {
            r->headers_out.status = NGX_HTTP_OK;
            ngx_str_null(&r->headers_out.status_line);
        }

        return NGX_OK;
    }

    switch (status) {

    case NGX_HTTP_BAD_GATEWAY:
    case NGX_HTTP_SERVICE_UNAVAILABLE:
        ngx_str_set(&title, "Upstream unavailable");
        break;

    case NGX_HTTP_GATEWAY_TIME_OUT:
        ngx_str_set(&title, "Deadline exceeded");
        break;

    default:
        return NGX_OK;
    }

    return ngx_http_idem_grpc_trailers_only(r, ctx, status, NULL, &title,
                                            NULL);
}


/*
 * The upstream's grpc-status: in the answer's headers for a Trailers-Only
 * answer, else in its trailers.  -1: none (not a gRPC answer, or cut).
 */

ngx_int_t
ngx_http_idem_grpc_status(ngx_http_request_t *r)
{
    ngx_int_t         n;
    ngx_table_elt_t  *h;

    h = ngx_http_idem_header_find(&r->headers_out.trailers, "grpc-status",
                                sizeof("grpc-status") - 1);

    if (h == NULL) {
        h = ngx_http_idem_header_find(&r->headers_out.headers, "grpc-status",
                                    sizeof("grpc-status") - 1);
    }

    if (h == NULL) {
        return -1;
    }

    n = ngx_atoi(h->value.data, h->value.len);

    return (n == NGX_ERROR || n > 16) ? NGX_HTTP_IDEM_GRPC_UNKNOWN : n;
}


/* what this attempt's gRPC upstream said: its grpc-status, or -1 */

ngx_int_t
ngx_http_idem_grpc_upstream_status(ngx_http_upstream_t *u)
{
    ngx_int_t         n;
    ngx_table_elt_t  *h;

    h = ngx_http_idem_header_find(&u->headers_in.trailers, "grpc-status",
                                sizeof("grpc-status") - 1);

    if (h == NULL) {
        h = ngx_http_idem_header_find(&u->headers_in.headers, "grpc-status",
                                    sizeof("grpc-status") - 1);
    }

    if (h == NULL) {
        return -1;
    }

    n = ngx_atoi(h->value.data, h->value.len);

    return (n == NGX_ERROR || n > 16) ? NGX_HTTP_IDEM_GRPC_UNKNOWN : n;
}


/*
 * A Trailers-Only answer from a gRPC upstream (its headers hold
 * grpc-status) with UNAVAILABLE or RESOURCE_EXHAUSTED: the HTTP status
 * idem_retry's "on=" knows it by (503, 429), and the delay its
 * grpc-retry-pushback-ms asks for in "delay" (-1: none; a negative or
 * malformed pushback means "do not retry": 0 is returned).
 */

ngx_uint_t
ngx_http_idem_grpc_retryable(ngx_http_request_t *r, ngx_msec_int_t *delay)
{
    ngx_int_t             code, n;
    ngx_table_elt_t      *h;
    ngx_http_upstream_t  *u;

    u = r->upstream;
    *delay = -1;

    if (u->headers_in.status_n != NGX_HTTP_OK) {
        return 0;
    }

    h = ngx_http_idem_header_find(&u->headers_in.headers, "grpc-status",
                                sizeof("grpc-status") - 1);
    if (h == NULL) {
        return 0;
    }

    code = ngx_atoi(h->value.data, h->value.len);

    if (code != NGX_HTTP_IDEM_GRPC_UNAVAILABLE
        && code != NGX_HTTP_IDEM_GRPC_RESOURCE_EXHAUSTED)
    {
        return 0;
    }

    h = ngx_http_idem_header_find(&u->headers_in.headers,
                                "grpc-retry-pushback-ms",
                                sizeof("grpc-retry-pushback-ms") - 1);
    if (h != NULL) {
        n = ngx_atoi(h->value.data, h->value.len);

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem grpc: grpc-retry-pushback-ms \"%V\"",
                       &h->value);

        if (n == NGX_ERROR) {
            return 0;
        }

        *delay = (n > NGX_MAX_INT32_VALUE) ? NGX_MAX_INT32_VALUE : n;
    }

    return (code == NGX_HTTP_IDEM_GRPC_UNAVAILABLE)
           ? NGX_HTTP_SERVICE_UNAVAILABLE : NGX_HTTP_TOO_MANY_REQUESTS;
}
