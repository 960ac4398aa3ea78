
/*
 * The call id from elsewhere than idem_call_id_header: any nginx complex
 * value (idem_call_id_from), or a field of a JSON body (idem_call_id_json),
 * as webhook providers send their event ids.  Either is a client's id in
 * every way (validated, never rewritten, recorded, deduped), flagged with
 * where it came from, and wins over the header: a client must not
 * override a provider's id by adding one.
 *
 * A body id needs the body before the id is settled: the handler reads it
 * in the precontent phase, where dedupe reads it, and its first bytes (up
 * to max=) are copied as they arrive, by the request body filter, before
 * nginx writes them to a file: a spooled body is never read back.  A body
 * longer than max= is not parsed at all.
 */


#include "ngx_http_idem_call_id_source.h"
#include "ngx_http_idem_json.h"
#include "ngx_http_idem_util.h"


/* a body of unknown length: the room kept for it at first */
#define NGX_HTTP_IDEM_SOURCE_FIRST       4096


static ngx_int_t ngx_http_idem_source_body(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_http_idem_json_conf_t *jcf,
    ngx_http_idem_inbound_t *in);
static ngx_int_t ngx_http_idem_source_capture(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_buf_t *b);
static ngx_flag_t *ngx_http_idem_source_unbuffered(ngx_conf_t *cf,
    ngx_str_t *name);


static ngx_str_t  ngx_http_idem_source_names[] = {
    ngx_string("client"),
    ngx_string("gateway"),
    ngx_string("variable"),
    ngx_string("body")
};


/* what X-Call-Id-Source, $idem_call_id_source and records say */

ngx_str_t *
ngx_http_idem_source_name(ngx_uint_t source)
{
    if (source > NGX_HTTP_IDEM_SOURCE_BODY) {
        source = NGX_HTTP_IDEM_SOURCE_GATEWAY;
    }

    return &ngx_http_idem_source_names[source];
}


/*
 * The id of a configured source, into "in" in place of the header's: the
 * value as a header of its own (empty: missing), its source and name.
 */

ngx_int_t
ngx_http_idem_source_value(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_idem_inbound_t *in)
{
    ngx_str_t                  value;
    ngx_http_idem_loc_conf_t  *ilcf;

    ilcf = ctx->conf;

    if (ilcf->call_id_json != NULL) {
        return ngx_http_idem_source_body(r, ctx, ilcf->call_id_json, in);
    }

    if (ilcf->call_id_from == NULL) {
        return NGX_OK;
    }

    if (ngx_http_complex_value(r, ilcf->call_id_from, &value) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem call id from \"%V\": \"%V\"",
                   &ilcf->call_id_from_src, &value);

    in->call_id_source = NGX_HTTP_IDEM_SOURCE_VARIABLE;
    in->call_id_name = ilcf->call_id_from_src;
    in->call_id = NULL;
    in->call_id_count = 0;

    if (value.len) {
        in->call_id_value.value = value;
        in->call_id = &in->call_id_value;
        in->call_id_count = 1;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_idem_source_body(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_http_idem_json_conf_t *jcf, ngx_http_idem_inbound_t *in)
{
    char       *why;
    ngx_int_t   rc;
    ngx_str_t   value;
    ngx_buf_t  *b;

    in->call_id_source = NGX_HTTP_IDEM_SOURCE_BODY;
    in->call_id_name = jcf->path;
    in->call_id_digest = jcf->digest;
    in->call_id = NULL;
    in->call_id_count = 0;

    b = ctx->source.capture;

    if (ctx->source.over || b == NULL) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem call id from the body: longer than %uz bytes, "
                       "not parsed", jcf->max);
        in->call_id_missing = "missing: the body is longer than max=";
        return NGX_OK;
    }

    rc = ngx_http_idem_json_extract(r->pool, b->pos, b->last - b->pos,
                                    jcf->steps, &value, &why);

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem call id from the body: \"%V\": %s",
                       &jcf->path, why);
        in->call_id_missing = why;
        return NGX_OK;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem call id from the body: \"%V\": \"%V\"",
                   &jcf->path, &value);

    /* an empty string is an id that fails validation, not a missing one */

    in->call_id_value.value = value;
    in->call_id = &in->call_id_value;
    in->call_id_count = 1;

    return NGX_OK;
}


/*
 * Reads the body for a body id: its first bytes are kept as they arrive
 * (the request body filter).  NGX_DONE: "handler" runs once it is read;
 * else an HTTP status.
 */

ngx_int_t
ngx_http_idem_source_read_body(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_http_client_body_handler_pt handler)
{
    off_t                       len;
    size_t                      size;
    ngx_int_t                   rc;
    ngx_buf_t                  *b;
    ngx_chain_t                *cl;
    ngx_http_idem_json_conf_t  *jcf;

    jcf = ctx->conf->call_id_json;

    ctx->source.max = jcf->max;

    len = r->headers_in.content_length_n;

    if (len > (off_t) jcf->max) {
        ctx->source.over = 1;

    } else {

        /* a body of unknown length: room grows as it arrives, to max= */

        size = (len >= 0) ? (size_t) len
                          : ngx_min(jcf->max, NGX_HTTP_IDEM_SOURCE_FIRST);

        ctx->source.capture = ngx_create_temp_buf(r->pool, size ? size : 1);
        if (ctx->source.capture == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem call id from the body: reading it, length %O, "
                   "max %uz", len, jcf->max);

    if (r->request_body != NULL) {

        /* read before us (mirror, say): its buffers, as they are */

        for (cl = r->request_body->bufs; cl; cl = cl->next) {
            b = cl->buf;

            if (ngx_http_idem_source_capture(r, ctx, b) != NGX_OK) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }
        }

    } else {
        ctx->source.reading = 1;
    }

    rc = ngx_http_read_client_request_body(r, handler);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        ctx->source.reading = 0;
        return rc;
    }

    ngx_http_finalize_request(r, NGX_DONE);

    return NGX_DONE;
}


/* the request body filter, while a body id's body is read */

void
ngx_http_idem_source_body_filter(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx, ngx_chain_t *in)
{
    for ( /* void */ ; in; in = in->next) {
        if (ngx_buf_in_memory(in->buf)
            && ngx_http_idem_source_capture(r, ctx, in->buf) != NGX_OK)
        {
            /* not kept: the id is missing, as for a body past max= */
            ctx->source.over = 1;
        }
    }
}


static ngx_int_t
ngx_http_idem_source_capture(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx,
    ngx_buf_t *b)
{
    off_t       size;
    size_t      have, room;
    u_char     *p;
    ssize_t     n;
    ngx_buf_t  *c;

    c = ctx->source.capture;

    if (ctx->source.over || c == NULL) {
        return NGX_OK;
    }

    size = ngx_buf_in_memory(b) ? b->last - b->pos
           : (b->in_file ? b->file_last - b->file_pos : 0);

    if (size == 0) {
        return NGX_OK;
    }

    have = c->last - c->pos;

    if (size > (off_t) (ctx->source.max - have)) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem call id from the body: past %uz bytes",
                       ctx->source.max);
        ctx->source.over = 1;
        return NGX_OK;
    }

    if (size > c->end - c->last) {

        /* twice the room, or what it takes, never past max= */

        room = ngx_max(2 * (size_t) (c->end - c->pos), have + (size_t) size);
        room = ngx_min(room, ctx->source.max);

        p = ngx_pnalloc(r->pool, room);
        if (p == NULL) {
            return NGX_ERROR;
        }

        c->last = ngx_cpymem(p, c->pos, have);
        c->pos = p;
        c->start = p;
        c->end = p + room;
    }

    if (ngx_buf_in_memory(b)) {
        c->last = ngx_cpymem(c->last, b->pos, size);
        return NGX_OK;
    }

    /* a body read before us, spooled: at most max= bytes read back */

    n = ngx_read_file(b->file, c->last, (size_t) size, b->file_pos);

    if (n != (ssize_t) size) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "idem: could not read the request body back "
                      "from \"%V\"", &b->file->name);
        return NGX_ERROR;
    }

    c->last += n;

    return NGX_OK;
}


char *
ngx_http_idem_set_call_id_from(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    ngx_str_t                         *value;
    ngx_http_compile_complex_value_t   ccv;

    if (ilcf->call_id_from != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    ilcf->call_id_from = ngx_palloc(cf->pool,
                                    sizeof(ngx_http_complex_value_t));
    if (ilcf->call_id_from == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = ilcf->call_id_from;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (ilcf->call_id_from->lengths == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, it "
                           "must hold a variable (e.g. "
                           "$http_x_shopify_event_id): a fixed call id would "
                           "make every call a duplicate of the first",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    ilcf->call_id_from_src = value[1];

    return NGX_CONF_OK;
}


/* idem_call_id_json PATH [max=SIZE] [digest] */

char *
ngx_http_idem_set_call_id_json(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    char                       *err;
    ssize_t                     size;
    ngx_int_t                   rc;
    ngx_str_t                  *value, s, v;
    ngx_uint_t                  i;
    ngx_http_idem_json_conf_t  *jcf;

    if (ilcf->call_id_json != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    jcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_idem_json_conf_t));
    if (jcf == NULL) {
        return NGX_CONF_ERROR;
    }

    jcf->path = value[1];
    jcf->max = NGX_HTTP_IDEM_JSON_MAX;

    rc = ngx_http_idem_json_path_parse(cf->pool, &jcf->path, &jcf->steps,
                                       &err);
    if (rc == NGX_ERROR) {
        return NGX_CONF_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid path \"%V\" in \"%V\" directive: %s",
                           &value[1], &cmd->name, err);
        return NGX_CONF_ERROR;
    }

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strcmp(value[i].data, "digest") == 0) {
            jcf->digest = 1;
            continue;
        }

        if (ngx_http_idem_conf_param(&value[i], &s, &v) != NGX_OK
            || !ngx_http_idem_str_is(&s, "max"))
        {
            return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
        }

        size = ngx_parse_size(&v);

        /* parsed in one piece, in memory: 16m at most */

        if (size == NGX_ERROR || size < 2 || size > 16 * 1024 * 1024) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%V\" in \"%V\" directive, "
                               "max must be a size from 2 to 16m",
                               &value[i], &cmd->name);
            return NGX_CONF_ERROR;
        }

        jcf->max = (size_t) size;
    }

    ilcf->call_id_json = jcf;

    return NGX_CONF_OK;
}


/*
 * The two sources are inherited as one: a level that sets either drops
 * the other of the level above.  Where the body holds the id, a
 * *_request_buffering off has no effect: the body is read whole first.
 */

char *
ngx_http_idem_source_merge(ngx_conf_t *cf, ngx_http_idem_loc_conf_t *conf,
    ngx_http_idem_loc_conf_t *prev)
{
    ngx_str_t    name;
    ngx_flag_t  *off;

    if (conf->call_id_from != NGX_CONF_UNSET_PTR
        && conf->call_id_json != NGX_CONF_UNSET_PTR)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_call_id_from\" and \"idem_call_id_json\" "
                           "are both set here: a call has one id, say "
                           "where it is once");
        return NGX_CONF_ERROR;
    }

    if (conf->call_id_from == NGX_CONF_UNSET_PTR
        && conf->call_id_json == NGX_CONF_UNSET_PTR)
    {
        conf->call_id_from = prev->call_id_from;
        conf->call_id_from_src = prev->call_id_from_src;
        conf->call_id_json = prev->call_id_json;
    }

    ngx_conf_merge_ptr_value(conf->call_id_from, NULL, NULL);
    ngx_conf_merge_ptr_value(conf->call_id_json, NULL, NULL);

    if (conf->call_id_json == NULL || !conf->enable) {
        return NGX_CONF_OK;
    }

    off = ngx_http_idem_source_unbuffered(cf, &name);

    if (off != NULL) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"%V off\" has no effect where "
                           "\"idem_call_id_json\" is set: a call id from the "
                           "body needs the whole body buffered before the "
                           "call goes upstream", &name);
    }

    return NGX_CONF_OK;
}


/*
 * A proxy_, fastcgi_, uwsgi_ or scgi_request_buffering set to off for this
 * location, found by the directive's own offset in its module's conf (the
 * modules merge theirs before this one, a dynamic module, is merged).
 */

static ngx_flag_t *
ngx_http_idem_source_unbuffered(ngx_conf_t *cf, ngx_str_t *name)
{
    u_char                *p;
    ngx_flag_t            *flag;
    ngx_uint_t             m;
    ngx_module_t          *module;
    ngx_command_t         *cmd;
    ngx_http_conf_ctx_t   *ctx;

    static ngx_str_t  suffix = ngx_string("_request_buffering");

    ctx = cf->ctx;

    for (m = 0; cf->cycle->modules[m]; m++) {
        module = cf->cycle->modules[m];

        if (module->type != NGX_HTTP_MODULE || module->commands == NULL) {
            continue;
        }

        for (cmd = module->commands; cmd->name.len; cmd++) {

            if (cmd->name.len <= suffix.len
                || cmd->set != ngx_conf_set_flag_slot
                || cmd->conf != NGX_HTTP_LOC_CONF_OFFSET)
            {
                continue;
            }

            p = cmd->name.data + cmd->name.len - suffix.len;

            if (ngx_strncmp(p, suffix.data, suffix.len) != 0) {
                continue;
            }

            flag = (ngx_flag_t *) ((char *) ctx->loc_conf[module->ctx_index]
                                   + cmd->offset);

            if (*flag == 0) {
                *name = cmd->name;
                return flag;
            }
        }
    }

    return NULL;
}
