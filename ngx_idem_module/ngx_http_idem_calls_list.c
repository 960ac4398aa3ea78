
/*
 * The calls that need a person.  An idem_status location asked for
 * without an id (GET /_idem/calls/) lists the executions still UNKNOWN
 * and not resolved, from the follow-up stream its location names
 * (idem_unknown_stream), newest first: as JSON when the client asks for
 * it, else as a page that needs no script and reads at phone width.
 *
 * A page is one bounded read of the stream (?limit=, ?before=: XREVRANGE
 * with COUNT, store/redis/ngx_http_idem_redis_stream.c), then the
 * records of that page's calls, read at once; an entry whose record no
 * longer says UNKNOWN for that very execution (resolved, run again,
 * expired) is left out.  Only calls this location reads by id are
 * listed, as its links would read them: under the caller's own scope;
 * or, where scope_digest=on, every scope's by its digest and the calls
 * recorded without a scope (by scope_digest=none where the location has
 * a scope of its own), so that one location lists every call that needs
 * a person.
 *
 * What comes from the stream or a record is whatever a client sent (a
 * URI): escaped for HTML and JSON, numbers written only when they are.
 */


#include "ngx_http_idem_calls_list.h"
#include "ngx_http_idem_call_id.h"
#include "ngx_http_idem_json.h"
#include "ngx_http_idem_problem.h"
#include "ngx_http_idem_record.h"
#include "ngx_http_idem_record_parse.h"
#include "ngx_http_idem_store.h"
#include "ngx_http_idem_timeline.h"
#include "ngx_http_idem_util.h"


/* ?limit=: its default, and the most one page reads */
#define NGX_HTTP_IDEM_LIST_LIMIT         50
#define NGX_HTTP_IDEM_LIST_MAX           200

/* a stream entry's id: <ms>-<seq>, each at most 20 digits */
#define NGX_HTTP_IDEM_LIST_ENTRY_ID      41

/* room for one call beside its strings (escaped), and for the page */
#define NGX_HTTP_IDEM_LIST_ROW           1024
#define NGX_HTTP_IDEM_LIST_HEAD          4096


/* the entry's fields the list uses (ngx_http_idem_stream.c writes them) */
enum {
    NGX_HTTP_IDEM_LIST_CALL_ID = 0,
    NGX_HTTP_IDEM_LIST_TRACE_ID,
    NGX_HTTP_IDEM_LIST_KEY,
    NGX_HTTP_IDEM_LIST_TOKEN,
    NGX_HTTP_IDEM_LIST_METHOD,
    NGX_HTTP_IDEM_LIST_URI,
    NGX_HTTP_IDEM_LIST_NODE,
    NGX_HTTP_IDEM_LIST_ATTEMPTS,
    NGX_HTTP_IDEM_LIST_LAST_OUTCOME,
    NGX_HTTP_IDEM_LIST_LAST_SENT,
    NGX_HTTP_IDEM_LIST_FINAL_STATUS,
    NGX_HTTP_IDEM_LIST_CREATED_MS,
    NGX_HTTP_IDEM_LIST_ENDED_MS,
    NGX_HTTP_IDEM_LIST_RECEIPT,
    NGX_HTTP_IDEM_LIST_NFIELDS
};


typedef struct ngx_http_idem_calls_s  ngx_http_idem_calls_t;

typedef struct {
    ngx_http_idem_calls_t           *list;
    ngx_http_idem_store_op_t        *op;
    ngx_str_t                        entry;
    ngx_str_t                        f[NGX_HTTP_IDEM_LIST_NFIELDS];
    ngx_str_t                        digest;    /* scoped, where the link
                                                   takes it; else empty */
    ngx_str_t                        link_arg;  /* the link's scope_digest
                                                   (a digest, "none"), or
                                                   empty */
    uint64_t                         created_ms;
    unsigned                         listed:1;
} ngx_http_idem_calls_item_t;

struct ngx_http_idem_calls_s {
    ngx_http_request_t              *request;
    ngx_http_idem_loc_conf_t        *ilcf;
    ngx_http_idem_store_op_t        *op;        /* the stream's page */
    ngx_http_idem_calls_item_t      *items;
    ngx_uint_t                       nitems;
    ngx_uint_t                       pending;   /* records not read yet */
    ngx_uint_t                       limit;
    ngx_str_t                        limit_arg; /* as given, or empty */
    uint64_t                         now;       /* Redis's clock */
    ngx_str_t                        next;      /* older entries: from */
    ngx_str_t                        path;      /* the list's, links */
    ngx_uint_t                       html;
    unsigned                         failed:1;
};


static ngx_int_t ngx_http_idem_calls_args(ngx_http_request_t *r,
    ngx_http_idem_calls_t *list, ngx_str_t *before,
    ngx_http_idem_problem_t *problem);
static void ngx_http_idem_calls_page_read(void *data, ngx_int_t rc,
    uint64_t now, ngx_http_idem_store_read_entry_t *entries, ngx_uint_t n);
static ngx_int_t ngx_http_idem_calls_item(ngx_http_idem_calls_t *list,
    ngx_http_idem_store_read_entry_t *entry, ngx_http_idem_calls_item_t *it);
static void ngx_http_idem_calls_record_read(void *data, ngx_int_t rc,
    ngx_http_idem_store_record_t *record);
static void ngx_http_idem_calls_done(ngx_http_idem_calls_t *list);
static ngx_int_t ngx_http_idem_calls_send(ngx_http_idem_calls_t *list);
static ngx_int_t ngx_http_idem_calls_unread(ngx_http_idem_calls_t *list,
    ngx_str_t *out);
static size_t ngx_http_idem_calls_room(ngx_http_idem_calls_t *list);
static ngx_int_t ngx_http_idem_calls_json(ngx_http_idem_calls_t *list,
    ngx_str_t *out);
static ngx_int_t ngx_http_idem_calls_page(ngx_http_idem_calls_t *list,
    ngx_str_t *out);
static u_char *ngx_http_idem_calls_head(u_char *p);
static u_char *ngx_http_idem_calls_json_str(u_char *p, ngx_str_t *s);
static u_char *ngx_http_idem_calls_json_num(u_char *p, ngx_str_t *s);
static u_char *ngx_http_idem_calls_html(u_char *p, ngx_str_t *s);
static u_char *ngx_http_idem_calls_age(u_char *p, uint64_t ms);
static ngx_uint_t ngx_http_idem_calls_digits(ngx_str_t *s);
static void ngx_http_idem_calls_cleanup(void *data);


static ngx_str_t  ngx_http_idem_calls_fields[] = {
    ngx_string("call_id"),
    ngx_string("trace_id"),
    ngx_string("key"),
    ngx_string("token"),
    ngx_string("method"),
    ngx_string("uri"),
    ngx_string("node"),
    ngx_string("attempts"),
    ngx_string("last_outcome"),
    ngx_string("last_sent"),
    ngx_string("final_status"),
    ngx_string("created_ms"),
    ngx_string("ended_ms"),
    ngx_string("receipt")
};


static ngx_str_t  ngx_http_idem_calls_style = ngx_string(
    "<style>\n"
    "body{font:15px/1.45 system-ui,sans-serif;margin:1.5em;color:#222;"
    "max-width:60em}\n"
    "h1{font-size:1.6em;margin:0 0 .2em}\n"
    ".means{margin:0 0 1.2em;color:#444}\n"
    "code{font-family:ui-monospace,monospace;word-break:break-all}\n"
    "ol{list-style:none;padding:0;margin:0}\n"
    "li{border:1px solid #e4e4e4;border-left:5px solid #e0a030;"
    "border-radius:4px;padding:.6em .8em;margin:0 0 .7em}\n"
    ".top{display:flex;flex-wrap:wrap;justify-content:space-between;"
    "gap:.2em 1em}\n"
    ".id{font-size:1.1em;font-weight:600}\n"
    ".age{color:#b86e00;white-space:nowrap}\n"
    ".req{margin:.3em 0}\n"
    ".meta{margin:0;color:#555;font-size:.92em}\n"
    ".meta span{display:inline-block;margin-right:1em}\n"
    ".none{color:#1b7f2a;font-size:1.2em}\n"
    ".pager{margin:1.2em 0}\n"
    "@media (max-width:40em){body{margin:.8em}}\n"
    "</style>\n");


/*
 * GET or HEAD without an id.  NGX_DONE: the stream is being read; else
 * the answer's status, sent or to send.
 */

ngx_int_t
ngx_http_idem_calls_list(ngx_http_request_t *r,
    ngx_http_idem_loc_conf_t *ilcf, ngx_uint_t html)
{
    ngx_int_t                   rc;
    ngx_str_t                   before, stream, key, id;
    ngx_pool_cleanup_t         *cln;
    ngx_http_idem_calls_t      *list;
    ngx_http_idem_problem_t     problem;
    ngx_http_idem_main_conf_t  *imcf;

    if (ilcf->unknown_stream.len == 0) {
        ngx_http_idem_problem_set(r, &problem,
                                  NGX_HTTP_IDEM_P_NO_UNKNOWN_LIST, NULL,
                                  "this location names no "
                                  "idem_unknown_stream: it lists no calls; "
                                  "ask for a call by its id");
        return ngx_http_idem_send_problem(r, &problem, NULL);
    }

    list = ngx_pcalloc(r->pool, sizeof(ngx_http_idem_calls_t));
    if (list == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    list->request = r;
    list->ilcf = ilcf;
    list->html = html;

    if (ngx_http_idem_calls_args(r, list, &before, &problem) != NGX_OK) {
        return ngx_http_idem_send_problem(r, &problem, NULL);
    }

    /* a client's location lists its own scope's calls: it must have one */

    if (ilcf->dedupe_scope != NULL && !ilcf->status_digest) {
        ngx_str_set(&id, "-");

        rc = ngx_http_idem_record_key(r, ilcf, &id, &key);

        if (rc == NGX_ERROR) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (rc == NGX_DECLINED) {
            ngx_http_idem_problem_empty_scope(r, &problem, ilcf,
                                              "the caller's scope (whose "
                                              "calls are listed)");
            return ngx_http_idem_send_problem(r, &problem, NULL);
        }
    }

    /* links: the list's own path, normalised, and a call id */

    if (ngx_http_idem_link_path(r, &list->path) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    stream.len = imcf->key_prefix.len + ilcf->unknown_stream.len;
    stream.data = ngx_pnalloc(r->pool, stream.len);
    if (stream.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(ngx_cpymem(stream.data, imcf->key_prefix.data,
                          imcf->key_prefix.len),
               ilcf->unknown_stream.data, ilcf->unknown_stream.len);

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* a request gone before the answers cancels its reads */

    cln->handler = ngx_http_idem_calls_cleanup;
    cln->data = list;

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem list: \"%V\" before \"%V\", %ui at most, for %s",
                   &stream, &before, list->limit, html ? "a page" : "JSON");

    list->op = ngx_http_idem_store_read_stream(&stream, &before, list->limit,
                                               ngx_http_idem_calls_page_read,
                                               list);

    if (list->op == NULL) {
        list->failed = 1;
        return ngx_http_idem_calls_send(list);
    }

    r->main->count++;

    return NGX_DONE;
}


/*
 * ?limit=N (1 and up; more than NGX_HTTP_IDEM_LIST_MAX reads that many)
 * and ?before=<entry id> (the "next" of the page before).  NGX_ABORT:
 * refused with "problem".
 */

static ngx_int_t
ngx_http_idem_calls_args(ngx_http_request_t *r, ngx_http_idem_calls_t *list,
    ngx_str_t *before, ngx_http_idem_problem_t *problem)
{
    char        *why;
    ngx_int_t    n;
    ngx_uint_t   i, dash;

    list->limit = NGX_HTTP_IDEM_LIST_LIMIT;
    ngx_str_null(before);

    if (ngx_http_arg(r, (u_char *) "limit", sizeof("limit") - 1,
                     &list->limit_arg)
        == NGX_OK)
    {
        for (i = 0; i < list->limit_arg.len; i++) {
            if (list->limit_arg.data[i] < '0'
                || list->limit_arg.data[i] > '9')
            {
                break;
            }
        }

        n = ngx_atoi(list->limit_arg.data, list->limit_arg.len);

        if (list->limit_arg.len == 0 || i < list->limit_arg.len || n == 0) {
            why = "limit must be a number from 1";
            goto invalid;
        }

        /* bounded: a long stream never makes one request slow */

        list->limit = (n == NGX_ERROR || n > NGX_HTTP_IDEM_LIST_MAX)
                      ? NGX_HTTP_IDEM_LIST_MAX : (ngx_uint_t) n;

    } else {
        ngx_str_null(&list->limit_arg);
    }

    if (ngx_http_arg(r, (u_char *) "before", sizeof("before") - 1, before)
        != NGX_OK)
    {
        ngx_str_null(before);
        return NGX_OK;
    }

    /* an entry id: <digits>-<digits>, or <digits> */

    dash = 0;

    for (i = 0; i < before->len; i++) {
        if (before->data[i] == '-' && i > 0 && !dash
            && i + 1 < before->len)
        {
            dash = 1;
            continue;
        }

        if (before->data[i] < '0' || before->data[i] > '9') {
            break;
        }
    }

    if (before->len == 0 || i < before->len
        || before->len > NGX_HTTP_IDEM_LIST_ENTRY_ID)
    {
        why = "before must be a stream entry's id, as \"next\" gives it "
              "(<ms>-<n>)";
        goto invalid;
    }

    return NGX_OK;

invalid:

    ngx_http_idem_problem_set(r, problem, NGX_HTTP_IDEM_P_INVALID_PAGE, NULL,
                              why);

    return NGX_ABORT;
}


/* the stream's page: its calls' records are read, all at once */

static void
ngx_http_idem_calls_page_read(void *data, ngx_int_t rc, uint64_t now,
    ngx_http_idem_store_read_entry_t *entries, ngx_uint_t n)
{
    ngx_http_idem_calls_t *list = data;

    ngx_uint_t                   i, j;
    ngx_http_request_t          *r;
    ngx_http_idem_calls_item_t  *it;

    r = list->request;
    list->op = NULL;

    if (rc != NGX_OK) {
        list->failed = 1;
        ngx_http_idem_calls_done(list);
        return;
    }

    list->now = now;

    /* a full page: older entries may follow */

    if (n == list->limit && n > 0) {
        list->next.len = entries[n - 1].id.len;
        list->next.data = ngx_pstrdup(r->pool, &entries[n - 1].id);
        if (list->next.data == NULL) {
            list->failed = 1;
            ngx_http_idem_calls_done(list);
            return;
        }
    }

    list->items = ngx_pcalloc(r->pool,
                              (n ? n : 1) * sizeof(ngx_http_idem_calls_item_t));
    if (list->items == NULL) {
        list->failed = 1;
        ngx_http_idem_calls_done(list);
        return;
    }

    for (i = 0; i < n; i++) {
        it = &list->items[list->nitems];

        rc = ngx_http_idem_calls_item(list, &entries[i], it);

        if (rc == NGX_ERROR) {
            list->failed = 1;
            ngx_http_idem_calls_done(list);
            return;
        }

        if (rc != NGX_OK) {
            continue;
        }

        /* a call sent again: its newest entry only */

        for (j = 0; j < list->nitems; j++) {
            if (list->items[j].f[NGX_HTTP_IDEM_LIST_KEY].len
                    == it->f[NGX_HTTP_IDEM_LIST_KEY].len
                && ngx_strncmp(list->items[j].f[NGX_HTTP_IDEM_LIST_KEY].data,
                               it->f[NGX_HTTP_IDEM_LIST_KEY].data,
                               it->f[NGX_HTTP_IDEM_LIST_KEY].len)
                   == 0)
            {
                break;
            }
        }

        if (j < list->nitems) {
            continue;
        }

        list->nitems++;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem list: %ui entries, %ui calls to read, next \"%V\"",
                   n, list->nitems, &list->next);

    for (i = 0; i < list->nitems; i++) {
        it = &list->items[i];
        it->list = list;

        it->op = ngx_http_idem_store_read_record(
                                         &it->f[NGX_HTTP_IDEM_LIST_KEY],
                                         ngx_http_idem_calls_record_read, it);
        if (it->op == NULL) {
            list->failed = 1;
            break;
        }

        list->pending++;
    }

    if (list->failed) {
        ngx_http_idem_calls_cleanup(list);
        list->pending = 0;
    }

    if (list->pending == 0) {
        ngx_http_idem_calls_done(list);
    }
}


/*
 * An entry as an item, its strings copied (they live during the reply
 * only).  NGX_OK: a call this location reads by id, to read; NGX_DECLINED:
 * not one (another scope, another prefix, an entry not of this module).
 */

static ngx_int_t
ngx_http_idem_calls_item(ngx_http_idem_calls_t *list,
    ngx_http_idem_store_read_entry_t *entry, ngx_http_idem_calls_item_t *it)
{
    u_char                     *p;
    ngx_int_t                   rc;
    ngx_str_t                   key, digest, *id, *f;
    ngx_uint_t                  i, k, scoped;
    ngx_http_request_t         *r;
    ngx_http_idem_main_conf_t  *imcf;

    r = list->request;

    ngx_memzero(it, sizeof(ngx_http_idem_calls_item_t));

    f = entry->fields;

    for (i = 0; i + 1 < entry->nfields; i += 2) {
        for (k = 0; k < NGX_HTTP_IDEM_LIST_NFIELDS; k++) {
            if (f[i].len == ngx_http_idem_calls_fields[k].len
                && ngx_strncmp(f[i].data, ngx_http_idem_calls_fields[k].data,
                               f[i].len)
                   == 0)
            {
                it->f[k] = f[i + 1];
                break;
            }
        }
    }

    id = &it->f[NGX_HTTP_IDEM_LIST_CALL_ID];

    if (id->len == 0 || id->len > NGX_HTTP_IDEM_MAX_ID_LEN
        || ngx_http_idem_check_charset(id) != NGX_OK
        || it->f[NGX_HTTP_IDEM_LIST_TOKEN].len == 0)
    {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem list: entry \"%V\" skipped: no call", &entry->id);
        return NGX_DECLINED;
    }

    /* the key a read of this id here would use: the entry's, or not */

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    f = &it->f[NGX_HTTP_IDEM_LIST_KEY];
    p = f->data + imcf->key_prefix.len;

    scoped = (f->len == imcf->key_prefix.len + sizeof("s:{:}") - 1
                        + NGX_HTTP_IDEM_SHA256_HEX_LEN + id->len
              && ngx_strncmp(f->data, imcf->key_prefix.data,
                             imcf->key_prefix.len)
                 == 0
              && ngx_strncmp(p, "s:{", 3) == 0);

    ngx_str_null(&digest);
    ngx_str_null(&it->link_arg);

    if (scoped && list->ilcf->status_digest) {
        digest.data = p + 3;
        digest.len = NGX_HTTP_IDEM_SHA256_HEX_LEN;

        rc = ngx_http_idem_record_key_digest(r, &digest, id, &key);

    } else if (list->ilcf->status_digest) {

        /* unscoped, read so here: by scope_digest=none if need be */

        rc = ngx_http_idem_record_key_digest(r, NULL, id, &key);

        if (list->ilcf->dedupe_scope != NULL) {
            ngx_str_set(&it->link_arg, NGX_HTTP_IDEM_SCOPE_NONE);
        }

    } else {
        rc = ngx_http_idem_record_key(r, list->ilcf, id, &key);
    }

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc != NGX_OK || key.len != f->len
        || ngx_strncmp(key.data, f->data, f->len) != 0)
    {
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "idem list: entry \"%V\" skipped: \"%V\" is not read "
                       "here", &entry->id, f);
        return NGX_DECLINED;
    }

    it->entry.len = entry->id.len;
    it->entry.data = ngx_pstrdup(r->pool, &entry->id);
    if (it->entry.data == NULL) {
        return NGX_ERROR;
    }

    for (k = 0; k < NGX_HTTP_IDEM_LIST_NFIELDS; k++) {
        if (it->f[k].len == 0) {
            continue;
        }

        p = ngx_pstrdup(r->pool, &it->f[k]);
        if (p == NULL) {
            return NGX_ERROR;
        }

        it->f[k].data = p;
    }

    if (digest.len) {
        it->digest.len = digest.len;
        it->digest.data = it->f[NGX_HTTP_IDEM_LIST_KEY].data
                          + imcf->key_prefix.len + 3;
        it->link_arg = it->digest;
    }

    rc = ngx_atoi(it->f[NGX_HTTP_IDEM_LIST_CREATED_MS].data,
                  it->f[NGX_HTTP_IDEM_LIST_CREATED_MS].len);
    it->created_ms = (rc == NGX_ERROR) ? 0 : (uint64_t) rc;

    return NGX_OK;
}


/*
 * A call's record: listed when its latest execution is the entry's, still
 * UNKNOWN and not resolved
 */

static void
ngx_http_idem_calls_record_read(void *data, ngx_int_t rc,
    ngx_http_idem_store_record_t *record)
{
    ngx_http_idem_calls_item_t *it = data;

    ngx_str_t                     *token, *receipt;
    ngx_http_idem_calls_t         *list;
    ngx_http_idem_record_t         rec;
    ngx_http_idem_record_exec_t   *x;

    list = it->list;
    it->op = NULL;
    list->pending--;

    if (rc == NGX_ERROR) {
        list->failed = 1;

    } else if (rc == NGX_OK
               && ngx_http_idem_record_parse(list->request->pool,
                                             record->fields, record->nfields,
                                             record->now, &rec)
                  == NGX_OK
               && rec.nexecs > 0)
    {
        x = rec.execs[rec.nexecs - 1];
        token = &it->f[NGX_HTTP_IDEM_LIST_TOKEN];

        it->listed = (rec.state.len == sizeof("UNKNOWN") - 1
                      && ngx_strncmp(rec.state.data, "UNKNOWN",
                                     rec.state.len) == 0
                      && x->token.len == token->len
                      && ngx_strncmp(x->token.data, token->data,
                                     token->len) == 0
                      && x->resolved[0].len == 0);

        /* the service's receipt, where an answer of it carried one */

        receipt = &it->f[NGX_HTTP_IDEM_LIST_RECEIPT];

        if (it->listed && receipt->len == 0 && x->receipt.len) {
            receipt->len = x->receipt.len;
            receipt->data = ngx_pstrdup(list->request->pool, &x->receipt);
            if (receipt->data == NULL) {
                list->failed = 1;
            }
        }
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, list->request->connection->log, 0,
                   "idem list: \"%V\" read (%i): %s",
                   &it->f[NGX_HTTP_IDEM_LIST_CALL_ID], rc,
                   it->listed ? "listed" : "left out");

    if (list->pending == 0) {
        ngx_http_idem_calls_done(list);
    }
}


static void
ngx_http_idem_calls_done(ngx_http_idem_calls_t *list)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = list->request;
    c = r->connection;

    ngx_http_finalize_request(r, ngx_http_idem_calls_send(list));
    ngx_http_run_posted_requests(c);
}


/*
 * 200 the list; 503 when a read got no answer: {"state":"UNKNOWN"}, or a
 * page for a browser (an operator opens the list during an outage)
 */

static ngx_int_t
ngx_http_idem_calls_send(ngx_http_idem_calls_t *list)
{
    ngx_int_t            rc;
    ngx_str_t            body, value;
    ngx_uint_t           status;
    ngx_http_request_t  *r;

    r = list->request;

    ngx_str_set(&value, "Accept");

    if (ngx_http_idem_add_response_header(r, "Vary", &value) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&value, "no-store");

    if (ngx_http_idem_add_response_header(r, "Cache-Control", &value)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (list->html) {
        ngx_str_set(&value, "default-src 'none'; style-src 'unsafe-inline'; "
                    "form-action 'self'");

        if (ngx_http_idem_add_response_header(r, "Content-Security-Policy",
                                              &value)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    status = NGX_HTTP_OK;

    if (list->failed) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "idem list: the store did not answer");

        ngx_str_set(&value, "1");

        if (ngx_http_idem_add_response_header(r, "Retry-After", &value)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        status = NGX_HTTP_SERVICE_UNAVAILABLE;

        if (list->html) {
            rc = ngx_http_idem_calls_unread(list, &body);

        } else {
            ngx_str_set(&body, "{\"state\":\"UNKNOWN\"}\n");
            rc = NGX_OK;
        }

    } else {
        rc = list->html ? ngx_http_idem_calls_page(list, &body)
                        : ngx_http_idem_calls_json(list, &body);
    }

    if (rc != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_idem_send_response(r, status,
                                       list->html ? "text/html; charset=utf-8"
                                                  : "application/json",
                                       &body);
}


/* the page of a list not read: the store did not answer */

static ngx_int_t
ngx_http_idem_calls_unread(ngx_http_idem_calls_t *list, ngx_str_t *out)
{
    u_char  *p;
    size_t   len;

    len = NGX_HTTP_IDEM_LIST_HEAD + ngx_http_idem_calls_style.len;

    p = ngx_pnalloc(list->request->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;

    p = ngx_http_idem_calls_head(p);
    p = ngx_cpymem(p, "<p class=\"means\">The record store cannot be read "
                   "now, so which calls need a person is not known: reload "
                   "this page in a moment.</p>\n</body>\n</html>\n",
                   sizeof("<p class=\"means\">The record store cannot be "
                          "read now, so which calls need a person is not "
                          "known: reload this page in a moment.</p>\n"
                          "</body>\n</html>\n") - 1);

    out->len = p - out->data;

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, list->request->connection->log, 0,
                   "idem list: the page of a list not read");

    return NGX_OK;
}


/* room for an item's strings, escaped (6 bytes a byte at most) */

static size_t
ngx_http_idem_calls_room(ngx_http_idem_calls_t *list)
{
    size_t                       len;
    ngx_uint_t                   i, k;
    ngx_http_idem_calls_item_t  *it;

    len = NGX_HTTP_IDEM_LIST_HEAD + ngx_http_idem_calls_style.len
          + 6 * (list->path.len + list->next.len + list->limit_arg.len);

    for (i = 0; i < list->nitems; i++) {
        it = &list->items[i];

        if (!it->listed) {
            continue;
        }

        len += NGX_HTTP_IDEM_LIST_ROW + 6 * (it->entry.len + it->digest.len
                                             + list->path.len);

        for (k = 0; k < NGX_HTTP_IDEM_LIST_NFIELDS; k++) {
            len += 6 * it->f[k].len;
        }

        len += 6 * it->f[NGX_HTTP_IDEM_LIST_CALL_ID].len;
    }

    return len;
}


/*
 * {"calls":[{"call_id":..,"state":"UNKNOWN","age_ms":..,...}],"next":..}
 */

static ngx_int_t
ngx_http_idem_calls_json(ngx_http_idem_calls_t *list, ngx_str_t *out)
{
    u_char                      *p, *last;
    size_t                       len;
    ngx_str_t                   *f;
    ngx_uint_t                   i, n;
    ngx_http_idem_calls_item_t  *it;

    len = ngx_http_idem_calls_room(list);

    p = ngx_pnalloc(list->request->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;
    last = p + len;

    p = ngx_cpymem(p, "{\"calls\":[", sizeof("{\"calls\":[") - 1);

    for (i = 0, n = 0; i < list->nitems; i++) {
        it = &list->items[i];

        if (!it->listed) {
            continue;
        }

        if (n++) {
            *p++ = ',';
        }

        f = it->f;

        p = ngx_cpymem(p, "{\"call_id\":", sizeof("{\"call_id\":") - 1);
        p = ngx_http_idem_calls_json_str(p, &f[NGX_HTTP_IDEM_LIST_CALL_ID]);
        p = ngx_cpymem(p, ",\"state\":\"UNKNOWN\",\"age_ms\":",
                       sizeof(",\"state\":\"UNKNOWN\",\"age_ms\":") - 1);

        if (it->created_ms) {
            p = ngx_sprintf(p, "%uL", list->now > it->created_ms
                                      ? list->now - it->created_ms : 0);

        } else {
            p = ngx_cpymem(p, "null", 4);
        }

        p = ngx_cpymem(p, ",\"created_ms\":", sizeof(",\"created_ms\":") - 1);
        p = ngx_http_idem_calls_json_num(p,
                                     &f[NGX_HTTP_IDEM_LIST_CREATED_MS]);
        p = ngx_cpymem(p, ",\"ended_ms\":", sizeof(",\"ended_ms\":") - 1);
        p = ngx_http_idem_calls_json_num(p, &f[NGX_HTTP_IDEM_LIST_ENDED_MS]);
        p = ngx_cpymem(p, ",\"method\":", sizeof(",\"method\":") - 1);
        p = ngx_http_idem_calls_json_str(p, &f[NGX_HTTP_IDEM_LIST_METHOD]);
        p = ngx_cpymem(p, ",\"uri\":", sizeof(",\"uri\":") - 1);
        p = ngx_http_idem_calls_json_str(p, &f[NGX_HTTP_IDEM_LIST_URI]);
        p = ngx_cpymem(p, ",\"node\":", sizeof(",\"node\":") - 1);
        p = ngx_http_idem_calls_json_str(p, &f[NGX_HTTP_IDEM_LIST_NODE]);
        p = ngx_cpymem(p, ",\"attempts\":", sizeof(",\"attempts\":") - 1);
        p = ngx_http_idem_calls_json_num(p, &f[NGX_HTTP_IDEM_LIST_ATTEMPTS]);
        p = ngx_cpymem(p, ",\"last_outcome\":",
                       sizeof(",\"last_outcome\":") - 1);
        p = ngx_http_idem_calls_json_str(p,
                                     &f[NGX_HTTP_IDEM_LIST_LAST_OUTCOME]);
        p = ngx_sprintf(p, ",\"last_sent\":%s,\"final_status\":",
                        (f[NGX_HTTP_IDEM_LIST_LAST_SENT].len == 1
                         && f[NGX_HTTP_IDEM_LIST_LAST_SENT].data[0] == '1')
                        ? "true" : "false");
        p = ngx_http_idem_calls_json_num(p,
                                     &f[NGX_HTTP_IDEM_LIST_FINAL_STATUS]);
        p = ngx_cpymem(p, ",\"receipt\":", sizeof(",\"receipt\":") - 1);
        p = ngx_http_idem_calls_json_str(p, &f[NGX_HTTP_IDEM_LIST_RECEIPT]);
        p = ngx_cpymem(p, ",\"trace_id\":", sizeof(",\"trace_id\":") - 1);
        p = ngx_http_idem_calls_json_str(p, &f[NGX_HTTP_IDEM_LIST_TRACE_ID]);
        p = ngx_cpymem(p, ",\"scope_digest\":",
                       sizeof(",\"scope_digest\":") - 1);
        p = ngx_http_idem_calls_json_str(p, &it->digest);
        p = ngx_cpymem(p, ",\"entry\":", sizeof(",\"entry\":") - 1);
        p = ngx_http_idem_calls_json_str(p, &it->entry);

        /* the call's page (or JSON), as the list's path and its id */

        p = ngx_cpymem(p, ",\"link\":\"", sizeof(",\"link\":\"") - 1);
        p = ngx_http_idem_json_escape(p, list->path.data, list->path.len);
        p = ngx_http_idem_json_escape(p, f[NGX_HTTP_IDEM_LIST_CALL_ID].data,
                                      f[NGX_HTTP_IDEM_LIST_CALL_ID].len);

        if (it->link_arg.len) {
            p = ngx_sprintf(p, "?scope_digest=%V", &it->link_arg);
        }

        p = ngx_cpymem(p, "\"}", 2);
    }

    p = ngx_cpymem(p, "],\"next\":", sizeof("],\"next\":") - 1);
    p = ngx_http_idem_calls_json_str(p, &list->next);
    p = ngx_cpymem(p, "}\n", 2);

    if (p > last) {
        ngx_log_error(NGX_LOG_ALERT, list->request->connection->log, 0,
                      "idem: list buffer overrun");
        return NGX_ERROR;
    }

    out->len = p - out->data;

    return NGX_OK;
}


/* the same as a page: a card a call, links to their pages, the pager */

static ngx_int_t
ngx_http_idem_calls_page(ngx_http_idem_calls_t *list, ngx_str_t *out)
{
    u_char                      *p, *last;
    size_t                       len;
    ngx_str_t                   *f, *outcome;
    ngx_uint_t                   i, n;
    ngx_http_idem_calls_item_t  *it;

    len = ngx_http_idem_calls_room(list);

    p = ngx_pnalloc(list->request->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;
    last = p + len;

    for (i = 0, n = 0; i < list->nitems; i++) {
        n += list->items[i].listed;
    }

    p = ngx_http_idem_calls_head(p);
    p = ngx_sprintf(p, "<p class=\"means\">Sent, with no answer: each may have "
                    "taken effect. Ask the service, then open the call and "
                    "say what it answered. %ui on this page, newest "
                    "first.</p>\n", n);

    if (n == 0) {
        p = ngx_cpymem(p, "<p class=\"none\">No UNKNOWN call waits here."
                       "</p>\n",
                       sizeof("<p class=\"none\">No UNKNOWN call waits here."
                              "</p>\n") - 1);

    } else {
        p = ngx_cpymem(p, "<ol class=\"calls\">\n",
                       sizeof("<ol class=\"calls\">\n") - 1);
    }

    for (i = 0; i < list->nitems; i++) {
        it = &list->items[i];

        if (!it->listed) {
            continue;
        }

        f = it->f;

        p = ngx_cpymem(p, "<li class=\"call\"><div class=\"top\">"
                       "<a class=\"id\" href=\"",
                       sizeof("<li class=\"call\"><div class=\"top\">"
                              "<a class=\"id\" href=\"") - 1);
        p = ngx_http_idem_calls_html(p, &list->path);
        p = ngx_http_idem_calls_html(p, &f[NGX_HTTP_IDEM_LIST_CALL_ID]);

        if (it->link_arg.len) {
            p = ngx_sprintf(p, "?scope_digest=%V", &it->link_arg);
        }

        p = ngx_cpymem(p, "\"><code>", sizeof("\"><code>") - 1);
        p = ngx_http_idem_calls_html(p, &f[NGX_HTTP_IDEM_LIST_CALL_ID]);
        p = ngx_cpymem(p, "</code></a><span class=\"age\">",
                       sizeof("</code></a><span class=\"age\">") - 1);
        p = ngx_http_idem_calls_age(p, it->created_ms == 0 ? 0
                                     : list->now > it->created_ms
                                       ? list->now - it->created_ms : 1);
        p = ngx_cpymem(p, "</span></div>\n<p class=\"req\"><code>",
                       sizeof("</span></div>\n<p class=\"req\"><code>") - 1);
        p = ngx_http_idem_calls_html(p, &f[NGX_HTTP_IDEM_LIST_METHOD]);
        *p++ = ' ';
        p = ngx_http_idem_calls_html(p, &f[NGX_HTTP_IDEM_LIST_URI]);
        p = ngx_cpymem(p, "</code></p>\n<p class=\"meta\"><span>node <code>",
                       sizeof("</code></p>\n<p class=\"meta\"><span>node "
                              "<code>") - 1);
        p = ngx_http_idem_calls_html(p, &f[NGX_HTTP_IDEM_LIST_NODE]);
        p = ngx_cpymem(p, "</code></span><span class=\"attempts\">",
                       sizeof("</code></span><span class=\"attempts\">") - 1);

        if (ngx_http_idem_calls_digits(&f[NGX_HTTP_IDEM_LIST_ATTEMPTS])) {
            p = ngx_http_idem_calls_html(p, &f[NGX_HTTP_IDEM_LIST_ATTEMPTS]);

        } else {
            *p++ = '?';
        }

        /* how the last one ended, in words (timeline.c) */

        outcome = &f[NGX_HTTP_IDEM_LIST_LAST_OUTCOME];

        if (f[NGX_HTTP_IDEM_LIST_ATTEMPTS].len == 1
            && f[NGX_HTTP_IDEM_LIST_ATTEMPTS].data[0] == '1')
        {
            p = ngx_cpymem(p, " attempt: ", sizeof(" attempt: ") - 1);
            p = ngx_http_idem_timeline_outcome(p, outcome);

        } else if (outcome->len == 0
                   || (outcome->len == 1 && outcome->data[0] == '-'))
        {
            p = ngx_cpymem(p, " attempts", sizeof(" attempts") - 1);

        } else {
            p = ngx_cpymem(p, " attempts, the last ",
                           sizeof(" attempts, the last ") - 1);
            p = ngx_http_idem_timeline_outcome(p, outcome);
        }

        p = ngx_cpymem(p, "</span><span>answered ",
                       sizeof("</span><span>answered ") - 1);
        p = ngx_http_idem_calls_html(p, &f[NGX_HTTP_IDEM_LIST_FINAL_STATUS]);
        p = ngx_cpymem(p, "</span>", sizeof("</span>") - 1);

        if (f[NGX_HTTP_IDEM_LIST_RECEIPT].len) {
            p = ngx_cpymem(p, "<span>receipt <code class=\"receipt\">",
                           sizeof("<span>receipt <code class=\"receipt\">")
                           - 1);
            p = ngx_http_idem_calls_html(p, &f[NGX_HTTP_IDEM_LIST_RECEIPT]);
            p = ngx_cpymem(p, "</code></span>", sizeof("</code></span>") - 1);
        }

        if (it->digest.len) {
            p = ngx_sprintf(p, "<span>scope <code class=\"scope\">%*s&hellip;"
                            "</code></span>", (size_t) 16, it->digest.data);
        }

        p = ngx_cpymem(p, "</p></li>\n", sizeof("</p></li>\n") - 1);
    }

    if (n) {
        p = ngx_cpymem(p, "</ol>\n", sizeof("</ol>\n") - 1);
    }

    /* older calls: the same path, ?before= (and the limit given) */

    if (list->next.len) {
        p = ngx_cpymem(p, "<p class=\"pager\"><a rel=\"next\" href=\"?before=",
                       sizeof("<p class=\"pager\"><a rel=\"next\" "
                              "href=\"?before=") - 1);
        p = ngx_http_idem_calls_html(p, &list->next);

        if (list->limit_arg.len) {
            p = ngx_sprintf(p, "&amp;limit=%ui", list->limit);
        }

        p = ngx_cpymem(p, "\">Older calls</a></p>\n",
                       sizeof("\">Older calls</a></p>\n") - 1);
    }

    p = ngx_cpymem(p, "</body>\n</html>\n", sizeof("</body>\n</html>\n") - 1);

    if (p > last) {
        ngx_log_error(NGX_LOG_ALERT, list->request->connection->log, 0,
                      "idem: list buffer overrun");
        return NGX_ERROR;
    }

    out->len = p - out->data;

    return NGX_OK;
}


/* from the doctype to the heading */

static u_char *
ngx_http_idem_calls_head(u_char *p)
{
    p = ngx_cpymem(p, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                   "<meta charset=\"utf-8\">\n"
                   "<meta name=\"viewport\" content=\"width=device-width\">\n"
                   "<title>UNKNOWN calls</title>\n",
                   sizeof("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                          "<meta charset=\"utf-8\">\n"
                          "<meta name=\"viewport\" "
                          "content=\"width=device-width\">\n"
                          "<title>UNKNOWN calls</title>\n") - 1);
    p = ngx_cpymem(p, ngx_http_idem_calls_style.data,
                   ngx_http_idem_calls_style.len);

    return ngx_cpymem(p, "</head>\n<body>\n<h1>Calls that need a person</h1>\n",
                      sizeof("</head>\n<body>\n"
                             "<h1>Calls that need a person</h1>\n") - 1);
}


/* a JSON string, null when empty */

static u_char *
ngx_http_idem_calls_json_str(u_char *p, ngx_str_t *s)
{
    if (s->len == 0) {
        return ngx_cpymem(p, "null", 4);
    }

    *p++ = '"';
    p = ngx_http_idem_json_escape(p, s->data, s->len);
    *p++ = '"';

    return p;
}


/* a plain decimal number, else null (an entry may be damaged) */

static u_char *
ngx_http_idem_calls_json_num(u_char *p, ngx_str_t *s)
{
    if (!ngx_http_idem_calls_digits(s)) {
        return ngx_cpymem(p, "null", 4);
    }

    return ngx_cpymem(p, s->data, s->len);
}


static ngx_uint_t
ngx_http_idem_calls_digits(ngx_str_t *s)
{
    ngx_uint_t  i;

    if (s->len == 0 || s->len > NGX_INT64_LEN
        || (s->len > 1 && s->data[0] == '0'))
    {
        return 0;
    }

    for (i = 0; i < s->len; i++) {
        if (s->data[i] < '0' || s->data[i] > '9') {
            return 0;
        }
    }

    return 1;
}


static u_char *
ngx_http_idem_calls_html(u_char *p, ngx_str_t *s)
{
    if (s->len == 0) {
        return p;
    }

    return (u_char *) ngx_escape_html(p, s->data, s->len);
}


/* "12 s ago", "4 min ago", "3 h 5 min ago", "2 d 3 h ago"; 0: not known */

static u_char *
ngx_http_idem_calls_age(u_char *p, uint64_t ms)
{
    uint64_t  s;

    if (ms == 0) {
        return ngx_cpymem(p, "age not known", sizeof("age not known") - 1);
    }

    s = ms / 1000;

    if (s < 60) {
        return ngx_sprintf(p, "%uL s ago", s);
    }

    if (s < 3600) {
        return ngx_sprintf(p, "%uL min ago", s / 60);
    }

    if (s < 86400) {
        return ngx_sprintf(p, "%uL h %uL min ago", s / 3600, s % 3600 / 60);
    }

    return ngx_sprintf(p, "%uL d %uL h ago", s / 86400, s % 86400 / 3600);
}


static void
ngx_http_idem_calls_cleanup(void *data)
{
    ngx_http_idem_calls_t *list = data;

    ngx_uint_t  i;

    if (list->op != NULL) {
        ngx_http_idem_store_cancel(list->op);
        list->op = NULL;
    }

    for (i = 0; i < list->nitems; i++) {
        if (list->items[i].op != NULL) {
            ngx_http_idem_store_cancel(list->items[i].op);
            list->items[i].op = NULL;
        }
    }
}
