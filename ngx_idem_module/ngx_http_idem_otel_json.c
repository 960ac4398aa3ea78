
/*
 * OTLP/JSON encoding of the module's spans (docs/tracing.md, "Exporting
 * spans"): the protobuf JSON mapping of ExportTraceServiceRequest, with
 * the two departures OTLP makes from it: trace and span ids are hex, not
 * base64, and enums are integers.  64-bit integers are strings.
 *
 *     {"resourceSpans":[{"resource":{"attributes":[service.name]},
 *      "scopeSpans":[{"scope":{"name":"ngx_idem_module"},
 *      "spans":[ SPAN, SPAN ... ]}]}]}
 *
 * A span is written in three steps: its fixed fields and the opening of
 * its attributes, the attributes, then the end of the list and its
 * status.  The caller makes room for it first.
 */


#include "ngx_http_idem_otel_json.h"
#include "ngx_http_idem_json.h"


static u_char *ngx_http_idem_otel_json_key(u_char *p, char *key);


static char  ngx_http_idem_otel_json_tail_s[] = "]}]}]}";


/*
 * A string as JSON writes it, quotes aside: a path or a Host the client
 * sent may hold any bytes, and one that is not UTF-8 would have a strict
 * collector refuse the whole batch (json.c replaces it)
 */

size_t
ngx_http_idem_otel_json_len(ngx_str_t *s)
{
    return ngx_http_idem_json_escape_len(s->data, s->len);
}


size_t
ngx_http_idem_otel_json_head_len(ngx_str_t *service)
{
    return sizeof("{\"resourceSpans\":[{\"resource\":{\"attributes\":[")
           + NGX_HTTP_IDEM_OTEL_ATTR_LEN + sizeof("service.name")
           + ngx_http_idem_otel_json_len(service)
           + sizeof("]},\"scopeSpans\":[{\"scope\":{\"name\":"
                    "\"ngx_idem_module\"},\"spans\":[");
}


u_char *
ngx_http_idem_otel_json_head(u_char *p, ngx_str_t *service)
{
    p = ngx_cpymem(p, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[",
                   sizeof("{\"resourceSpans\":[{\"resource\":{\"attributes\""
                          ":[") - 1);
    p = ngx_http_idem_otel_json_str(p, "service.name", service);

    return ngx_cpymem(p, "]},\"scopeSpans\":[{\"scope\":{\"name\":"
                         "\"ngx_idem_module\"},\"spans\":[",
                      sizeof("]},\"scopeSpans\":[{\"scope\":{\"name\":"
                             "\"ngx_idem_module\"},\"spans\":[") - 1);
}


u_char *
ngx_http_idem_otel_json_tail(u_char *p)
{
    return ngx_cpymem(p, ngx_http_idem_otel_json_tail_s,
                      sizeof(ngx_http_idem_otel_json_tail_s) - 1);
}


/*
 * The span's fixed part, up to its open list of attributes: they follow,
 * each with a comma before it but the first (one that follows "[").
 */

u_char *
ngx_http_idem_otel_json_span(u_char *p, ngx_http_idem_otel_span_t *span)
{
    ngx_str_t  s;

    p = ngx_cpymem(p, "{\"traceId\":\"", sizeof("{\"traceId\":\"") - 1);
    p = ngx_cpymem(p, span->trace_id, NGX_HTTP_IDEM_TRACE_ID_LEN);
    p = ngx_cpymem(p, "\",\"spanId\":\"", sizeof("\",\"spanId\":\"") - 1);
    p = ngx_cpymem(p, span->span_id, NGX_HTTP_IDEM_SPAN_ID_LEN);

    if (span->parent != NULL) {
        p = ngx_cpymem(p, "\",\"parentSpanId\":\"",
                       sizeof("\",\"parentSpanId\":\"") - 1);
        p = ngx_cpymem(p, span->parent, NGX_HTTP_IDEM_SPAN_ID_LEN);
    }

    p = ngx_cpymem(p, "\",\"name\":\"", sizeof("\",\"name\":\"") - 1);
    s = span->name;
    p = ngx_http_idem_json_escape(p, s.data, s.len);

    if (span->name2.len) {
        *p++ = ' ';
        s = span->name2;
        p = ngx_http_idem_json_escape(p, s.data, s.len);
    }

    /* nanoseconds since the epoch, as a string (int64 in JSON) */

    p = ngx_sprintf(p, "\",\"kind\":%ui,\"startTimeUnixNano\":\"%uL000000\","
                    "\"endTimeUnixNano\":\"%uL000000\",\"attributes\":[",
                    span->kind, span->start_ms, span->end_ms);

    return p;
}


static u_char *
ngx_http_idem_otel_json_key(u_char *p, char *key)
{
    /* a comma before every attribute but a list's first */

    if (p[-1] != '[') {
        *p++ = ',';
    }

    p = ngx_cpymem(p, "{\"key\":\"", sizeof("{\"key\":\"") - 1);
    p = ngx_cpymem(p, key, ngx_strlen(key));

    return ngx_cpymem(p, "\",\"value\":{", sizeof("\",\"value\":{") - 1);
}


u_char *
ngx_http_idem_otel_json_str(u_char *p, char *key, ngx_str_t *value)
{
    p = ngx_http_idem_otel_json_key(p, key);
    p = ngx_cpymem(p, "\"stringValue\":\"", sizeof("\"stringValue\":\"") - 1);
    p = ngx_http_idem_json_escape(p, value->data, value->len);

    return ngx_cpymem(p, "\"}}", 3);
}


u_char *
ngx_http_idem_otel_json_int(u_char *p, char *key, int64_t value)
{
    p = ngx_http_idem_otel_json_key(p, key);

    return ngx_sprintf(p, "\"intValue\":\"%L\"}}", value);
}


u_char *
ngx_http_idem_otel_json_bool(u_char *p, char *key, ngx_uint_t value)
{
    p = ngx_http_idem_otel_json_key(p, key);

    return value ? ngx_cpymem(p, "\"boolValue\":true}}", 18)
                 : ngx_cpymem(p, "\"boolValue\":false}}", 19);
}


u_char *
ngx_http_idem_otel_json_span_end(u_char *p, ngx_uint_t status)
{
    if (status == NGX_HTTP_IDEM_OTEL_STATUS_UNSET) {
        return ngx_cpymem(p, "]}", 2);
    }

    return ngx_sprintf(p, "],\"status\":{\"code\":%ui}}", status);
}
