
/*
 * The answer a claim's owner keeps for its duplicates, and its replay.
 *
 * It is taken where this module's filters sit in nginx's chain: before
 * gzip, charset, sub, add_header and the rest, so that a replay, sent
 * through the whole chain again, gives the client the bytes the first
 * answer gave.  Kept as "<status>\n<name>: <value>\n...\n\n<body>": names
 * and values never hold a newline (nginx refuses them from upstreams).
 */


#include "ngx_http_idem_module.h"


#define NGX_HTTP_IDEM_ANSWER_FIRST  4096


static ngx_int_t ngx_http_idem_answer_skip(ngx_http_idem_ctx_t *ctx,
    ngx_table_elt_t *h);
static ngx_int_t ngx_http_idem_answer_is(ngx_table_elt_t *h, char *name);
static ngx_int_t ngx_http_idem_answer_append(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, u_char *data, size_t len);


/* not kept: hop-by-hop, computed again, or this module's own */
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
    ngx_null_string
};


/* the owner's answer starts: its status and headers */

ngx_int_t
ngx_http_idem_answer_header(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    size_t                     len;
    u_char                    *p;
    ngx_uint_t                 i, status;
    ngx_list_part_t           *part;
    ngx_table_elt_t           *h;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    status = r->headers_out.status;
    ctx->capture_max = ilcf->dedupe_store_max;

    if (status == NGX_HTTP_SWITCHING_PROTOCOLS
        || r->headers_out.content_length_n > (off_t) ctx->capture_max)
    {
        ctx->capture_over = 1;
        return NGX_OK;
    }

    len = sizeof("999\nContent-Type: \n\n") - 1
          + r->headers_out.content_type.len;

    part = &r->headers_out.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].hash == 0) {
            continue;
        }

        /* "try later" from the upstream: not an answer to keep */

        if ((status == NGX_HTTP_TOO_MANY_REQUESTS
             || status == NGX_HTTP_SERVICE_UNAVAILABLE)
            && ngx_http_idem_answer_is(&h[i], "Retry-After"))
        {
            ctx->retry_later = 1;
            ctx->capture_over = 1;
            return NGX_OK;
        }

        if (!ngx_http_idem_answer_skip(ctx, &h[i])) {
            len += h[i].key.len + sizeof(": \n") - 1 + h[i].value.len;
        }
    }

    ctx->capture = ngx_create_temp_buf(r->pool, len
                                       + ngx_min(ctx->capture_max,
                                                 NGX_HTTP_IDEM_ANSWER_FIRST));
    if (ctx->capture == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(ctx->capture->last, "%03ui\n", status);

    if (r->headers_out.content_type.len) {
        p = ngx_sprintf(p, "Content-Type: %V\n",
                        &r->headers_out.content_type);
    }

    part = &r->headers_out.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].hash == 0 || ngx_http_idem_answer_skip(ctx, &h[i])) {
            continue;
        }

        p = ngx_sprintf(p, "%V: %V\n", &h[i].key, &h[i].value);
    }

    *p++ = '\n';

    ctx->capture->last = p;

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_answer_skip(ngx_http_idem_ctx_t *ctx, ngx_table_elt_t *h)
{
    ngx_str_t  *name;

    for (name = ngx_http_idem_answer_skipped; name->len; name++) {
        if (ngx_http_idem_answer_is(h, (char *) name->data)) {
            return 1;
        }
    }

    /* the ids are set again on every answer */

    return (h->key.len == ctx->call_id_header->name.len
            && ngx_strncasecmp(h->key.data, ctx->call_id_header->name.data,
                               h->key.len) == 0)
           || (h->key.len == ctx->trace_id_header->name.len
               && ngx_strncasecmp(h->key.data,
                                  ctx->trace_id_header->name.data,
                                  h->key.len) == 0);
}


static ngx_int_t
ngx_http_idem_answer_is(ngx_table_elt_t *h, char *name)
{
    size_t  len;

    len = ngx_strlen(name);

    return h->key.len == len
           && ngx_strncasecmp(h->key.data, (u_char *) name, len) == 0;
}


/* the owner's answer goes by: its body, as far as it is to be kept */

void
ngx_http_idem_answer_body(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_chain_t *in)
{
    size_t      size;
    ssize_t     n;
    ngx_buf_t  *b;

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

            n = ngx_read_file(b->file, ctx->capture->last, size, b->file_pos);

            if (n != (ssize_t) size) {
                ctx->capture_over = 1;
                return;
            }

            ctx->capture->last += size;
        }

        if (b->last_buf) {
            ctx->capture_done = 1;
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

    ctx->captured += len;

    if (ctx->captured > (off_t) ctx->capture_max) {
        ctx->capture_over = 1;
        return NGX_DECLINED;
    }

    b = ctx->capture;

    if ((size_t) (b->end - b->last) < len) {

        /* doubling, up to what the headers and the largest body need */

        used = b->last - b->start;
        size = ngx_max(2 * (size_t) (b->end - b->start), used + len);
        size = ngx_min(size, used + ctx->capture_max
                             - (size_t) (ctx->captured - len));

        b = ngx_create_temp_buf(r->pool, size);
        if (b == NULL) {
            ctx->capture_over = 1;
            return NGX_ERROR;
        }

        b->last = ngx_cpymem(b->last, ctx->capture->start, used);

        ngx_pfree(r->pool, ctx->capture->start);
        ctx->capture = b;
    }

    if (data != NULL) {
        b->last = ngx_cpymem(b->last, data, len);
    }

    return NGX_OK;
}


/*
 * What a finished owner leaves for the duplicates of its call, and the
 * answer to store with it.
 */

u_char
ngx_http_idem_answer_keep(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_uint_t state, ngx_str_t *answer)
{
    ngx_uint_t                i;
    ngx_http_idem_attempt_t  *a;

    if (state == NGX_HTTP_IDEM_UNKNOWN) {
        return NGX_HTTP_IDEM_KEEP_UNKNOWN;
    }

    /* nothing reached the upstream: the call did not happen, run it again */

    a = ctx->attempts ? ctx->attempts->elts : NULL;

    for (i = 0; a && i < ctx->attempts->nelts; i++) {
        if (a[i].sent) {
            break;
        }
    }

    if (a == NULL || i == ctx->attempts->nelts || ctx->retry_later) {
        return NGX_HTTP_IDEM_KEEP_RELEASE;
    }

    /* a 204, a 304 or an answer to HEAD has no body to wait for */

    if (ctx->capture == NULL || ctx->capture_over
        || !(ctx->capture_done || r->header_only))
    {
        return NGX_HTTP_IDEM_KEEP_LARGE;
    }

    answer->data = ctx->capture->start;
    answer->len = ctx->capture->last - ctx->capture->start;

    return NGX_HTTP_IDEM_KEEP_REPLAY;
}


/* a duplicate gets the stored answer, through the filters as the first */

ngx_int_t
ngx_http_idem_answer_replay(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_str_t *answer)
{
    u_char           *p, *last, *eol, *colon;
    ngx_int_t         rc, status;
    ngx_buf_t        *b;
    ngx_chain_t       out;
    ngx_table_elt_t  *h;

    p = answer->data;
    last = p + answer->len;

    eol = ngx_strlchr(p, last, '\n');
    if (eol == NULL) {
        goto invalid;
    }

    status = ngx_atoi(p, eol - p);
    if (status < 100 || status > 999) {
        goto invalid;
    }

    r->headers_out.status = status;

    for (p = eol + 1; p < last && *p != '\n'; p = eol + 1) {

        eol = ngx_strlchr(p, last, '\n');
        colon = ngx_strlchr(p, last, ':');

        if (eol == NULL || colon == NULL || colon > eol
            || colon + 1 == eol || colon[1] != ' ')
        {
            goto invalid;
        }

        if (colon - p == sizeof("Content-Type") - 1
            && ngx_strncasecmp(p, (u_char *) "Content-Type",
                               sizeof("Content-Type") - 1) == 0)
        {
            /* kept apart: nginx sends it from headers_out.content_type */

            r->headers_out.content_type.data = colon + 2;
            r->headers_out.content_type.len = eol - colon - 2;
            r->headers_out.content_type_len =
                                        r->headers_out.content_type.len;
            r->headers_out.content_type_lowcase = NULL;
            continue;
        }

        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        h->key.data = p;
        h->key.len = colon - p;
        h->value.data = colon + 2;
        h->value.len = eol - colon - 2;
        h->lowcase_key = NULL;

        /* what the filters look at, as the upstream module set it */

        if (ngx_http_idem_answer_is(h, "Content-Encoding")) {
            r->headers_out.content_encoding = h;

        } else if (ngx_http_idem_answer_is(h, "Location")) {
            r->headers_out.location = h;
        }
    }

    if (p >= last) {
        goto invalid;
    }

    p++;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Idempotent-Replayed");
    ngx_str_set(&h->value, "true");
    h->lowcase_key = (u_char *) "idempotent-replayed";

    r->headers_out.content_length_n = last - p;

    ctx->replayed = 1;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = p;
    b->last = last;
    b->memory = (p < last) ? 1 : 0;
    b->last_buf = 1;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);

invalid:

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "idem: the stored answer of call \"%V\" is not valid",
                  &ctx->call_id);

    return NGX_HTTP_INTERNAL_SERVER_ERROR;
}
