
/*
 * Small helpers with no feature of their own: random bytes, time, digests,
 * and the one way the module sends an answer it makes itself.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sys/random.h>
#include <openssl/evp.h>

#include "ngx_http_idem_util.h"


#define NGX_HTTP_IDEM_RANDOM_POOL  4096


/* "len" lowercase hex digits (len is even), never all zeros */

void
ngx_http_idem_random_hex(u_char *dst, size_t len)
{
    u_char  bytes[16];    /* a trace id's, the longest asked for */
    size_t  i, n;

    n = ngx_min(len / 2, sizeof(bytes));

    do {
        ngx_http_idem_random_bytes(bytes, n);

        for (i = 0; i < n; i++) {
            if (bytes[i]) {
                break;
            }
        }

    } while (i == n);

    ngx_hex_dump(dst, bytes, n);
}


/*
 * Random bytes from the kernel, fetched in batches to keep the syscall off
 * most requests.  The batch is per process: a worker never reuses bytes that
 * another process has seen.
 */

void
ngx_http_idem_random_bytes(u_char *dst, size_t len)
{
    size_t            got;
    ssize_t           n;

    static u_char     pool[NGX_HTTP_IDEM_RANDOM_POOL];
    static size_t     pos = NGX_HTTP_IDEM_RANDOM_POOL;
    static ngx_pid_t  owner;

    if (owner != ngx_pid) {
        owner = ngx_pid;
        pos = NGX_HTTP_IDEM_RANDOM_POOL;
    }

    if (pos + len > NGX_HTTP_IDEM_RANDOM_POOL) {

        /* reads over 256 bytes may come back short (a signal) */

        for (got = 0; got < NGX_HTTP_IDEM_RANDOM_POOL; got += n) {
            n = getrandom(pool + got, NGX_HTTP_IDEM_RANDOM_POOL - got,
                          GRND_NONBLOCK);

            if (n > 0) {
                continue;
            }

            if (n == -1 && ngx_errno == NGX_EINTR) {
                n = 0;
                continue;
            }

            /* entropy not ready yet (early boot): nginx's own generator */

            ngx_log_debug0(NGX_LOG_DEBUG_CORE, ngx_cycle->log, ngx_errno,
                           "idem: getrandom() failed, using ngx_random()");

            for ( /* void */ ; got < NGX_HTTP_IDEM_RANDOM_POOL; got++) {
                pool[got] = (u_char) (ngx_random() >> 7);
            }

            break;
        }

        ngx_log_debug0(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                       "idem: new batch of random bytes");

        pos = 0;
    }

    ngx_memcpy(dst, pool + pos, len);
    ngx_memzero(pool + pos, len);
    pos += len;
}


uint64_t
ngx_http_idem_unix_ms(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (uint64_t) tp->sec * 1000 + tp->msec;
}


ngx_int_t
ngx_http_idem_sha256_hex(u_char *dst, ngx_str_t *parts, ngx_uint_t n)
{
    u_char         md[EVP_MAX_MD_SIZE];
    ngx_int_t      rc;
    ngx_uint_t     i;
    EVP_MD_CTX    *mdctx;
    unsigned int   len;

    mdctx = EVP_MD_CTX_new();
    if (mdctx == NULL) {
        return NGX_ERROR;
    }

    rc = NGX_ERROR;

    if (EVP_DigestInit_ex(mdctx, EVP_sha256(), NULL) != 1) {
        goto done;
    }

    for (i = 0; i < n; i++) {
        if (EVP_DigestUpdate(mdctx, parts[i].data, parts[i].len) != 1) {
            goto done;
        }
    }

    if (EVP_DigestFinal_ex(mdctx, md, &len) == 1 && len == 32) {
        ngx_hex_dump(dst, md, 32);
        rc = NGX_OK;
    }

done:

    EVP_MD_CTX_free(mdctx);

    return rc;
}


/* a header of an answer the module makes itself */

ngx_int_t
ngx_http_idem_add_response_header(ngx_http_request_t *r, char *name,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) name;
    h->key.len = ngx_strlen(name);
    h->value = *value;
    h->lowcase_key = NULL;

    return NGX_OK;
}


/*
 * An answer the module makes itself (a problem, the status endpoint,
 * metrics, a replay): "content_type" NULL keeps the type and length the
 * caller set; "body" NULL or empty sends the header alone.
 */

ngx_int_t
ngx_http_idem_send_response(ngx_http_request_t *r, ngx_uint_t status,
    char *content_type, ngx_str_t *body)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    r->headers_out.status = status;

    if (content_type != NULL) {
        r->headers_out.content_type.data = (u_char *) content_type;
        r->headers_out.content_type.len = ngx_strlen(content_type);
        r->headers_out.content_type_len = r->headers_out.content_type.len;
        r->headers_out.content_type_lowcase = NULL;
        r->headers_out.content_length_n = body ? (off_t) body->len : 0;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    if (body != NULL && body->len) {
        b->pos = body->data;
        b->last = body->data + body->len;
        b->memory = 1;
    }

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* answer headers may lack lowcase_key: the names are compared */

ngx_uint_t
ngx_http_idem_header_named(ngx_table_elt_t *h, ngx_str_t *name)
{
    return h->key.len == name->len
           && ngx_strncasecmp(h->key.data, name->data, name->len) == 0;
}


/* an entry of a header list by name, or NULL; hidden entries are skipped */

ngx_table_elt_t *
ngx_http_idem_header_find(ngx_list_t *list, char *name, size_t len)
{
    ngx_table_elt_t              *h;
    ngx_http_idem_header_iter_t   it;

    for (h = ngx_http_idem_header_first(&it, list);
         h != NULL;
         h = ngx_http_idem_header_next(&it))
    {
        if (h->hash != 0 && h->key.len == len
            && ngx_strncasecmp(h->key.data, (u_char *) name, len) == 0)
        {
            return h;
        }
    }

    return NULL;
}


/* a directive's "name=value" argument in two; NGX_DECLINED without "=" */

ngx_int_t
ngx_http_idem_conf_param(ngx_str_t *arg, ngx_str_t *name, ngx_str_t *value)
{
    u_char  *p;

    p = ngx_strlchr(arg->data, arg->data + arg->len, '=');
    if (p == NULL) {
        return NGX_DECLINED;
    }

    name->data = arg->data;
    name->len = p - arg->data;
    value->data = p + 1;
    value->len = arg->data + arg->len - value->data;

    return NGX_OK;
}


/* the directive's one argument is "off" */

ngx_uint_t
ngx_http_idem_conf_off(ngx_conf_t *cf)
{
    ngx_str_t  *value;

    value = cf->args->elts;

    return cf->args->nelts == 2 && ngx_http_idem_str_is(&value[1], "off");
}


char *
ngx_http_idem_conf_invalid(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *arg)
{
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" in \"%V\" directive",
                       arg, &cmd->name);

    return NGX_CONF_ERROR;
}


/*
 * The request's path as a link that stays on this host: the normalised
 * URI, never the one the client sent (//evil.example/..%2F_idem/calls/
 * normalises to a status location, but as a link it names another
 * host), escaped, with one leading slash however many it has
 * (merge_slashes off).
 */

ngx_int_t
ngx_http_idem_link_path(ngx_http_request_t *r, ngx_str_t *path)
{
    u_char     *start, *end;
    uintptr_t   n;

    start = r->uri.data;
    end = start + r->uri.len;

    while (end - start > 1 && start[0] == '/' && start[1] == '/') {
        start++;
    }

    n = ngx_escape_uri(NULL, start, end - start, NGX_ESCAPE_URI);

    path->data = ngx_pnalloc(r->pool, (end - start) + 2 * n + 2);
    if (path->data == NULL) {
        return NGX_ERROR;
    }

    if (start == end || start[0] != '/') {
        /* not a path (never from nginx's parser): the link is relative */
        path->data[0] = '.';
        path->data[1] = '/';
        path->len = 2;
        return NGX_OK;
    }

    path->len = (u_char *) ngx_escape_uri(path->data, start, end - start,
                                          NGX_ESCAPE_URI)
                - path->data;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem link: \"%V\" as \"%V\"", &r->uri, path);

    return NGX_OK;
}
