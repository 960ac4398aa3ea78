
/*
 * The fuzz targets' request, input reader and output checks; and weak
 * stand-ins for the module's own functions that a target does not
 * include (a target's #included .c file overrides them).
 *
 * nginx itself is nginx's own objects (fuzz/nginx.sh): what a worker has
 * set up before a request is set up here once, as nginx's init does; the
 * answer is taken by a header and a body filter at the top of nginx's
 * filter chains; the two functions of the HTTP core that need a running
 * event loop and a configured server are wrapped (-Wl,--wrap=, Makefile's
 * FUZZ_WRAP): ngx_http_finalize_request() is recorded, and
 * ngx_http_core_run_phases() does nothing.  Nothing of this file calls a
 * target: the targets call it.
 */


#include "ngx_http_idem_fuzz.h"
#include "ngx_http_idem_redis_common.h"
#include "ngx_http_idem_trace.h"
#include "ngx_http_idem_util.h"
#include "ngx_http_idem_calls_list.h"


#define NGX_HTTP_IDEM_FUZZ_JSON_DEPTH  32

/* the clock of every run: a worker between two events, always the same */
#define NGX_HTTP_IDEM_FUZZ_SEC   1700000000
#define NGX_HTTP_IDEM_FUZZ_MSEC  1000000


static void ngx_http_idem_fuzz_once(void);
static void ngx_http_idem_fuzz_log_writer(ngx_log_t *log, ngx_uint_t level,
    u_char *buf, size_t len);
static ngx_int_t ngx_http_idem_fuzz_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_idem_fuzz_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_uint_t ngx_http_idem_fuzz_json_value(u_char **pos, u_char *last,
    ngx_uint_t depth);
static ngx_uint_t ngx_http_idem_fuzz_json_string(u_char **pos, u_char *last);
static ngx_uint_t ngx_http_idem_fuzz_json_number(u_char **pos, u_char *last);
static size_t ngx_http_idem_fuzz_utf8(u_char *p, u_char *last);
static void ngx_http_idem_fuzz_json_space(u_char **pos, u_char *last);
static void ngx_http_idem_fuzz_name(ngx_http_idem_fuzz_t *fz,
    ngx_http_idem_header_t *h, char *name);

void __wrap_ngx_http_finalize_request(ngx_http_request_t *r, ngx_int_t rc);
void __wrap_ngx_http_core_run_phases(ngx_http_request_t *r);


ngx_http_idem_fuzz_answer_t  ngx_http_idem_fuzz_answer;

static ngx_log_t     ngx_http_idem_fuzz_log;
static ngx_cycle_t   ngx_http_idem_fuzz_cycle;
static ngx_uint_t    ngx_http_idem_fuzz_log_stderr;
static ngx_atomic_t  ngx_http_idem_fuzz_connections;


/* the module's shared objects, as module.c and metrics.c define them */

static ngx_http_idem_counters_t  ngx_http_idem_fuzz_counters;

__attribute__((weak)) ngx_module_t  ngx_http_idem_module;


__attribute__((weak)) ngx_http_idem_counters_t *
ngx_http_idem_counters(void)
{
    return &ngx_http_idem_fuzz_counters;
}


void
ngx_http_idem_fuzz_abort(const char *what)
{
    fprintf(stderr, "ngx_idem fuzz: %s\n", what);
    abort();
}


/*
 * What nginx's main() and a worker's init set before any request, as far
 * as the module's paths use it: the page size (ngx_os_init), the time
 * (ngx_time_init), the cycle and its log, the process, the connection
 * counter (ngx_event_module_init), and the filter chains' tops.
 */

static void
ngx_http_idem_fuzz_once(void)
{
    static ngx_uint_t  done;

    if (done) {
        return;
    }

    done = 1;

    ngx_pagesize = getpagesize();
    ngx_cacheline_size = NGX_CPU_CACHE_LINE;

    for (ngx_pagesize_shift = 0;
         (ngx_uint_t) 1 << ngx_pagesize_shift < ngx_pagesize;
         ngx_pagesize_shift++)
    {
        /* void */
    }

    ngx_time_init();

    ngx_pid = ngx_getpid();
    ngx_process = NGX_PROCESS_WORKER;

    /*
     * every log line, debug ones too, is formatted by ngx_log_error_core();
     * IDEM_FUZZ_LOG=1 shows them on stderr, otherwise they are dropped
     */

    ngx_use_stderr = 0;
    ngx_http_idem_fuzz_log_stderr = (getenv("IDEM_FUZZ_LOG") != NULL);

    ngx_http_idem_fuzz_log.log_level = NGX_LOG_DEBUG_ALL;
    ngx_http_idem_fuzz_log.writer = ngx_http_idem_fuzz_log_writer;

    ngx_http_idem_fuzz_cycle.log = &ngx_http_idem_fuzz_log;
    ngx_cycle = &ngx_http_idem_fuzz_cycle;

    ngx_connection_counter = &ngx_http_idem_fuzz_connections;

    ngx_http_top_header_filter = ngx_http_idem_fuzz_header_filter;
    ngx_http_top_body_filter = ngx_http_idem_fuzz_body_filter;
}


static void
ngx_http_idem_fuzz_log_writer(ngx_log_t *log, ngx_uint_t level, u_char *buf,
    size_t len)
{
    if (ngx_http_idem_fuzz_log_stderr) {
        fprintf(stderr, "%.*s", (int) len, buf);
    }
}


/*
 * The answer as the last filters would send it: looked at, not sent.  The
 * request's header_sent is left alone, so that a second header is a
 * finding here, not an alert of ngx_http_send_header().
 */

static ngx_int_t
ngx_http_idem_fuzz_header_filter(ngx_http_request_t *r)
{
    ngx_http_idem_fuzz_answer_t  *a;

    a = &ngx_http_idem_fuzz_answer;

    ngx_http_idem_fuzz_assert(!a->header_sent);
    ngx_http_idem_fuzz_assert(r->headers_out.status >= 100
                              && r->headers_out.status <= 999);

    a->header_sent = 1;
    a->status = r->headers_out.status;

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_fuzz_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    u_char                       *p;
    size_t                        size;
    ngx_http_idem_fuzz_answer_t  *a;

    a = &ngx_http_idem_fuzz_answer;

    ngx_http_idem_fuzz_assert(a->header_sent);

    for ( /* void */ ; in; in = in->next) {
        ngx_http_idem_fuzz_assert(in->buf->pos <= in->buf->last);

        size = in->buf->last - in->buf->pos;

        /* every byte is read: a buffer past its memory is reported */

        p = ngx_pnalloc(r->pool, a->body.len + size);
        if (p == NULL) {
            return NGX_ERROR;
        }

        if (a->body.len) {
            ngx_memcpy(p, a->body.data, a->body.len);
        }

        if (size) {
            ngx_memcpy(p + a->body.len, in->buf->pos, size);
        }

        a->body.data = p;
        a->body.len += size;
    }

    return NGX_OK;
}


/* wrapped: nginx's needs the event loop and the server's configuration */

void
__wrap_ngx_http_finalize_request(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_http_idem_fuzz_answer.finalized = rc;
}


void
__wrap_ngx_http_core_run_phases(ngx_http_request_t *r)
{
}


/*
 * A request as the module sees it in a worker: its pool, connection and
 * log, configuration arrays holding the module's confs (index 0), the
 * module's ctx, empty header lists.  The input is copied into the pool.
 */

ngx_int_t
ngx_http_idem_fuzz_init(ngx_http_idem_fuzz_t *fz, const uint8_t *data,
    size_t size, ngx_http_idem_fuzz_input_t *in)
{
    u_char              *p;
    ngx_pool_t          *pool;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    ngx_memzero(fz, sizeof(ngx_http_idem_fuzz_t));
    ngx_memzero(&ngx_http_idem_fuzz_answer,
                sizeof(ngx_http_idem_fuzz_answer_t));

    ngx_http_idem_fuzz_answer.finalized = -100;

    ngx_http_idem_fuzz_once();

    /* the clock stands still: a run does not depend on when it runs */

    ngx_cached_time->sec = NGX_HTTP_IDEM_FUZZ_SEC;
    ngx_cached_time->msec = 0;
    ngx_current_msec = NGX_HTTP_IDEM_FUZZ_MSEC;

    /* no timer or posted event of an earlier run: its memory is gone */

    ngx_event_timer_init(&ngx_http_idem_fuzz_log);
    ngx_queue_init(&ngx_posted_events);

    pool = ngx_create_pool(4096, &ngx_http_idem_fuzz_log);
    if (pool == NULL) {
        return NGX_ERROR;
    }

    fz->pool = pool;

    c = ngx_pcalloc(pool, sizeof(ngx_connection_t));
    r = ngx_pcalloc(pool, sizeof(ngx_http_request_t));
    p = ngx_pnalloc(pool, size);

    if (c == NULL || r == NULL || p == NULL) {
        return NGX_ERROR;
    }

    /* a client connection's events, for the HTTP core's functions */

    c->read = ngx_pcalloc(pool, sizeof(ngx_event_t));
    c->write = ngx_pcalloc(pool, sizeof(ngx_event_t));

    if (c->read == NULL || c->write == NULL) {
        return NGX_ERROR;
    }

    c->read->data = c;
    c->read->log = &ngx_http_idem_fuzz_log;
    c->write->data = c;
    c->write->write = 1;
    c->write->log = &ngx_http_idem_fuzz_log;

    c->log = &ngx_http_idem_fuzz_log;
    c->pool = pool;
    c->data = r;

    r->pool = pool;
    r->connection = c;
    r->main = r;
    r->count = 1;
    r->method = NGX_HTTP_GET;
    ngx_str_set(&r->method_name, "GET");
    ngx_str_set(&r->uri, "/");
    ngx_str_set(&r->unparsed_uri, "/");
    r->headers_out.content_length_n = -1;

    r->ctx = ngx_pcalloc(pool, NGX_HTTP_IDEM_FUZZ_MODULES * sizeof(void *));
    r->main_conf = ngx_pcalloc(pool,
                               NGX_HTTP_IDEM_FUZZ_MODULES * sizeof(void *));
    r->loc_conf = ngx_pcalloc(pool,
                              NGX_HTTP_IDEM_FUZZ_MODULES * sizeof(void *));

    fz->imcf = ngx_pcalloc(pool, sizeof(ngx_http_idem_main_conf_t));
    fz->ilcf = ngx_pcalloc(pool, sizeof(ngx_http_idem_loc_conf_t));
    fz->ctx = ngx_pcalloc(pool, sizeof(ngx_http_idem_ctx_t));

    if (r->ctx == NULL || r->main_conf == NULL || r->loc_conf == NULL
        || fz->imcf == NULL || fz->ilcf == NULL || fz->ctx == NULL)
    {
        return NGX_ERROR;
    }

    /* small parts: lists of several parts are walked too */

    if (ngx_list_init(&r->headers_in.headers, pool, 2,
                      sizeof(ngx_table_elt_t))
        != NGX_OK
        || ngx_list_init(&r->headers_out.headers, pool, 2,
                         sizeof(ngx_table_elt_t))
           != NGX_OK
        || ngx_list_init(&r->headers_out.trailers, pool, 2,
                         sizeof(ngx_table_elt_t))
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* nginx's modules have no conf here: a use of one is a NULL */

    ngx_http_core_module.ctx_index = 1;
    ngx_http_upstream_module.ctx_index = 2;

    r->main_conf[ngx_http_idem_module.ctx_index] = fz->imcf;
    r->loc_conf[ngx_http_idem_module.ctx_index] = fz->ilcf;
    r->ctx[ngx_http_idem_module.ctx_index] = fz->ctx;

    /* the directives' defaults (module.c's merge) */

    fz->ilcf->enable = 1;
    fz->ilcf->call_id_max_length = 128;
    fz->ilcf->retry_attempts = NGX_HTTP_IDEM_RETRY_ATTEMPTS;
    fz->ilcf->retry_backoff = NGX_HTTP_IDEM_RETRY_BACKOFF;
    fz->ilcf->retry_max_backoff = NGX_HTTP_IDEM_RETRY_MAX_BACKOFF;
    fz->ilcf->retry_on = NGX_HTTP_IDEM_RETRY_ON;
    fz->ilcf->dedupe_store_max = 65536;
    ngx_str_set(&fz->ilcf->call_id_prefix, "gw");
    ngx_str_set(&fz->imcf->node_id, "fuzz-node");
    ngx_str_set(&fz->imcf->key_prefix, "idem:");
    fz->imcf->record_max_executions = NGX_HTTP_IDEM_RECORD_MAX_EXECUTIONS;

    fz->ctx->request = r;
    fz->ctx->conf = fz->ilcf;
    fz->ctx->ids.call_id_header = &fz->ilcf->call_id_header;
    fz->ctx->ids.trace_id_header = &fz->ilcf->trace_id_header;
    ngx_str_set(&fz->ctx->ids.call_id, "fuzz-call");

    fz->request = r;

    ngx_memcpy(p, data, size);

    in->pos = p;
    in->last = p + size;
    in->pool = pool;

    return NGX_OK;
}


void
ngx_http_idem_fuzz_done(ngx_http_idem_fuzz_t *fz)
{
    if (fz->pool != NULL) {
        ngx_destroy_pool(fz->pool);
    }

    ngx_queue_init(&ngx_posted_events);
}


/* the header names of the defaults, hashed as nginx hashes request's */

ngx_int_t
ngx_http_idem_fuzz_names(ngx_http_idem_fuzz_t *fz)
{
    ngx_http_idem_fuzz_name(fz, &fz->ilcf->call_id_header, "X-Call-Id");
    ngx_http_idem_fuzz_name(fz, &fz->ilcf->trace_id_header, "X-Trace-Id");
    ngx_http_idem_fuzz_name(fz, &fz->ilcf->deadline_header, "X-Deadline-Ms");
    ngx_http_idem_fuzz_name(fz, &fz->imcf->source_header, "X-Call-Id-Source");
    ngx_http_idem_fuzz_name(fz, &fz->imcf->attempt_header, "X-Call-Attempt");
    ngx_http_idem_fuzz_name(fz, &fz->imcf->traceparent_header,
                            "traceparent");
    ngx_http_idem_fuzz_name(fz, &fz->imcf->tracestate_header, "tracestate");
    ngx_http_idem_fuzz_name(fz, &fz->imcf->grpc_timeout_header,
                            "grpc-timeout");

    return NGX_OK;
}


static void
ngx_http_idem_fuzz_name(ngx_http_idem_fuzz_t *fz, ngx_http_idem_header_t *h,
    char *name)
{
    h->name.data = (u_char *) name;
    h->name.len = ngx_strlen(name);
    h->lowcase = ngx_pnalloc(fz->pool, h->name.len);

    if (h->lowcase == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    h->hash = ngx_hash_strlow(h->lowcase, h->name.data, h->name.len);
}


/* one entry of a header list, with its lowercase name and hash */

ngx_int_t
ngx_http_idem_fuzz_header(ngx_http_idem_fuzz_t *fz, ngx_list_t *list,
    char *name, ngx_str_t *value)
{
    size_t            len;
    ngx_table_elt_t  *h;

    h = ngx_list_push(list);
    if (h == NULL) {
        return NGX_ERROR;
    }

    len = ngx_strlen(name);

    h->key.data = ngx_pnalloc(fz->pool, len);
    h->lowcase_key = ngx_pnalloc(fz->pool, len);

    if (h->key.data == NULL || h->lowcase_key == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(h->key.data, name, len);
    h->key.len = len;
    h->hash = ngx_hash_strlow(h->lowcase_key, h->key.data, len);
    h->value = *value;

    return NGX_OK;
}


ngx_uint_t
ngx_http_idem_fuzz_byte(ngx_http_idem_fuzz_input_t *in)
{
    if (in->pos == in->last) {
        return 0;
    }

    return *in->pos++;
}


/*
 * Up to the next LF (not included), or the rest.  Every piece is copied
 * into a block of its own size: a byte read past it is reported.
 */

void
ngx_http_idem_fuzz_line(ngx_http_idem_fuzz_input_t *in, ngx_str_t *line)
{
    u_char  *lf;

    lf = memchr(in->pos, '\n', in->last - in->pos);

    line->len = (lf ? lf : in->last) - in->pos;
    line->data = ngx_pnalloc(in->pool, line->len);

    if (line->data == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    ngx_memcpy(line->data, in->pos, line->len);

    in->pos = lf ? lf + 1 : in->last;
}


/* a length byte (255: two bytes of length follow), then that many bytes */

void
ngx_http_idem_fuzz_string(ngx_http_idem_fuzz_input_t *in, ngx_str_t *s)
{
    size_t  len;

    len = ngx_http_idem_fuzz_byte(in);

    if (len == 255) {
        len = ngx_http_idem_fuzz_byte(in) << 8;
        len |= ngx_http_idem_fuzz_byte(in);
    }

    len = ngx_min(len, (size_t) (in->last - in->pos));

    s->len = len;
    s->data = ngx_pnalloc(in->pool, len);

    if (s->data == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    ngx_memcpy(s->data, in->pos, len);

    in->pos += len;
}


/* SPEC's call id rule: 1..max bytes of A-Z a-z 0-9 - . _ ~ : */

ngx_uint_t
ngx_http_idem_fuzz_id_valid(ngx_str_t *id, size_t max)
{
    size_t  i;

    if (id->len == 0 || id->len > max) {
        return 0;
    }

    for (i = 0; i < id->len; i++) {
        if (strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                   "0123456789-._~:", id->data[i]) == NULL
            || id->data[i] == '\0')
        {
            return 0;
        }
    }

    return 1;
}


/*
 * RFC 8941's String, read independently of the module: 0 when the value
 * is not one (no opening quote, a byte outside %x20-7E, an escape of
 * other than DQUOTE or "\\", no closing quote); 1 when it is one alone,
 * trailing SP or HTAB allowed; 2 when something follows the string (its
 * parameters are the module's to judge).  "content" gets the string's
 * content, unescaped (room for value->len bytes).
 */

ngx_uint_t
ngx_http_idem_fuzz_sf_string(ngx_str_t *value, ngx_str_t *content)
{
    size_t  i, n;

    if (value->len == 0 || value->data[0] != '"') {
        return 0;
    }

    n = 0;

    for (i = 1; i < value->len; i++) {

        if (value->data[i] == '"') {
            break;
        }

        if (value->data[i] == '\\') {
            if (i + 1 == value->len
                || (value->data[i + 1] != '"' && value->data[i + 1] != '\\'))
            {
                return 0;
            }

            i++;

        } else if (value->data[i] < 0x20 || value->data[i] > 0x7e) {
            return 0;
        }

        content->data[n++] = value->data[i];
    }

    if (i == value->len) {
        return 0;
    }

    content->len = n;

    for (i++; i < value->len; i++) {
        if (value->data[i] != ' ' && value->data[i] != '\t') {
            return 2;
        }
    }

    return 1;
}


/*
 * hiredis 0.14 allocates at once the element vector an array header
 * announces: "*1000000000" asks it for 8 GB.  That is hiredis' limit on
 * what Redis may send (1.x has maxelements), not the module's: an input
 * with an array header over 4096 elements is not run.
 */

ngx_uint_t
ngx_http_idem_fuzz_resp_too_large(u_char *p, u_char *last)
{
    ngx_uint_t  n;

    for ( /* void */ ; p < last; p++) {
        if (*p != '*') {
            continue;
        }

        for (n = 0; p + 1 < last && p[1] >= '0' && p[1] <= '9'; p++) {
            n = n * 10 + (p[1] - '0');

            if (n > NGX_HTTP_IDEM_FUZZ_ELEMENTS) {
                return 1;
            }
        }
    }

    return 0;
}


/* the value of the request header added last */

ngx_str_t *
ngx_http_idem_fuzz_last_value(ngx_http_idem_fuzz_t *fz)
{
    ngx_list_part_t  *last;

    last = fz->request->headers_in.headers.last;

    return &((ngx_table_elt_t *) last->elts)[last->nelts - 1].value;
}


/* two header entries with the same name and value, byte for byte */

void
ngx_http_idem_fuzz_same_header(ngx_table_elt_t *h, ngx_table_elt_t *h2)
{
    ngx_http_idem_fuzz_assert(h2 != NULL);
    ngx_http_idem_fuzz_assert(h->key.len == h2->key.len
                              && ngx_memcmp(h->key.data, h2->key.data,
                                            h->key.len) == 0);
    ngx_http_idem_fuzz_assert(h->value.len == h2->value.len
                              && (h->value.len == 0
                                  || ngx_memcmp(h->value.data,
                                                h2->value.data,
                                                h->value.len) == 0));
}


/* a 400 problem+json answer was sent, and it parses */

void
ngx_http_idem_fuzz_problem_sent(ngx_int_t rc)
{
    ngx_http_idem_fuzz_assert(rc == NGX_OK);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_answer.status
                              == NGX_HTTP_BAD_REQUEST);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_json(
                                  ngx_http_idem_fuzz_answer.body.data,
                                  ngx_http_idem_fuzz_answer.body.len));
}


/*
 * JSON (RFC 8259) syntax, one value and nothing after it but white space,
 * in UTF-8 as a strict reader takes it: bytes above 0x7f in strings must
 * be well-formed UTF-8 (no stray byte, overlong form, surrogate or code
 * point past U+10FFFF).
 */

ngx_uint_t
ngx_http_idem_fuzz_json(u_char *p, size_t len)
{
    u_char  *last;

    last = p + len;

    if (!ngx_http_idem_fuzz_json_value(&p, last, 0)) {
        return 0;
    }

    ngx_http_idem_fuzz_json_space(&p, last);

    return p == last;
}


static ngx_uint_t
ngx_http_idem_fuzz_json_value(u_char **pos, u_char *last, ngx_uint_t depth)
{
    u_char      *p, close;
    ngx_uint_t   first;

    ngx_http_idem_fuzz_json_space(pos, last);

    p = *pos;

    if (p == last || depth > NGX_HTTP_IDEM_FUZZ_JSON_DEPTH) {
        return 0;
    }

    if (*p == '"') {
        return ngx_http_idem_fuzz_json_string(pos, last);
    }

    if (*p == '-' || (*p >= '0' && *p <= '9')) {
        return ngx_http_idem_fuzz_json_number(pos, last);
    }

    if (last - p >= 4 && (ngx_strncmp(p, "true", 4) == 0
                          || ngx_strncmp(p, "null", 4) == 0))
    {
        *pos = p + 4;
        return 1;
    }

    if (last - p >= 5 && ngx_strncmp(p, "false", 5) == 0) {
        *pos = p + 5;
        return 1;
    }

    if (*p != '{' && *p != '[') {
        return 0;
    }

    close = (*p == '{') ? '}' : ']';
    *pos = p + 1;

    for (first = 1; /* void */; first = 0) {
        ngx_http_idem_fuzz_json_space(pos, last);

        if (*pos == last) {
            return 0;
        }

        if (**pos == close) {
            (*pos)++;
            return 1;
        }

        if (!first) {
            if (**pos != ',') {
                return 0;
            }

            (*pos)++;
            ngx_http_idem_fuzz_json_space(pos, last);
        }

        if (close == '}') {
            if (*pos == last || **pos != '"'
                || !ngx_http_idem_fuzz_json_string(pos, last))
            {
                return 0;
            }

            ngx_http_idem_fuzz_json_space(pos, last);

            if (*pos == last || **pos != ':') {
                return 0;
            }

            (*pos)++;
        }

        if (!ngx_http_idem_fuzz_json_value(pos, last, depth + 1)) {
            return 0;
        }
    }
}


static ngx_uint_t
ngx_http_idem_fuzz_json_string(u_char **pos, u_char *last)
{
    u_char      *p;
    size_t       n;
    ngx_uint_t   i;

    for (p = *pos + 1; p < last; p++) {

        if (*p == '"') {
            *pos = p + 1;
            return 1;
        }

        if (*p < 0x20) {
            return 0;
        }

        if (*p >= 0x80) {
            n = ngx_http_idem_fuzz_utf8(p, last);

            if (n == 0) {
                return 0;
            }

            p += n - 1;
            continue;
        }

        if (*p != '\\') {
            continue;
        }

        if (++p == last) {
            return 0;
        }

        if (*p == 'u') {
            for (i = 0; i < 4; i++) {
                if (++p == last || !isxdigit(*p)) {
                    return 0;
                }
            }

            continue;
        }

        if (strchr("\"\\/bfnrt", *p) == NULL || *p == '\0') {
            return 0;
        }
    }

    return 0;
}


/*
 * The length of the UTF-8 sequence at p, its code point decoded and
 * judged (the module's writer goes by the table of well-formed bytes
 * instead); 0: not one
 */

static size_t
ngx_http_idem_fuzz_utf8(u_char *p, u_char *last)
{
    size_t    i, n;
    uint32_t  cp, min;

    if ((*p & 0xe0) == 0xc0) {
        n = 2;
        cp = *p & 0x1f;
        min = 0x80;

    } else if ((*p & 0xf0) == 0xe0) {
        n = 3;
        cp = *p & 0x0f;
        min = 0x800;

    } else if ((*p & 0xf8) == 0xf0) {
        n = 4;
        cp = *p & 0x07;
        min = 0x10000;

    } else {
        return 0;
    }

    if ((size_t) (last - p) < n) {
        return 0;
    }

    for (i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return 0;
        }

        cp = (cp << 6) | (p[i] & 0x3f);
    }

    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        return 0;
    }

    return n;
}


static ngx_uint_t
ngx_http_idem_fuzz_json_number(u_char **pos, u_char *last)
{
    u_char  *p, *start;

    p = *pos;

    if (*p == '-') {
        p++;
    }

    start = p;

    while (p < last && *p >= '0' && *p <= '9') {
        p++;
    }

    /* no leading zeros: "0", "12", not "012" */

    if (p == start || (*start == '0' && p - start > 1)) {
        return 0;
    }

    if (p < last && *p == '.') {
        start = ++p;

        while (p < last && *p >= '0' && *p <= '9') {
            p++;
        }

        if (p == start) {
            return 0;
        }
    }

    if (p < last && (*p == 'e' || *p == 'E')) {
        p++;

        if (p < last && (*p == '+' || *p == '-')) {
            p++;
        }

        start = p;

        while (p < last && *p >= '0' && *p <= '9') {
            p++;
        }

        if (p == start) {
            return 0;
        }
    }

    *pos = p;

    return 1;
}


static void
ngx_http_idem_fuzz_json_space(u_char **pos, u_char *last)
{
    while (*pos < last
           && (**pos == ' ' || **pos == '\t' || **pos == '\n'
               || **pos == '\r'))
    {
        (*pos)++;
    }
}


/*
 * The module's functions a target does not include.  Those a target's
 * path goes through behave simply; the others must not be reached.
 */

__attribute__((weak)) ngx_http_idem_ctx_t *
ngx_http_idem_get_ctx(ngx_http_request_t *r)
{
    return ngx_http_get_module_ctx(r, ngx_http_idem_module);
}


__attribute__((weak)) void
ngx_http_idem_ctx_resume(ngx_event_t *ev)
{
    ngx_http_idem_ctx_t *ctx = ev->data;

    ngx_http_core_run_phases(ctx->request);
}


__attribute__((weak)) ngx_msec_int_t
ngx_http_idem_remaining(ngx_http_idem_ctx_t *ctx)
{
    return (ngx_msec_int_t) (ctx->deadline.at - ngx_current_msec);
}


__attribute__((weak)) void
ngx_http_idem_random_hex(u_char *dst, size_t len)
{
    /* not random: a fuzz run must be reproducible */
    ngx_memset(dst, 'a', len);
}


__attribute__((weak)) ngx_uint_t
ngx_http_idem_sent(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_uint_t *unanswered)
{
    *unanswered = 0;
    return 1;
}


__attribute__((weak)) void
ngx_http_idem_problem_set(ngx_http_request_t *r,
    ngx_http_idem_problem_t *problem, ngx_http_idem_problem_e id,
    ngx_str_t *header, char *reason)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_problem_set");
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_send_problem(ngx_http_request_t *r,
    ngx_http_idem_problem_t *problem, ngx_str_t *call_id)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_send_problem");
    return NGX_ERROR;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_add_response_header(ngx_http_request_t *r, char *name,
    ngx_str_t *value)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_add_response_header");
    return NGX_ERROR;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_set_attempt_headers(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t grpc)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_set_attempt_headers");
    return NGX_ERROR;
}


/* trace.c: headers.c's traceparent names the attempt's span as parent */

__attribute__((weak)) u_char *
ngx_http_idem_trace_upstream_parent(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, u_char *span_id)
{
    return span_id;
}


__attribute__((weak)) ngx_uint_t
ngx_http_idem_trace_id_w3c(ngx_str_t *id)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_trace_id_w3c");
    return 0;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_traceparent_parse(ngx_str_t *value,
    ngx_http_idem_traceparent_t *tp)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_traceparent_parse");
    return NGX_DECLINED;
}


__attribute__((weak)) void
ngx_http_idem_trace_take(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_idem_traceparent_t *tp)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_trace_take");
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_trace_start(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_http_idem_inbound_t *in,
    ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_trace_start");
    return NGX_ERROR;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_check_charset(ngx_str_t *value)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_check_charset");
    return NGX_ERROR;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_record_key(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_str_t *id, ngx_str_t *key)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_record_key");
    return NGX_ERROR;
}


/* status.c: a key by a scope's digest, only where scope_digest=on */

__attribute__((weak)) ngx_int_t
ngx_http_idem_record_key_digest(ngx_http_request_t *r, ngx_str_t *digest,
    ngx_str_t *id, ngx_str_t *key)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_record_key_digest");
    return NGX_ERROR;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_answer_replay(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_str_t *answer)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_answer_replay");
    return NGX_ERROR;
}


__attribute__((weak)) u_char
ngx_http_idem_answer_keep(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_uint_t state, ngx_uint_t sent, ngx_int_t grpc, ngx_str_t *answer)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_answer_keep");
    return 0;
}


__attribute__((weak)) u_char *
ngx_http_idem_record_arrival(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    u_char *p, u_char state)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_record_arrival");
    return p;
}


__attribute__((weak)) size_t
ngx_http_idem_record_arrival_len(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_record_arrival_len");
    return 0;
}


__attribute__((weak)) void
ngx_http_idem_record_expiring(ngx_http_idem_ctx_t *ctx)
{
    /* a claim that wrote the record's expiry: nothing to keep here */
}


__attribute__((weak)) void
ngx_http_idem_record_unstart(ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_record_unstart");
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_attempt_start(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_attempt_start");
    return NGX_ERROR;
}


__attribute__((weak)) void
ngx_http_idem_attempt_end(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_peer_connection_t *pc)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_attempt_end");
}


__attribute__((weak)) void
ngx_http_idem_arm_try_timer(ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_arm_try_timer");
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_store_write(ngx_http_idem_store_write_t *w)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_store_write");
    return NGX_DECLINED;
}


__attribute__((weak)) ngx_http_idem_store_op_t *
ngx_http_idem_store_claim(ngx_http_idem_store_claim_t *claim,
    ngx_http_idem_store_claim_pt handler, void *data)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_store_claim");
    return NULL;
}


__attribute__((weak)) ngx_http_idem_store_op_t *
ngx_http_idem_store_read_record(ngx_str_t *key,
    ngx_http_idem_store_record_pt handler, void *data)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_store_read_record");
    return NULL;
}


__attribute__((weak)) ngx_http_idem_store_op_t *
ngx_http_idem_store_resolve(ngx_str_t *key,
    ngx_http_idem_store_resolution_t *res,
    ngx_http_idem_store_resolved_pt handler, void *data)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_store_resolve");
    return NULL;
}


__attribute__((weak)) void
ngx_http_idem_store_cancel(ngx_http_idem_store_op_t *op)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_store_cancel");
}


__attribute__((weak)) ngx_http_idem_store_op_t *
ngx_http_idem_store_read_stream(ngx_str_t *stream, ngx_str_t *before,
    ngx_uint_t count, ngx_http_idem_store_entries_pt handler, void *data)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_store_read_stream");
    return NULL;
}


/* the list of UNKNOWN calls (calls_list.c): no target asks for it */

__attribute__((weak)) ngx_int_t
ngx_http_idem_calls_list(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_uint_t html)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_calls_list");
    return NGX_ERROR;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_store_append(ngx_http_idem_store_entry_t *entry,
    ngx_http_idem_store_done_pt handler, void *data)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_store_append");
    return NGX_DECLINED;
}


__attribute__((weak)) ngx_uint_t
ngx_http_idem_grpc_request(ngx_http_request_t *r)
{
    return 0;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_grpc_trailers_only(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t status, ngx_str_t *type,
    ngx_str_t *title, ngx_str_t *detail)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_grpc_trailers_only");
    return NGX_ERROR;
}


__attribute__((weak)) ngx_uint_t
ngx_http_idem_grpc_retryable(ngx_http_request_t *r, ngx_msec_int_t *delay)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_grpc_retryable");
    return 0;
}


__attribute__((weak)) u_char *
ngx_http_idem_grpc_timeout(u_char *p, ngx_msec_t ms)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_grpc_timeout");
    return p;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_parse_sf_string(ngx_str_t *value, ngx_str_t *content,
    u_char *err, size_t size)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_parse_sf_string");
    return NGX_ERROR;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_record_parse(ngx_pool_t *pool, ngx_str_t *elts, ngx_uint_t n,
    uint64_t now, ngx_http_idem_record_t *rec)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_record_parse");
    return NGX_ERROR;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_storm_admit(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_storm_admit");
    return NGX_ERROR;
}


__attribute__((weak)) void
ngx_http_idem_storm_attempt(ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_storm_attempt");
}


__attribute__((weak)) ngx_uint_t
ngx_http_idem_storm_retry(ngx_http_idem_ctx_t *ctx)
{
    /* no retry budget, no breaker: every retry is allowed */
    return 1;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_new_round(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_new_round");
    return NGX_ERROR;
}


/* idem_metrics' observations (dedupe.c makes them): none shown here */

__attribute__((weak)) uint64_t
ngx_http_idem_metrics_clock(void)
{
    return 0;
}


__attribute__((weak)) void
ngx_http_idem_observe_claim(ngx_http_idem_ctx_t *ctx)
{
}


__attribute__((weak)) void
ngx_http_idem_observe_wait(ngx_http_idem_ctx_t *ctx, ngx_uint_t result)
{
}


__attribute__((weak)) ngx_uint_t
ngx_http_idem_metrics_waited(ngx_http_idem_store_found_t *found)
{
    return 0;
}


__attribute__((weak)) void
ngx_http_idem_metrics_waiters(ngx_uint_t n)
{
}


/* idem_resend_limit (dedupe.c asks it): no limit, every resend goes on */

__attribute__((weak)) ngx_int_t
ngx_http_idem_resend_check(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_uint_t tentative)
{
    return NGX_OK;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_resend_refuse(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_resend_refuse");
    return NGX_ERROR;
}


/* the waiters' subscription (store/redis/ngx_http_idem_redis_subscribe.c) */

__attribute__((weak)) ngx_int_t
ngx_http_idem_store_watch(ngx_http_idem_store_watch_t *w, ngx_msec_t since)
{
    return NGX_DECLINED;
}


__attribute__((weak)) void
ngx_http_idem_store_unwatch(ngx_http_idem_store_watch_t *w)
{
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_redis_subscribe_init(ngx_http_idem_redis_t *rd)
{
    return NGX_OK;
}


__attribute__((weak)) void
ngx_http_idem_redis_subscribe_exit(ngx_http_idem_redis_t *rd)
{
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_redis_publish(ngx_str_t *channel, ngx_str_t *key)
{
    return NGX_OK;
}


/* the Redis store's cluster and sentinel parts (redis_cluster target) */

__attribute__((weak)) ngx_int_t
ngx_http_idem_redis_cluster_init(ngx_http_idem_redis_t *rd,
    ngx_cycle_t *cycle)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_redis_cluster_init");
    return NGX_ERROR;
}


__attribute__((weak)) void
ngx_http_idem_redis_cluster_exit(ngx_http_idem_redis_t *rd)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_redis_cluster_exit");
}


/* the fuzz nodes have no durable connection */

__attribute__((weak)) ngx_http_idem_redis_node_t *
ngx_http_idem_redis_durable_node(ngx_http_idem_redis_t *rd,
    ngx_http_idem_redis_node_t *node, ngx_http_idem_store_op_t *op)
{
    return (node != NULL) ? node->durable : NULL;
}


__attribute__((weak)) ngx_http_idem_redis_node_t *
ngx_http_idem_redis_cluster_route(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_redis_cluster_route");
    return NULL;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_redis_cluster_redirect(ngx_http_idem_redis_t *rd,
    ngx_http_idem_store_op_t *op, redisReply *reply,
    ngx_http_idem_redis_node_t **to)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_redis_cluster_redirect");
    return NGX_ERROR;
}


__attribute__((weak)) ngx_uint_t
ngx_http_idem_redis_cluster_slot(u_char *key, size_t len)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_redis_cluster_slot");
    return 0;
}


__attribute__((weak)) void
ngx_http_idem_redis_cluster_stale(ngx_http_idem_redis_t *rd)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_redis_cluster_stale");
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_redis_sentinel_init(ngx_http_idem_redis_t *rd,
    ngx_cycle_t *cycle)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_redis_sentinel_init");
    return NGX_ERROR;
}


__attribute__((weak)) ngx_int_t
ngx_http_idem_send_response(ngx_http_request_t *r, ngx_uint_t status,
    char *content_type, ngx_str_t *body)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_send_response");
    return NGX_ERROR;
}


__attribute__((weak)) void
ngx_http_idem_problem_count(ngx_http_idem_problem_t *problem)
{
}
