
/*
 * Fuzz target: the stored answer a duplicate is replayed from (its bytes
 * come from the store), and the way round: an owner's answer kept, then
 * replayed, must give the client what the owner's gave.
 *
 * Input: a flags byte.  Bit 0 clear: the rest is a stored answer, replayed
 * (bit 1: to a HEAD request); its "~name: value" lines are the first
 * answer's trailers (gRPC's grpc-status).  Bit 0 set: the rest is an
 * upstream's answer to keep: a status line ("NNN reason"), a Content-Type
 * line, header lines ("name: value", "\tname: value" a trailer) up to an
 * empty line, then the body, cut in up to three buffers at the next two
 * bytes.
 */


#include "ngx_http_idem_answer.c"
#include "ngx_http_idem_headers.c"
#include "ngx_http_idem_call_id_source.c"
#include "ngx_http_idem_json.c"
#include "ngx_http_idem_util.c"

#include "ngx_http_idem_fuzz.h"


static void ngx_http_idem_fuzz_replay(ngx_http_idem_fuzz_t *fz,
    ngx_str_t *answer);
static void ngx_http_idem_fuzz_keep(ngx_http_idem_fuzz_t *fz,
    ngx_http_idem_fuzz_input_t *input);
static ngx_uint_t ngx_http_idem_fuzz_kept(ngx_table_elt_t *h);
static ngx_table_elt_t *ngx_http_idem_fuzz_next(ngx_list_part_t **part,
    ngx_uint_t *i, ngx_uint_t kept);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ngx_str_t                    answer;
    ngx_uint_t                   flags;
    ngx_http_idem_fuzz_t         fz;
    ngx_http_idem_fuzz_input_t   input;

    if (ngx_http_idem_fuzz_init(&fz, data, size, &input) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    ngx_http_idem_fuzz_names(&fz);

    flags = ngx_http_idem_fuzz_byte(&input);

    /* a HEAD answer has no body to keep: replays only */

    if ((flags & 3) == 2) {
        fz.request->method = NGX_HTTP_HEAD;
        ngx_str_set(&fz.request->method_name, "HEAD");
    }

    if (flags & 1) {
        ngx_http_idem_fuzz_keep(&fz, &input);

    } else {
        answer.len = input.last - input.pos;
        answer.data = ngx_pnalloc(fz.pool, answer.len);

        if (answer.data == NULL) {
            ngx_http_idem_fuzz_abort("no memory");
        }

        ngx_memcpy(answer.data, input.pos, answer.len);

        ngx_http_idem_fuzz_replay(&fz, &answer);
    }

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}


/*
 * The stored format: "NNN[ reason]\n", "name: value\n" lines, "\n", the
 * body.  A valid one is replayed whole; anything else is a 500.
 */

static void
ngx_http_idem_fuzz_replay(ngx_http_idem_fuzz_t *fz, ngx_str_t *answer)
{
    u_char              *p, *last, *eol, *colon;
    off_t                length;
    ngx_int_t            rc;
    ngx_int_t            trailers;
    ngx_uint_t           valid, status;
    ngx_list_part_t     *part;
    ngx_http_request_t  *r;

    r = fz->request;

    p = answer->data;
    last = p + answer->len;
    eol = memchr(p, '\n', answer->len);

    valid = eol != NULL && eol - p >= 3 && (eol - p == 3 || p[3] == ' ')
            && isdigit(p[0]) && isdigit(p[1]) && isdigit(p[2])
            && p[0] != '0';

    status = valid ? (ngx_uint_t) ngx_atoi(p, 3) : 0;
    length = -1;
    trailers = 0;

    for (p = valid ? eol + 1 : last; p < last && *p != '\n'; p = eol + 1) {
        eol = memchr(p, '\n', last - p);
        colon = memchr(p, ':', last - p);

        if (eol == NULL || colon == NULL || colon == p || colon + 1 >= eol
            || colon[1] != ' ')
        {
            valid = 0;
            break;
        }

        if (*p == '~') {
            trailers++;
            continue;
        }

        if (colon - p == 14 && ngx_strncasecmp(p, (u_char *) "Content-Length",
                                               14) == 0)
        {
            length = ngx_atoof(colon + 2, eol - colon - 2);
        }
    }

    if (p >= last) {
        valid = 0;
    }

    rc = ngx_http_idem_answer_replay(r, fz->ctx, answer);

    if (!valid) {
        ngx_http_idem_fuzz_assert(rc == NGX_HTTP_INTERNAL_SERVER_ERROR);
        ngx_http_idem_fuzz_assert(!ngx_http_idem_fuzz_answer.header_sent);
        ngx_http_idem_fuzz_assert(r->headers_out.headers.part.nelts == 0);
        return;
    }

    /* the body is what follows the empty line, byte for byte */

    p++;

    ngx_http_idem_fuzz_assert(rc == NGX_OK);
    ngx_http_idem_fuzz_assert(fz->ctx->answer.replayed);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_answer.status == status);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_answer.body.len
                              == (size_t) (last - p));
    ngx_http_idem_fuzz_assert(last == p
                              || ngx_memcmp(ngx_http_idem_fuzz_answer.body.data,
                                            p, last - p) == 0);
    for (part = &r->headers_out.trailers.part; part; part = part->next) {
        trailers -= part->nelts;
    }

    ngx_http_idem_fuzz_assert(trailers == 0);
    ngx_http_idem_fuzz_assert((r->expect_trailers != 0)
                              == (r->headers_out.trailers.part.nelts != 0));

    /* with trailers, no length: as the first answer came */

    ngx_http_idem_fuzz_assert(r->headers_out.content_length_n
                              == (r->expect_trailers ? -1
                                  : (length >= 0 ? length : last - p)));
}


/* an upstream's answer goes through the capture, is kept, is replayed */

static void
ngx_http_idem_fuzz_keep(ngx_http_idem_fuzz_t *fz,
    ngx_http_idem_fuzz_input_t *input)
{
    u_char                      k, *colon, *p;
    size_t                      cut[2];
    ngx_str_t                   line, kept, value;
    ngx_buf_t                  *b;
    ngx_uint_t                  i, j, n;
    ngx_chain_t                *cl, **ll, *chain;
    ngx_list_part_t            *part, *part2;
    ngx_table_elt_t            *h, *h2;
    ngx_http_request_t         *r;
    ngx_http_idem_fuzz_t        fz2;
    ngx_http_idem_fuzz_input_t  none;

    r = fz->request;

    /* "NNN reason": the status, and the line as the upstream module sets */

    ngx_http_idem_fuzz_line(input, &line);

    r->headers_out.status = 200;

    if (line.len >= 3 && isdigit(line.data[0]) && isdigit(line.data[1])
        && isdigit(line.data[2]) && line.data[0] != '0')
    {
        r->headers_out.status = ngx_atoi(line.data, 3);
    }

    if (line.len > 4 && line.data[3] == ' ') {
        r->headers_out.status_line = line;
    }

    ngx_http_idem_fuzz_line(input, &r->headers_out.content_type);

    /* names hold no ':', no byte of a line break (nginx refuses them) */

    while (input->pos < input->last) {
        ngx_http_idem_fuzz_line(input, &line);

        if (line.len == 0) {
            break;
        }

        colon = memchr(line.data, ':', line.len);

        if (colon == NULL || colon == line.data
            || memchr(line.data, '\r', line.len)
            || memchr(line.data, '\0', line.len))
        {
            continue;
        }

        value.data = colon + 1;
        value.len = line.data + line.len - value.data;

        if (value.len && value.data[0] == ' ') {
            value.data++;
            value.len--;
        }

        *colon = '\0';

        if (line.data[0] == '\t' && colon > line.data + 1) {

            /* a trailer of the answer, known when it ends */

            if (ngx_http_idem_fuzz_header(fz, &r->headers_out.trailers,
                                          (char *) line.data + 1, &value)
                != NGX_OK)
            {
                ngx_http_idem_fuzz_abort("no memory");
            }

            continue;
        }

        if (ngx_http_idem_fuzz_header(fz, &r->headers_out.headers,
                                      (char *) line.data, &value)
            != NGX_OK)
        {
            ngx_http_idem_fuzz_abort("no memory");
        }
    }

    /* the body, in up to three buffers */

    cut[0] = ngx_http_idem_fuzz_byte(input);
    cut[1] = ngx_http_idem_fuzz_byte(input);

    n = input->last - input->pos;
    p = input->pos;

    chain = NULL;
    ll = &chain;

    for (i = 0; i < 3; i++) {
        j = (i < 2) ? ngx_min(cut[i], n) : n;

        b = ngx_calloc_buf(fz->pool);
        cl = ngx_alloc_chain_link(fz->pool);

        if (b == NULL || cl == NULL) {
            ngx_http_idem_fuzz_abort("no memory");
        }

        b->pos = ngx_pnalloc(fz->pool, j);
        if (b->pos == NULL) {
            ngx_http_idem_fuzz_abort("no memory");
        }

        ngx_memcpy(b->pos, p, j);
        b->last = b->pos + j;
        b->memory = 1;
        b->last_buf = (i == 2);

        cl->buf = b;
        cl->next = NULL;
        *ll = cl;
        ll = &cl->next;

        p += j;
        n -= j;
    }

    r->headers_out.content_length_n = p - input->pos;

    if (ngx_http_idem_answer_header(r, fz->ctx) != NGX_OK) {
        ngx_http_idem_fuzz_abort("answer_header");
    }

    if (fz->ctx->answer.capture != NULL) {
        ngx_http_idem_answer_body(r, fz->ctx, chain);
    }

    ngx_str_null(&kept);

    /* the answer came from the upstream: the call was sent */

    k = ngx_http_idem_answer_keep(r, fz->ctx, NGX_HTTP_IDEM_SUCCESS, 1, -1,
                                  &kept);

    if (fz->ctx->answer.retry_later) {
        ngx_http_idem_fuzz_assert(k == NGX_HTTP_IDEM_KEEP_RELEASE);
        return;
    }

    if (k != NGX_HTTP_IDEM_KEEP_REPLAY) {
        ngx_http_idem_fuzz_assert(k == NGX_HTTP_IDEM_KEEP_LARGE);
        ngx_http_idem_fuzz_assert(fz->ctx->answer.capture_over
                                  || r->headers_out.status == 101);
        return;
    }

    /* a duplicate, in another request, gets the same answer */

    if (ngx_http_idem_fuzz_init(&fz2, (uint8_t *) "", 0, &none) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    ngx_http_idem_fuzz_names(&fz2);

    fz2.request->method = r->method;

    ngx_http_idem_fuzz_assert(ngx_http_idem_answer_replay(fz2.request,
                                                          fz2.ctx, &kept)
                              == NGX_OK);

    ngx_http_idem_fuzz_assert(fz2.request->headers_out.status
                              == r->headers_out.status);
    ngx_http_idem_fuzz_assert(fz2.request->headers_out.content_type.len
                              == r->headers_out.content_type.len);
    ngx_http_idem_fuzz_assert(r->headers_out.content_type.len == 0
                              || ngx_memcmp(
                                     fz2.request->headers_out.content_type.data,
                                     r->headers_out.content_type.data,
                                     r->headers_out.content_type.len)
                                 == 0);

    if (r->headers_out.status_line.len > 4) {
        ngx_http_idem_fuzz_assert(
            fz2.request->headers_out.status_line.len
            == r->headers_out.status_line.len
            && ngx_memcmp(fz2.request->headers_out.status_line.data + 3,
                          r->headers_out.status_line.data + 3,
                          r->headers_out.status_line.len - 3)
               == 0);
    }

    /* the kept headers, in their order, then the replay's own */

    part = &r->headers_out.headers.part;
    part2 = &fz2.request->headers_out.headers.part;
    i = 0;
    j = 0;

    for ( ;; ) {
        h = ngx_http_idem_fuzz_next(&part, &i, 1);
        h2 = ngx_http_idem_fuzz_next(&part2, &j, 0);

        if (h == NULL) {
            break;
        }

        ngx_http_idem_fuzz_same_header(h, h2);
    }

    ngx_http_idem_fuzz_assert(h2 != NULL && h2->key.len == 19
                              && ngx_strncmp(h2->key.data,
                                             "Idempotent-Replayed", 19)
                                 == 0);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_next(&part2, &j, 0)
                              == NULL);

    /* the trailers, in their order */

    part = &r->headers_out.trailers.part;
    part2 = &fz2.request->headers_out.trailers.part;
    i = 0;
    j = 0;

    for ( ;; ) {
        h = ngx_http_idem_fuzz_next(&part, &i, 0);
        h2 = ngx_http_idem_fuzz_next(&part2, &j, 0);

        if (h == NULL) {
            ngx_http_idem_fuzz_assert(h2 == NULL);
            break;
        }

        ngx_http_idem_fuzz_same_header(h, h2);
    }

    /* the body */

    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_answer.body.len
                              == (size_t) (p - input->pos));
    ngx_http_idem_fuzz_assert(p == input->pos
                              || ngx_memcmp(ngx_http_idem_fuzz_answer.body.data,
                                            input->pos, p - input->pos) == 0);

    ngx_http_idem_fuzz_done(&fz2);
}


/* what the capture keeps of an answer's headers (answer.c's list) */

static ngx_uint_t
ngx_http_idem_fuzz_kept(ngx_table_elt_t *h)
{
    ngx_uint_t  i;

    static char  *skipped[] = {
        "Connection", "Keep-Alive", "Proxy-Authenticate",
        "Proxy-Authorization", "Proxy-Connection", "TE", "Trailer",
        "Transfer-Encoding", "Upgrade", "Content-Length", "Content-Type",
        "Idempotent-Replayed", "Set-Cookie", "Set-Cookie2", "X-Call-Id",
        "X-Trace-Id", NULL
    };

    if (h->hash == 0) {
        return 0;
    }

    for (i = 0; skipped[i]; i++) {
        if (h->key.len == ngx_strlen(skipped[i])
            && ngx_strncasecmp(h->key.data, (u_char *) skipped[i],
                               h->key.len) == 0)
        {
            return 0;
        }
    }

    return 1;
}


static ngx_table_elt_t *
ngx_http_idem_fuzz_next(ngx_list_part_t **part, ngx_uint_t *i,
    ngx_uint_t kept)
{
    ngx_table_elt_t  *h;

    for ( ;; ) {
        if (*i >= (*part)->nelts) {
            if ((*part)->next == NULL) {
                return NULL;
            }

            *part = (*part)->next;
            *i = 0;
        }

        h = (*part)->elts;
        h = &h[(*i)++];

        if (!kept || ngx_http_idem_fuzz_kept(h)) {
            return h;
        }
    }
}
