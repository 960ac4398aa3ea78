
/*
 * Fuzz target: the status endpoint, from the URI to the answer.  The call
 * id is taken from the URI's last segment (a String form, "abc", is the
 * id abc) and checked; a bad one is a 400 problem+json.  A good one is
 * read from the store; the store's reply (Redis's time, then the record's
 * fields and values) goes through the record parser to the JSON answer,
 * which must parse, or to a 404 or a 503; or, when the client's Accept
 * prefers HTML, to the timeline page, in which nothing from the record or
 * the id may open a tag, an entity or an attribute value ("fz" canaries).
 *
 * Input: a byte of idem_record_max_executions (0: the default), a byte of
 * idem_call_id_max_length (0: 128), the URI up to a line feed, the Accept
 * header up to a line feed (empty: none), then strings, each a length
 * byte (255: two bytes of length follow) and its bytes: Redis's time
 * (unix ms, in decimal; none or not a number: the store did not answer;
 * alone: no record), then the record's fields and values, in turns.  The
 * store's decoding of a real reply is the redis_reply target's.  A URI
 * whose last segment is empty asks for the list of UNKNOWN calls
 * (calls_list.c, not in this target): it must go there, and only there.
 * The JSON answer must be valid UTF-8 too, whatever bytes the record
 * holds; and the input whole, any bytes, goes first through the JSON
 * string writer (json.c): its length is what it writes, a JSON string.
 */


#include "ngx_http_idem_status.c"
#include "ngx_http_idem_record_parse.c"
#include "ngx_http_idem_resolution.c"
#include "ngx_http_idem_record_json.c"
#include "ngx_http_idem_timeline.c"
#include "ngx_http_idem_call_id.c"
#include "ngx_http_idem_problem.c"
#include "ngx_http_idem_headers.c"
#include "ngx_http_idem_call_id_source.c"
#include "ngx_http_idem_json.c"
#include "ngx_http_idem_util.c"

#include "ngx_http_idem_fuzz.h"


#define NGX_HTTP_IDEM_FUZZ_FIELDS  512


static ngx_http_idem_store_record_pt  ngx_http_idem_fuzz_handler;
static void                          *ngx_http_idem_fuzz_data;
static ngx_http_idem_store_op_t      *ngx_http_idem_fuzz_op;
static ngx_str_t                      ngx_http_idem_fuzz_read_key;


static ngx_uint_t                     ngx_http_idem_fuzz_listed;


static ngx_uint_t ngx_http_idem_fuzz_canary(ngx_str_t *page);
static void ngx_http_idem_fuzz_escape(ngx_http_idem_fuzz_t *fz, u_char *src,
    size_t size);


/* the list of UNKNOWN calls: only that it was asked for */

ngx_int_t
ngx_http_idem_calls_list(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_uint_t html)
{
    ngx_http_idem_fuzz_listed++;

    return NGX_HTTP_NO_CONTENT;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char                      *p;
    ngx_int_t                    rc, now;
    ngx_str_t                    uri, id, content, accept, *elts, *body;
    ngx_uint_t                   n, max, valid, sf, status, html;
    ngx_http_idem_fuzz_t         fz;
    ngx_http_idem_store_record_t record;
    ngx_http_idem_fuzz_input_t   input;
    ngx_http_idem_status_ctx_t  *sctx;

    if (ngx_http_idem_fuzz_init(&fz, data, size, &input) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    ngx_http_idem_fuzz_names(&fz);

    ngx_http_idem_fuzz_escape(&fz, (u_char *) data, size);

    ngx_http_idem_fuzz_handler = NULL;
    ngx_http_idem_fuzz_data = NULL;
    ngx_http_idem_fuzz_op = NULL;
    ngx_http_idem_fuzz_listed = 0;

    max = ngx_http_idem_fuzz_byte(&input);
    fz.imcf->record_max_executions = max ? max
                                     : NGX_HTTP_IDEM_RECORD_MAX_EXECUTIONS;

    max = ngx_http_idem_fuzz_byte(&input);
    fz.ilcf->call_id_max_length = max ? max : 128;
    fz.ilcf->status = 1;

    ngx_http_idem_fuzz_line(&input, &uri);
    fz.request->uri = uri;

    ngx_http_idem_fuzz_line(&input, &accept);

    if (accept.len
        && ngx_http_idem_fuzz_header(&fz, &fz.request->headers_in.headers,
                                     "Accept", &accept)
           != NGX_OK)
    {
        ngx_http_idem_fuzz_abort("no memory");
    }

    /* what the id is: the URI's last segment, a String's content */

    for (p = uri.data + uri.len; p > uri.data && p[-1] != '/'; p--) {
        /* void */
    }

    id.data = p;
    id.len = uri.data + uri.len - p;

    if (id.len == 0) {
        rc = ngx_http_idem_status_handler(fz.request);

        ngx_http_idem_fuzz_assert(rc == NGX_HTTP_NO_CONTENT
                                  && ngx_http_idem_fuzz_listed == 1
                                  && ngx_http_idem_fuzz_handler == NULL);

        ngx_http_idem_fuzz_done(&fz);
        return 0;
    }

    content.data = ngx_pnalloc(fz.pool, id.len);
    if (content.data == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    sf = ngx_http_idem_fuzz_sf_string(&id, &content);

    if (sf == 1) {
        id = content;
    }

    valid = ngx_http_idem_fuzz_id_valid(&id, fz.ilcf->call_id_max_length);

    rc = ngx_http_idem_status_handler(fz.request);

    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_listed == 0);

    if (sf == 2 && rc == NGX_DONE) {

        /* parameters after the String: the module's parser judges them */

        ngx_http_idem_fuzz_assert(
            ngx_http_idem_fuzz_id_valid(&content,
                                        fz.ilcf->call_id_max_length));
        id = content;
        valid = 1;
    }

    if (!valid) {
        ngx_http_idem_fuzz_problem_sent(rc);
        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_handler == NULL);

        ngx_http_idem_fuzz_done(&fz);
        return 0;
    }

    /* a good id is read, under its key */

    ngx_http_idem_fuzz_assert(rc == NGX_DONE);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_handler != NULL);
    ngx_http_idem_fuzz_assert(!ngx_http_idem_fuzz_answer.header_sent);

    sctx = ngx_http_idem_fuzz_data;

    ngx_http_idem_fuzz_assert(sctx->id.len == id.len
                              && ngx_memcmp(sctx->id.data, id.data, id.len)
                                 == 0);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_read_key.len
                              == sizeof("idem:c:{}") - 1 + id.len
                              && ngx_memcmp(ngx_http_idem_fuzz_read_key.data
                                            + sizeof("idem:c:{") - 1,
                                            id.data, id.len) == 0);

    /* the store's reply */

    elts = ngx_palloc(fz.pool, NGX_HTTP_IDEM_FUZZ_FIELDS * sizeof(ngx_str_t));
    if (elts == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    for (n = 0; input.pos < input.last && n < NGX_HTTP_IDEM_FUZZ_FIELDS; n++)
    {
        ngx_http_idem_fuzz_string(&input, &elts[n]);
    }

    /*
     * As the store hands it over (store.h): no answer or no clock is
     * NGX_ERROR, the clock alone is no record, else the record's strings
     */

    ngx_memzero(&record, sizeof(ngx_http_idem_store_record_t));

    now = n ? ngx_atoi(elts[0].data, elts[0].len) : NGX_ERROR;

    if (now == NGX_ERROR) {
        rc = NGX_ERROR;

    } else if (n == 1) {
        record.now = (uint64_t) now;
        rc = NGX_DECLINED;

    } else {
        record.now = (uint64_t) now;
        record.fields = &elts[1];
        record.nfields = n - 1;
        rc = NGX_OK;
    }

    ngx_http_idem_fuzz_handler(ngx_http_idem_fuzz_data, rc, &record);

    status = ngx_http_idem_fuzz_answer.status;

    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_answer.header_sent);
    ngx_http_idem_fuzz_assert(status == NGX_HTTP_OK
                              || status == NGX_HTTP_NOT_FOUND
                              || status == NGX_HTTP_SERVICE_UNAVAILABLE);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_answer.finalized == NGX_OK);

    if (rc == NGX_ERROR) {
        ngx_http_idem_fuzz_assert(status == NGX_HTTP_SERVICE_UNAVAILABLE);

    } else if (rc == NGX_DECLINED) {
        ngx_http_idem_fuzz_assert(status == NGX_HTTP_NOT_FOUND);
    }

    /* JSON without Accept; a page for "text/html" alone */

    body = &ngx_http_idem_fuzz_answer.body;
    html = fz.request->headers_out.content_type.len >= 9
           && ngx_strncmp(fz.request->headers_out.content_type.data,
                          "text/html", 9) == 0;

    if (accept.len == 0) {
        ngx_http_idem_fuzz_assert(!html);

    } else if (accept.len == 9
               && ngx_strncmp(accept.data, "text/html", 9) == 0)
    {
        ngx_http_idem_fuzz_assert(html);
    }

    ngx_http_idem_fuzz_assert(fz.request->headers_out.content_length_n
                              == (off_t) body->len);

    if (html) {
        ngx_http_idem_fuzz_assert(body->len > 16
                                  && ngx_strncmp(body->data,
                                                 "<!DOCTYPE html>", 15)
                                     == 0
                                  && ngx_strncmp(body->data + body->len
                                                 - 8, "</html>\n", 8)
                                     == 0);

        if (ngx_http_idem_fuzz_canary(body)) {
            fprintf(stderr, "not escaped: %.*s\n", (int) body->len,
                    body->data);
            ngx_http_idem_fuzz_abort("check failed: the page's escaping");
        }

    } else if (!ngx_http_idem_fuzz_json(body->data, body->len)) {
        fprintf(stderr, "not JSON: %.*s\n", (int) body->len, body->data);
        ngx_http_idem_fuzz_abort("check failed: the record's JSON");
    }

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}


/*
 * Record data and ids are escaped where the page shows them: "<fz", "&fz",
 * '"fz' or "fz>" in the page can only come from a byte left as it was.
 */

static ngx_uint_t
ngx_http_idem_fuzz_canary(ngx_str_t *page)
{
    u_char  *p, *last;

    last = page->data + page->len;

    for (p = page->data; p + 2 < last; p++) {
        if (p[1] == 'f' && p[2] == 'z'
            && (p[0] == '<' || p[0] == '&' || p[0] == '"'))
        {
            return 1;
        }

        if (p[0] == 'f' && p[1] == 'z' && p[2] == '>') {
            return 1;
        }
    }

    return 0;
}


/* the store: a read is kept, answered by the target */

ngx_http_idem_store_op_t *
ngx_http_idem_store_read_record(ngx_str_t *key,
    ngx_http_idem_store_record_pt handler, void *data)
{
    static u_char  op;

    ngx_http_idem_fuzz_handler = handler;
    ngx_http_idem_fuzz_data = data;
    ngx_http_idem_fuzz_read_key = *key;
    ngx_http_idem_fuzz_op = (ngx_http_idem_store_op_t *) &op;

    return ngx_http_idem_fuzz_op;
}


void
ngx_http_idem_store_cancel(ngx_http_idem_store_op_t *op)
{
    /* the request went before the reply: not in this target */
    ngx_http_idem_fuzz_unreached("ngx_http_idem_store_cancel");
}


/* the key of an id with "idem_dedupe_scope off" (record.c's rule) */

ngx_int_t
ngx_http_idem_record_key(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_str_t *id, ngx_str_t *key)
{
    key->data = ngx_pnalloc(r->pool, sizeof("idem:c:{}") - 1 + id->len);
    if (key->data == NULL) {
        return NGX_ERROR;
    }

    key->len = ngx_sprintf(key->data, "idem:c:{%V}", id) - key->data;

    return NGX_OK;
}


/*
 * The module's JSON string writer (json.c) on the whole input, any bytes:
 * the length it computes is what it writes, and between quotes that is a
 * JSON string in valid UTF-8, as the status answer's strings must be
 */

static void
ngx_http_idem_fuzz_escape(ngx_http_idem_fuzz_t *fz, u_char *src, size_t size)
{
    u_char  *p, *last;
    size_t   len;

    len = ngx_http_idem_json_escape_len(src, size);

    ngx_http_idem_fuzz_assert(len >= size && len <= 6 * size);

    p = ngx_pnalloc(fz->pool, len + 2);
    if (p == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    p[0] = '"';
    last = ngx_http_idem_json_escape(p + 1, src, size);
    *last++ = '"';

    ngx_http_idem_fuzz_assert((size_t) (last - p) == len + 2);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_json(p, len + 2));
}
