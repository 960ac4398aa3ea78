
/*
 * Fuzz target: the OTLP collector's answer to a batch of spans, as the
 * span exporter's parser reads it (ngx_http_idem_otel_response() in
 * otel.c): the status line, Content-Length, Transfer-Encoding: chunked,
 * Connection: close, the end of the body.  The answer arrives in two
 * reads, split where the input says: the parser sees the first part, then
 * (when that was not enough) the whole, then, when the input says the
 * collector closed the connection after it, the whole again with "closed",
 * as the worker's read handler calls it.
 *
 * Each verdict is checked against an independent reading of the answer:
 * NGX_OK only for a whole status line of a 2xx and whole headers; a kept
 * connection only when nothing says close and the body ends exactly at
 * the last byte read (Content-Length, chunked, or a 204); a complete
 * answer in a plain form is taken without waiting for more; a status
 * line that is not HTTP/1.x or a whole non-2xx answer fails the batch,
 * which is counted as dropped once and its timer removed.  The bytes of
 * the buffer past what was read are poisoned: the parser reads none.
 *
 * Input: a flags byte (bit 0: the collector closes after the whole
 * answer; bits 1-3: spans in the batch), two bytes of where the first
 * read ends, then the answer's bytes (at most the worker's buffer).
 */


#include "ngx_http_idem_otel.c"
#include "ngx_http_idem_otel_json.c"
#include "ngx_http_idem_json.c"
#include "ngx_http_idem_util.c"

#include "ngx_http_idem_fuzz.h"

/* after nginx's headers: _GNU_SOURCE first */
#include <sanitizer/asan_interface.h>


/* what an independent reading of the answer says */
typedef struct {
    ngx_uint_t                    status_line;  /* HTTP/1.x NNN */
    ngx_uint_t                    status;
    ngx_uint_t                    http10;
    u_char                       *body;         /* NULL: headers not whole */
    ngx_uint_t                    connection;   /* a Connection header */
    ngx_uint_t                    close;        /* ... naming "close" */
    ngx_uint_t                    chunked;
    off_t                         length;       /* -1: none, -2: bad */
    ngx_uint_t                    plain;        /* no OWS, ext, trailer */
    ngx_uint_t                    whole;        /* ends at the last byte */
} ngx_http_idem_fuzz_otel_t;


static void ngx_http_idem_fuzz_otel_read(u_char *p, u_char *last,
    ngx_http_idem_fuzz_otel_t *ref);
static void ngx_http_idem_fuzz_otel_header(ngx_str_t *name,
    ngx_str_t *value, ngx_http_idem_fuzz_otel_t *ref);
static ngx_uint_t ngx_http_idem_fuzz_otel_chunked(u_char *p, u_char *last,
    ngx_uint_t *plain);
static ngx_uint_t ngx_http_idem_fuzz_otel_token(ngx_str_t *value,
    char *token);
static ngx_int_t ngx_http_idem_fuzz_otel_call(ngx_http_idem_otel_worker_t *w,
    size_t len, ngx_uint_t closed, ngx_uint_t spans);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t                        len, split;
    ngx_int_t                     rc;
    ngx_uint_t                    flags, spans;
    ngx_http_idem_fuzz_t          fz;
    ngx_http_idem_fuzz_input_t    input;
    ngx_http_idem_otel_conf_t     conf;
    ngx_http_idem_otel_worker_t  *w;

    if (ngx_http_idem_fuzz_init(&fz, data, size, &input) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    flags = ngx_http_idem_fuzz_byte(&input);
    split = ngx_http_idem_fuzz_byte(&input) << 8;
    split |= ngx_http_idem_fuzz_byte(&input);

    len = ngx_min((size_t) (input.last - input.pos),
                  (size_t) NGX_HTTP_IDEM_OTEL_RESPONSE);
    split = split % (len + 1);
    spans = 1 + ((flags >> 1) & 7);

    /* a worker whose batch is out, on no connection (close does nothing) */

    ngx_memzero(&conf, sizeof(ngx_http_idem_otel_conf_t));
    ngx_str_set(&conf.url, "http://127.0.0.1:4318/v1/traces");

    w = ngx_pcalloc(fz.pool, sizeof(ngx_http_idem_otel_worker_t));
    if (w == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    w->cycle = (ngx_cycle_t *) ngx_cycle;
    w->conf = &conf;
    w->log = *fz.request->connection->log;
    w->c = NULL;
    w->busy = 1;
    w->batch_spans = spans;

    w->timeout_ev.handler = ngx_http_idem_otel_timeout_handler;
    w->timeout_ev.data = w;
    w->timeout_ev.log = &w->log;
    ngx_add_timer(&w->timeout_ev, 5000);

    w->flush_ev.data = w;
    w->flush_ev.log = &w->log;

    ngx_memcpy(w->response, input.pos, len);

    /* the first read: at least a byte, as recv() gives */

    rc = NGX_AGAIN;

    if (split > 0) {
        rc = ngx_http_idem_fuzz_otel_call(w, split, 0, spans);
    }

    /* the second read: the rest */

    if (rc == NGX_AGAIN && len > split) {
        rc = ngx_http_idem_fuzz_otel_call(w, len, 0, spans);
    }

    /* then nothing: the collector closed the connection */

    if (rc == NGX_AGAIN && (flags & 1)) {
        (void) ngx_http_idem_fuzz_otel_call(w, len, 1, spans);
    }

    ASAN_UNPOISON_MEMORY_REGION(w->response, NGX_HTTP_IDEM_OTEL_RESPONSE);

    if (w->timeout_ev.timer_set) {
        ngx_del_timer(&w->timeout_ev);
    }

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}


/* one call of the parser on the first len bytes, and its checks */

static ngx_int_t
ngx_http_idem_fuzz_otel_call(ngx_http_idem_otel_worker_t *w, size_t len,
    ngx_uint_t closed, ngx_uint_t spans)
{
    ngx_int_t                   rc;
    ngx_uint_t                  keep, sent, dropped;
    ngx_http_idem_counters_t   *counters;
    ngx_http_idem_fuzz_otel_t   ref;

    counters = ngx_http_idem_counters();
    sent = counters->otel_spans_sent;
    dropped = counters->otel_spans_dropped;

    w->response_len = len;

    ASAN_UNPOISON_MEMORY_REGION(w->response, NGX_HTTP_IDEM_OTEL_RESPONSE);
    ASAN_POISON_MEMORY_REGION(w->response + len,
                              NGX_HTTP_IDEM_OTEL_RESPONSE - len);

    keep = 2;

    rc = ngx_http_idem_otel_response(w, closed, &keep);

    ngx_http_idem_fuzz_assert(rc == NGX_OK || rc == NGX_AGAIN
                              || rc == NGX_ERROR);
    ngx_http_idem_fuzz_assert(keep == 0 || keep == 1);
    ngx_http_idem_fuzz_assert(w->response_len == len);

    ngx_http_idem_fuzz_otel_read(w->response, w->response + len, &ref);

    /* the parser does not count: a batch that failed is counted once */

    ngx_http_idem_fuzz_assert(counters->otel_spans_sent == sent);

    if (rc == NGX_ERROR) {
        ngx_http_idem_fuzz_assert(counters->otel_spans_dropped
                                  == dropped + spans);
        ngx_http_idem_fuzz_assert(!w->busy && w->batch_spans == 0);
        ngx_http_idem_fuzz_assert(!w->timeout_ev.timer_set);
        ngx_http_idem_fuzz_assert(!keep);

    } else {
        ngx_http_idem_fuzz_assert(counters->otel_spans_dropped == dropped);
        ngx_http_idem_fuzz_assert(w->busy && w->batch_spans == spans);
        ngx_http_idem_fuzz_assert(w->timeout_ev.timer_set);
    }

    /* more is read into what is left of the buffer: something is */

    if (rc == NGX_AGAIN) {
        ngx_http_idem_fuzz_assert(len < NGX_HTTP_IDEM_OTEL_RESPONSE);
        ngx_http_idem_fuzz_assert(!keep);
    }

    /* a status line that is not one fails at once */

    if (len >= 12 && !ref.status_line) {
        ngx_http_idem_fuzz_assert(rc == NGX_ERROR);
    }

    /* the batch is in: a 2xx, its headers whole */

    if (rc == NGX_OK) {
        ngx_http_idem_fuzz_assert(ref.status_line && ref.body != NULL);
        ngx_http_idem_fuzz_assert(ref.status >= 200 && ref.status <= 299);
    }

    /* a whole answer of another status fails the batch */

    if (ref.status_line && ref.body != NULL
        && (ref.status < 200 || ref.status > 299))
    {
        ngx_http_idem_fuzz_assert(rc == NGX_ERROR);
    }

    /*
     * A kept connection: the collector did not say close, and nothing of
     * this answer is left to be read as the next batch's
     */

    if (keep) {
        ngx_http_idem_fuzz_assert(rc == NGX_OK && !closed);
        ngx_http_idem_fuzz_assert(!ref.close);
        ngx_http_idem_fuzz_assert(!ref.http10 || ref.connection);

        if (!ref.whole) {
            fprintf(stderr, "kept after: %.*s\n", (int) len, w->response);
            ngx_http_idem_fuzz_abort("check failed: kept, the body not "
                                     "whole");
        }
    }

    /*
     * A 2xx whose body ends at the last byte read, in a plain form: taken
     * now, not when the exchange times out
     */

    if (ref.status_line && ref.body != NULL && ref.whole && ref.plain
        && ref.status >= 200 && ref.status <= 299)
    {
        ngx_http_idem_fuzz_assert(rc == NGX_OK);
    }

    /* no length, not chunked: the body ends when the collector closes */

    if (closed && ref.status_line && ref.body != NULL && !ref.chunked
        && ref.length == -1 && ref.status >= 200 && ref.status <= 299)
    {
        ngx_http_idem_fuzz_assert(rc == NGX_OK);
    }

    return rc;
}


/*
 * The answer, read on its own: lines end with LF (a CR before it is
 * dropped: RFC 9112 2.2 lets a recipient take a bare LF, and nginx's
 * parser and otel.c do; the chunked body's lines want CRLF, as in
 * otel.c), the status line first, the headers up to an empty line.
 * Transfer-Encoding is chunked when one names it (as otel.c reads it); a
 * Content-Length is digits between optional spaces and tabs, and
 * several must agree; "whole" is a body that ends exactly at the end.
 */

static void
ngx_http_idem_fuzz_otel_read(u_char *p, u_char *last,
    ngx_http_idem_fuzz_otel_t *ref)
{
    u_char     *eol, *colon;
    ngx_str_t   line, name, value;
    ngx_uint_t  first;

    ngx_memzero(ref, sizeof(ngx_http_idem_fuzz_otel_t));
    ref->length = -1;
    ref->plain = 1;

    if (last - p >= 12
        && ngx_strncmp(p, "HTTP/1.", 7) == 0
        && p[8] == ' '
        && p[9] >= '0' && p[9] <= '9'
        && p[10] >= '0' && p[10] <= '9'
        && p[11] >= '0' && p[11] <= '9')
    {
        ref->status_line = 1;
        ref->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + p[11] - '0';
        ref->http10 = (p[7] == '0');
    }

    first = 1;

    for ( ;; ) {
        eol = memchr(p, '\n', last - p);

        if (eol == NULL) {
            return;
        }

        line.data = p;
        line.len = eol - p;

        if (line.len && line.data[line.len - 1] == '\r') {
            line.len--;
        }

        p = eol + 1;

        if (line.len == 0) {
            break;
        }

        if (first) {
            first = 0;
            continue;
        }

        colon = memchr(line.data, ':', line.len);

        if (colon == NULL) {
            continue;
        }

        name.data = line.data;
        name.len = colon - line.data;
        value.data = colon + 1;
        value.len = line.data + line.len - value.data;

        ngx_http_idem_fuzz_otel_header(&name, &value, ref);
    }

    ref->body = p;

    if (ref->chunked) {
        ref->whole = ngx_http_idem_fuzz_otel_chunked(p, last, &ref->plain);

    } else if (ref->length >= 0) {
        ref->whole = (last - p == ref->length);

    } else if (ref->length == -1 && ref->status == 204) {
        ref->whole = (p == last);
    }
}


static void
ngx_http_idem_fuzz_otel_header(ngx_str_t *name, ngx_str_t *value,
    ngx_http_idem_fuzz_otel_t *ref)
{
    u_char  *p, *last;
    off_t    n;

    if (name->len == 10
        && ngx_strncasecmp(name->data, (u_char *) "connection", 10) == 0)
    {
        ref->connection = 1;

        if (ngx_http_idem_fuzz_otel_token(value, "close")) {
            ref->close = 1;
        }

        return;
    }

    if (name->len == 17
        && ngx_strncasecmp(name->data, (u_char *) "transfer-encoding", 17)
           == 0)
    {
        if (ngx_strlcasestrn(value->data, value->data + value->len,
                             (u_char *) "chunked", 7 - 1)
            != NULL)
        {
            ref->chunked = 1;
        }

        return;
    }

    if (!(name->len == 14
          && ngx_strncasecmp(name->data, (u_char *) "content-length", 14)
             == 0))
    {
        return;
    }

    p = value->data;
    last = p + value->len;

    if (p == last || *p != ' ') {
        ref->plain = 0;
    }

    while (p < last && (*p == ' ' || *p == '\t')) {
        p++;
    }

    while (last > p && (last[-1] == ' ' || last[-1] == '\t')) {
        last--;
        ref->plain = 0;
    }

    /* 1*DIGIT (RFC 9110 8.6): empty is invalid, leading zeros are not */

    if (p == last) {
        ref->length = -2;
        return;
    }

    while (last - p > 1 && *p == '0') {
        p++;
    }

    /* more digits than any buffer's length: never whole */

    if (last - p > 15) {
        ref->length = -2;
        return;
    }

    for (n = 0; p < last; p++) {
        if (*p < '0' || *p > '9') {
            ref->length = -2;
            return;
        }

        n = n * 10 + *p - '0';
    }

    if (ref->length == -2 || (ref->length >= 0 && ref->length != n)) {
        ref->length = -2;
        return;
    }

    ref->length = n;
}


/* chunks of hex sizes, the last of 0, trailers, CRLF: ends at last */

static ngx_uint_t
ngx_http_idem_fuzz_otel_chunked(u_char *p, u_char *last, ngx_uint_t *plain)
{
    u_char      c, *eol;
    size_t      size;
    ngx_uint_t  digits;

    for ( ;; ) {
        size = 0;

        for (digits = 0; p < last; p++, digits++) {
            c = (u_char) (*p | 0x20);

            if (*p >= '0' && *p <= '9') {
                size = size * 16 + *p - '0';

            } else if (c >= 'a' && c <= 'f') {
                size = size * 16 + c - 'a' + 10;

            } else {
                break;
            }

            if (size > NGX_HTTP_IDEM_OTEL_RESPONSE) {
                return 0;
            }
        }

        if (digits == 0) {
            return 0;
        }

        if (p < last && *p == ';') {
            *plain = 0;

            while (p < last && *p != '\r') {
                p++;
            }
        }

        if (last - p < 2 || p[0] != '\r' || p[1] != '\n') {
            return 0;
        }

        p += 2;

        if (size == 0) {
            break;
        }

        if ((size_t) (last - p) < size + 2) {
            return 0;
        }

        p += size;

        if (p[0] != '\r' || p[1] != '\n') {
            return 0;
        }

        p += 2;
    }

    /* trailer fields, then the empty line */

    for ( ;; ) {
        if (last - p >= 2 && p[0] == '\r' && p[1] == '\n') {
            return (p + 2 == last);
        }

        *plain = 0;

        eol = memchr(p, '\n', last - p);

        if (eol == NULL || eol == p || eol[-1] != '\r') {
            return 0;
        }

        p = eol + 1;
    }
}


/* a comma-separated list names the token, in any case */

static ngx_uint_t
ngx_http_idem_fuzz_otel_token(ngx_str_t *value, char *token)
{
    u_char  *p, *last, *start, *end;
    size_t   len;

    len = ngx_strlen(token);
    p = value->data;
    last = p + value->len;

    while (p < last) {
        start = p;

        while (p < last && *p != ',') {
            p++;
        }

        end = p;

        if (p < last) {
            p++;
        }

        while (start < end && (*start == ' ' || *start == '\t')) {
            start++;
        }

        while (end > start && (end[-1] == ' ' || end[-1] == '\t')) {
            end--;
        }

        if ((size_t) (end - start) == len
            && ngx_strncasecmp(start, (u_char *) token, len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


/* what the spans' writing asks (trace.c, record.c): not in this target */

ngx_uint_t
ngx_http_idem_trace_sampled(ngx_http_request_t *r)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_trace_sampled");
    return 0;
}


ngx_str_t *
ngx_http_idem_source_name(ngx_uint_t source)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_source_name");
    return NULL;
}


ngx_str_t *
ngx_http_idem_state_name(ngx_uint_t state)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_state_name");
    return NULL;
}


ngx_str_t *
ngx_http_idem_outcome_name(ngx_http_request_t *r, ngx_http_idem_attempt_t *a)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_outcome_name");
    return NULL;
}
