
/*
 * Spans exported over OTLP/HTTP (docs/tracing.md): one SERVER span per
 * call, one CLIENT span per attempt, its child, whose id is the one the
 * attempt's upstream got in its traceparent.
 *
 * The request path only writes a call's spans into this worker's queue,
 * a buffer of idem_otel_buffer bytes, or drops and counts them when it is
 * full.  The queue is sent when it holds idem_otel_batch spans or its
 * oldest has waited idem_otel_flush, as one POST on a connection of the
 * worker's own (non-blocking, kept alive), while the next batch fills a
 * second buffer; a batch whose exchange fails or outlasts idem_otel_timeout
 * is dropped and counted.  Nothing waits for the collector: a worker that
 * exits (a reload, a graceful stop) sends what is queued at once, each
 * batch bounded by idem_otel_timeout, all of it by worker_shutdown_timeout
 * when set.
 */


#include "ngx_http_idem_otel.h"
#include "ngx_http_idem_trace.h"
#include "ngx_http_idem_otel_json.h"
#include "ngx_http_idem_call_id_source.h"
#include "ngx_http_idem_ctx.h"
#include "ngx_http_idem_metrics.h"
#include "ngx_http_idem_record.h"
#include "ngx_http_idem_util.h"


/* the collector's answer: its status line and headers, a short body */
#define NGX_HTTP_IDEM_OTEL_RESPONSE      4096

/*
 * The flush timer's tick while spans are queued: an exiting worker sends
 * them within it, whatever idem_otel_flush says
 */
#define NGX_HTTP_IDEM_OTEL_TICK          100

/* the request line and headers, the path and Host aside */
#define NGX_HTTP_IDEM_OTEL_HEADER_LEN                                        \
    (sizeof("POST  HTTP/1.1\r\nHost: \r\nContent-Type: application/json\r\n" \
            "Content-Length: \r\nUser-Agent: ngx_idem_module\r\n\r\n")       \
     + NGX_OFF_T_LEN)


typedef struct {
    ngx_cycle_t               *cycle;
    ngx_http_idem_otel_conf_t  *conf;
    ngx_log_t                  log;         /* the connection's: quiet */

    /* spans queued: JSON objects separated by commas */
    u_char                    *queue;
    u_char                    *pos;
    u_char                    *end;
    ngx_uint_t                 queued;
    ngx_msec_t                 oldest;      /* its first span's time */

    /* the batch being sent: the other buffer */
    u_char                    *batch;
    size_t                     batch_len;
    ngx_uint_t                 batch_spans;

    u_char                    *head;        /* request line ... JSON head */
    u_char                    *json_head;   /* its JSON part, made once */
    size_t                     json_head_len;
    ngx_buf_t                  bufs[3];
    ngx_chain_t                chain[3];
    ngx_chain_t               *out;         /* what is left to send */

    ngx_event_t                flush_ev;
    ngx_event_t                timeout_ev;  /* the batch's exchange */
    ngx_peer_connection_t      pc;
    ngx_connection_t          *c;

    u_char                     response[NGX_HTTP_IDEM_OTEL_RESPONSE];
    size_t                     response_len;

    unsigned                   busy:1;      /* a batch is out */
    unsigned                   connected:1;
} ngx_http_idem_otel_worker_t;


static void ngx_http_idem_otel_write_spans(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t n);
static size_t ngx_http_idem_otel_spans_len(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t n);
static ngx_str_t *ngx_http_idem_otel_dedupe(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static void ngx_http_idem_otel_flush_handler(ngx_event_t *ev);
static void ngx_http_idem_otel_send(ngx_http_idem_otel_worker_t *w);
static void ngx_http_idem_otel_write_handler(ngx_event_t *wev);
static void ngx_http_idem_otel_read_handler(ngx_event_t *rev);
static void ngx_http_idem_otel_timeout_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_idem_otel_response(ngx_http_idem_otel_worker_t *w,
    ngx_uint_t closed, ngx_uint_t *keep);
static ngx_int_t ngx_http_idem_otel_chunked(u_char *p, u_char *last,
    u_char **end);
static void ngx_http_idem_otel_fail(ngx_http_idem_otel_worker_t *w,
    char *why, ngx_err_t err);
static void ngx_http_idem_otel_done(ngx_http_idem_otel_worker_t *w,
    ngx_uint_t ok);
static void ngx_http_idem_otel_close(ngx_http_idem_otel_worker_t *w);
static void ngx_http_idem_otel_count(ngx_uint_t sent, ngx_uint_t n);
static void ngx_http_idem_otel_closed(ngx_http_idem_otel_worker_t *w);


/* this worker's exporter, NULL: no export here */
static ngx_http_idem_otel_worker_t  *ngx_http_idem_otel_worker;


static ngx_str_t  ngx_http_idem_otel_nginx = ngx_string("nginx");

static ngx_str_t  ngx_http_idem_otel_dedupe_results[] = {
    ngx_string("claimed"),
    ngx_string("replayed"),
    ngx_string("409"),
    ngx_string("422"),
    ngx_string("503"),
    ngx_string("429"),
    ngx_string("other")
};


/* idem_otel_endpoint http://host[:port][/path] */

char *
ngx_http_idem_otel_endpoint(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_main_conf_t *imcf = conf;

    size_t      add;
    u_char     *p;
    ngx_url_t   u;
    ngx_str_t  *value;

    if (imcf->otel.url.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len > 8
        && ngx_strncasecmp(value[1].data, (u_char *) "https://", 8) == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\": https is not supported by idem_otel_"
                           "endpoint; send to a collector on loopback or "
                           "a private network over http://", &value[1]);
        return NGX_CONF_ERROR;
    }

    if (value[1].len <= 7
        || ngx_strncasecmp(value[1].data, (u_char *) "http://", 7) != 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid idem_otel_endpoint \"%V\": "
                           "http://host[:port]/path expected", &value[1]);
        return NGX_CONF_ERROR;
    }

    add = 7;

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.url.len = value[1].len - add;
    u.url.data = value[1].data + add;
    u.default_port = 80;
    u.uri_part = 1;

    /* the host is resolved here, once: never in a request's path */

    if (ngx_parse_url(cf->pool, &u) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid idem_otel_endpoint \"%V\": %s",
                           &value[1], u.err ? u.err : "cannot parse");
        return NGX_CONF_ERROR;
    }

    if (u.naddrs == 0 || u.addrs == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idem_otel_endpoint \"%V\": host not found",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    imcf->otel.url = value[1];
    imcf->otel.addr = &u.addrs[0];

    if (u.uri.len == 0) {
        ngx_str_set(&imcf->otel.path, "/v1/traces");

    } else {
        imcf->otel.path = u.uri;
    }

    /* Host: as written, with its port unless the default */

    p = ngx_pnalloc(cf->pool, u.host.len + 1 + NGX_INT_T_LEN + 2);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    imcf->otel.host.data = p;

    if (u.family == AF_INET6) {
        *p++ = '[';
        p = ngx_cpymem(p, u.host.data, u.host.len);
        *p++ = ']';

    } else {
        p = ngx_cpymem(p, u.host.data, u.host.len);
    }

    if (u.port != 80) {
        p = ngx_sprintf(p, ":%d", (int) u.port);
    }

    imcf->otel.host.len = p - imcf->otel.host.data;

    return NGX_CONF_OK;
}


void
ngx_http_idem_otel_create_conf(ngx_http_idem_otel_conf_t *oc)
{
    oc->buffer = NGX_CONF_UNSET_SIZE;
    oc->batch = NGX_CONF_UNSET_UINT;
    oc->flush = NGX_CONF_UNSET_MSEC;
    oc->timeout = NGX_CONF_UNSET_MSEC;
}


char *
ngx_http_idem_otel_init_conf(ngx_conf_t *cf, ngx_http_idem_main_conf_t *imcf)
{
    ngx_http_idem_otel_conf_t  *oc;

    oc = &imcf->otel;

    ngx_conf_init_size_value(oc->buffer, 1024 * 1024);
    ngx_conf_init_uint_value(oc->batch, 512);
    ngx_conf_init_msec_value(oc->flush, 1000);
    ngx_conf_init_msec_value(oc->timeout, 3000);

    if (oc->service_name.data == NULL) {
        oc->service_name = imcf->node_id.len ? imcf->node_id
                                              : ngx_http_idem_otel_nginx;
    }

    if (oc->url.len == 0) {
        return NGX_CONF_OK;
    }

    /* a call's spans must fit: a few attempts, a long URI */

    if (oc->buffer < 16 * 1024) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idem_otel_buffer must be at least 16k");
        return NGX_CONF_ERROR;
    }

    if (oc->batch == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idem_otel_batch must be at least 1");
        return NGX_CONF_ERROR;
    }

    if (oc->flush == 0 || oc->timeout == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idem_otel_flush and idem_otel_timeout must be "
                           "more than 0");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


ngx_int_t
ngx_http_idem_otel_init_process(ngx_cycle_t *cycle)
{
    u_char                       *p;
    ngx_http_idem_main_conf_t    *imcf;
    ngx_http_idem_otel_worker_t  *w;

    ngx_http_idem_otel_worker = NULL;

    imcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_idem_module);

    if (imcf == NULL || imcf->otel.url.len == 0 || !imcf->used) {
        return NGX_OK;
    }

    w = ngx_pcalloc(cycle->pool, sizeof(ngx_http_idem_otel_worker_t));
    if (w == NULL) {
        return NGX_ERROR;
    }

    w->cycle = cycle;
    w->conf = &imcf->otel;

    w->queue = ngx_palloc(cycle->pool, w->conf->buffer);
    w->batch = ngx_palloc(cycle->pool, w->conf->buffer);

    w->json_head_len = ngx_http_idem_otel_json_head_len(
                                                   &w->conf->service_name);
    w->json_head = ngx_palloc(cycle->pool, w->json_head_len);

    w->head = ngx_palloc(cycle->pool, NGX_HTTP_IDEM_OTEL_HEADER_LEN
                                      + w->conf->path.len
                                      + w->conf->host.len);

    if (w->queue == NULL || w->batch == NULL || w->json_head == NULL
        || w->head == NULL)
    {
        return NGX_ERROR;
    }

    p = ngx_http_idem_otel_json_head(w->json_head, &w->conf->service_name);
    w->json_head_len = p - w->json_head;

    w->pos = w->queue;
    w->end = w->queue + w->conf->buffer;

    /*
     * The collector's connection logs nothing of its own (a refused
     * connect is an error there): its failures are this file's warnings.
     */

    w->log = *cycle->log;
    w->log.log_level = NGX_LOG_CRIT;
    w->log.handler = NULL;
    w->log.data = NULL;

    w->flush_ev.handler = ngx_http_idem_otel_flush_handler;
    w->flush_ev.data = w;
    w->flush_ev.log = cycle->log;

    w->timeout_ev.handler = ngx_http_idem_otel_timeout_handler;
    w->timeout_ev.data = w;
    w->timeout_ev.log = cycle->log;

    ngx_http_idem_otel_worker = w;

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, cycle->log, 0,
                   "idem otel: exporting to \"%V\", %uz bytes queued at most",
                   &w->conf->url, w->conf->buffer);

    return NGX_OK;
}


/*
 * The call's ids are settled (handler.c), before the client's traceparent
 * is dropped: the client's span becomes the server span's parent, and the
 * call's spans are exported or not.
 */

void
ngx_http_idem_otel_start(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_idem_inbound_t *in)
{
    ngx_http_core_loc_conf_t  *clcf;

    if (ngx_http_idem_otel_worker == NULL) {
        return;
    }

    /*
     * spans only for a W3C trace id, the one its attempts' traceparent
     * carries: an all-zero one is invalid to W3C and OTLP alike
     */

    if (!ngx_http_idem_trace_id_w3c(&ctx->ids.trace_id)) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem otel: trace id \"%V\" is no W3C one, "
                       "no spans", &ctx->ids.trace_id);
        return;
    }

    /* the client's flag, else idem_otel_sample (trace.c) */

    ctx->trace.export = ngx_http_idem_trace_sampled(r);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem otel: call's spans %s, client's span %s",
                   ctx->trace.export ? "exported" : "not sampled",
                   ctx->trace.parent_id.len ? "known" : "unknown");

    if (!ctx->trace.export) {
        return;
    }

    ngx_http_idem_random_hex(ctx->trace.server_span,
                             NGX_HTTP_IDEM_SPAN_ID_LEN);

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);
    ctx->trace.route = clcf->name;
    ctx->trace.path = r->uri;
}


/* the call is over (the log phase): its spans, queued or dropped */

void
ngx_http_idem_otel_end(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    size_t                        len;
    ngx_uint_t                    n;
    ngx_http_idem_otel_worker_t  *w;

    w = ngx_http_idem_otel_worker;

    if (w == NULL || !ctx->trace.export) {
        return;
    }

    if (w->cycle != ngx_cycle) {

        /*
         * master_process off, reloaded: no process starts again, and the
         * exporter was made for the configuration that is gone
         */

        ngx_http_idem_otel_worker = NULL;
        return;
    }

    ctx->trace.export = 0;

    n = 1 + (ctx->record.attempts ? ctx->record.attempts->nelts : 0);

    len = ngx_http_idem_otel_spans_len(r, ctx, n);

    if ((size_t) (w->end - w->pos) < len) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem otel: queue full, %ui spans dropped", n);
        ngx_http_idem_otel_count(0, n);
        return;
    }

    if (w->queued == 0) {
        w->oldest = ngx_current_msec;
    }

    ngx_http_idem_otel_write_spans(r, ctx, n);

    w->queued += n;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem otel: %ui spans queued, %ui in all", n, w->queued);

    if (w->queued >= w->conf->batch) {
        if (!w->flush_ev.posted) {
            ngx_post_event(&w->flush_ev, &ngx_posted_events);
        }

    } else if (!w->flush_ev.timer_set) {
        ngx_add_timer(&w->flush_ev,
                      ngx_min(w->conf->flush, NGX_HTTP_IDEM_OTEL_TICK));
    }
}


/* room for the call's spans, at most */

static size_t
ngx_http_idem_otel_spans_len(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_uint_t n)
{
    size_t                    len;
    ngx_uint_t                i;
    ngx_http_upstream_t      *u;
    ngx_http_idem_attempt_t  *a;

    len = n * (NGX_HTTP_IDEM_OTEL_SPAN_LEN + 16 * NGX_HTTP_IDEM_OTEL_ATTR_LEN
               + 2 * ngx_http_idem_otel_json_len(&r->method_name)
               + ngx_http_idem_otel_json_len(&r->headers_in.server)
               + 256)
          + ngx_http_idem_otel_json_len(&ctx->trace.route)
          + ngx_http_idem_otel_json_len(&ctx->trace.path)
          + ngx_http_idem_otel_json_len(&ctx->ids.call_id);

    /* each attempt's upstream and peer, names of any length */

    u = r->upstream;
    a = ctx->record.attempts ? ctx->record.attempts->elts : NULL;

    for (i = 0; i + 1 < n; i++) {
        if (u != NULL && u->upstream != NULL) {
            len += ngx_http_idem_otel_json_len(&u->upstream->host);
        }

        if (a[i].peer != NULL) {
            len += ngx_http_idem_otel_json_len(a[i].peer);
        }
    }

    return len;
}


static void
ngx_http_idem_otel_write_spans(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t n)
{
    u_char                       *p, name[NGX_INT_T_LEN + 16];
    ngx_str_t                    *s, str;
    ngx_uint_t                    i, status, code, prev_end;
    uint64_t                      start_ms, end_ms;
    ngx_msec_int_t                left;
    ngx_http_upstream_t          *u;
    ngx_http_idem_attempt_t      *a;
    ngx_http_idem_otel_span_t     span;
    ngx_http_idem_otel_worker_t  *w;

    w = ngx_http_idem_otel_worker;
    p = w->pos;

    if (w->queued) {
        *p++ = ',';
    }

    /* the call: the SERVER span */

    status = r->err_status ? r->err_status : r->headers_out.status;

    span.trace_id = ctx->ids.trace_id.data;
    span.span_id = ctx->trace.server_span;
    span.parent = ctx->trace.parent_id.len ? ctx->trace.parent_id.data : NULL;
    span.name = r->method_name;
    span.name2 = ctx->trace.route;
    span.kind = NGX_HTTP_IDEM_OTEL_KIND_SERVER;
    start_ms = (uint64_t) r->start_sec * 1000 + r->start_msec;
    end_ms = ngx_http_idem_unix_ms();
    span.start_ms = start_ms;
    span.end_ms = end_ms;

    p = ngx_http_idem_otel_json_span(p, &span);
    p = ngx_http_idem_otel_json_str(p, "http.request.method",
                                    &r->method_name);
    p = ngx_http_idem_otel_json_str(p, "url.path", &ctx->trace.path);

    if (status) {
        p = ngx_http_idem_otel_json_int(p, "http.response.status_code",
                                        status);
    }

    if (r->headers_in.server.len) {
        p = ngx_http_idem_otel_json_str(p, "server.address",
                                        &r->headers_in.server);
    }

    p = ngx_http_idem_otel_json_str(p, "idem.call_id", &ctx->ids.call_id);
    p = ngx_http_idem_otel_json_str(p, "idem.call_id.source",
                                    ngx_http_idem_source_name(
                                                       ctx->ids.source));

    if (ctx->record.final_state) {
        p = ngx_http_idem_otel_json_str(p, "idem.state",
                          ngx_http_idem_state_name(ctx->record.final_state));
    }

    p = ngx_http_idem_otel_json_int(p, "idem.attempts", n - 1);

    s = ngx_http_idem_otel_dedupe(r, ctx);

    if (s != NULL) {
        p = ngx_http_idem_otel_json_str(p, "idem.dedupe", s);
    }

    if (ctx->dedupe.wait_until) {
        p = ngx_http_idem_otel_json_bool(p, "idem.dedupe.waited", 1);
    }

    p = ngx_http_idem_otel_json_span_end(p,
                     (status >= NGX_HTTP_INTERNAL_SERVER_ERROR
                      || ctx->record.final_state == NGX_HTTP_IDEM_UNKNOWN)
                     ? NGX_HTTP_IDEM_OTEL_STATUS_ERROR
                     : NGX_HTTP_IDEM_OTEL_STATUS_UNSET);

    /* each attempt: a CLIENT span, the server span's child */

    u = r->upstream;
    a = ctx->record.attempts ? ctx->record.attempts->elts : NULL;
    prev_end = 0;

    for (i = 0; i + 1 < n; i++) {

        *p++ = ',';

        span.span_id = a[i].span_id;

        if (a[i].span_id[0] == '\0') {
            /* no traceparent was sent: an id of its own all the same */
            ngx_http_idem_random_hex(a[i].span_id, NGX_HTTP_IDEM_SPAN_ID_LEN);
        }

        span.parent = ctx->trace.server_span;
        span.name = r->method_name;
        str.data = name;
        str.len = ngx_sprintf(name, "attempt %ui", a[i].n) - name;
        span.name2 = str;
        span.kind = NGX_HTTP_IDEM_OTEL_KIND_CLIENT;

        /*
         * within the call's span: the clocks differ (cached, not), by a
         * millisecond or so
         */

        span.start_ms = ngx_max(a[i].start_ms, start_ms);
        span.end_ms = ngx_min(a[i].start_ms
                              + ((a[i].outcome == NGX_HTTP_IDEM_OUTCOME_NONE)
                                 ? (ngx_current_msec - a[i].start)
                                 : a[i].duration),
                              end_ms);
        span.end_ms = ngx_max(span.end_ms, span.start_ms);

        p = ngx_http_idem_otel_json_span(p, &span);
        p = ngx_http_idem_otel_json_str(p, "http.request.method",
                                        &r->method_name);

        if (a[i].status) {
            p = ngx_http_idem_otel_json_int(p, "http.response.status_code",
                                            a[i].status);
        }

        if (u != NULL && u->upstream != NULL && u->upstream->host.len) {
            p = ngx_http_idem_otel_json_str(p, "server.address",
                                            &u->upstream->host);
        }

        if (a[i].peer != NULL) {
            p = ngx_http_idem_otel_json_str(p, "network.peer.address",
                                            a[i].peer);
        }

        p = ngx_http_idem_otel_json_int(p, "idem.attempt", a[i].n);

        s = ngx_http_idem_outcome_name(r, &a[i]);

        if (a[i].outcome == NGX_HTTP_IDEM_OUTCOME_HTTP) {
            str.data = name;
            str.len = ngx_sprintf(name, "http_%ui", a[i].status) - name;
            s = &str;
        }

        p = ngx_http_idem_otel_json_str(p, "idem.outcome", s);

        if (a[i].grpc_status >= 0) {
            p = ngx_http_idem_otel_json_int(p, "rpc.grpc.status_code",
                                            a[i].grpc_status);
        }

        if (i > 0) {

            /* why this one came: how the one before ended */

            s = ngx_http_idem_outcome_name(r, &a[i - 1]);

            if (a[i - 1].outcome == NGX_HTTP_IDEM_OUTCOME_HTTP) {
                str.data = name;
                str.len = ngx_sprintf(name, "http_%ui", a[i - 1].status)
                          - name;
                s = &str;
            }

            p = ngx_http_idem_otel_json_str(p, "idem.retry_reason", s);
            p = ngx_http_idem_otel_json_int(p, "idem.backoff_ms",
                      (int64_t) ngx_max((ngx_msec_int_t)
                                        (a[i].start - prev_end), 0));
        }

        if (ctx->deadline.set) {
            left = (ngx_msec_int_t) (ctx->deadline.at - a[i].start);
            p = ngx_http_idem_otel_json_int(p, "idem.budget_remaining_ms",
                                            ngx_max(left, 0));
        }

        if (a[i].no_retry == NGX_HTTP_IDEM_NO_RETRY_BUDGET) {
            ngx_str_set(&str, "retry_budget");
            p = ngx_http_idem_otel_json_str(p, "idem.no_retry", &str);
        }

        code = (a[i].outcome == NGX_HTTP_IDEM_OUTCOME_OK
                && a[i].status < NGX_HTTP_INTERNAL_SERVER_ERROR
                && a[i].grpc_status <= 0)
               ? NGX_HTTP_IDEM_OTEL_STATUS_UNSET
               : NGX_HTTP_IDEM_OTEL_STATUS_ERROR;

        if (a[i].outcome == NGX_HTTP_IDEM_OUTCOME_HTTP
            && a[i].status < NGX_HTTP_INTERNAL_SERVER_ERROR)
        {
            /* a 4xx is the client's error, not the attempt's */
            code = NGX_HTTP_IDEM_OTEL_STATUS_UNSET;
        }

        p = ngx_http_idem_otel_json_span_end(p, code);

        prev_end = a[i].start + a[i].duration;
    }

    w->pos = p;
}


/* what dedupe made of the call, NULL: not a dedupe route */

static ngx_str_t *
ngx_http_idem_otel_dedupe(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_uint_t  status;

    if (ctx->answer.replayed) {
        return &ngx_http_idem_otel_dedupe_results[1];
    }

    if (ctx->dedupe.owner) {
        return &ngx_http_idem_otel_dedupe_results[0];
    }

    if (ctx->dedupe.state == NGX_HTTP_IDEM_DEDUPE_NONE) {
        return NULL;
    }

    status = r->err_status ? r->err_status : r->headers_out.status;

    switch (status) {
    case NGX_HTTP_CONFLICT:
        return &ngx_http_idem_otel_dedupe_results[2];
    case NGX_HTTP_IDEM_UNPROCESSABLE:
        return &ngx_http_idem_otel_dedupe_results[3];
    case NGX_HTTP_SERVICE_UNAVAILABLE:
        return &ngx_http_idem_otel_dedupe_results[4];
    case NGX_HTTP_TOO_MANY_REQUESTS:
        return &ngx_http_idem_otel_dedupe_results[5];
    default:
        return &ngx_http_idem_otel_dedupe_results[6];
    }
}


/*
 * The queue goes when it holds a batch, when its oldest span has waited
 * idem_otel_flush, or at once in an exiting worker (a reload, a graceful
 * stop); until then the timer ticks.  Its timer is not cancelable: an
 * exiting worker stays until its spans are sent or dropped.
 */

static void
ngx_http_idem_otel_flush_handler(ngx_event_t *ev)
{
    ngx_http_idem_otel_worker_t  *w = ev->data;

    if (ev->timer_set) {
        ngx_del_timer(ev);
    }

    if (w->queued == 0) {
        return;
    }

    if (!w->busy
        && (w->queued >= w->conf->batch
            || ngx_exiting
            || ngx_current_msec - w->oldest >= w->conf->flush))
    {
        ngx_http_idem_otel_send(w);
    }

    if (w->queued) {
        ngx_add_timer(ev, ngx_min(w->conf->flush, NGX_HTTP_IDEM_OTEL_TICK));
    }
}


/* the queue becomes the batch, sent on the kept connection or a new one */

static void
ngx_http_idem_otel_send(ngx_http_idem_otel_worker_t *w)
{
    u_char     *p;
    size_t      len;
    ngx_int_t   rc;

    if (w->busy || w->queued == 0) {
        return;
    }

    p = w->batch;
    w->batch = w->queue;
    w->batch_len = w->pos - w->queue;
    w->batch_spans = w->queued;
    w->queue = p;
    w->pos = p;
    w->end = p + w->conf->buffer;
    w->queued = 0;
    w->busy = 1;
    w->response_len = 0;

    len = w->json_head_len + w->batch_len
          + sizeof("]}]}]}") - 1;

    p = ngx_sprintf(w->head, "POST %V HTTP/1.1\r\nHost: %V\r\n"
                    "Content-Type: application/json\r\n"
                    "Content-Length: %uz\r\n"
                    "User-Agent: ngx_idem_module\r\n\r\n",
                    &w->conf->path, &w->conf->host, len);

    ngx_memzero(w->bufs, sizeof(w->bufs));

    w->bufs[0].pos = w->head;
    w->bufs[0].last = p;
    w->bufs[1].pos = w->json_head;
    w->bufs[1].last = w->json_head + w->json_head_len;
    w->bufs[2].pos = w->batch;
    w->bufs[2].last = ngx_http_idem_otel_json_tail(w->batch + w->batch_len);

    w->bufs[0].memory = 1;
    w->bufs[1].memory = 1;
    w->bufs[2].memory = 1;

    w->chain[0].buf = &w->bufs[0];
    w->chain[0].next = &w->chain[1];
    w->chain[1].buf = &w->bufs[1];
    w->chain[1].next = &w->chain[2];
    w->chain[2].buf = &w->bufs[2];
    w->chain[2].next = NULL;
    w->out = w->chain;

    ngx_add_timer(&w->timeout_ev, w->conf->timeout);

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, ngx_cycle->log, 0,
                   "idem otel: sending %ui spans, %uz bytes",
                   w->batch_spans, len);

    if (w->c != NULL) {

        /* the connection kept from the last batch */

        w->c->idle = 0;
        ngx_http_idem_otel_write_handler(w->c->write);
        return;
    }

    ngx_memzero(&w->pc, sizeof(ngx_peer_connection_t));

    w->pc.sockaddr = w->conf->addr->sockaddr;
    w->pc.socklen = w->conf->addr->socklen;
    w->pc.name = &w->conf->addr->name;
    w->pc.get = ngx_event_get_peer;
    w->pc.log = &w->log;
    w->pc.log_error = NGX_ERROR_INFO;

    rc = ngx_event_connect_peer(&w->pc);

    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
        if (w->pc.connection != NULL) {
            ngx_close_connection(w->pc.connection);
        }

        ngx_http_idem_otel_fail(w, "cannot connect", 0);
        return;
    }

    w->c = w->pc.connection;
    w->c->data = w;
    w->c->read->handler = ngx_http_idem_otel_read_handler;
    w->c->write->handler = ngx_http_idem_otel_write_handler;
    w->connected = (rc == NGX_OK);

    if (rc == NGX_AGAIN) {
        return;     /* connecting: the write event says when */
    }

    ngx_http_idem_otel_write_handler(w->c->write);
}


static void
ngx_http_idem_otel_write_handler(ngx_event_t *wev)
{
    int                           err;
    socklen_t                     len;
    ngx_chain_t                  *cl;
    ngx_connection_t             *c;
    ngx_http_idem_otel_worker_t  *w;

    c = wev->data;
    w = c->data;

    if (!w->busy) {
        return;
    }

    if (c->close) {
        ngx_http_idem_otel_closed(w);
        return;
    }

    if (!w->connected) {
        err = 0;
        len = sizeof(int);

        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, (void *) &err, &len)
            == -1)
        {
            err = ngx_socket_errno;
        }

        if (err) {
            ngx_http_idem_otel_fail(w, "cannot connect", err);
            return;
        }

        w->connected = 1;
    }

    cl = c->send_chain(c, w->out, 0);

    if (cl == NGX_CHAIN_ERROR) {
        ngx_http_idem_otel_fail(w, "cannot send", ngx_socket_errno);
        return;
    }

    w->out = cl;

    if (cl != NULL) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_idem_otel_fail(w, "cannot send", 0);
        }

        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, ngx_cycle->log, 0,
                   "idem otel: %ui spans sent, reading the answer",
                   w->batch_spans);

    if (c->read->ready) {
        ngx_http_idem_otel_read_handler(c->read);
        return;
    }

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        ngx_http_idem_otel_fail(w, "cannot read", 0);
    }
}


static void
ngx_http_idem_otel_read_handler(ngx_event_t *rev)
{
    u_char                        b[1];
    ssize_t                       n;
    ngx_int_t                     rc;
    ngx_uint_t                    keep;
    ngx_connection_t             *c;
    ngx_http_idem_otel_worker_t  *w;

    c = rev->data;
    w = c->data;

    if (!w->busy) {

        /* a kept connection: closed by the worker or the collector */

        if (!c->close) {
            n = c->recv(c, b, 1);

            if (n == NGX_AGAIN) {
                if (ngx_handle_read_event(rev, 0) == NGX_OK) {
                    return;
                }
            }
        }

        ngx_log_debug0(NGX_LOG_DEBUG_EVENT, ngx_cycle->log, 0,
                       "idem otel: kept connection closed");

        ngx_http_idem_otel_close(w);
        return;
    }

    if (c->close) {
        ngx_http_idem_otel_closed(w);
        return;
    }

    if (w->out != NULL) {
        return;     /* still sending */
    }

    for ( ;; ) {
        n = c->recv(c, w->response + w->response_len,
                    NGX_HTTP_IDEM_OTEL_RESPONSE - w->response_len);

        if (n == NGX_AGAIN) {
            if (ngx_handle_read_event(rev, 0) != NGX_OK) {
                ngx_http_idem_otel_fail(w, "cannot read", 0);
            }

            return;
        }

        if (n == NGX_ERROR) {
            ngx_http_idem_otel_fail(w, "cannot read the answer",
                                    ngx_socket_errno);
            return;
        }

        if (n > 0) {
            w->response_len += n;
        }

        rc = ngx_http_idem_otel_response(w, n == 0, &keep);

        if (rc == NGX_AGAIN) {
            if (n == 0) {
                ngx_http_idem_otel_fail(w, "the collector closed the "
                                        "connection", 0);
                return;
            }

            continue;
        }

        if (rc == NGX_ERROR) {
            return;     /* failed, said so */
        }

        if (!keep || n == 0 || ngx_exiting) {
            ngx_http_idem_otel_close(w);

        } else {
            c->idle = 1;
        }

        ngx_http_idem_otel_done(w, 1);

        if (w->c != NULL && !w->busy
            && ngx_handle_read_event(rev, 0) != NGX_OK)
        {
            ngx_http_idem_otel_close(w);
        }

        return;
    }
}


/*
 * The collector's answer so far: NGX_AGAIN while incomplete, NGX_OK for a
 * whole 2xx (keep: the connection may serve the next batch), NGX_ERROR
 * for anything else (the batch failed: said and counted here).
 */

static ngx_int_t
ngx_http_idem_otel_response(ngx_http_idem_otel_worker_t *w,
    ngx_uint_t closed, ngx_uint_t *keep)
{
    u_char      *p, *last, *eol, *body;
    off_t        length, n;
    ngx_str_t    line;
    ngx_uint_t   status, chunked, close, bad, connection;

    p = w->response;
    last = p + w->response_len;
    *keep = 0;

    if (w->response_len < 12) {
        goto again;
    }

    if (ngx_strncmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ') {
        goto invalid;
    }

    status = ngx_atoi(p + 9, 3);

    if (status == (ngx_uint_t) NGX_ERROR) {
        goto invalid;
    }

    /* the headers: Content-Length, chunked, Connection: close */

    length = -1;
    bad = 0;
    chunked = 0;
    close = 0;
    connection = 0;
    body = NULL;

    for ( ;; ) {

        /*
         * a bare LF ends a line too, a CR before it dropped: RFC 9112 2.2
         * lets a recipient accept it, as nginx's own parser does (the
         * chunked body below wants CRLF: one without is not kept)
         */

        eol = ngx_strlchr(p, last, '\n');

        if (eol == NULL) {
            goto again;
        }

        line.data = p;
        line.len = eol - p;

        if (line.len && line.data[line.len - 1] == '\r') {
            line.len--;
        }

        p = eol + 1;

        if (line.len == 0) {
            body = p;
            break;
        }

        /* an empty Content-Length is one too: invalid (1*DIGIT) */

        if (line.len >= 15
            && ngx_strncasecmp(line.data, (u_char *) "content-length:", 15)
               == 0)
        {
            line.data += 15;
            line.len -= 15;

            while (line.len && (line.data[0] == ' ' || line.data[0] == '\t'))
            {
                line.data++;
                line.len--;
            }

            while (line.len && (line.data[line.len - 1] == ' '
                                || line.data[line.len - 1] == '\t'))
            {
                line.len--;
            }

            /* not a number, or two that differ: no end known (RFC 9112) */

            n = ngx_atoof(line.data, line.len);

            if (n == NGX_ERROR || (length != -1 && n != length)) {
                bad = 1;

            } else {
                length = n;
            }

        } else if (line.len > 18
                   && ngx_strncasecmp(line.data,
                                      (u_char *) "transfer-encoding:", 18)
                      == 0)
        {
            if (ngx_strlcasestrn(line.data, line.data + line.len,
                                 (u_char *) "chunked", 7 - 1)
                != NULL)
            {
                chunked = 1;
            }

        } else if (line.len > 11
                   && ngx_strncasecmp(line.data, (u_char *) "connection:",
                                      11)
                      == 0)
        {
            /* any of several says close */

            connection = 1;

            if (ngx_strlcasestrn(line.data, line.data + line.len,
                                 (u_char *) "close", 5 - 1)
                != NULL)
            {
                close = 1;
            }
        }
    }

    /* HTTP/1.0: closed unless a Connection header says otherwise */

    if (w->response[7] == '0' && !connection) {
        close = 1;
    }

    if (status < 200 || status > 299) {

        /* its status line, for the warning */

        line.data = w->response;
        eol = ngx_strlchr(w->response, w->response + w->response_len, '\r');
        line.len = ngx_min((size_t) ((eol ? eol : last) - w->response), 128);

        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "idem otel: the collector at \"%V\" answered \"%V\": "
                      "%ui spans dropped", &w->conf->url, &line,
                      w->batch_spans);
        ngx_http_idem_otel_close(w);
        ngx_http_idem_otel_done(w, 0);
        return NGX_ERROR;
    }

    /* its body: read whole, or the connection is not kept */

    if (chunked) {

        /*
         * walked chunk by chunk: a chunk's data may end as the last chunk
         * does; a body that is not chunked after a 2xx: not kept
         */

        switch (ngx_http_idem_otel_chunked(body, last, &eol)) {

        case NGX_OK:
            *keep = !close && eol == last;
            return NGX_OK;

        case NGX_ERROR:
            return NGX_OK;

        default: /* NGX_AGAIN */
            break;
        }

    } else if (bad) {

        /* the batch is in, the connection not kept */

        return NGX_OK;

    } else if (length >= 0) {
        if (last - body >= length) {
            *keep = !close && (last - body == length);
            return NGX_OK;
        }

    } else if (status == 204 || closed) {
        /* a 204 has no body: bytes after it are no answer to keep */
        *keep = !close && status == 204 && body == last;
        return NGX_OK;
    }

    if (w->response_len == NGX_HTTP_IDEM_OTEL_RESPONSE) {

        /* a long body after a 2xx: the batch is in, the connection not kept */

        return NGX_OK;
    }

again:

    if (w->response_len == NGX_HTTP_IDEM_OTEL_RESPONSE) {
        goto invalid;
    }

    return NGX_AGAIN;

invalid:

    ngx_http_idem_otel_fail(w, "invalid answer", 0);
    return NGX_ERROR;
}


/*
 * A chunked body from p: NGX_OK when its last chunk and trailer fields
 * are in (*end: the byte after them), NGX_AGAIN while they are not,
 * NGX_ERROR when it is not chunked (RFC 9112, 7.1)
 */

static ngx_int_t
ngx_http_idem_otel_chunked(u_char *p, u_char *last, u_char **end)
{
    u_char      c, *eol;
    off_t       size;
    ngx_uint_t  digits;

    for ( ;; ) {
        size = 0;

        for (digits = 0; p < last; p++, digits++) {
            c = (u_char) (*p | 0x20);

            if (*p >= '0' && *p <= '9') {
                c = *p - '0';

            } else if (c >= 'a' && c <= 'f') {
                c = c - 'a' + 10;

            } else {
                break;
            }

            if (size > (NGX_MAX_OFF_T_VALUE - c) / 16) {
                return NGX_ERROR;
            }

            size = size * 16 + c;
        }

        if (p == last) {
            return NGX_AGAIN;
        }

        if (digits == 0) {
            return NGX_ERROR;
        }

        /* chunk extensions: skipped */

        if (*p == ';') {
            while (p < last && *p != '\r') {
                p++;
            }
        }

        if (last - p < 2) {
            return NGX_AGAIN;
        }

        if (p[0] != '\r' || p[1] != '\n') {
            return NGX_ERROR;
        }

        p += 2;

        if (size == 0) {
            break;
        }

        if (last - p < size + 2) {
            return NGX_AGAIN;
        }

        p += size;

        if (p[0] != '\r' || p[1] != '\n') {
            return NGX_ERROR;
        }

        p += 2;
    }

    /* the trailer fields, up to an empty line */

    for ( ;; ) {
        eol = ngx_strlchr(p, last, '\n');

        if (eol == NULL) {
            return NGX_AGAIN;
        }

        if (eol == p || eol[-1] != '\r') {
            return NGX_ERROR;
        }

        if (eol == p + 1) {
            *end = eol + 1;
            return NGX_OK;
        }

        p = eol + 1;
    }
}


static void
ngx_http_idem_otel_timeout_handler(ngx_event_t *ev)
{
    ngx_http_idem_otel_fail(ev->data, "timed out", 0);
}


static void
ngx_http_idem_otel_fail(ngx_http_idem_otel_worker_t *w, char *why,
    ngx_err_t err)
{
    ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, err,
                  "idem otel: export to \"%V\" failed (%s): %ui spans "
                  "dropped", &w->conf->url, why, w->batch_spans);

    ngx_http_idem_otel_close(w);
    ngx_http_idem_otel_done(w, 0);
}


/* a batch is over: counted; what queued meanwhile goes next */

static void
ngx_http_idem_otel_done(ngx_http_idem_otel_worker_t *w, ngx_uint_t ok)
{
    if (!w->busy) {
        return;
    }

    w->busy = 0;
    w->out = NULL;

    if (w->timeout_ev.timer_set) {
        ngx_del_timer(&w->timeout_ev);
    }

    ngx_http_idem_otel_count(ok, w->batch_spans);

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, ngx_cycle->log, 0,
                   "idem otel: batch of %ui spans %s", w->batch_spans,
                   ok ? "sent" : "dropped");

    w->batch_spans = 0;

    if (w->queued == 0) {

        /* an exiting worker keeps no connection */

        if (ngx_exiting && w->c != NULL) {
            ngx_http_idem_otel_close(w);
        }

        return;
    }

    /* the flush handler decides whether they go now */

    if (!w->flush_ev.posted) {
        ngx_post_event(&w->flush_ev, &ngx_posted_events);
    }
}


/*
 * The worker closed the connection under a batch: worker_shutdown_timeout
 * has come.  The batch and what is queued are dropped: nothing more is
 * sent by a worker told to be gone.
 */

static void
ngx_http_idem_otel_closed(ngx_http_idem_otel_worker_t *w)
{
    if (ngx_exiting && w->queued) {
        ngx_http_idem_otel_count(0, w->queued);
        w->queued = 0;
        w->pos = w->queue;

        if (w->flush_ev.timer_set) {
            ngx_del_timer(&w->flush_ev);
        }

        if (w->flush_ev.posted) {
            ngx_delete_posted_event(&w->flush_ev);
        }
    }

    ngx_http_idem_otel_fail(w, "the worker closed the connection", 0);
}


static void
ngx_http_idem_otel_close(ngx_http_idem_otel_worker_t *w)
{
    if (w->c == NULL) {
        return;
    }

    ngx_close_connection(w->c);
    w->c = NULL;
    w->connected = 0;
}


static void
ngx_http_idem_otel_count(ngx_uint_t sent, ngx_uint_t n)
{
    ngx_http_idem_counters_t  *counters;

    counters = ngx_http_idem_counters();

    if (counters == NULL) {
        return;
    }

    if (sent) {
        (void) ngx_atomic_fetch_add(&counters->otel_spans_sent, n);

    } else {
        (void) ngx_atomic_fetch_add(&counters->otel_spans_dropped, n);
    }
}
