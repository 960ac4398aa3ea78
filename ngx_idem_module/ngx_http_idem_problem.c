
/*
 * The module's own error answers: application/problem+json (RFC 9457),
 * sent directly so that error_page never replaces them.
 */


#include "ngx_http_idem_problem.h"
#include "ngx_http_idem_ctx.h"
#include "ngx_http_idem_grpc.h"
#include "ngx_http_idem_json.h"
#include "ngx_http_idem_metrics.h"
#include "ngx_http_idem_util.h"


#define NGX_HTTP_IDEM_PROBLEM_TYPE  "urn:ngx-idem:problem:"


typedef struct {
    ngx_uint_t   status;
    char        *type;
    char        *title;
    ngx_int_t    counter;       /* in ngx_http_idem_counters_t, -1: none */
} ngx_http_idem_problem_def_t;


static ngx_int_t ngx_http_idem_problem_body(ngx_http_request_t *r,
    ngx_http_idem_problem_t *problem, ngx_str_t *call_id, ngx_str_t *body);


#define ngx_http_idem_counter(field)                                         \
    offsetof(ngx_http_idem_counters_t, field)


/* indexed by ngx_http_idem_problem_e */

static ngx_http_idem_problem_def_t  ngx_http_idem_problems[] = {

    { NGX_HTTP_BAD_REQUEST, "missing-call-id", "Missing call id",
      ngx_http_idem_counter(missing_call_id) },

    { NGX_HTTP_BAD_REQUEST, "invalid-call-id", "Invalid call id",
      ngx_http_idem_counter(invalid_call_id) },

    { NGX_HTTP_BAD_REQUEST, "invalid-trace-id", "Invalid trace id",
      ngx_http_idem_counter(invalid_trace_id) },

    { NGX_HTTP_BAD_REQUEST, "invalid-deadline", "Invalid deadline",
      ngx_http_idem_counter(invalid_deadline) },

    { NGX_HTTP_BAD_REQUEST, "empty-dedupe-scope", "No scope",
      ngx_http_idem_counter(empty_scope) },

    { NGX_HTTP_GATEWAY_TIME_OUT, "deadline-exceeded", "Deadline exceeded",
      ngx_http_idem_counter(deadline_exceeded) },

    { NGX_HTTP_CONFLICT, "call-in-flight", "Call in flight",
      ngx_http_idem_counter(dedupe_in_flight) },

    { NGX_HTTP_CONFLICT, "call-outcome-unknown", "Call outcome unknown",
      ngx_http_idem_counter(dedupe_unknown) },

    { NGX_HTTP_CONFLICT, "answer-not-stored", "Answer not stored",
      ngx_http_idem_counter(dedupe_not_stored) },

    { NGX_HTTP_IDEM_UNPROCESSABLE, "payload-mismatch", "Call id reused",
      ngx_http_idem_counter(dedupe_mismatches) },

    { NGX_HTTP_SERVICE_UNAVAILABLE, "dedupe-unavailable",
      "Duplicate check unavailable",
      ngx_http_idem_counter(dedupe_unavailable) },

    /* counted per upstream by storm.c */

    { NGX_HTTP_SERVICE_UNAVAILABLE, "upstream-unavailable",
      "Upstream unavailable", -1 },

    { NGX_HTTP_CONFLICT, "call-applied", "Call applied",
      ngx_http_idem_counter(dedupe_applied) },

    /* the status endpoint's resolutions (status.c) */

    { NGX_HTTP_BAD_REQUEST, "invalid-resolution", "Invalid resolution",
      ngx_http_idem_counter(resolve_invalid) },

    { NGX_HTTP_CONFLICT, "resolution-conflict", "Not resolvable",
      ngx_http_idem_counter(resolve_conflict) },

    { NGX_HTTP_SERVICE_UNAVAILABLE, "claim-not-durable",
      "Claim not durable", ngx_http_idem_counter(dedupe_not_durable) },

    /* a status read by a scope's digest (status.c): not a call */

    { NGX_HTTP_BAD_REQUEST, "invalid-scope-digest", "Invalid scope digest",
      -1 },

    /* a resolution of a lapsed claim whose owner may still answer */

    { NGX_HTTP_CONFLICT, "resolution-too-early", "Owner may still answer",
      ngx_http_idem_counter(resolve_early) },

    /* a resend of a known call id over idem_resend_limit */

    { NGX_HTTP_TOO_MANY_REQUESTS, "too-many-resends", "Too many resends",
      ngx_http_idem_counter(resends_refused) },

    /* a forced resolution of an execution that has a final write */

    { NGX_HTTP_CONFLICT, "resolution-force-refused", "Force refused",
      ngx_http_idem_counter(resolve_force_refused) },

    /* a resolution posted from another site's page (CSRF, status.c) */

    { NGX_HTTP_FORBIDDEN, "resolution-cross-site", "Cross-site resolution",
      -1 },

    /* the list of UNKNOWN calls (calls_list.c): not a call */

    { NGX_HTTP_NOT_FOUND, "no-unknown-stream", "No list of UNKNOWN calls",
      -1 },

    { NGX_HTTP_BAD_REQUEST, "invalid-page", "Invalid page", -1 }
};


ngx_int_t
ngx_http_idem_send_problem(ngx_http_request_t *r,
    ngx_http_idem_problem_t *problem, ngx_str_t *call_id)
{
    ngx_int_t              rc;
    ngx_str_t              value, body;
    ngx_http_idem_ctx_t   *ctx;

    /*
     * The call is refused for good: should this answer fail, a later
     * location (error_page) answers it again rather than forward it.
     */

    ctx = (r == r->main) ? ngx_http_idem_get_ctx(r) : NULL;

    if (ctx != NULL && ctx->refused == NULL) {
        ctx->refused = ngx_palloc(r->pool, sizeof(ngx_http_idem_problem_t));
        if (ctx->refused == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        *ctx->refused = *problem;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem problem: %ui \"%V\"", problem->status,
                   &problem->type);

    /*
     * A body that cannot be discarded (a broken chunk, say) does not make
     * the answer nginx's own: that would hand the call to error_page.  The
     * problem is sent all the same, and the connection closed after it.
     */

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idem: request body not discarded (%i), the "
                      "connection is closed after the answer", rc);

        r->keepalive = 0;
    }

    /* a gRPC client reads a grpc-status, not a JSON body */

    if (ctx != NULL ? ctx->grpc.on : ngx_http_idem_grpc_request(r)) {
        if (ngx_http_idem_grpc_trailers_only(r, ctx, problem->status,
                                             &problem->type, &problem->title,
                                             &problem->detail)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_send_header(r);
    }

    if (ngx_http_idem_problem_body(r, problem, call_id, &body) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (problem->status == NGX_HTTP_IDEM_UNPROCESSABLE) {

        /* nginx 1.22 has no reason phrase of its own for it */

        ngx_str_set(&r->headers_out.status_line, "422 Unprocessable Content");
    }

    /* an answer about this one call: never cached */

    ngx_str_set(&value, "no-store");

    if (ngx_http_idem_add_response_header(r, "Cache-Control", &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_idem_send_response(r, problem->status,
                                       "application/problem+json", &body);
}


/*
 * nginx's own error page for a call turned into the problem (its 504 when
 * the budget ran out during an attempt): the header filter sets the
 * problem's headers here, and the body filter sends its body in place of
 * the page (ngx_http_idem_problem_swap()).  Sent from inside nginx's
 * answer, this one does not bypass error_page: an error_page of the
 * operator's had its turn before it.
 */

ngx_int_t
ngx_http_idem_problem_replace(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_idem_problem_t *problem)
{
    ngx_buf_t    *b;
    ngx_str_t     body, value;
    ngx_chain_t  *cl;

    if (ngx_http_idem_problem_body(r, problem, &ctx->ids.call_id, &body)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = body.data;
    b->last = body.data + body.len;
    b->memory = 1;
    b->last_buf = 1;
    b->last_in_chain = 1;

    cl = ngx_alloc_chain_link(r->pool);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    cl->buf = b;
    cl->next = NULL;

    ctx->problem_body = cl;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem problem: %ui \"%V\" in place of nginx's page",
                   problem->status, &problem->type);

    ngx_str_set(&r->headers_out.content_type, "application/problem+json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;
    ngx_str_null(&r->headers_out.charset);

    r->headers_out.content_length_n = body.len;

    if (r->headers_out.content_length) {
        r->headers_out.content_length->hash = 0;
        r->headers_out.content_length = NULL;
    }

    ngx_str_set(&value, "no-store");

    return ngx_http_idem_add_response_header(r, "Cache-Control", &value);
}


/*
 * The page's buffers are dropped as they come (nginx sends it in one
 * chain); its last one brings the problem's body in its place.  NULL:
 * nothing to send yet.
 */

ngx_chain_t *
ngx_http_idem_problem_swap(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_chain_t *in)
{
    ngx_uint_t    last;
    ngx_chain_t  *cl, *out;

    last = 0;

    for (cl = in; cl; cl = cl->next) {
        if (cl->buf->last_buf) {
            last = 1;
        }

        cl->buf->pos = cl->buf->last;
        cl->buf->file_pos = cl->buf->file_last;
    }

    if (!last) {
        return NULL;
    }

    out = ctx->problem_body;
    ctx->problem_body = NULL;

    return out;
}

/*
 * The problem document: type, title, status, detail, the call id (when
 * known), the execution's state and the record (when the problem has
 * them).
 */

static ngx_int_t
ngx_http_idem_problem_body(ngx_http_request_t *r,
    ngx_http_idem_problem_t *problem, ngx_str_t *call_id, ngx_str_t *body)
{
    size_t   len;
    u_char  *p;

    len = sizeof("{\"type\":\"" NGX_HTTP_IDEM_PROBLEM_TYPE) - 1
          + problem->type.len
          + sizeof("\",\"title\":\"") - 1
          + problem->title.len
          + sizeof("\",\"status\":") - 1 + NGX_INT_T_LEN
          + sizeof(",\"detail\":\"") - 1
          + ngx_http_idem_json_escape_len(problem->detail.data,
                                          problem->detail.len)
          + sizeof("\"}") - 1;

    if (call_id != NULL && call_id->len) {

        /* call ids are validated: nothing in them needs escaping */

        len += sizeof(",\"call_id\":\"\"") - 1 + call_id->len;
    }

    /* the execution's state, where the answer says it (a validated name) */

    len += sizeof(",\"state\":\"\"") - 1 + problem->state.len;

    /* the record is JSON already (status.c) */

    len += sizeof(",\"record\":") - 1 + problem->record.len;

    body->data = ngx_pnalloc(r->pool, len);
    if (body->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(body->data, "{\"type\":\"" NGX_HTTP_IDEM_PROBLEM_TYPE
                    "%V\",\"title\":\"%V\",\"status\":%ui,\"detail\":\"",
                    &problem->type, &problem->title, problem->status);

    p = ngx_http_idem_json_escape(p, problem->detail.data,
                                  problem->detail.len);

    if (call_id != NULL && call_id->len) {
        p = ngx_sprintf(p, "\",\"call_id\":\"%V", call_id);
    }

    *p++ = '"';

    if (problem->state.len) {
        p = ngx_sprintf(p, ",\"state\":\"%V\"", &problem->state);
    }

    if (problem->record.len) {
        p = ngx_cpymem(p, ",\"record\":", sizeof(",\"record\":") - 1);
        p = ngx_cpymem(p, problem->record.data, problem->record.len);

        if (p[-1] == '\n') {
            p--;
        }
    }

    p = ngx_cpymem(p, "}", 1);
    body->len = p - body->data;

    return NGX_OK;

}


/* "detail" reads "header <name>: <reason>", or just the reason */

void
ngx_http_idem_problem_set(ngx_http_request_t *r,
    ngx_http_idem_problem_t *problem, ngx_http_idem_problem_e id,
    ngx_str_t *header, char *reason)
{
    size_t                        len;
    u_char                       *p;
    ngx_http_idem_problem_def_t  *def;

    def = &ngx_http_idem_problems[id];

    problem->id = id;
    problem->status = def->status;
    problem->type.data = (u_char *) def->type;
    problem->type.len = ngx_strlen(def->type);
    problem->title.data = (u_char *) def->title;
    problem->title.len = ngx_strlen(def->title);
    problem->detail.data = (u_char *) reason;
    problem->detail.len = ngx_strlen(reason);
    ngx_str_null(&problem->record);
    ngx_str_null(&problem->state);

    if (header == NULL) {
        return;
    }

    len = sizeof("header : ") - 1 + header->len + problem->detail.len;

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return;
    }

    problem->detail.data = p;
    problem->detail.len = ngx_sprintf(p, "header %V: %s", header, reason) - p;
}


/*
 * 400 empty-dedupe-scope, naming what the scope is made of (the
 * idem_dedupe_scope value as written, e.g. "$http_authorization"), so
 * that the caller learns what to send: "<who> is empty: ...".
 */

void
ngx_http_idem_problem_empty_scope(ngx_http_request_t *r,
    ngx_http_idem_problem_t *problem, ngx_http_idem_loc_conf_t *ilcf,
    char *who)
{
    size_t      len;
    u_char     *p;
    ngx_str_t  *source;

    ngx_http_idem_problem_set(r, problem, NGX_HTTP_IDEM_P_EMPTY_SCOPE, NULL,
                              who);

    if (ilcf->dedupe_scope == NULL) {
        return;
    }

    source = &ilcf->dedupe_scope->value;

    len = ngx_strlen(who) + sizeof(" is empty: idem_dedupe_scope \"\" has "
                                   "no value in this request") - 1
          + source->len
          + (ilcf->status_digest ? sizeof(" (or name the scope by its "
                                          "digest: ?scope_digest=<hex "
                                          "SHA-256>)") - 1 : 0);

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return;
    }

    problem->detail.data = p;

    p = ngx_sprintf(p, "%s is empty: idem_dedupe_scope \"%V\" has no value "
                    "in this request", who, source);

    if (ilcf->status_digest) {
        p = ngx_sprintf(p, " (or name the scope by its digest: "
                        "?scope_digest=<hex SHA-256>)");
    }

    problem->detail.len = p - problem->detail.data;
}

/* the counter a problem grows when a call is refused with it */

void
ngx_http_idem_problem_count(ngx_http_idem_problem_t *problem)
{
    ngx_atomic_t              *value;
    ngx_http_idem_counters_t  *counters;

    if (ngx_http_idem_problems[problem->id].counter == -1) {
        return;
    }

    counters = ngx_http_idem_counters();

    if (counters != NULL) {
        value = (ngx_atomic_t *) ((char *) counters
                                 + ngx_http_idem_problems[problem->id].counter);
        (void) ngx_atomic_fetch_add(value, 1);
    }
}
