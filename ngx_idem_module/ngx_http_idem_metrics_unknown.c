
/*
 * idem_unknown_unresolved: the executions of a follow-up stream
 * (idem_unknown_stream) still UNKNOWN and not resolved, as the list of
 * calls that need a person decides it (ngx_http_idem_calls_list.c): an
 * entry counts while its call's record says UNKNOWN for that very
 * execution, unresolved.  Every scope counts.
 *
 * Bounded and cheap: a scrape never waits for Redis.  It shows the last
 * count kept in the metrics zone, and starts a new read when the last one
 * began unknown_interval ago or more and no worker is reading: one worker
 * wins the slot (an atomic compare and set), the read goes on in its
 * event loop after the scrape is answered.  A read is the stream's newest
 * unknown_max entries (one XREVRANGE) and their records, 16 in flight at
 * a time; a read that got no answer keeps the count it had, older.
 */


#include "ngx_http_idem_metrics_unknown.h"
#include "ngx_http_idem_record_parse.h"
#include "ngx_http_idem_store.h"


/* records read at once */
#define NGX_HTTP_IDEM_UNKNOWN_WINDOW   16


typedef struct ngx_http_idem_unknown_read_s  ngx_http_idem_unknown_read_t;

typedef struct {
    ngx_http_idem_unknown_read_t     *rd;
    ngx_str_t                         key;
    ngx_str_t                         token;
} ngx_http_idem_unknown_entry_t;


struct ngx_http_idem_unknown_read_s {
    ngx_queue_t                       queue;    /* this worker's reads */
    ngx_pool_t                       *pool;
    ngx_log_t                        *log;
    ngx_http_idem_metrics_stream_t   *slot;
    ngx_str_t                         name;
    ngx_str_t                         prefix;
    ngx_http_idem_unknown_entry_t    *entries;
    ngx_uint_t                        n;
    ngx_uint_t                        sent;     /* record reads sent */
    ngx_uint_t                        pending;
    ngx_uint_t                        unresolved;
    unsigned                          truncated:1;
    unsigned                          failed:1;
};


static void ngx_http_idem_unknown_start(ngx_http_request_t *r,
    ngx_http_idem_metrics_stream_t *slot, ngx_str_t *name,
    ngx_uint_t max);
static void ngx_http_idem_unknown_page(void *data, ngx_int_t rc,
    uint64_t now, ngx_http_idem_store_read_entry_t *entries, ngx_uint_t n);
static void ngx_http_idem_unknown_next(ngx_http_idem_unknown_read_t *rd);
static void ngx_http_idem_unknown_record(void *data, ngx_int_t rc,
    ngx_http_idem_store_record_t *record);
static void ngx_http_idem_unknown_done(ngx_http_idem_unknown_read_t *rd);


/*
 * This worker's reads in flight: a worker that exits before their answer
 * (the store gives up its commands unanswered) frees them itself.
 */
static ngx_queue_t  ngx_http_idem_unknown_reads;
static ngx_uint_t ngx_http_idem_unknown_alive(ngx_pid_t pid);


/* each stream whose count is due: one worker starts its read */

void
ngx_http_idem_metrics_unknown_refresh(ngx_http_request_t *r,
    ngx_http_idem_metrics_stream_t *slots)
{
    ngx_str_t                       *name;
    ngx_uint_t                       i, max;
    ngx_msec_t                       interval;
    ngx_atomic_t                     busy, next;
    ngx_http_idem_main_conf_t       *imcf;
    ngx_http_idem_metrics_stream_t  *slot;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    if (imcf->unknown_streams == NULL || imcf->store.addr.data == NULL) {
        return;
    }

    interval = imcf->metrics_unknown_interval
               ? imcf->metrics_unknown_interval
               : NGX_HTTP_IDEM_UNKNOWN_INTERVAL;
    max = imcf->metrics_unknown_max ? imcf->metrics_unknown_max
                                    : NGX_HTTP_IDEM_UNKNOWN_MAX;

    name = imcf->unknown_streams->elts;

    for (i = 0; i < imcf->unknown_streams->nelts
                && i < NGX_HTTP_IDEM_METRICS_STREAMS; i++)
    {
        slot = &slots[i];

        next = slot->next;

        if ((ngx_msec_int_t) (ngx_current_msec - (ngx_msec_t) next) < 0) {
            continue;
        }

        /* a read in flight ends by the store's own timeout */

        busy = slot->busy;

        if (busy != 0 && ngx_http_idem_unknown_alive((ngx_pid_t) busy)) {
            continue;
        }

        if (!ngx_atomic_cmp_set(&slot->busy, busy,
                                (ngx_atomic_uint_t) ngx_pid))
        {
            continue;
        }

        /* a read that ended between the two loads above set "next" */

        if ((ngx_msec_int_t) (ngx_current_msec - (ngx_msec_t) slot->next)
            < 0)
        {
            slot->busy = 0;
            continue;
        }

        slot->next = (ngx_atomic_uint_t) (ngx_current_msec + interval);

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem metrics: reading \"%V\", %ui entries at most",
                       &name[i], max);

        ngx_http_idem_unknown_start(r, slot, &name[i], max);
    }
}


static void
ngx_http_idem_unknown_start(ngx_http_request_t *r,
    ngx_http_idem_metrics_stream_t *slot, ngx_str_t *name, ngx_uint_t max)
{
    ngx_str_t                      stream, before;
    ngx_pool_t                    *pool;
    ngx_http_idem_main_conf_t     *imcf;
    ngx_http_idem_unknown_read_t  *rd;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    /* the read outlives the scrape: a pool of its own */

    pool = ngx_create_pool(4096, ngx_cycle->log);
    if (pool == NULL) {
        goto failed;
    }

    rd = ngx_pcalloc(pool, sizeof(ngx_http_idem_unknown_read_t));
    if (rd == NULL) {
        ngx_destroy_pool(pool);
        goto failed;
    }

    rd->pool = pool;
    rd->log = ngx_cycle->log;
    rd->slot = slot;
    rd->name = *name;               /* lives as long as the cycle */
    rd->prefix = imcf->key_prefix;

    stream.len = imcf->key_prefix.len + name->len;
    stream.data = ngx_pnalloc(pool, stream.len);
    if (stream.data == NULL) {
        ngx_destroy_pool(pool);
        goto failed;
    }

    ngx_memcpy(ngx_cpymem(stream.data, imcf->key_prefix.data,
                          imcf->key_prefix.len),
               name->data, name->len);

    ngx_str_null(&before);

    if (ngx_http_idem_unknown_reads.next == NULL) {
        ngx_queue_init(&ngx_http_idem_unknown_reads);
    }

    ngx_queue_insert_tail(&ngx_http_idem_unknown_reads, &rd->queue);

    if (ngx_http_idem_store_read_stream(&stream, &before, max,
                                        ngx_http_idem_unknown_page, rd)
        == NULL)
    {
        ngx_queue_remove(&rd->queue);
        ngx_destroy_pool(pool);
        goto failed;
    }

    rd->n = max;                    /* the page's size, until it comes */

    return;

failed:

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idem metrics: \"%V\" not read, its count is kept", name);

    slot->busy = 0;
}


/* the stream's newest entries: each call's key and its execution's token */

static void
ngx_http_idem_unknown_page(void *data, ngx_int_t rc, uint64_t now,
    ngx_http_idem_store_read_entry_t *entries, ngx_uint_t n)
{
    ngx_http_idem_unknown_read_t *rd = data;

    u_char                         *p;
    ngx_str_t                      *f, key, token, id;
    ngx_uint_t                      i, k;
    ngx_http_idem_unknown_entry_t  *e;

    if (rc != NGX_OK) {
        rd->failed = 1;
        ngx_http_idem_unknown_done(rd);
        return;
    }

    rd->truncated = (n > 0 && n >= rd->n);
    rd->n = 0;

    rd->entries = ngx_pcalloc(rd->pool,
                              (n ? n : 1)
                              * sizeof(ngx_http_idem_unknown_entry_t));
    if (rd->entries == NULL) {
        rd->failed = 1;
        ngx_http_idem_unknown_done(rd);
        return;
    }

    for (i = 0; i < n; i++) {
        ngx_str_null(&key);
        ngx_str_null(&token);
        ngx_str_null(&id);

        f = entries[i].fields;

        for (k = 0; k + 1 < entries[i].nfields; k += 2) {
            if (f[k].len == 3 && ngx_strncmp(f[k].data, "key", 3) == 0) {
                key = f[k + 1];

            } else if (f[k].len == 5
                       && ngx_strncmp(f[k].data, "token", 5) == 0)
            {
                token = f[k + 1];

            } else if (f[k].len == 7
                       && ngx_strncmp(f[k].data, "call_id", 7) == 0)
            {
                id = f[k + 1];
            }
        }

        /* an entry of this gateway's records, or none of the module's */

        if (id.len == 0 || token.len == 0 || key.len <= rd->prefix.len
            || ngx_strncmp(key.data, rd->prefix.data, rd->prefix.len) != 0)
        {
            ngx_log_debug1(NGX_LOG_DEBUG_HTTP, rd->log, 0,
                           "idem metrics: entry \"%V\" skipped",
                           &entries[i].id);
            continue;
        }

        e = &rd->entries[rd->n];
        e->rd = rd;

        p = ngx_pnalloc(rd->pool, key.len + token.len);
        if (p == NULL) {
            rd->failed = 1;
            ngx_http_idem_unknown_done(rd);
            return;
        }

        e->key.data = p;
        e->key.len = key.len;
        e->token.data = ngx_cpymem(p, key.data, key.len);
        e->token.len = token.len;
        ngx_memcpy(e->token.data, token.data, token.len);

        rd->n++;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, rd->log, 0,
                   "idem metrics: \"%V\": %ui entries, %ui to read",
                   &rd->name, n, rd->n);

    ngx_http_idem_unknown_next(rd);
}


/* the next records, NGX_HTTP_IDEM_UNKNOWN_WINDOW in flight at most */

static void
ngx_http_idem_unknown_next(ngx_http_idem_unknown_read_t *rd)
{
    ngx_http_idem_unknown_entry_t  *e;

    while (!rd->failed && rd->sent < rd->n
           && rd->pending < NGX_HTTP_IDEM_UNKNOWN_WINDOW)
    {
        e = &rd->entries[rd->sent];

        if (ngx_http_idem_store_read_record(&e->key,
                                            ngx_http_idem_unknown_record, e)
            == NULL)
        {
            rd->failed = 1;
            break;
        }

        rd->sent++;
        rd->pending++;
    }

    if (rd->pending == 0) {
        ngx_http_idem_unknown_done(rd);
    }
}


/* one call's record: unresolved while its latest execution is the entry's */

static void
ngx_http_idem_unknown_record(void *data, ngx_int_t rc,
    ngx_http_idem_store_record_t *record)
{
    ngx_http_idem_unknown_entry_t *e = data;

    ngx_pool_t                    *pool;
    ngx_uint_t                     unresolved;
    ngx_http_idem_record_t         rec;
    ngx_http_idem_record_exec_t   *x;
    ngx_http_idem_unknown_read_t  *rd;

    rd = e->rd;

    rd->pending--;
    unresolved = 0;

    if (rc == NGX_ERROR) {
        rd->failed = 1;

    } else if (rc == NGX_OK) {

        /* a parse's allocations go with it */

        pool = ngx_create_pool(4096, rd->log);
        if (pool == NULL) {
            rd->failed = 1;

        } else {
            if (ngx_http_idem_record_parse(pool, record->fields,
                                           record->nfields, record->now,
                                           &rec)
                == NGX_OK
                && rec.nexecs > 0)
            {
                x = rec.execs[rec.nexecs - 1];

                unresolved = (rec.state.len == sizeof("UNKNOWN") - 1
                              && ngx_strncmp(rec.state.data, "UNKNOWN",
                                             rec.state.len) == 0
                              && x->token.len == e->token.len
                              && ngx_strncmp(x->token.data, e->token.data,
                                             e->token.len) == 0
                              && x->resolved[0].len == 0);
            }

            ngx_destroy_pool(pool);
        }
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, rd->log, 0,
                   "idem metrics: \"%V\" read (%i): %s", &e->key, rc,
                   unresolved ? "unresolved" : "not counted");

    rd->unresolved += unresolved;

    ngx_http_idem_unknown_next(rd);
}


/* the count into the zone (a read that failed keeps the last one) */

static void
ngx_http_idem_unknown_done(ngx_http_idem_unknown_read_t *rd)
{
    ngx_time_t                      *tp;
    ngx_http_idem_metrics_stream_t  *slot;

    slot = rd->slot;

    if (rd->failed) {
        ngx_log_error(NGX_LOG_INFO, rd->log, 0,
                      "idem metrics: \"%V\" not read whole, its count is "
                      "kept", &rd->name);

    } else {
        tp = ngx_timeofday();

        slot->seq++;
        ngx_memory_barrier();

        slot->unresolved = rd->unresolved;
        slot->truncated = rd->truncated;
        slot->read_ms = (ngx_atomic_uint_t) tp->sec * 1000 + tp->msec;
        slot->len = (u_char) rd->name.len;
        ngx_memcpy(slot->name, rd->name.data, rd->name.len);

        ngx_memory_barrier();
        slot->seq++;

        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, rd->log, 0,
                       "idem metrics: \"%V\": %ui unresolved%s", &rd->name,
                       rd->unresolved, rd->truncated ? ", truncated" : "");
    }

    ngx_memory_barrier();
    slot->busy = 0;

    ngx_queue_remove(&rd->queue);
    ngx_destroy_pool(rd->pool);
}


/* the gauges' lines: room for them */

size_t
ngx_http_idem_metrics_unknown_len(ngx_http_request_t *r)
{
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    if (imcf->unknown_streams == NULL) {
        return 0;
    }

    return 1024 + NGX_HTTP_IDEM_METRICS_STREAMS
                  * 3 * (sizeof("idem_unknown_unresolved_age_seconds"
                                "{stream=\"\"} .000\n")
                         + NGX_HTTP_IDEM_MAX_ID_LEN + NGX_ATOMIC_T_LEN);
}


/*
 * Each stream whose count was read (under its name: a reload may have
 * named other streams since), how old it is, and whether the read stopped
 * at unknown_max.  None before a first read.
 */

u_char *
ngx_http_idem_metrics_unknown_show(ngx_http_request_t *r, u_char *p,
    ngx_http_idem_metrics_stream_t *slots)
{
    uint64_t                         now, age;
    ngx_str_t                       *name;
    ngx_uint_t                       i, k, n, tries;
    ngx_time_t                      *tp;
    ngx_atomic_t                     seq;
    ngx_http_idem_main_conf_t       *imcf;
    ngx_http_idem_metrics_stream_t   copy[NGX_HTTP_IDEM_METRICS_STREAMS];
    ngx_uint_t                       shown[NGX_HTTP_IDEM_METRICS_STREAMS];

    static char  *help[] = {
        "# HELP idem_unknown_unresolved UNKNOWN executions in the stream "
        "(idem_unknown_stream) not resolved yet, as its last read found "
        "them (its newest unknown_max entries).\n"
        "# TYPE idem_unknown_unresolved gauge\n",
        "# HELP idem_unknown_unresolved_age_seconds How long ago that read "
        "ended (a read starts at most every unknown_interval, from a "
        "scrape).\n"
        "# TYPE idem_unknown_unresolved_age_seconds gauge\n",
        "# HELP idem_unknown_unresolved_truncated 1: that read stopped at "
        "unknown_max entries, older ones were not looked at.\n"
        "# TYPE idem_unknown_unresolved_truncated gauge\n"
    };

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    if (imcf->unknown_streams == NULL) {
        return p;
    }

    name = imcf->unknown_streams->elts;
    n = ngx_min(imcf->unknown_streams->nelts, NGX_HTTP_IDEM_METRICS_STREAMS);

    /* a whole copy of each slot, or none */

    for (i = 0; i < n; i++) {
        shown[i] = 0;

        for (tries = 0; tries < 8; tries++) {
            seq = slots[i].seq;

            if (seq & 1) {
                ngx_cpu_pause();
                continue;
            }

            ngx_memory_barrier();
            ngx_memcpy(&copy[i], &slots[i],
                       sizeof(ngx_http_idem_metrics_stream_t));
            ngx_memory_barrier();

            if (slots[i].seq == seq) {
                shown[i] = (copy[i].read_ms != 0
                            && copy[i].len == name[i].len
                            && ngx_strncmp(copy[i].name, name[i].data,
                                           name[i].len) == 0);
                break;
            }
        }
    }

    tp = ngx_timeofday();
    now = (uint64_t) tp->sec * 1000 + tp->msec;

    for (k = 0; k < 3; k++) {

        for (i = 0; i < n; i++) {
            if (shown[i]) {
                break;
            }
        }

        if (i == n) {
            return p;
        }

        p = ngx_cpymem(p, help[k], ngx_strlen(help[k]));

        for (i = 0; i < n; i++) {
            if (!shown[i]) {
                continue;
            }

            p = ngx_sprintf(p, "%s{stream=\"%V\"} ",
                            k == 0 ? "idem_unknown_unresolved"
                            : k == 1 ? "idem_unknown_unresolved_age_seconds"
                            : "idem_unknown_unresolved_truncated",
                            &name[i]);

            if (k == 1) {
                age = (now > copy[i].read_ms) ? now - copy[i].read_ms : 0;
                p = ngx_sprintf(p, "%uL.%03uL\n", age / 1000, age % 1000);

            } else {
                p = ngx_sprintf(p, "%uA\n", k == 0 ? copy[i].unresolved
                                                   : copy[i].truncated);
            }
        }
    }

    return p;
}


/* a worker going: a read it had in flight is no longer its own */

void
ngx_http_idem_metrics_unknown_exit(ngx_http_idem_metrics_stream_t *slots)
{
    ngx_uint_t                     i;
    ngx_queue_t                   *q;
    ngx_http_idem_unknown_read_t  *rd;

    for (i = 0; i < NGX_HTTP_IDEM_METRICS_STREAMS; i++) {
        (void) ngx_atomic_cmp_set(&slots[i].busy,
                                  (ngx_atomic_uint_t) ngx_pid, 0);
    }

    /* before the store gives up their commands, which answers none */

    if (ngx_http_idem_unknown_reads.next == NULL) {
        return;
    }

    while (!ngx_queue_empty(&ngx_http_idem_unknown_reads)) {
        q = ngx_queue_head(&ngx_http_idem_unknown_reads);
        rd = ngx_queue_data(q, ngx_http_idem_unknown_read_t, queue);

        ngx_queue_remove(q);
        ngx_destroy_pool(rd->pool);
    }
}


static ngx_uint_t
ngx_http_idem_unknown_alive(ngx_pid_t pid)
{
    if (pid == ngx_pid) {
        return 1;
    }

    return kill(pid, 0) == 0 || ngx_errno == NGX_EPERM;
}
