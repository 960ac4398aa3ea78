
/*
 * OTLP/JSON: an ExportTraceServiceRequest written piece by piece (the
 * protobuf JSON mapping, with OTLP's hex trace and span ids).
 */


#ifndef _NGX_HTTP_IDEM_OTEL_JSON_H_INCLUDED_
#define _NGX_HTTP_IDEM_OTEL_JSON_H_INCLUDED_


#include "ngx_http_idem_common.h"


/* SpanKind and Status.StatusCode, as the protobuf enums number them */
#define NGX_HTTP_IDEM_OTEL_KIND_SERVER   2
#define NGX_HTTP_IDEM_OTEL_KIND_CLIENT   3
#define NGX_HTTP_IDEM_OTEL_STATUS_UNSET  0
#define NGX_HTTP_IDEM_OTEL_STATUS_ERROR  2

/* a span's fixed part, its attributes' keys and numbers aside */
#define NGX_HTTP_IDEM_OTEL_SPAN_LEN      512
/* one attribute's fixed part, its key and value aside */
#define NGX_HTTP_IDEM_OTEL_ATTR_LEN      64


typedef struct {
    u_char                   *trace_id;     /* 32 hex */
    u_char                   *span_id;      /* 16 hex */
    u_char                   *parent;       /* 16 hex, NULL: a root */
    ngx_str_t                 name;
    ngx_str_t                 name2;        /* appended after a space */
    ngx_uint_t                kind;
    uint64_t                  start_ms;     /* unix */
    uint64_t                  end_ms;
} ngx_http_idem_otel_span_t;


size_t ngx_http_idem_otel_json_len(ngx_str_t *s);
size_t ngx_http_idem_otel_json_head_len(ngx_str_t *service);
u_char *ngx_http_idem_otel_json_head(u_char *p, ngx_str_t *service);
u_char *ngx_http_idem_otel_json_tail(u_char *p);
u_char *ngx_http_idem_otel_json_span(u_char *p,
    ngx_http_idem_otel_span_t *span);
u_char *ngx_http_idem_otel_json_str(u_char *p, char *key, ngx_str_t *value);
u_char *ngx_http_idem_otel_json_int(u_char *p, char *key, int64_t value);
u_char *ngx_http_idem_otel_json_bool(u_char *p, char *key, ngx_uint_t value);
u_char *ngx_http_idem_otel_json_span_end(u_char *p, ngx_uint_t status);


#endif /* _NGX_HTTP_IDEM_OTEL_JSON_H_INCLUDED_ */
