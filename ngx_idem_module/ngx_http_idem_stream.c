
/*
 * The compensation stream (idem_unknown_stream): every execution that ends
 * UNKNOWN on a route with records is appended to a Redis stream, so that a
 * job follows it up (asks for the receipt again, reverses, or hands it to
 * a person) instead of the call waiting in its record until someone asks.
 *
 * The entry is appended right behind the record's final write (the log
 * phase, handler.c), on the same connection, so that a consumer that
 * reads the record finds the final write there.
 * Nothing else is appended: SUCCESS and FAILED-not-sent are definite.  A
 * store that is down loses the entry as it loses the final write; it is
 * counted, never waited for.
 *
 * The stream <prefix><NAME>, kept near maxlen entries; an entry's fields:
 *   call_id <id> trace_id <id> key <record key> token <execution token>
 *   method <method> uri <path> node <node> attempts <n>
 *   last_outcome <outcome|-> last_sent <0|1> final_status <status>
 *   created_ms <ms> ended_ms <ms> [receipt <the service's receipt>]
 *
 * (receipt: where idem_receipt_header found one in an answer that then
 * did not end the call, e.g. a body cut short).
 */


#include "ngx_http_idem_stream.h"
#include "ngx_http_idem_call_id.h"
#include "ngx_http_idem_metrics.h"
#include "ngx_http_idem_record.h"
#include "ngx_http_idem_store.h"
#include "ngx_http_idem_util.h"


/* 13 field/value pairs, and a receipt */
#define NGX_HTTP_IDEM_STREAM_FIELDS      (2 * 14)


static void ngx_http_idem_stream_added(void *data, ngx_int_t rc);
static ngx_int_t ngx_http_idem_stream_named(ngx_conf_t *cf, ngx_str_t *name);


/* idem_unknown_stream NAME [maxlen=N] | off */

char *
ngx_http_idem_unknown_stream(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;

    if (ilcf->unknown_stream_maxlen != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        if (cf->args->nelts != 2) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\" in \"%V\" directive",
                               &value[2], &cmd->name);
            return NGX_CONF_ERROR;
        }

        ngx_str_set(&ilcf->unknown_stream, "");
        ilcf->unknown_stream_maxlen = 0;

        return NGX_CONF_OK;
    }

    /* a name like the key prefix's: no spaces, nothing to quote */

    if (ngx_http_idem_check_charset(&value[1]) != NGX_OK
        || value[1].len > NGX_HTTP_IDEM_MAX_ID_LEN)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "a stream name takes A-Z a-z 0-9 - . _ ~ :",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    ilcf->unknown_stream = value[1];
    ilcf->unknown_stream_maxlen = NGX_HTTP_IDEM_STREAM_MAXLEN;

    if (ngx_http_idem_stream_named(cf, &value[1]) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (cf->args->nelts == 2) {
        return NGX_CONF_OK;
    }

    if (ngx_strncmp(value[2].data, "maxlen=", 7) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\" in \"%V\" directive",
                           &value[2], &cmd->name);
        return NGX_CONF_ERROR;
    }

    n = ngx_atoi(value[2].data + 7, value[2].len - 7);

    if (n < 1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "maxlen must be a number from 1", &value[2],
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    ilcf->unknown_stream_maxlen = n;

    return NGX_CONF_OK;
}


/* every stream the configuration names, once: idem_metrics counts them */

static ngx_int_t
ngx_http_idem_stream_named(ngx_conf_t *cf, ngx_str_t *name)
{
    ngx_str_t                  *s;
    ngx_uint_t                  i;
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);

    if (imcf->unknown_streams == NULL) {
        imcf->unknown_streams = ngx_array_create(cf->pool, 2,
                                                 sizeof(ngx_str_t));
        if (imcf->unknown_streams == NULL) {
            return NGX_ERROR;
        }
    }

    s = imcf->unknown_streams->elts;

    for (i = 0; i < imcf->unknown_streams->nelts; i++) {
        if (s[i].len == name->len
            && ngx_strncmp(s[i].data, name->data, name->len) == 0)
        {
            return NGX_OK;
        }
    }

    s = ngx_array_push(imcf->unknown_streams);
    if (s == NULL) {
        return NGX_ERROR;
    }

    *s = *name;

    return NGX_OK;
}


/*
 * Called once per execution, at its final write; ok: that write was
 * queued.  Appends the execution to the location's stream when it ended
 * UNKNOWN.
 */

void
ngx_http_idem_stream_final(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_uint_t state, ngx_uint_t ok)
{
    u_char                       *p, *last, *q;
    size_t                        len;
    ngx_str_t                     argv[NGX_HTTP_IDEM_STREAM_FIELDS], uri;
    ngx_str_t                    *outcome;
    ngx_uint_t                    i, status, nattempts;
    ngx_http_idem_attempt_t      *a;
    ngx_http_idem_loc_conf_t     *ilcf;
    ngx_http_idem_main_conf_t    *imcf;
    ngx_http_idem_store_entry_t   entry;

    if (state != NGX_HTTP_IDEM_UNKNOWN) {
        return;
    }

    /* the location whose policy the call follows, as for retries */

    ilcf = ctx->conf ? ctx->conf
                     : ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (ilcf->unknown_stream.len == 0) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem stream: \"%V\" UNKNOWN, no stream here",
                       &ctx->ids.call_id);
        return;
    }

    if (!ok) {
        /* lost with the final write, counted as a record drop there */
        ngx_http_idem_count(unknown_stream_drops);

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem stream: \"%V\" not appended: store down",
                       &ctx->ids.call_id);
        return;
    }

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    /* the path only, as in the record: a query string may hold secrets */

    uri = r->unparsed_uri;

    q = ngx_strlchr(uri.data, uri.data + uri.len, '?');
    if (q != NULL) {
        uri.len = q - uri.data;
    }

    nattempts = ctx->record.attempts ? ctx->record.attempts->nelts : 0;
    a = nattempts ? (ngx_http_idem_attempt_t *) ctx->record.attempts->elts
                    + nattempts - 1
                  : NULL;

    status = r->err_status ? r->err_status : r->headers_out.status;

    len = imcf->key_prefix.len + ilcf->unknown_stream.len
          + 5 * NGX_INT64_LEN + sizeof("http_999") + 2 * NGX_INT_T_LEN;

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        ngx_http_idem_count(unknown_stream_drops);
        return;
    }

    last = p + len;

    entry.stream.data = p;
    p = ngx_cpymem(p, imcf->key_prefix.data, imcf->key_prefix.len);
    p = ngx_cpymem(p, ilcf->unknown_stream.data, ilcf->unknown_stream.len);
    entry.stream.len = p - entry.stream.data;
    entry.maxlen = ilcf->unknown_stream_maxlen;

    i = 0;

    ngx_str_set(&argv[i], "call_id");
    argv[i + 1] = ctx->ids.call_id;
    i += 2;

    ngx_str_set(&argv[i], "trace_id");
    argv[i + 1] = ctx->ids.trace_id;
    i += 2;

    /* the record, scope included, without the scope's value */

    ngx_str_set(&argv[i], "key");
    argv[i + 1] = ctx->record.key;
    i += 2;

    ngx_str_set(&argv[i], "token");
    argv[i + 1] = ctx->record.token;
    i += 2;

    ngx_str_set(&argv[i], "method");
    argv[i + 1] = r->method_name;
    i += 2;

    ngx_str_set(&argv[i], "uri");
    argv[i + 1] = uri;
    i += 2;

    ngx_str_set(&argv[i], "node");
    argv[i + 1] = imcf->node_id;
    i += 2;

    ngx_str_set(&argv[i], "attempts");
    argv[i + 1].data = p;
    p = ngx_sprintf(p, "%ui", nattempts);
    argv[i + 1].len = p - argv[i + 1].data;
    i += 2;

    ngx_str_set(&argv[i], "last_outcome");
    argv[i + 1].data = p;

    if (a == NULL) {
        *p++ = '-';

    } else if (a->outcome == NGX_HTTP_IDEM_OUTCOME_HTTP) {
        p = ngx_sprintf(p, "http_%03ui", a->status);

    } else {
        outcome = ngx_http_idem_outcome_name(r, a);
        p = ngx_cpymem(p, outcome->data, outcome->len);
    }

    argv[i + 1].len = p - argv[i + 1].data;
    i += 2;

    ngx_str_set(&argv[i], "last_sent");

    if (a != NULL && a->sent) {
        ngx_str_set(&argv[i + 1], "1");

    } else {
        ngx_str_set(&argv[i + 1], "0");
    }

    i += 2;

    ngx_str_set(&argv[i], "final_status");
    argv[i + 1].data = p;
    p = ngx_sprintf(p, "%ui", status);
    argv[i + 1].len = p - argv[i + 1].data;
    i += 2;

    ngx_str_set(&argv[i], "created_ms");
    argv[i + 1].data = p;
    p = ngx_sprintf(p, "%uL", ctx->record.created_ms);
    argv[i + 1].len = p - argv[i + 1].data;
    i += 2;

    /* the final write's time: the event loop's clock has not moved */

    ngx_str_set(&argv[i], "ended_ms");
    argv[i + 1].data = p;
    p = ngx_sprintf(p, "%uL", ngx_http_idem_unix_ms());
    argv[i + 1].len = p - argv[i + 1].data;
    i += 2;

    if (ctx->record.receipt.len) {
        ngx_str_set(&argv[i], "receipt");
        argv[i + 1] = ctx->record.receipt;
        i += 2;
    }

    if (p > last || i > NGX_HTTP_IDEM_STREAM_FIELDS) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "idem: stream buffer overrun");
        return;
    }

    entry.fields = argv;
    entry.nfields = i;

    if (ngx_http_idem_store_append(&entry, ngx_http_idem_stream_added, NULL)
        != NGX_OK)
    {
        ngx_http_idem_count(unknown_stream_drops);

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem stream: \"%V\" not appended: store full",
                       &ctx->ids.call_id);
        return;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem stream: \"%V\" UNKNOWN appended to \"%V\", "
                   "%ui attempts", &ctx->ids.call_id, &entry.stream, nattempts);
}


/* the store did not take it (it logs why): lost, counted */

static void
ngx_http_idem_stream_added(void *data, ngx_int_t rc)
{
    if (rc != NGX_OK) {
        ngx_http_idem_count(unknown_stream_drops);
    }
}
