
/*
 * A record read back, as JSON: the status endpoint's answer and the
 * "record" of a 409.  The record is parsed by record_parse.c; nothing here
 * knows a field's name in the store.
 */


#include "ngx_http_idem_record_json.h"
#include "ngx_http_idem_record_parse.h"
#include "ngx_http_idem_json.h"


static u_char *ngx_http_idem_json_string(u_char *p, char *name,
    ngx_str_t *value);
static u_char *ngx_http_idem_json_number(u_char *p, char *name,
    ngx_str_t *value);
static u_char *ngx_http_idem_json_resolved(u_char *p,
    ngx_http_idem_record_exec_t *e);


/*
 * {"call_id", "trace_id", "state", "source", "node", "method", "uri",
 *  "created_ms", "updated_ms", "final_status", ["receipt",]
 *  ["resolved": {"execution", "outcome", "at_ms", "receipt", "by"
 *                [, "overridden": true]},]
 *  "executions",
 *  "attempts": [{"execution", "n", "start_ms", "duration_ms", "outcome",
 *                "sent", "status", "span_id"[, "receipt"]}]}
 *
 * "receipt": the service's (idem_receipt_header), on the attempt whose
 * answer carried it, and at the top the newest execution's; only where
 * there is one.  "resolved": the service's word on the newest execution
 * it resolved (POST to the status endpoint), where there is one;
 * "overridden" where that execution's final write came after it (its
 * state is the final write's).
 *
 * Executions are numbered in the order they arrived, those a trim
 * summarised included; "executions" counts them all.  The attempts shown
 * are those of the newest idem_record_max_executions executions: a record
 * written before the cap existed may hold many more.  NGX_DECLINED: no
 * execution.
 */

ngx_int_t
ngx_http_idem_record_json(ngx_http_request_t *r, ngx_str_t *id,
    uint64_t now, ngx_str_t *elts, ngx_uint_t n, ngx_str_t *out)
{
    u_char                          *p;
    size_t                           len;
    ngx_int_t                        rc;
    ngx_str_t                        none, *parts;
    ngx_uint_t                       i, j, k, from, shown;
    ngx_http_idem_record_t           rec;
    ngx_http_idem_main_conf_t       *imcf;
    ngx_http_idem_record_attempt_t  *a;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    rc = ngx_http_idem_record_parse(r->pool, elts, n, now, &rec);
    if (rc != NGX_OK) {
        return rc;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: \"%V\": %ui executions, %ui kept, "
                   "%ui attempts", id, rec.executions, rec.nexecs,
                   rec.nattempts);

    /* the index of the first execution whose attempts are shown */

    from = (rec.nexecs > imcf->record_max_executions)
           ? rec.execs[rec.nexecs - imcf->record_max_executions]->index : 0;

    len = sizeof("{\"call_id\":\"\",\"trace_id\":\"\",\"state\":\"\","
                 "\"source\":\"\",\"node\":\"\",\"method\":\"\",\"uri\":\"\","
                 "\"created_ms\":,\"updated_ms\":,\"final_status\":null,"
                 "\"executions\":,\"attempts\":[]}\n")
          + 6 * (id->len + rec.state.len + rec.final_status.len)
          + 3 * NGX_INT64_LEN
          + sizeof(",\"receipt\":\"\"") + 6 * rec.receipt.len;

    if (rec.resolved != NULL) {
        len += sizeof(",\"resolved\":{\"execution\":,\"outcome\":\"\","
                      "\"at_ms\":,\"receipt\":\"\",\"by\":\"\","
                      "\"forced\":true,\"overridden\":true}")
               + NGX_INT_T_LEN;

        for (i = 0; i < 4; i++) {
            len += 6 * rec.resolved->resolved[i].len;
        }
    }

    for (i = 0; i < 6; i++) {
        len += 6 * rec.info[i].len;
    }

    shown = 0;
    a = rec.attempts;

    for (i = 0; i < rec.nattempts; i++) {
        if (a[i].exec->index >= from) {
            for (k = 0; k < a[i].nparts; k++) {
                len += 6 * a[i].parts[k].len;
            }

            /* numbers: their digits, or a "null" for an empty one */

            len += 2 * NGX_INT_T_LEN + 4 * (sizeof("null") - 1)
                   + sizeof(",{\"execution\":,\"n\":,\"start_ms\":,"
                            "\"duration_ms\":,\"outcome\":\"\","
                            "\"sent\":false,\"status\":,"
                            "\"span_id\":\"\",\"no_retry\":\"\","
                            "\"grpc_status\":,\"receipt\":\"\"}")
                   + 6 * a[i].exec->receipt.len;
            shown++;
        }
    }

    out->data = ngx_pnalloc(r->pool, len);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    ngx_str_null(&none);

    p = ngx_http_idem_json_string(out->data, "{\"call_id", id);
    p = ngx_http_idem_json_string(p, ",\"trace_id", &rec.info[4]);
    p = ngx_http_idem_json_string(p, ",\"state", &rec.state);
    p = ngx_http_idem_json_string(p, ",\"source", &rec.info[1]);
    p = ngx_http_idem_json_string(p, ",\"node", &rec.info[2]);
    p = ngx_http_idem_json_string(p, ",\"method", &rec.info[3]);
    p = ngx_http_idem_json_string(p, ",\"uri", &rec.info[5]);
    p = ngx_sprintf(p, ",\"created_ms\":%uL,\"updated_ms\":%uL",
                    rec.created_ms, rec.updated_ms);
    p = ngx_http_idem_json_number(p, ",\"final_status",
                                  rec.final_status.len ? &rec.final_status
                                                       : NULL);

    if (rec.receipt.len) {
        p = ngx_http_idem_json_string(p, ",\"receipt", &rec.receipt);
    }

    if (rec.resolved != NULL) {
        p = ngx_http_idem_json_resolved(p, rec.resolved);
    }

    p = ngx_sprintf(p, ",\"executions\":%ui,\"attempts\":[", rec.executions);

    for (i = 0, j = 0; i < rec.nattempts; i++) {

        if (a[i].exec->index < from) {
            continue;
        }

        parts = a[i].parts;

        p = ngx_sprintf(p, "%s{\"execution\":%ui,\"n\":%ui",
                        j++ ? "," : "", a[i].exec->index, a[i].n);
        p = ngx_http_idem_json_number(p, ",\"start_ms", &parts[0]);
        p = ngx_http_idem_json_number(p, ",\"duration_ms", &parts[1]);
        p = ngx_http_idem_json_string(p, ",\"outcome", &parts[2]);
        p = ngx_sprintf(p, ",\"sent\":%s",
                        parts[3].len == 1 && parts[3].data[0] == '1'
                        ? "true" : "false");
        p = ngx_http_idem_json_number(p, ",\"status",
                                      parts[4].len == 1
                                      && parts[4].data[0] == '0'
                                      ? NULL : &parts[4]);
        p = ngx_http_idem_json_string(p, ",\"span_id",
                                      parts[5].len == 1
                                      && parts[5].data[0] == '-'
                                      ? &none : &parts[5]);

        /* why no retry followed (storm.c), a gRPC upstream's status */

        if (a[i].nparts > 6
            && !(parts[6].len == 1 && parts[6].data[0] == '-'))
        {
            p = ngx_http_idem_json_string(p, ",\"no_retry", &parts[6]);
        }

        if (a[i].nparts > 7) {
            p = ngx_http_idem_json_number(p, ",\"grpc_status", &parts[7]);
        }

        if (a[i].exec->receipt.len && a[i].exec->receipt_n == a[i].n) {
            p = ngx_http_idem_json_string(p, ",\"receipt",
                                          &a[i].exec->receipt);
        }

        *p++ = '}';
    }

    p = ngx_cpymem(p, "]}\n", 3);

    out->len = p - out->data;

    if (out->len > len || j != shown) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "idem: status buffer overrun");
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* ,"resolved":{"execution","outcome","at_ms","receipt","by"} */

static u_char *
ngx_http_idem_json_resolved(u_char *p, ngx_http_idem_record_exec_t *e)
{
    ngx_uint_t  i;
    ngx_str_t  *v;

    p = ngx_sprintf(p, ",\"resolved\":{\"execution\":%ui", e->index);
    p = ngx_http_idem_json_string(p, ",\"outcome", &e->resolved[0]);
    p = ngx_http_idem_json_number(p, ",\"at_ms", &e->resolved[1]);

    for (i = 2; i < 4; i++) {
        v = &e->resolved[i];

        p = ngx_http_idem_json_string(p, (i == 2) ? ",\"receipt" : ",\"by",
                                      (v->len == 1 && v->data[0] == '-')
                                      ? NULL : v);
    }

    /* an operator's word that the owner's gateway was gone */

    if (e->forced) {
        p = ngx_cpymem(p, ",\"forced\":true", sizeof(",\"forced\":true") - 1);
    }

    /* the owner's final write came after it: the state is that write's */

    if (e->overridden) {
        p = ngx_cpymem(p, ",\"overridden\":true",
                       sizeof(",\"overridden\":true") - 1);
    }

    *p++ = '}';

    return p;
}


/* "name" starts with the separator, "{" or ",", and the opening quote */

static u_char *
ngx_http_idem_json_string(u_char *p, char *name, ngx_str_t *value)
{
    p = ngx_sprintf(p, "%s\":", name);

    if (value == NULL) {
        return ngx_cpymem(p, "null", 4);
    }

    *p++ = '"';
    p = ngx_http_idem_json_escape(p, value->data, value->len);
    *p++ = '"';

    return p;
}


static u_char *
ngx_http_idem_json_number(u_char *p, char *name, ngx_str_t *value)
{
    ngx_uint_t  i;

    p = ngx_sprintf(p, "%s\":", name);

    /* JSON has no leading zeros: "007" from a damaged record is no number */

    if (value == NULL || value->len == 0
        || (value->len > 1 && value->data[0] == '0'))
    {
        return ngx_cpymem(p, "null", 4);
    }

    for (i = 0; i < value->len; i++) {
        if (value->data[i] < '0' || value->data[i] > '9') {
            return ngx_cpymem(p, "null", 4);
        }
    }

    return ngx_cpymem(p, value->data, value->len);
}
