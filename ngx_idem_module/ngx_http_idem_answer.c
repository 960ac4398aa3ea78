
/*
 * The answer a claim's owner keeps for its duplicates, and its replay.
 *
 * It is taken where this module's filters sit in nginx's chain (a dynamic
 * HTTP_FILTER module goes just before the copy filter in the module list):
 * after not_modified, range and slice, before add_header, gzip, charset,
 * sub, ssi and the rest, so that a replay, sent through the whole chain
 * again, gives the client the bytes the first answer gave.  An owner's
 * Range is ignored (RFC 9110 allows it), so that its whole answer is kept;
 * an answer made of subrequests' output (ssi, slice, addition) is not
 * kept, nor one to the owner's condition or range that the digest does
 * not cover (304, 206; 412 and 416 when it sent one).  Kept as
 * "<status>[ <reason>]\n<name>: <value>\n...\n\n<body>": names and
 * values never hold a newline (nginx refuses them).  Trailers
 * (gRPC's grpc-status) are lines of the same block, as "~<name>: <value>":
 * no field name starts with "~".
 *
 * Set-Cookie is never kept: a duplicate may come from another caller (a
 * route with "idem_dedupe_scope off", or a scope coarser than a session),
 * and must not be handed the first caller's session.
 */


#include "ngx_http_idem_answer.h"
#include "ngx_http_idem_util.h"


#define NGX_HTTP_IDEM_ANSWER_FIRST  4096


static ngx_uint_t ngx_http_idem_answer_conditional(ngx_http_request_t *r,
    ngx_uint_t status);
static ngx_int_t ngx_http_idem_answer_skip(ngx_http_idem_ctx_t *ctx,
    ngx_table_elt_t *h);
static ngx_int_t ngx_http_idem_answer_append(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, u_char *data, size_t len);
static ngx_int_t ngx_http_idem_answer_line(u_char **pos, u_char *last,
    ngx_str_t *name, ngx_str_t *value);
static void ngx_http_idem_answer_content_type(ngx_http_request_t *r,
    ngx_str_t *value);
static ngx_int_t ngx_http_idem_answer_trailers(ngx_http_request_t *r,
    ngx_str_t *answer);
static ngx_uint_t ngx_http_idem_answer_replayed(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_int_t grpc);


/* not kept: hop-by-hop, computed again, this module's own, or a caller's */
static ngx_str_t  ngx_http_idem_answer_skipped[] = {
    ngx_string("Connection"),
    ngx_string("Keep-Alive"),
    ngx_string("Proxy-Authenticate"),
    ngx_string("Proxy-Authorization"),
    ngx_string("Proxy-Connection"),
    ngx_string("TE"),
    ngx_string("Trailer"),
    ngx_string("Transfer-Encoding"),
    ngx_string("Upgrade"),
    ngx_string("Content-Length"),
    ngx_string("Content-Type"),
    ngx_string("Idempotent-Replayed"),
    ngx_string("Set-Cookie"),
    ngx_string("Set-Cookie2"),
    ngx_null_string
};


static ngx_str_t  ngx_http_idem_retry_after = ngx_string("Retry-After");
static ngx_str_t  ngx_http_idem_content_encoding =
    ngx_string("Content-Encoding");
static ngx_str_t  ngx_http_idem_location = ngx_string("Location");
static ngx_str_t  ngx_http_idem_server = ngx_string("Server");
static ngx_str_t  ngx_http_idem_date = ngx_string("Date");
static ngx_str_t  ngx_http_idem_replayed = ngx_string("true");


/* the owner's answer starts: its status and headers */

ngx_int_t
ngx_http_idem_answer_header(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    size_t                        len;
    u_char                       *p;
    ngx_uint_t                    status;
    ngx_table_elt_t              *h;
    ngx_http_idem_loc_conf_t     *ilcf;
    ngx_http_idem_header_iter_t   it;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    status = r->headers_out.status;
    ctx->answer.capture_max = ilcf->dedupe_store_max;

    /*
     * An answer to the owner's own condition or range: the digest knows
     * neither, so a duplicate without them would get it as its own
     */

    if (ngx_http_idem_answer_conditional(r, status)) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem: a %ui answers the owner's condition or "
                       "range: not kept", status);

        ctx->answer.capture_over = 1;
        return NGX_OK;
    }

    len = sizeof("999 \nContent-Type: \nContent-Length: \n\n") - 1
          + r->headers_out.status_line.len + r->headers_out.content_type.len
          + NGX_OFF_T_LEN;

    for (h = ngx_http_idem_header_first(&it, &r->headers_out.headers);
         h != NULL;
         h = ngx_http_idem_header_next(&it))
    {
        if (h->hash == 0) {
            continue;
        }

        /* "try later" from the upstream: not an answer to keep */

        if ((status == NGX_HTTP_TOO_MANY_REQUESTS
             || status == NGX_HTTP_SERVICE_UNAVAILABLE)
            && ngx_http_idem_header_named(h, &ngx_http_idem_retry_after))
        {
            ctx->answer.retry_later = 1;
            ctx->answer.capture_over = 1;
            return NGX_OK;
        }

        if (ngx_http_idem_answer_skip(ctx, h)) {
            continue;
        }

        /*
         * "~" opens a trailer's line: a header named so (nginx lets an
         * upstream send one) would come back as a trailer; not kept
         */

        if (h->key.len && h->key.data[0] == '~') {
            ctx->answer.capture_over = 1;
            return NGX_OK;
        }

        len += h->key.len + sizeof(": \n") - 1 + h->value.len;
    }

    /*
     * idem_dedupe_store_max 0 keeps no answer at all: an empty body's
     * status and headers (a 201's Location, say) are an answer too
     */

    if (status == NGX_HTTP_SWITCHING_PROTOCOLS
        || ctx->answer.capture_max == 0
        || r->headers_out.content_length_n > (off_t) ctx->answer.capture_max)
    {
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem: a %ui answer of %O bytes: not kept", status,
                       r->headers_out.content_length_n);

        ctx->answer.capture_over = 1;
        return NGX_OK;
    }

    ctx->answer.capture = ngx_create_temp_buf(r->pool, len
                                    + ngx_min(ctx->answer.capture_max,
                                              NGX_HTTP_IDEM_ANSWER_FIRST));
    if (ctx->answer.capture == NULL) {
        return NGX_ERROR;
    }

    r->allow_ranges = 0;

    p = ngx_sprintf(ctx->answer.capture->last, "%03ui", status);

    if (r->headers_out.status_line.len > 4) {

        /* the reason phrase, if the upstream gave one */

        p = ngx_sprintf(p, " %*s", r->headers_out.status_line.len - 4,
                        r->headers_out.status_line.data + 4);
    }

    *p++ = '\n';

    if (r->headers_out.content_type.len) {
        p = ngx_sprintf(p, "Content-Type: %V\n",
                        &r->headers_out.content_type);
    }

    if (r->method == NGX_HTTP_HEAD && r->headers_out.content_length_n >= 0) {

        /* the length of the body a HEAD answer does not carry */

        p = ngx_sprintf(p, "Content-Length: %O\n",
                        r->headers_out.content_length_n);
    }

    for (h = ngx_http_idem_header_first(&it, &r->headers_out.headers);
         h != NULL;
         h = ngx_http_idem_header_next(&it))
    {
        if (h->hash == 0 || ngx_http_idem_answer_skip(ctx, h)) {
            continue;
        }

        p = ngx_sprintf(p, "%V: %V\n", &h->key, &h->value);
    }

    *p++ = '\n';

    ctx->answer.capture->last = p;

    return NGX_OK;
}


/*
 * 304 and 206 answer a condition or a range only; 412 and 416 are kept
 * when the request had none (the upstream's own reasons)
 */

static ngx_uint_t
ngx_http_idem_answer_conditional(ngx_http_request_t *r, ngx_uint_t status)
{
    ngx_http_headers_in_t  *in;

    in = &r->headers_in;

    switch (status) {

    case NGX_HTTP_NOT_MODIFIED:
    case NGX_HTTP_PARTIAL_CONTENT:
        return 1;

    case NGX_HTTP_PRECONDITION_FAILED:
        return in->if_match != NULL || in->if_unmodified_since != NULL
               || in->if_none_match != NULL
               || in->if_modified_since != NULL;

    case NGX_HTTP_RANGE_NOT_SATISFIABLE:
        return in->range != NULL;

    default:
        return 0;
    }
}


static ngx_int_t
ngx_http_idem_answer_skip(ngx_http_idem_ctx_t *ctx, ngx_table_elt_t *h)
{
    ngx_str_t  *name;

    for (name = ngx_http_idem_answer_skipped; name->len; name++) {
        if (ngx_http_idem_header_named(h, name)) {
            return 1;
        }
    }

    /* the ids are set again on every answer */

    return ngx_http_idem_header_named(h, &ctx->ids.call_id_header->name)
           || ngx_http_idem_header_named(h, &ctx->ids.trace_id_header->name);
}


/* the owner's answer goes by: its body, as far as it is to be kept */

void
ngx_http_idem_answer_body(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_chain_t *in)
{
    size_t      size;
    ssize_t     n;
    ngx_buf_t  *b;

    if (r != r->main) {

        /* a subrequest's output in the answer (ssi, slice): not kept */

        for ( /* void */ ; in; in = in->next) {
            if (!r->background && ngx_buf_size(in->buf)) {
                ctx->answer.capture_over = 1;
            }
        }

        return;
    }

    for ( /* void */ ; in; in = in->next) {
        b = in->buf;

        if (ngx_buf_in_memory(b)) {
            size = b->last - b->pos;

            if (ngx_http_idem_answer_append(r, ctx, b->pos, size) != NGX_OK) {
                return;
            }

        } else if (b->in_file) {

            /* a file buffer (a spooled answer): read back, as copy does */

            size = (size_t) (b->file_last - b->file_pos);

            if (ngx_http_idem_answer_append(r, ctx, NULL, size) != NGX_OK) {
                return;
            }

            n = ngx_read_file(b->file, ctx->answer.capture->last, size,
                              b->file_pos);

            if (n != (ssize_t) size) {
                ctx->answer.capture_over = 1;
                return;
            }

            ctx->answer.capture->last += size;
        }

        if (b->last_buf) {
            ctx->answer.capture_done = 1;
        }
    }
}


/*
 * Room for len more bytes of body (copied from data unless NULL); a body
 * larger than idem_dedupe_store_max stops the capture.
 */

static ngx_int_t
ngx_http_idem_answer_append(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    u_char *data, size_t len)
{
    size_t      size, used;
    ngx_buf_t  *b;

    if (len == 0) {
        return NGX_OK;
    }

    ctx->answer.captured += len;

    if (ctx->answer.captured > (off_t) ctx->answer.capture_max) {
        ctx->answer.capture_over = 1;
        return NGX_DECLINED;
    }

    b = ctx->answer.capture;

    if ((size_t) (b->end - b->last) < len) {

        /* doubling, up to what the headers and the largest body need */

        used = b->last - b->start;
        size = ngx_max(2 * (size_t) (b->end - b->start), used + len);
        size = ngx_min(size, used + ctx->answer.capture_max
                             - (size_t) (ctx->answer.captured - len));

        b = ngx_create_temp_buf(r->pool, size);
        if (b == NULL) {
            ctx->answer.capture_over = 1;
            return NGX_ERROR;
        }

        b->last = ngx_cpymem(b->last, ctx->answer.capture->start, used);

        ngx_pfree(r->pool, ctx->answer.capture->start);
        ctx->answer.capture = b;
    }

    if (data != NULL) {
        b->last = ngx_cpymem(b->last, data, len);
    }

    return NGX_OK;
}


/*
 * What a finished owner leaves for the duplicates of its call, and the
 * answer to store with it; "sent": some attempt reached the upstream;
 * "grpc": a gRPC call's grpc-status as the client got it, -1: none.
 */

u_char
ngx_http_idem_answer_keep(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_uint_t state, ngx_uint_t sent, ngx_int_t grpc, ngx_str_t *answer)
{
    if (state == NGX_HTTP_IDEM_UNKNOWN) {
        return NGX_HTTP_IDEM_KEEP_UNKNOWN;
    }

    /* nothing reached the upstream: the call did not happen, run it again */

    if (!sent || ctx->answer.retry_later) {
        return NGX_HTTP_IDEM_KEEP_RELEASE;
    }

    /* an answer idem_dedupe_replay leaves out: the next resend runs it */

    if (!ngx_http_idem_answer_replayed(r, ctx, grpc)) {
        return NGX_HTTP_IDEM_KEEP_RELEASE;
    }

    /* a 204 or an answer to HEAD has no body to wait for */

    if (ctx->answer.capture == NULL || ctx->answer.capture_over
        || !(ctx->answer.capture_done || r->header_only))
    {
        return NGX_HTTP_IDEM_KEEP_LARGE;
    }

    answer->data = ctx->answer.capture->start;
    answer->len = ctx->answer.capture->last - ctx->answer.capture->start;

    if (ngx_http_idem_answer_trailers(r, answer) != NGX_OK) {
        return NGX_HTTP_IDEM_KEEP_LARGE;
    }

    return NGX_HTTP_IDEM_KEEP_REPLAY;
}


/*
 * Is the call's answer one that idem_dedupe_replay keeps (of the location
 * whose policy the call follows)?  Its status as the client got it.
 */

static ngx_uint_t
ngx_http_idem_answer_replayed(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_int_t grpc)
{
    ngx_uint_t                 i, status, *code;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ctx->conf ? ctx->conf
                     : ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (ilcf->dedupe_replay == NULL) {
        return 1;
    }

    status = r->err_status ? r->err_status : r->headers_out.status;
    code = ilcf->dedupe_replay->elts;

    /* no code listed (grpc= alone): every HTTP status */

    for (i = 0; i < ilcf->dedupe_replay->nelts; i++) {
        if (code[i] == status || code[i] == status / 100) {
            break;
        }
    }

    if (ilcf->dedupe_replay->nelts && i == ilcf->dedupe_replay->nelts) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem dedupe: a %ui answer is not kept "
                       "(idem_dedupe_replay): the claim is released", status);
        return 0;
    }

    /* grpc=: a gRPC call's grpc-status, in its trailers or Trailers-Only */

    if (ilcf->dedupe_replay_grpc == 0 || !ctx->grpc.on) {
        return 1;
    }

    if (grpc >= 0 && (ilcf->dedupe_replay_grpc & ((ngx_uint_t) 1 << grpc))) {
        return 1;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem dedupe: an answer with grpc-status %i is not kept "
                   "(idem_dedupe_replay grpc=): the claim is released", grpc);

    return 0;
}


/*
 * The answer's trailers, known once it has ended, go into its header block
 * as "~<name>: <value>" lines: a replay sends them as trailers again.
 */

static ngx_int_t
ngx_http_idem_answer_trailers(ngx_http_request_t *r, ngx_str_t *answer)
{
    size_t                        len;
    u_char                       *p, *end, *last;
    ngx_table_elt_t              *h;
    ngx_http_idem_header_iter_t   it;

    len = 0;

    for (h = ngx_http_idem_header_first(&it, &r->headers_out.trailers);
         h != NULL;
         h = ngx_http_idem_header_next(&it))
    {
        if (h->hash != 0) {
            len += sizeof("~: \n") - 1 + h->key.len + h->value.len;
        }
    }

    if (len == 0) {
        return NGX_OK;
    }

    /* the empty line that ends the header block: no header line is empty */

    last = answer->data + answer->len;

    for (end = answer->data; end + 1 < last; end++) {
        if (end[0] == '\n' && end[1] == '\n') {
            break;
        }
    }

    if (end + 1 >= last) {
        return NGX_ERROR;
    }

    end++;

    p = ngx_pnalloc(r->pool, answer->len + len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    answer->data = ngx_cpymem(p, answer->data, end - answer->data);

    for (h = ngx_http_idem_header_first(&it, &r->headers_out.trailers);
         h != NULL;
         h = ngx_http_idem_header_next(&it))
    {
        if (h->hash != 0) {
            answer->data = ngx_sprintf(answer->data, "~%V: %V\n",
                                       &h->key, &h->value);
        }
    }

    answer->data = ngx_cpymem(answer->data, end, last - end);
    answer->len = answer->data - p;
    answer->data = p;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem: the stored answer keeps %uz bytes of trailers", len);

    return NGX_OK;
}


/* a duplicate gets the stored answer, through the filters as the first */

ngx_int_t
ngx_http_idem_answer_replay(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_str_t *answer)
{
    u_char           *p, *last, *headers;
    off_t             length;
    ngx_int_t         rc, status;
    ngx_str_t         name, value, body;
    ngx_table_elt_t  *h;

    last = answer->data + answer->len;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem replay: \"%V\", %uz bytes stored",
                   &ctx->ids.call_id, answer->len);

    /* "<status>[ <reason>]\n" */

    headers = ngx_strlchr(answer->data, last, '\n');

    if (headers == NULL || headers - answer->data < 3
        || (headers - answer->data > 3 && answer->data[3] != ' '))
    {
        goto invalid;
    }

    status = ngx_atoi(answer->data, 3);
    if (status < 100) {
        goto invalid;
    }

    headers++;

    /* checked whole first: a bad one changes nothing of the answer */

    p = headers;

    do {
        rc = ngx_http_idem_answer_line(&p, last, &name, &value);
    } while (rc == NGX_OK);

    if (rc == NGX_ERROR) {
        goto invalid;
    }

    length = -1;

    for (p = headers;
         ngx_http_idem_answer_line(&p, last, &name, &value) == NGX_OK;
         /* void */)
    {
        if (name.data[0] == '~') {

            /* a trailer of the first answer */

            h = ngx_list_push(&r->headers_out.trailers);
            if (h == NULL) {
                return NGX_ERROR;
            }

            h->hash = 1;
            h->key.data = name.data + 1;
            h->key.len = name.len - 1;
            h->value = value;
            h->lowcase_key = NULL;

            r->expect_trailers = 1;
            continue;
        }

        if (name.len == sizeof("Content-Type") - 1
            && ngx_strncasecmp(name.data, (u_char *) "Content-Type",
                               name.len) == 0)
        {
            ngx_http_idem_answer_content_type(r, &value);
            continue;
        }

        if (name.len == sizeof("Content-Length") - 1
            && ngx_strncasecmp(name.data, (u_char *) "Content-Length",
                               name.len) == 0)
        {
            /* an answer to HEAD: the length of the body it did not carry */
            length = ngx_atoof(value.data, value.len);
            continue;
        }

        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        h->key = name;
        h->value = value;
        h->lowcase_key = NULL;

        /* what the filters look at, as the upstream module sets it */

        if (ngx_http_idem_header_named(h, &ngx_http_idem_content_encoding)) {
            r->headers_out.content_encoding = h;

        } else if (ngx_http_idem_header_named(h, &ngx_http_idem_location)) {
            r->headers_out.location = h;

        } else if (ngx_http_idem_header_named(h, &ngx_http_idem_server)) {
            r->headers_out.server = h;

        } else if (ngx_http_idem_header_named(h, &ngx_http_idem_date)) {
            r->headers_out.date = h;
        }
    }

    p++;

    if (headers - answer->data > 4) {
        r->headers_out.status_line.data = answer->data;
        r->headers_out.status_line.len = headers - 1 - answer->data;
    }

    if (ngx_http_idem_add_response_header(r, "Idempotent-Replayed",
                                          &ngx_http_idem_replayed)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    r->headers_out.content_length_n = (length >= 0) ? length : last - p;

    if (r->expect_trailers) {

        /*
         * Without a length, as the first answer came: nginx's own gRPC
         * client stops reading at the length, before the trailers.
         */

        r->headers_out.content_length_n = -1;
    }

    ctx->answer.replayed = 1;

    body.data = p;
    body.len = last - p;

    return ngx_http_idem_send_response(r, status, NULL, &body);

invalid:

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "idem: the stored answer of call \"%V\" is not valid",
                  &ctx->ids.call_id);

    return NGX_HTTP_INTERNAL_SERVER_ERROR;
}


/*
 * One "<name>: <value>\n" line of a stored answer; NGX_DONE at the empty
 * line that ends them (*pos is left on it).
 */

static ngx_int_t
ngx_http_idem_answer_line(u_char **pos, u_char *last, ngx_str_t *name,
    ngx_str_t *value)
{
    u_char  *p, *eol, *colon;

    p = *pos;

    if (p >= last) {
        return NGX_ERROR;
    }

    if (*p == '\n') {
        return NGX_DONE;
    }

    eol = ngx_strlchr(p, last, '\n');
    colon = ngx_strlchr(p, last, ':');

    if (eol == NULL || colon == NULL || colon == p || colon + 1 >= eol
        || colon[1] != ' ')
    {
        return NGX_ERROR;
    }

    name->data = p;
    name->len = colon - p;
    value->data = colon + 2;
    value->len = eol - colon - 2;

    *pos = eol + 1;

    return NGX_OK;
}


/*
 * Content-Type as the upstream module sets it: the type's length stops at
 * the parameters, and a charset parameter is the charset, so that
 * gzip_types and the like match the replay as they matched the first.
 */

static void
ngx_http_idem_answer_content_type(ngx_http_request_t *r, ngx_str_t *value)
{
    u_char  *p, *last, *semicolon;

    r->headers_out.content_type = *value;
    r->headers_out.content_type_len = value->len;
    r->headers_out.content_type_lowcase = NULL;

    last = value->data + value->len;

    for (p = value->data; p < last; p++) {

        if (*p != ';') {
            continue;
        }

        semicolon = p;

        do {
            p++;
        } while (p < last && *p == ' ');

        if (last - p < 8
            || ngx_strncasecmp(p, (u_char *) "charset=", 8) != 0)
        {
            p--;
            continue;
        }

        p += 8;

        if (p < last && *p == '"') {
            p++;
        }

        if (last > p && *(last - 1) == '"') {
            last--;
        }

        r->headers_out.content_type_len = semicolon - value->data;
        r->headers_out.charset.data = p;
        r->headers_out.charset.len = last - p;

        return;
    }
}
