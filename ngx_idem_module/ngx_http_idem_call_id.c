
/*
 * Call ids and trace ids: validation of what the client sent, generation of
 * what it did not send, and the W3C traceparent it may carry instead (read
 * by ngx_http_idem_trace.c).
 */


#include "ngx_http_idem_call_id.h"
#include "ngx_http_idem_problem.h"
#include "ngx_http_idem_trace.h"
#include "ngx_http_idem_util.h"

#include <uuid/uuid.h>


static ngx_int_t ngx_http_idem_check_id(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_header_t *name,
    ngx_table_elt_t *h, ngx_uint_t count, ngx_http_idem_inbound_t *in,
    ngx_str_t *id, ngx_http_idem_problem_t *problem);
static void ngx_http_idem_call_id_problem(ngx_http_request_t *r,
    ngx_http_idem_inbound_t *in, ngx_http_idem_header_t *name,
    ngx_http_idem_problem_t *problem, ngx_http_idem_problem_e id,
    char *reason);
static ngx_int_t ngx_http_idem_call_id_digest(ngx_http_request_t *r,
    ngx_http_idem_inbound_t *in, ngx_str_t *id);
static ngx_int_t ngx_http_idem_resolve_trace(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_problem_t *problem);
static ngx_int_t ngx_http_idem_resolve_trace_id(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_problem_t *problem);
static ngx_uint_t ngx_http_idem_traceparent(ngx_http_request_t *r,
    ngx_http_idem_inbound_t *in, ngx_http_idem_ctx_t *ctx,
    ngx_str_t *trace_id);
static u_char *ngx_http_idem_bad_byte(ngx_str_t *value);
static u_char *ngx_http_idem_sf_param(u_char *p, u_char *last);
static u_char *ngx_http_idem_sf_bare_item(u_char *p, u_char *last);


/*
 * Decides the call id and trace id of the request.  NGX_DECLINED means the
 * request must be answered with "problem"; the context then still holds a
 * gateway-made call id and a trace id, for the response headers and logs.
 */

ngx_int_t
ngx_http_idem_resolve_ids(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_problem_t *problem)
{
    u_char     *p;
    ngx_int_t   rc;
    ngx_str_t   id;

    if (in->call_id_count == 0
        && ilcf->call_id_missing == NGX_HTTP_IDEM_MISSING_REJECT)
    {
        ngx_http_idem_call_id_problem(r, in, &ilcf->call_id_header, problem,
                                      NGX_HTTP_IDEM_P_MISSING_CALL_ID,
                                      in->call_id_missing
                                      ? in->call_id_missing : "missing");
        rc = NGX_DECLINED;

    } else if (in->call_id_count == 0) {
        rc = NGX_OK;

    } else {
        rc = ngx_http_idem_check_id(r, ilcf, &ilcf->call_id_header,
                                    in->call_id, in->call_id_count, in,
                                    &id, problem);

        /* idem_call_id_json ... digest: an invalid id stands for its hash */

        if (rc == NGX_DECLINED && in->call_id_digest) {
            rc = ngx_http_idem_call_id_digest(r, in, &id);
        }

        /* the client's own header name never gets a gateway id back */

        ctx->ids.call_id_refused = (rc == NGX_DECLINED);
    }

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_OK && in->call_id != NULL) {
        ctx->ids.call_id = id;
        ctx->ids.call_id_echo = in->call_id_digest ? id : in->call_id->value;
        ctx->ids.source = in->call_id_source;

    } else {
        /* a rejected call gets an id too, so that its answer can be traced */

        if (ngx_http_idem_generate_call_id(r, ilcf, &ctx->ids.call_id)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        ctx->ids.source = NGX_HTTP_IDEM_SOURCE_GATEWAY;

        if (ilcf->call_id_form == NGX_HTTP_IDEM_FORM_STRING) {

            /* generated ids are tokens: nothing in them needs escaping */

            p = ngx_pnalloc(r->pool, ctx->ids.call_id.len + 2);
            if (p == NULL) {
                return NGX_ERROR;
            }

            ctx->ids.call_id_echo.data = p;
            *p++ = '"';
            p = ngx_cpymem(p, ctx->ids.call_id.data, ctx->ids.call_id.len);
            *p++ = '"';
            ctx->ids.call_id_echo.len = p - ctx->ids.call_id_echo.data;

        } else {
            ctx->ids.call_id_echo = ctx->ids.call_id;
        }

        if (rc == NGX_DECLINED) {
            if (ngx_http_idem_resolve_trace(r, ilcf, in, ctx, NULL)
                == NGX_ERROR)
            {
                return NGX_ERROR;
            }

            return NGX_DECLINED;
        }
    }

    return ngx_http_idem_resolve_trace(r, ilcf, in, ctx, problem);
}


/* the trace id, then the trace context that goes with it */

static ngx_int_t
ngx_http_idem_resolve_trace(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_problem_t *problem)
{
    ngx_int_t  rc;

    rc = ngx_http_idem_resolve_trace_id(r, ilcf, in, ctx, problem);

    if (rc == NGX_ERROR
        || ngx_http_idem_trace_start(r, ilcf, in, ctx) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return rc;
}


static ngx_int_t
ngx_http_idem_resolve_trace_id(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_problem_t *problem)
{
    ngx_int_t                 rc;
    ngx_http_idem_problem_t   ignored;

    if (in->trace_id_count) {
        rc = ngx_http_idem_check_id(r, ilcf, &ilcf->trace_id_header,
                                    in->trace_id, in->trace_id_count, NULL,
                                    NULL, problem ? problem : &ignored);
        if (rc == NGX_OK) {
            ctx->ids.trace_id = in->trace_id->value;

            /* a traceparent of the same trace still gives its context */

            (void) ngx_http_idem_traceparent(r, in, ctx, &ctx->ids.trace_id);

            return NGX_OK;
        }

        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        /* invalid: the answer still needs a trace id */

        in->trace_id = NULL;

        if (ngx_http_idem_generate_trace_id(r->pool, &ctx->ids.trace_id)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        return NGX_DECLINED;
    }

    if (ngx_http_idem_traceparent(r, in, ctx, NULL)) {
        return NGX_OK;
    }

    return ngx_http_idem_generate_trace_id(r->pool, &ctx->ids.trace_id);
}


/*
 * The client's traceparent, when valid and of the trace "trace_id" (NULL:
 * any, and the trace id is taken from it): its context becomes the call's.
 */

static ngx_uint_t
ngx_http_idem_traceparent(ngx_http_request_t *r, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx, ngx_str_t *trace_id)
{
    ngx_http_idem_traceparent_t  tp;

    /* a repeated traceparent is invalid (W3C Trace Context), so ignored */

    if (in->traceparent_count != 1) {
        return 0;
    }

    if (ngx_http_idem_traceparent_parse(&in->traceparent->value, &tp)
        != NGX_OK)
    {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem: ignoring invalid traceparent \"%V\"",
                       &in->traceparent->value);
        return 0;
    }

    if (trace_id != NULL
        && (trace_id->len != tp.trace_id.len
            || ngx_memcmp(trace_id->data, tp.trace_id.data, tp.trace_id.len)
               != 0))
    {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem: ignoring traceparent \"%V\" of another trace "
                       "than the trace id header's",
                       &in->traceparent->value);
        return 0;
    }

    if (trace_id == NULL) {
        ctx->ids.trace_id = tp.trace_id;
    }

    ngx_http_idem_trace_take(r, ctx, &tp);

    return 1;
}


/*
 * Checks one id header ("in" for a call id, NULL for a trace id).  A call
 * id may come as an RFC 8941 String; "id" then gets its content (the call
 * id itself), else the value as sent.  An id of idem_call_id_from or
 * idem_call_id_json is taken as it is: no String form.
 */

static ngx_int_t
ngx_http_idem_check_id(ngx_http_request_t *r, ngx_http_idem_loc_conf_t *ilcf,
    ngx_http_idem_header_t *name, ngx_table_elt_t *h, ngx_uint_t count,
    ngx_http_idem_inbound_t *in, ngx_str_t *id,
    ngx_http_idem_problem_t *problem)
{
    char        *reason;
    u_char      *p, *last, buf[64];
    ngx_str_t   *v, content;
    ngx_uint_t   is_call_id;
#if (NGX_PCRE)
    ngx_int_t    rc;
#endif

    v = &h->value;
    is_call_id = (in != NULL);

    if (count > 1) {
        reason = "sent more than once";
        goto invalid;
    }

    if (is_call_id && in->call_id_source == NGX_HTTP_IDEM_SOURCE_CLIENT
        && v->len && v->data[0] == '"')
    {

        /* the IETF draft's form: an RFC 8941 String, its content the id */

        content.data = ngx_pnalloc(r->pool, v->len);
        if (content.data == NULL) {
            return NGX_ERROR;
        }

        if (ngx_http_idem_parse_sf_string(v, &content, buf, sizeof(buf))
            != NGX_OK)
        {
            reason = (char *) buf;
            goto invalid;
        }

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem: call id in string form, content \"%V\"",
                       &content);

        v = &content;
        *id = content;

    } else if (is_call_id) {
        *id = *v;
    }

    if (v->len == 0) {
        reason = "empty value";
        goto invalid;
    }

    if (v->len > ilcf->call_id_max_length) {
        last = ngx_snprintf(buf, sizeof(buf) - 1, "longer than %ui bytes",
                            ilcf->call_id_max_length);
        *last = '\0';
        reason = (char *) buf;
        goto invalid;
    }

    p = ngx_http_idem_bad_byte(v);

    if (p != NULL) {
        last = ngx_snprintf(buf, sizeof(buf) - 1,
                            "byte 0x%02xd at offset %uz is not allowed",
                            (ngx_uint_t) *p, (size_t) (p - v->data));
        *last = '\0';
        reason = (char *) buf;
        goto invalid;
    }

#if (NGX_PCRE)
    if (is_call_id && ilcf->call_id_pattern != NULL) {
        rc = ngx_regex_exec(ilcf->call_id_pattern, v, NULL, 0);

        if (rc == NGX_REGEX_NO_MATCHED) {
            reason = "does not match idem_call_id_pattern";
            goto invalid;
        }

        if (rc < 0) {
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                          ngx_regex_exec_n " failed: %i on \"%V\" using "
                          "\"%V\"", rc, v, &ilcf->call_id_pattern_src);
            return NGX_ERROR;
        }
    }
#endif

    return NGX_OK;

invalid:

    if (is_call_id) {
        ngx_http_idem_call_id_problem(r, in, name, problem,
                                      NGX_HTTP_IDEM_P_INVALID_CALL_ID,
                                      reason);

    } else {
        ngx_http_idem_problem_set(r, problem,
                                  NGX_HTTP_IDEM_P_INVALID_TRACE_ID,
                                  &name->name, reason);
    }

    return NGX_DECLINED;
}


/* the problem names the header, the body field or the variable */

static void
ngx_http_idem_call_id_problem(ngx_http_request_t *r,
    ngx_http_idem_inbound_t *in, ngx_http_idem_header_t *name,
    ngx_http_idem_problem_t *problem, ngx_http_idem_problem_e id,
    char *reason)
{
    u_char  *p;
    size_t   len;
    char    *what;

    if (in->call_id_source == NGX_HTTP_IDEM_SOURCE_CLIENT) {
        ngx_http_idem_problem_set(r, problem, id, &name->name, reason);
        return;
    }

    ngx_http_idem_problem_set(r, problem, id, NULL, reason);

    what = (in->call_id_source == NGX_HTTP_IDEM_SOURCE_BODY)
           ? "body field" : "value";

    len = ngx_strlen(what) + sizeof(" \"\": ") - 1 + in->call_id_name.len
          + problem->detail.len;

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return;
    }

    problem->detail.len = ngx_sprintf(p, "%s \"%V\": %V", what,
                                      &in->call_id_name, &problem->detail)
                          - p;
    problem->detail.data = p;
}


/* an id that failed validation, as the lowercase hex of its SHA-256 */

static ngx_int_t
ngx_http_idem_call_id_digest(ngx_http_request_t *r,
    ngx_http_idem_inbound_t *in, ngx_str_t *id)
{
    u_char  *p;

    p = ngx_pnalloc(r->pool, NGX_HTTP_IDEM_SHA256_HEX_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_idem_sha256_hex(p, &in->call_id->value, 1) != NGX_OK) {
        return NGX_ERROR;
    }

    id->data = p;
    id->len = NGX_HTTP_IDEM_SHA256_HEX_LEN;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem call id: \"%V\" is not a valid id, its digest "
                   "\"%V\" stands for it", &in->call_id->value, id);

    return NGX_OK;
}


/*
 * An RFC 8941 String, as the Idempotency-Key draft sends it:
 * DQUOTE *( %x20-21 / %x23-5B / %x5D-7E / "\\" ( DQUOTE / "\\" ) ) DQUOTE,
 * then parameters (";" *SP key [ "=" bare-item ]), ignored, and optional
 * whitespace.  "content" gets the unescaped string; its data must have
 * room for value->len bytes.  On NGX_DECLINED, "err" says what is wrong.
 */

ngx_int_t
ngx_http_idem_parse_sf_string(ngx_str_t *value, ngx_str_t *content,
    u_char *err, size_t size)
{
    u_char  c, *p, *q, *last, *start;

    p = value->data;
    last = p + value->len;

    if (p == last || *p != '"') {
        ngx_snprintf(err, size, "not a string%Z");
        return NGX_DECLINED;
    }

    start = p;
    q = content->data;

    for (p++; /* void */; p++) {

        if (p == last) {
            ngx_snprintf(err, size, "unterminated string%Z");
            return NGX_DECLINED;
        }

        c = *p;

        if (c == '"') {
            break;
        }

        if (c == '\\') {
            if (p + 1 == last || (p[1] != '"' && p[1] != '\\')) {
                ngx_snprintf(err, size, "bad escape at offset %uz%Z",
                             (size_t) (p - start));
                return NGX_DECLINED;
            }

            *q++ = *++p;
            continue;
        }

        if (c < 0x20 || c > 0x7e) {
            ngx_snprintf(err, size,
                         "byte 0x%02xd at offset %uz is not allowed in a "
                         "string%Z", (ngx_uint_t) c, (size_t) (p - start));
            return NGX_DECLINED;
        }

        *q++ = c;
    }

    content->len = q - content->data;

    /* parameters after the closing quote are allowed, and ignored */

    for (p++; p < last && *p == ';'; /* void */) {

        p = ngx_http_idem_sf_param(p + 1, last);

        if (p == NULL) {
            ngx_snprintf(err, size, "malformed parameter after the string%Z");
            return NGX_DECLINED;
        }
    }

    while (p < last && (*p == ' ' || *p == '\t')) {
        p++;
    }

    if (p != last) {
        ngx_snprintf(err, size, "unexpected data after the string%Z");
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* *SP key [ "=" bare-item ]: where it ends, or NULL when malformed */

static u_char *
ngx_http_idem_sf_param(u_char *p, u_char *last)
{
    u_char  c;

    while (p < last && *p == ' ') {
        p++;
    }

    if (p == last || !((*p >= 'a' && *p <= 'z') || *p == '*')) {
        return NULL;
    }

    for (p++; p < last; p++) {
        c = *p;

        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
              || c == '_' || c == '-' || c == '.' || c == '*'))
        {
            break;
        }
    }

    if (p == last || *p != '=') {
        return p;
    }

    return ngx_http_idem_sf_bare_item(p + 1, last);
}


/* an integer, decimal, string, token, byte sequence or boolean */

static u_char *
ngx_http_idem_sf_bare_item(u_char *p, u_char *last)
{
    u_char  c;

    if (p == last) {
        return NULL;
    }

    c = *p;

    if (c == '"') {
        for (p++; p < last && *p != '"'; p++) {
            if (*p == '\\') {
                if (++p == last || (*p != '"' && *p != '\\')) {
                    return NULL;
                }

            } else if (*p < 0x20 || *p > 0x7e) {
                return NULL;
            }
        }

        return p < last ? p + 1 : NULL;
    }

    if (c == '?') {
        return (p + 1 < last && (p[1] == '0' || p[1] == '1')) ? p + 2 : NULL;
    }

    if (c == ':') {
        for (p++; p < last && *p != ':'; p++) {
            c = *p;

            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                  || (c >= '0' && c <= '9') || c == '+' || c == '/'
                  || c == '='))
            {
                return NULL;
            }
        }

        return p < last ? p + 1 : NULL;
    }

    if (c == '-' || (c >= '0' && c <= '9')) {
        if (c == '-' && (++p == last || *p < '0' || *p > '9')) {
            return NULL;
        }

        while (p < last && ((*p >= '0' && *p <= '9') || *p == '.')) {
            p++;
        }

        return p;
    }

    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '*') {

        /* a token: tchar, ":" and "/" */

        for (p++; p < last; p++) {
            c = *p;

            if (c <= 0x20 || c >= 0x7f || c == '"' || c == '(' || c == ')'
                || c == ',' || c == ';' || c == '<' || c == '='
                || c == '>' || c == '?' || c == '@' || c == '['
                || c == '\\' || c == ']' || c == '{' || c == '}')
            {
                break;
            }
        }

        return p;
    }

    return NULL;
}


ngx_int_t
ngx_http_idem_check_charset(ngx_str_t *value)
{
    return ngx_http_idem_bad_byte(value) == NULL ? NGX_OK : NGX_DECLINED;
}


/* the first byte outside A-Z a-z 0-9 - . _ ~ : (URL-unreserved and ':') */

static u_char *
ngx_http_idem_bad_byte(ngx_str_t *value)
{
    u_char  c, *p, *last;

    last = value->data + value->len;

    for (p = value->data; p < last; p++) {
        c = *p;

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9')
            || c == '-' || c == '.' || c == '_' || c == '~' || c == ':')
        {
            continue;
        }

        return p;
    }

    return NULL;
}


ngx_int_t
ngx_http_idem_generate_call_id(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_str_t *id)
{
    u_char                     *p;
    uuid_t                      uuid;
    uint64_t                    ms;
    ngx_time_t                 *tp;
    ngx_http_idem_main_conf_t  *imcf;

    if (ilcf->call_id_generator == NGX_HTTP_IDEM_GENERATOR_UUID) {
        p = ngx_pnalloc(r->pool, NGX_HTTP_IDEM_UUID_LEN + 1);
        if (p == NULL) {
            return NGX_ERROR;
        }

        /*
         * A version 4 UUID from the process's batch of kernel random bytes:
         * uuid_generate_random() reseeds random() with five system calls
         * per id.  libuuid still writes the text form.
         */

        ngx_http_idem_random_bytes(uuid, sizeof(uuid_t));

        uuid[6] = (uuid[6] & 0x0f) | 0x40;
        uuid[8] = (uuid[8] & 0x3f) | 0x80;

        uuid_unparse_lower(uuid, (char *) p);

        id->data = p;
        id->len = NGX_HTTP_IDEM_UUID_LEN;

        return NGX_OK;
    }

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    id->data = ngx_pnalloc(r->pool,
                           ngx_http_idem_generated_length(ilcf,
                                                          &imcf->node_id));
    if (id->data == NULL) {
        return NGX_ERROR;
    }

    tp = ngx_timeofday();
    ms = (uint64_t) tp->sec * 1000 + tp->msec;

    p = ngx_sprintf(id->data, "%V-%uL-", &ilcf->call_id_prefix, ms);

    ngx_http_idem_random_hex(p, 8);
    p += 8;
    *p++ = '-';

    p = ngx_cpymem(p, imcf->node_id.data, imcf->node_id.len);

    id->len = p - id->data;

    return NGX_OK;
}


size_t
ngx_http_idem_generated_length(ngx_http_idem_loc_conf_t *ilcf,
    ngx_str_t *node_id)
{
    if (ilcf->call_id_generator == NGX_HTTP_IDEM_GENERATOR_UUID) {
        return NGX_HTTP_IDEM_UUID_LEN;
    }

    return ilcf->call_id_prefix.len + NGX_HTTP_IDEM_PREFIXED_FIXED_LEN
           + node_id->len;
}


ngx_int_t
ngx_http_idem_generate_trace_id(ngx_pool_t *pool, ngx_str_t *id)
{
    id->data = ngx_pnalloc(pool, NGX_HTTP_IDEM_TRACE_ID_LEN);
    if (id->data == NULL) {
        return NGX_ERROR;
    }

    ngx_http_idem_random_hex(id->data, NGX_HTTP_IDEM_TRACE_ID_LEN);
    id->len = NGX_HTTP_IDEM_TRACE_ID_LEN;

    return NGX_OK;
}
