
/*
 * Call records: every execution of a call id and each of its attempts,
 * written to the store as they happen, so that "what happened to call X?"
 * has an answer.  Writes are fire and forget: they never delay an answer.
 *
 * A record is a Redis hash under <prefix>c:{<call id>}:
 *
 *   call_id trace_id source node method uri   from its first execution
 *   created_ms updated_ms                     unix ms
 *   executions                                how many
 *   state                                     the record's state
 *   x:<token>      the index of an execution (tokens are made per request)
 *   s:<i>          execution i's state
 *   f:<i>          execution i's final status
 *   a:<i>:<n>      attempt n of execution i: "start_ms duration_ms outcome
 *                  sent status span_id"
 *   n_success n_unknown                       executions in those states
 *
 * One Lua script applies every write, so that states only move forward
 * whatever order writes arrive in, and the record's state is derived in
 * one place.
 */


#include "ngx_http_idem_module.h"


static void ngx_http_idem_arrival_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_idem_record_write(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_uint_t state, ngx_uint_t final);
static ngx_uint_t ngx_http_idem_final_state(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);
static uint64_t ngx_http_idem_unix_ms(void);


static ngx_str_t  ngx_http_idem_states[] = {
    ngx_string("RECEIVED"),
    ngx_string("PROCESSING"),
    ngx_string("SUCCESS"),
    ngx_string("FAILED"),
    ngx_string("UNKNOWN")
};


static ngx_str_t  ngx_http_idem_outcomes[] = {
    ngx_string("ok"),
    ngx_string("http"),                 /* written as http_NNN */
    ngx_string("connect_error"),
    ngx_string("timeout"),
    ngx_string("error_after_send"),
    ngx_string("client_abort"),
    ngx_string("deadline")
};


/* ARGV: ttl token now state final_status call_id trace_id source node
 *       method uri, then 7 per attempt: n start duration outcome sent
 *       status span */

static ngx_str_t  ngx_http_idem_record_lua = ngx_string(
"local k = KEYS[1]\n"
"local now = tonumber(ARGV[3])\n"
"local state, fstatus = ARGV[4], ARGV[5]\n"
"local rank = {RECEIVED = 1, PROCESSING = 2, SUCCESS = 3, FAILED = 3,\n"
"              UNKNOWN = 3}\n"
"local i = redis.call('HGET', k, 'x:' .. ARGV[2])\n"
"if not i then\n"
"  i = redis.call('HINCRBY', k, 'executions', 1)\n"
"  redis.call('HSET', k, 'x:' .. ARGV[2], i)\n"
"  redis.call('HSETNX', k, 'created_ms', now)\n"
"  local f = {'call_id', 'trace_id', 'source', 'node', 'method', 'uri'}\n"
"  for j = 1, 6 do redis.call('HSETNX', k, f[j], ARGV[5 + j]) end\n"
"end\n"
"local cur = redis.call('HGET', k, 's:' .. i)\n"
"if not cur or rank[state] > rank[cur] then\n"
"  redis.call('HSET', k, 's:' .. i, state)\n"
"  if state == 'SUCCESS' then redis.call('HINCRBY', k, 'n_success', 1)\n"
"  elseif state == 'UNKNOWN' then redis.call('HINCRBY', k, 'n_unknown', 1)\n"
"  end\n"
"  if fstatus ~= '' then redis.call('HSET', k, 'f:' .. i, fstatus) end\n"
"end\n"
"for j = 12, #ARGV - 6, 7 do\n"
"  redis.call('HSET', k, 'a:' .. i .. ':' .. ARGV[j],\n"
"             table.concat(ARGV, ' ', j + 1, j + 6))\n"
"end\n"
"local rs\n"
"if tonumber(redis.call('HGET', k, 'n_success') or '0') > 0 then\n"
"  rs = 'SUCCESS'\n"
"elseif tonumber(redis.call('HGET', k, 'n_unknown') or '0') > 0 then\n"
"  rs = 'UNKNOWN'\n"
"else\n"
"  local n = redis.call('HGET', k, 'executions')\n"
"  rs = redis.call('HGET', k, 's:' .. n) or 'RECEIVED'\n"
"end\n"
"redis.call('HSET', k, 'state', rs)\n"
"if now > tonumber(redis.call('HGET', k, 'updated_ms') or '0') then\n"
"  redis.call('HSET', k, 'updated_ms', now)\n"
"end\n"
"redis.call('PEXPIRE', k, ARGV[1])\n"
"return rs\n");


ngx_int_t
ngx_http_idem_record_init_conf(ngx_conf_t *cf,
    ngx_http_idem_main_conf_t *imcf)
{
    ngx_int_t  n;

    n = ngx_http_idem_store_add_script(cf, &ngx_http_idem_record_lua);
    if (n == NGX_ERROR) {
        return NGX_ERROR;
    }

    imcf->record_script = n;

    return NGX_OK;
}


/*
 * After access checks: this execution of the call is recorded.  The
 * arrival is written at the end of this turn of the event loop, so that a
 * call whose first attempt starts at once costs one write, not two.
 */

ngx_int_t
ngx_http_idem_record_start(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idem_module);

    if (!ilcf->record || ctx->record) {
        return NGX_OK;
    }

    ctx->record = 1;

    ctx->token.data = ngx_pnalloc(r->pool, NGX_HTTP_IDEM_SPAN_ID_LEN);
    if (ctx->token.data == NULL) {
        return NGX_ERROR;
    }

    ngx_http_idem_random_hex(ctx->token.data, NGX_HTTP_IDEM_SPAN_ID_LEN);
    ctx->token.len = NGX_HTTP_IDEM_SPAN_ID_LEN;

    ctx->arrival_ev.handler = ngx_http_idem_arrival_handler;
    ctx->arrival_ev.data = ctx;
    ctx->arrival_ev.log = r->connection->log;

    ngx_post_event(&ctx->arrival_ev, &ngx_posted_events);

    return NGX_OK;
}


static void
ngx_http_idem_arrival_handler(ngx_event_t *ev)
{
    ngx_http_idem_ctx_t  *ctx;

    ctx = ev->data;

    (void) ngx_http_idem_record_write(ctx->request, ctx,
                                      ctx->attempts && ctx->attempts->nelts
                                      ? NGX_HTTP_IDEM_PROCESSING
                                      : NGX_HTTP_IDEM_RECEIVED, 0);
}


/* the upstream was chosen for an attempt: it starts now */

ngx_int_t
ngx_http_idem_attempt_start(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_http_idem_attempt_t  *a;

    if (ctx->attempts == NULL) {
        ctx->attempts = ngx_array_create(r->pool, 2,
                                         sizeof(ngx_http_idem_attempt_t));
        if (ctx->attempts == NULL) {
            return NGX_ERROR;
        }
    }

    a = ngx_array_push(ctx->attempts);
    if (a == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(a, sizeof(ngx_http_idem_attempt_t));

    a->n = ctx->attempt;
    a->start = ngx_current_msec;
    a->start_ms = ngx_http_idem_unix_ms();
    a->outcome = NGX_HTTP_IDEM_OUTCOME_NONE;

    if (ctx->traceparent_h != NULL) {
        ngx_memcpy(a->span_id, ctx->traceparent_h->value.data + 36,
                   NGX_HTTP_IDEM_SPAN_ID_LEN);
    }

    /* an arrival already written said RECEIVED: now it is in progress */

    if (ctx->record && a->n == 1 && !ctx->arrival_ev.posted) {
        (void) ngx_http_idem_record_write(r, ctx, NGX_HTTP_IDEM_PROCESSING,
                                          0);
    }

    return NGX_OK;
}


/* the attempt is over: nginx has released its peer */

void
ngx_http_idem_attempt_end(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_peer_connection_t *pc)
{
    ngx_connection_t         *c;
    ngx_http_upstream_t      *u;
    ngx_http_idem_attempt_t  *a;

    if (ctx->attempts == NULL || ctx->attempts->nelts == 0) {
        return;
    }

    a = (ngx_http_idem_attempt_t *) ctx->attempts->elts
        + ctx->attempts->nelts - 1;

    if (a->outcome != NGX_HTTP_IDEM_OUTCOME_NONE) {
        return;
    }

    u = r->upstream;
    c = pc->connection;

    a->duration = ngx_current_msec - a->start;
    a->sent = u->request_sent;
    a->status = u->headers_in.status_n;

    if (ctx->deadline_expired) {
        a->outcome = NGX_HTTP_IDEM_OUTCOME_DEADLINE;
        a->status = 0;

    } else if (a->status) {
        a->outcome = (a->status < NGX_HTTP_BAD_REQUEST)
                     ? NGX_HTTP_IDEM_OUTCOME_OK : NGX_HTTP_IDEM_OUTCOME_HTTP;

    } else if (r->connection->error) {
        a->outcome = NGX_HTTP_IDEM_OUTCOME_CLIENT_ABORT;

    } else if (c != NULL && (c->read->timedout || c->write->timedout)) {
        a->outcome = NGX_HTTP_IDEM_OUTCOME_TIMEOUT;

    } else if (!a->sent) {
        a->outcome = NGX_HTTP_IDEM_OUTCOME_CONNECT_ERROR;

    } else {
        a->outcome = NGX_HTTP_IDEM_OUTCOME_ERROR_AFTER_SEND;
    }
}


/* the request is done (log phase): the execution's final state */

void
ngx_http_idem_record_finish(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ctx->final_state = ngx_http_idem_final_state(r, ctx);

    if (!ctx->record) {
        return;
    }

    if (ctx->arrival_ev.posted) {
        ngx_delete_posted_event(&ctx->arrival_ev);
    }

    (void) ngx_http_idem_record_write(r, ctx, ctx->final_state, 1);
}


/*
 * SUCCESS: the final answer was 1xx-3xx.  UNKNOWN: no success, and some
 * attempt sent the request without getting an answer (a timeout, a reset,
 * a client gone): it may have taken effect.  FAILED: an answer 4xx/5xx, or
 * nothing was ever sent.
 */

static ngx_uint_t
ngx_http_idem_final_state(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    ngx_uint_t                i, status;
    ngx_http_idem_attempt_t  *a;

    status = r->err_status ? r->err_status : r->headers_out.status;

    if (status >= 100 && status < NGX_HTTP_BAD_REQUEST) {
        return NGX_HTTP_IDEM_SUCCESS;
    }

    if (ctx->attempts != NULL) {
        a = ctx->attempts->elts;

        for (i = 0; i < ctx->attempts->nelts; i++) {
            if (a[i].sent && a[i].status == 0) {
                return NGX_HTTP_IDEM_UNKNOWN;
            }
        }
    }

    return NGX_HTTP_IDEM_FAILED;
}


ngx_str_t *
ngx_http_idem_state_name(ngx_uint_t state)
{
    return &ngx_http_idem_states[state];
}


/*
 * The state of this execution, as the request sees it now.  Once the
 * answer has started, it is the final state to be: access_log runs before
 * the module's own log handler.
 */

ngx_uint_t
ngx_http_idem_current_state(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    if (ctx->final_state) {
        return ctx->final_state;
    }

    if (r->main->header_sent) {
        return ngx_http_idem_final_state(r->main, ctx);
    }

    if (ctx->attempts && ctx->attempts->nelts) {
        return NGX_HTTP_IDEM_PROCESSING;
    }

    return NGX_HTTP_IDEM_RECEIVED;
}


static ngx_int_t
ngx_http_idem_record_write(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_uint_t state, ngx_uint_t final)
{
    u_char                     *p, *q;
    size_t                      len;
    ngx_str_t                  *argv, key;
    ngx_uint_t                  i, n, argc;
    ngx_http_idem_attempt_t    *a;
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    n = (final && ctx->attempts) ? ctx->attempts->nelts : 0;
    argc = 11 + 7 * n;

    argv = ngx_palloc(r->pool, argc * sizeof(ngx_str_t));
    if (argv == NULL) {
        return NGX_ERROR;
    }

    /* the numbers, side by side in one buffer */

    len = 3 * NGX_INT64_LEN + n * (4 * NGX_INT64_LEN + sizeof("http_999"));

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    key.len = imcf->key_prefix.len + sizeof("c:{}") - 1 + ctx->call_id.len;
    key.data = ngx_pnalloc(r->pool, key.len);
    if (key.data == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(key.data, "%Vc:{%V}", &imcf->key_prefix, &ctx->call_id);

    q = p;
    p = ngx_sprintf(p, "%M", imcf->record_ttl);
    argv[0].data = q;
    argv[0].len = p - q;

    argv[1] = ctx->token;

    q = p;
    p = ngx_sprintf(p, "%uL", ngx_http_idem_unix_ms());
    argv[2].data = q;
    argv[2].len = p - q;

    argv[3] = ngx_http_idem_states[state];

    if (final) {
        q = p;
        p = ngx_sprintf(p, "%ui", r->err_status ? r->err_status
                                                : r->headers_out.status);
        argv[4].data = q;
        argv[4].len = p - q;

    } else {
        ngx_str_null(&argv[4]);
    }

    argv[5] = ctx->call_id;
    argv[6] = ctx->trace_id;

    if (ctx->source == NGX_HTTP_IDEM_SOURCE_CLIENT) {
        ngx_str_set(&argv[7], "client");

    } else {
        ngx_str_set(&argv[7], "gateway");
    }

    argv[8] = imcf->node_id;
    argv[9] = r->method_name;

    /* the path only: a query string may hold what nobody should keep */

    argv[10] = r->unparsed_uri;
    q = ngx_strlchr(argv[10].data, argv[10].data + argv[10].len, '?');
    if (q != NULL) {
        argv[10].len = q - argv[10].data;
    }

    a = n ? ctx->attempts->elts : NULL;

    for (i = 0; i < n; i++) {
        argc = 11 + 7 * i;

        q = p;
        p = ngx_sprintf(p, "%ui", a[i].n);
        argv[argc].data = q;
        argv[argc].len = p - q;

        q = p;
        p = ngx_sprintf(p, "%uL", a[i].start_ms);
        argv[argc + 1].data = q;
        argv[argc + 1].len = p - q;

        q = p;
        p = ngx_sprintf(p, "%M", a[i].duration);
        argv[argc + 2].data = q;
        argv[argc + 2].len = p - q;

        if (a[i].outcome == NGX_HTTP_IDEM_OUTCOME_HTTP) {
            q = p;
            p = ngx_sprintf(p, "http_%03ui", a[i].status);
            argv[argc + 3].data = q;
            argv[argc + 3].len = p - q;

        } else if (a[i].outcome == NGX_HTTP_IDEM_OUTCOME_NONE) {
            /* still running when the request ended: nginx gave up on it */
            argv[argc + 3] = ngx_http_idem_outcomes[
                                  r->connection->error
                                  ? NGX_HTTP_IDEM_OUTCOME_CLIENT_ABORT
                                  : NGX_HTTP_IDEM_OUTCOME_ERROR_AFTER_SEND];

        } else {
            argv[argc + 3] = ngx_http_idem_outcomes[a[i].outcome];
        }

        if (a[i].sent) {
            ngx_str_set(&argv[argc + 4], "1");

        } else {
            ngx_str_set(&argv[argc + 4], "0");
        }

        q = p;
        p = ngx_sprintf(p, "%ui", a[i].status);
        argv[argc + 5].data = q;
        argv[argc + 5].len = p - q;

        if (a[i].span_id[0]) {
            argv[argc + 6].data = a[i].span_id;
            argv[argc + 6].len = NGX_HTTP_IDEM_SPAN_ID_LEN;

        } else {
            ngx_str_set(&argv[argc + 6], "-");
        }
    }

    argc = 11 + 7 * n;

    if (ngx_http_idem_store_eval(imcf->record_script, &key, argc, argv)
        != NGX_OK)
    {
        /* the store logs drops itself, rate limited */
        return NGX_DECLINED;
    }

    return NGX_OK;
}


static uint64_t
ngx_http_idem_unix_ms(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (uint64_t) tp->sec * 1000 + tp->msec;
}
