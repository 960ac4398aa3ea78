
/*
 * Reads of a follow-up stream (idem_unknown_stream) for the list of calls
 * that need a person: one page, newest first, bounded by COUNT, in one
 * script (stream.lua) that flattens XREVRANGE's nested reply.  A stream
 * is one key: on a Redis Cluster the script goes to its slot's master.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis_common.h"
#include "ngx_http_idem_redis_lua.h"


typedef struct {
    ngx_http_idem_store_entries_pt   handler;
    void                            *data;
} ngx_http_idem_redis_pager_t;


static void ngx_http_idem_redis_stream_read(void *data, ngx_int_t rc,
    ngx_str_t *elts, ngx_uint_t n);


static ngx_http_idem_redis_script_t  ngx_http_idem_redis_stream_lua = {
    ngx_string(NGX_HTTP_IDEM_REDIS_LUA_STREAM),
    { 0 }, 0, 0
};


ngx_http_idem_store_op_t *
ngx_http_idem_store_read_stream(ngx_str_t *stream, ngx_str_t *before,
    ngx_uint_t count, ngx_http_idem_store_entries_pt handler, void *data)
{
    u_char                        num[NGX_INT_T_LEN];
    ngx_str_t                     argv[4];
    ngx_http_idem_store_op_t     *op;
    ngx_http_idem_redis_pager_t  *pg;

    ngx_str_set(&argv[0], "1");
    argv[1] = *stream;

    if (before->len == 0) {
        ngx_str_set(&argv[2], "+");

    } else {
        /* "(" and the id: an exclusive range (Redis 6.2) */

        argv[2].len = before->len + 1;
        argv[2].data = ngx_alloc(argv[2].len, ngx_cycle->log);
        if (argv[2].data == NULL) {
            return NULL;
        }

        argv[2].data[0] = '(';
        ngx_memcpy(argv[2].data + 1, before->data, before->len);
    }

    argv[3].data = num;
    argv[3].len = ngx_sprintf(num, "%ui", count) - num;

    /* the op copies its command */

    op = ngx_http_idem_redis_read(&ngx_http_idem_redis_stream_lua, 4, argv,
                                  ngx_http_idem_redis_stream_read, NULL,
                                  sizeof(ngx_http_idem_redis_pager_t));

    if (before->len) {
        ngx_free(argv[2].data);
    }

    if (op == NULL) {
        return NULL;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: page of \"%V\" before \"%V\", %ui at most",
                   stream, before, count);

    op->data = op;

    pg = op->ext;
    pg->handler = handler;
    pg->data = data;

    return op;
}


/* Redis's time, then: id, number of strings, field, value, ... */

static void
ngx_http_idem_redis_stream_read(void *data, ngx_int_t rc, ngx_str_t *elts,
    ngx_uint_t n)
{
    ngx_http_idem_store_op_t *op = data;

    ngx_int_t                          k, ms;
    ngx_uint_t                         i, m;
    ngx_http_idem_redis_pager_t       *pg;
    ngx_http_idem_store_read_entry_t  *entries;

    pg = op->ext;

    ms = (rc == NGX_OK && n > 0) ? ngx_atoi(elts[0].data, elts[0].len)
                                 : NGX_ERROR;

    if (ms == NGX_ERROR) {
        pg->handler(pg->data, NGX_ERROR, 0, NULL, 0);
        return;
    }

    if (n == 1) {
        pg->handler(pg->data, NGX_OK, (uint64_t) ms, NULL, 0);
        return;
    }

    entries = ngx_alloc((n / 2) * sizeof(ngx_http_idem_store_read_entry_t),
                        ngx_cycle->log);
    if (entries == NULL) {
        pg->handler(pg->data, NGX_ERROR, 0, NULL, 0);
        return;
    }

    m = 0;

    for (i = 1; i + 1 < n; i += 2 + k) {
        k = ngx_atoi(elts[i + 1].data, elts[i + 1].len);

        if (k == NGX_ERROR || k % 2 || (ngx_uint_t) k > n - i - 2) {
            ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                          "idem: unexpected answer to a read of a stream");
            ngx_free(entries);
            pg->handler(pg->data, NGX_ERROR, 0, NULL, 0);
            return;
        }

        entries[m].id = elts[i];
        entries[m].fields = &elts[i + 2];
        entries[m].nfields = k;
        m++;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "idem store: page of a stream read, %ui entries", m);

    pg->handler(pg->data, NGX_OK, (uint64_t) ms, entries, m);

    ngx_free(entries);
}
