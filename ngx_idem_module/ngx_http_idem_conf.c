
/*
 * The module's configuration: the main, server and location levels
 * created with their "unset" values, and merged with nginx's defaults
 * (ngx_conf_merge_*); a location's checks are in _directive.c.
 */


#include "ngx_http_idem_conf.h"
#include "ngx_http_idem_call_id.h"
#include "ngx_http_idem_call_id_source.h"
#include "ngx_http_idem_directive.h"
#include "ngx_http_idem_headers.h"
#include "ngx_http_idem_otel.h"
#include "ngx_http_idem_record_parse.h"
#include "ngx_http_idem_storm.h"


void *
ngx_http_idem_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_idem_main_conf_t));
    if (imcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     imcf->node_id = { 0, NULL };
     *     imcf->source_header = { ... };
     *     imcf->attempt_header = { ... };
     *     imcf->traceparent_header = { ... };
     *     imcf->tracestate_header = { ... };
     *     imcf->store = { ... };
     *     imcf->used = 0;
     *     imcf->metrics_zone = NULL;
     */

    imcf->record_ttl = NGX_CONF_UNSET_MSEC;
    imcf->record_max_executions = NGX_CONF_UNSET_UINT;
    imcf->record_short = NGX_CONF_UNSET;
    imcf->dedupe_wait_max = NGX_CONF_UNSET_UINT;

    ngx_http_idem_otel_create_conf(&imcf->otel);

    return imcf;
}


char *
ngx_http_idem_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_idem_main_conf_t *imcf = conf;

    size_t      i, len;
    u_char     *p;
    ngx_str_t   name;

    if (imcf->node_id.data == NULL) {

        /* the host name, mapped into the call id charset */

        len = ngx_min(cf->cycle->hostname.len, 64);

        p = ngx_pnalloc(cf->pool, len ? len : 1);
        if (p == NULL) {
            return NGX_CONF_ERROR;
        }

        for (i = 0; i < len; i++) {
            p[i] = cf->cycle->hostname.data[i];
            name.data = &p[i];
            name.len = 1;

            if (ngx_http_idem_check_charset(&name) != NGX_OK) {
                p[i] = '-';
            }
        }

        if (len == 0) {
            p[0] = 'n';
            len = 1;
        }

        imcf->node_id.data = p;
        imcf->node_id.len = len;
    }

    ngx_str_set(&name, "X-Call-Id-Source");
    if (ngx_http_idem_header_init(cf->pool, &imcf->source_header, &name)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_str_set(&name, "X-Call-Attempt");
    if (ngx_http_idem_header_init(cf->pool, &imcf->attempt_header, &name)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_str_set(&name, "grpc-timeout");
    ngx_conf_init_msec_value(imcf->record_ttl, 24 * 60 * 60 * 1000);
    ngx_conf_init_uint_value(imcf->record_max_executions,
                             NGX_HTTP_IDEM_RECORD_MAX_EXECUTIONS);
    ngx_conf_init_value(imcf->record_short, 1);
    ngx_conf_init_uint_value(imcf->dedupe_wait_max,
                             NGX_HTTP_IDEM_DEDUPE_WAIT_MAX);

    if (imcf->key_prefix.data == NULL) {
        ngx_str_set(&imcf->key_prefix, "idem:");
    }

    if (ngx_http_idem_header_init(cf->pool, &imcf->grpc_timeout_header,
                                  &name)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_str_set(&name, "traceparent");
    if (ngx_http_idem_header_init(cf->pool, &imcf->traceparent_header, &name)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_str_set(&name, "tracestate");
    if (ngx_http_idem_header_init(cf->pool, &imcf->tracestate_header, &name)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return ngx_http_idem_otel_init_conf(cf, imcf);
}


void *
ngx_http_idem_create_srv_conf(ngx_conf_t *cf)
{
    ngx_http_idem_srv_conf_t  *iscf;

    iscf = ngx_pcalloc(cf->pool, sizeof(ngx_http_idem_srv_conf_t));
    if (iscf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     iscf->original_init = NULL;
     */

    return iscf;
}


void *
ngx_http_idem_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_idem_loc_conf_t));
    if (ilcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     ilcf->call_id_header = { { 0, NULL }, NULL, 0 };
     *     ilcf->trace_id_header = { { 0, NULL }, NULL, 0 };
     *     ilcf->call_id_prefix = { 0, NULL };
     *     ilcf->call_id_pattern_src = { 0, NULL };
     *     ilcf->deadline_header = { { 0, NULL }, NULL, 0 };
     *     ilcf->status_id = NULL;
     *     ilcf->status_url = { 0, NULL };
     *     ilcf->dedupe_scope = NULL;
     *     ilcf->unknown_stream = { 0, NULL };
     *     ilcf->receipt_header = { { 0, NULL }, NULL, 0 };
     *     ilcf->dedupe_expires_header = { { 0, NULL }, NULL, 0 };
     *     ilcf->dedupe_durable_timeout = 0;
     *     ilcf->dedupe_replay_grpc = 0;
     *     ilcf->variable_upstream_logged = 0;
     */

    ilcf->enable = NGX_CONF_UNSET;
    ilcf->call_id_missing = NGX_CONF_UNSET_UINT;
    ilcf->call_id_generator = NGX_CONF_UNSET_UINT;
    ilcf->call_id_form = NGX_CONF_UNSET_UINT;
    ilcf->call_id_max_length = NGX_CONF_UNSET_UINT;

#if (NGX_PCRE)
    ilcf->call_id_pattern = NGX_CONF_UNSET_PTR;
#endif

    ilcf->call_id_from = NGX_CONF_UNSET_PTR;
    ilcf->call_id_json = NGX_CONF_UNSET_PTR;
    ilcf->otel_sample = NGX_CONF_UNSET_UINT;

    ilcf->deadline = NGX_CONF_UNSET_MSEC;
    ilcf->idempotent = NGX_CONF_UNSET;
    ilcf->retry_unsent = NGX_CONF_UNSET;
    ilcf->retry_attempts = NGX_CONF_UNSET_UINT;
    ilcf->retry_backoff = NGX_CONF_UNSET_MSEC;
    ilcf->retry_max_backoff = NGX_CONF_UNSET_MSEC;
    ilcf->retry_per_try_timeout = NGX_CONF_UNSET_MSEC;
    ilcf->retry_on = NGX_CONF_UNSET_UINT;
    ilcf->record = NGX_CONF_UNSET;
    ilcf->record_arrival_delay = NGX_CONF_UNSET_MSEC;
    ilcf->unknown_stream_maxlen = NGX_CONF_UNSET_UINT;
    ilcf->dedupe = NGX_CONF_UNSET;
    ilcf->dedupe_scope_set = NGX_CONF_UNSET;
    ilcf->dedupe_fingerprint_body = NGX_CONF_UNSET;
    ilcf->dedupe_store_max = NGX_CONF_UNSET_SIZE;
    ilcf->dedupe_lease = NGX_CONF_UNSET_MSEC;
    ilcf->dedupe_wait = NGX_CONF_UNSET_MSEC;
    ilcf->dedupe_replay = NGX_CONF_UNSET_PTR;
    ilcf->dedupe_client_abort = NGX_CONF_UNSET_UINT;
    ilcf->dedupe_durable = NGX_CONF_UNSET_UINT;
    ilcf->resend_limit = NGX_CONF_UNSET_PTR;

    ngx_http_idem_storm_create_conf(&ilcf->storm);

    return ilcf;
}


char *
ngx_http_idem_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_idem_loc_conf_t *prev = parent;
    ngx_http_idem_loc_conf_t *conf = child;

    ngx_uint_t                 here, durable_here, retry_here,
                               idempotent_here, resend_here;
    ngx_http_core_loc_conf_t  *clcf;

    /* set at this level: where a warning about them belongs */

    here = (conf->dedupe != NGX_CONF_UNSET
            || conf->call_id_missing != NGX_CONF_UNSET_UINT);
    durable_here = (conf->dedupe_durable != NGX_CONF_UNSET_UINT);
    retry_here = (conf->retry_attempts != NGX_CONF_UNSET_UINT);
    idempotent_here = (conf->idempotent == 1);
    resend_here = (conf->resend_limit != NGX_CONF_UNSET_PTR
                   && conf->resend_limit != NULL);

    ngx_conf_merge_value(conf->enable, prev->enable, 0);

    if (ngx_http_idem_merge_header(cf, &conf->call_id_header,
                                   &prev->call_id_header, "X-Call-Id")
        != NGX_OK
        || ngx_http_idem_merge_header(cf, &conf->trace_id_header,
                                      &prev->trace_id_header, "X-Trace-Id")
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_uint_value(conf->call_id_missing, prev->call_id_missing,
                              NGX_HTTP_IDEM_MISSING_GENERATE);
    ngx_conf_merge_uint_value(conf->call_id_generator,
                              prev->call_id_generator,
                              NGX_HTTP_IDEM_GENERATOR_UUID);
    ngx_conf_merge_uint_value(conf->call_id_form, prev->call_id_form,
                              NGX_HTTP_IDEM_FORM_TOKEN);
    ngx_conf_merge_str_value(conf->call_id_prefix, prev->call_id_prefix,
                             "gw");
    ngx_conf_merge_uint_value(conf->call_id_max_length,
                              prev->call_id_max_length, 128);

#if (NGX_PCRE)
    if (conf->call_id_pattern == NGX_CONF_UNSET_PTR) {
        conf->call_id_pattern = prev->call_id_pattern;
        conf->call_id_pattern_src = prev->call_id_pattern_src;
    }

    if (conf->call_id_pattern == NGX_CONF_UNSET_PTR) {
        conf->call_id_pattern = NULL;
    }
#endif

    if (ngx_http_idem_source_merge(cf, conf, prev) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_uint_value(conf->otel_sample, prev->otel_sample, 0);

    ngx_conf_merge_msec_value(conf->deadline, prev->deadline, 0);

    if (ngx_http_idem_merge_header(cf, &conf->deadline_header,
                                   &prev->deadline_header, "X-Deadline-Ms")
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_value(conf->idempotent, prev->idempotent, 0);
    ngx_conf_merge_value(conf->retry_unsent, prev->retry_unsent, 0);

    /* idem_retry is one directive: its parameters are inherited together */

    if (conf->retry_attempts == NGX_CONF_UNSET_UINT) {
        conf->retry_attempts = prev->retry_attempts;
        conf->retry_backoff = prev->retry_backoff;
        conf->retry_max_backoff = prev->retry_max_backoff;
        conf->retry_per_try_timeout = prev->retry_per_try_timeout;
        conf->retry_on = prev->retry_on;
    }

    ngx_conf_merge_uint_value(conf->retry_attempts, prev->retry_attempts,
                              NGX_HTTP_IDEM_RETRY_ATTEMPTS);
    ngx_conf_merge_msec_value(conf->retry_backoff, prev->retry_backoff,
                              NGX_HTTP_IDEM_RETRY_BACKOFF);
    ngx_conf_merge_msec_value(conf->retry_max_backoff,
                              prev->retry_max_backoff,
                              NGX_HTTP_IDEM_RETRY_MAX_BACKOFF);
    ngx_conf_merge_msec_value(conf->retry_per_try_timeout,
                              prev->retry_per_try_timeout, 0);
    ngx_conf_merge_uint_value(conf->retry_on, prev->retry_on,
                              NGX_HTTP_IDEM_RETRY_ON);

    if (ngx_http_idem_storm_merge_conf(cf, &conf->storm, &prev->storm)
        != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_value(conf->record, prev->record, 0);
    ngx_conf_merge_msec_value(conf->record_arrival_delay,
                              prev->record_arrival_delay,
                              NGX_HTTP_IDEM_RECORD_ARRIVAL_DELAY);

    /* idem_unknown_stream is one directive: name and maxlen go together */

    if (conf->unknown_stream_maxlen == NGX_CONF_UNSET_UINT) {
        conf->unknown_stream = prev->unknown_stream;
        conf->unknown_stream_maxlen = prev->unknown_stream_maxlen;
    }

    ngx_conf_merge_str_value(conf->unknown_stream, prev->unknown_stream, "");
    ngx_conf_merge_uint_value(conf->unknown_stream_maxlen,
                              prev->unknown_stream_maxlen, 0);

    if (ngx_http_idem_merge_header(cf, &conf->receipt_header,
                                   &prev->receipt_header, "")
        != NGX_OK
        || ngx_http_idem_merge_header(cf, &conf->dedupe_expires_header,
                                      &prev->dedupe_expires_header,
                                      "Idempotency-Expires")
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_value(conf->dedupe, prev->dedupe, 0);
    if (conf->dedupe_scope_set == NGX_CONF_UNSET) {
        conf->dedupe_scope = prev->dedupe_scope;
    }

    ngx_conf_merge_value(conf->dedupe_scope_set, prev->dedupe_scope_set, 0);
    ngx_conf_merge_value(conf->dedupe_fingerprint_body,
                         prev->dedupe_fingerprint_body, 1);
    ngx_conf_merge_size_value(conf->dedupe_store_max, prev->dedupe_store_max,
                              64 * 1024);
    ngx_conf_merge_msec_value(conf->dedupe_lease, prev->dedupe_lease, 0);
    ngx_conf_merge_msec_value(conf->dedupe_wait, prev->dedupe_wait, 0);

    /* idem_dedupe_replay is one directive: its codes and grpc= together */

    if (conf->dedupe_replay == NGX_CONF_UNSET_PTR) {
        conf->dedupe_replay_grpc = prev->dedupe_replay_grpc;
    }

    ngx_conf_merge_ptr_value(conf->dedupe_replay, prev->dedupe_replay, NULL);
    ngx_conf_merge_uint_value(conf->dedupe_client_abort,
                              prev->dedupe_client_abort,
                              NGX_HTTP_IDEM_CLIENT_ABORT_RUN);

    /* idem_dedupe_durable is one directive: replicas and timeout together */

    if (conf->dedupe_durable == NGX_CONF_UNSET_UINT) {
        conf->dedupe_durable = prev->dedupe_durable;
        conf->dedupe_durable_timeout = prev->dedupe_durable_timeout;
    }

    ngx_conf_merge_uint_value(conf->dedupe_durable, prev->dedupe_durable, 0);
    ngx_conf_merge_str_value(conf->status_url, prev->status_url, "");
    ngx_conf_merge_ptr_value(conf->resend_limit, prev->resend_limit, NULL);

    ngx_http_idem_check_retry(cf, conf, retry_here, idempotent_here);

    /* a limit on resends where no call id is known: said where written */

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (resend_here && clcf->name.len
        && (!conf->enable || (!conf->dedupe && !conf->record)))
    {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"idem_resend_limit\" is set in location \"%V\" "
                           "where \"idem\" is off or neither \"idem_dedupe\" "
                           "nor \"idem_record\" is on: it has no effect "
                           "there", &clcf->name);
    }

    return ngx_http_idem_check_loc_conf(cf, conf, here, durable_here);
}
