
/*
 * A call's record, read back from the store, parsed (the fields are
 * described in ngx_http_idem_record.c).  Nothing here knows of requests or
 * of the store: the status endpoint, the 409 bodies and a fuzz target
 * call it alike, and it needs nginx's core only.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_http_idem_record_parse.h"


/* the table that finds an execution by its token */
typedef struct {
    ngx_http_idem_record_exec_t    **buckets;
    ngx_uint_t                       mask;
    ngx_http_idem_record_exec_t     *execs;
    ngx_uint_t                       nexecs;
} ngx_http_idem_record_table_t;


static ngx_http_idem_record_exec_t *ngx_http_idem_record_exec(
    ngx_http_idem_record_table_t *table, ngx_str_t *token,
    ngx_uint_t create);
static void ngx_http_idem_record_summary(ngx_http_idem_record_t *rec,
    ngx_str_t *value, ngx_uint_t *ok, ngx_uint_t *unknown);
static ngx_uint_t ngx_http_idem_record_split(ngx_str_t *value,
    ngx_str_t *parts, ngx_uint_t n);
static void ngx_http_idem_record_receipt(ngx_http_idem_record_table_t *table,
    ngx_str_t *field, ngx_str_t *value);
static uint64_t ngx_http_idem_record_ms(ngx_str_t *value);
static ngx_uint_t ngx_http_idem_record_is(ngx_str_t *value, char *text);
static int ngx_libc_cdecl ngx_http_idem_record_exec_cmp(const void *one,
    const void *two);
static int ngx_libc_cdecl ngx_http_idem_record_attempt_cmp(const void *one,
    const void *two);


/*
 * One pass over the fields finds every execution through a hash table of
 * tokens (never a scan of the executions found so far), a second one its
 * attempts; then executions are sorted by arrival and attempts by
 * execution: O(n log n) in the fields, whatever the record holds.
 *
 * An execution's state: the final one if written, else UNKNOWN once its
 * claim has lapsed by "now", else PROCESSING, else RECEIVED; an UNKNOWN
 * one the service resolved is SUCCESS (applied) or FAILED; a resolved one
 * whose final write came later keeps that write's state, the resolution
 * "overridden".  The record's
 * state: SUCCESS if any execution succeeded (the summarised ones
 * included), else UNKNOWN if any was UNKNOWN, else the latest one's.
 */

ngx_int_t
ngx_http_idem_record_parse(ngx_pool_t *pool, ngx_str_t *elts, ngx_uint_t n,
    uint64_t now, ngx_http_idem_record_t *rec)
{
    u_char                          *v, *last;
    ngx_str_t                        token, parts[9], *fs;
    ngx_uint_t                       i, nb, ne, na, nz, ok, unknown;
    ngx_http_idem_record_exec_t     *e;
    ngx_http_idem_record_table_t     table;
    ngx_http_idem_record_attempt_t  *a;

    ngx_memzero(rec, sizeof(ngx_http_idem_record_t));

    ok = 0;
    unknown = 0;

    /* how many executions and attempts there can be: room for all */

    ne = 0;
    na = 0;

    for (i = 0; i + 1 < n; i += 2) {
        if (elts[i].len < 3 || elts[i].data[1] != ':') {
            continue;
        }

        switch (elts[i].data[0]) {

        case 'e':
        case 'p':
        case 'f':
        case 'l':
        case 'z':
            ne++;
            break;

        case 'a':
            na++;
            break;
        }
    }

    for (nb = 8; nb < ne; nb <<= 1) { /* void */ }

    table.mask = nb - 1;
    table.nexecs = 0;
    table.buckets = ngx_pcalloc(pool, nb * sizeof(void *));
    table.execs = ngx_palloc(pool, (ne + 1)
                                   * sizeof(ngx_http_idem_record_exec_t));
    rec->execs = ngx_palloc(pool, (ne + 1) * sizeof(void *));
    rec->attempts = ngx_palloc(pool, (na + 1)
                                     * sizeof(ngx_http_idem_record_attempt_t));

    if (table.buckets == NULL || table.execs == NULL || rec->execs == NULL
        || rec->attempts == NULL)
    {
        return NGX_ERROR;
    }

    /* executions first: attempts refer to them by token */

    for (i = 0; i + 1 < n; i += 2) {
        v = elts[i].data;

        if (elts[i].len == 1 && v[0] == 'x') {
            ngx_http_idem_record_summary(rec, &elts[i + 1], &ok, &unknown);
            continue;
        }

        if (elts[i].len < 3 || v[1] != ':'
            || (v[0] != 'e' && v[0] != 'p' && v[0] != 'f' && v[0] != 'l'
                && v[0] != 'z'))
        {
            continue;
        }

        token.data = v + 2;
        token.len = elts[i].len - 2;

        e = ngx_http_idem_record_exec(&table, &token, 1);

        if (v[0] == 'l') {
            e->lease_ms = ngx_http_idem_record_ms(&elts[i + 1]);
            continue;
        }

        if (v[0] == 'z') {

            /*
             * "<outcome> <at_ms> <receipt> <by>[ forced]": the service's
             * word, or an operator's forced one (resolve.lua)
             */

            nz = ngx_http_idem_record_split(&elts[i + 1], parts, 5);

            if (nz >= 4
                && (ngx_http_idem_record_is(&parts[0], "applied")
                    || ngx_http_idem_record_is(&parts[0], "not_applied")))
            {
                ngx_memcpy(e->resolved, parts, 4 * sizeof(ngx_str_t));
                e->forced = (nz == 5
                             && ngx_http_idem_record_is(&parts[4], "forced"));
            }

            continue;
        }

        if (v[0] == 'p') {
            if (e->state.len == 0 || e->state.data[0] == 'R') {
                ngx_str_set(&e->state, "PROCESSING");
            }

            e->updated_ms = ngx_max(e->updated_ms,
                                    ngx_http_idem_record_ms(&elts[i + 1]));
            continue;
        }

        if (v[0] == 'e') {
            if (ngx_http_idem_record_split(&elts[i + 1], parts, 7) != 7) {
                continue;
            }

            if (e->final_status.len == 0) {
                if (parts[0].len && parts[0].data[0] == 'P') {
                    ngx_str_set(&e->state, "PROCESSING");

                } else if (e->state.len == 0) {
                    ngx_str_set(&e->state, "RECEIVED");
                }

                ngx_memcpy(e->info, &parts[1], 6 * sizeof(ngx_str_t));
            }

        } else {
            if (ngx_http_idem_record_split(&elts[i + 1], parts, 9) != 9
                || parts[0].len == 0)
            {
                continue;
            }

            /* a final state wins over whatever came before it */

            e->state = parts[0];
            e->final_status = parts[1];
            e->updated_ms = ngx_max(e->updated_ms,
                                    ngx_http_idem_record_ms(&parts[2]));
            ngx_memcpy(e->info, &parts[3], 6 * sizeof(ngx_str_t));
        }

        e->created_ms = ngx_http_idem_record_ms(&e->info[0]);
        e->updated_ms = ngx_max(e->updated_ms, e->created_ms);
    }

    /* an execution known by its "p:" or "l:" field only: not one */

    for (i = 0; i < table.nexecs; i++) {
        if (table.execs[i].info[0].len) {
            rec->execs[rec->nexecs++] = &table.execs[i];
        }
    }

    if (rec->nexecs == 0) {
        return NGX_DECLINED;
    }

    ngx_qsort(rec->execs, rec->nexecs, sizeof(void *),
              ngx_http_idem_record_exec_cmp);

    fs = NULL;

    for (i = 0; i < rec->nexecs; i++) {
        e = rec->execs[i];

        e->index = rec->summarised + i + 1;
        rec->updated_ms = ngx_max(rec->updated_ms, e->updated_ms);

        if (e->final_status.len == 0 && e->lease_ms && now >= e->lease_ms) {
            /* its gateway never said how it ended: it may have run */
            ngx_str_set(&e->state, "UNKNOWN");
        }

        if (e->resolved[0].len) {

            /* the service's word on an UNKNOWN one (resolve.lua) */

            if (ngx_http_idem_record_is(&e->state, "UNKNOWN")) {
                if (e->resolved[0].len == 7) {
                    ngx_str_set(&e->state, "SUCCESS");

                } else {
                    ngx_str_set(&e->state, "FAILED");
                }

            } else if (e->final_status.len) {

                /*
                 * its owner's final write came after the resolution and
                 * says how the upstream answered: that stands
                 */

                e->overridden = 1;
            }

            rec->resolved = e;
        }

        if (ngx_http_idem_record_is(&e->state, "SUCCESS")) {
            ok++;

        } else if (ngx_http_idem_record_is(&e->state, "UNKNOWN")) {
            unknown++;
        }

        if (e->final_status.len) {
            fs = &e->final_status;
        }
    }

    rec->executions = rec->summarised + rec->nexecs;

    if (fs != NULL) {
        rec->final_status = *fs;
    }

    if (rec->info[0].len == 0) {

        /* nothing summarised: the first execution is the first kept */

        e = rec->execs[0];
        ngx_memcpy(rec->info, e->info, 6 * sizeof(ngx_str_t));
        rec->created_ms = e->created_ms;
    }

    if (ok) {
        ngx_str_set(&rec->state, "SUCCESS");

    } else if (unknown) {
        ngx_str_set(&rec->state, "UNKNOWN");

    } else {
        rec->state = rec->execs[rec->nexecs - 1]->state;
    }

    /*
     * attempts: "a:<token>:<n>" = "start dur outcome sent status span";
     * receipts: "r:<token>" = "<n> <receipt>"
     */

    for (i = 0; i + 1 < n; i += 2) {
        v = elts[i].data;
        last = v + elts[i].len;

        if (elts[i].len >= 3 && v[0] == 'r' && v[1] == ':') {
            ngx_http_idem_record_receipt(&table, &elts[i], &elts[i + 1]);
            continue;
        }

        if (elts[i].len < 5 || v[0] != 'a' || v[1] != ':') {
            continue;
        }

        v = ngx_strlchr(v + 2, last, ':');
        if (v == NULL) {
            continue;
        }

        token.data = elts[i].data + 2;
        token.len = v - token.data;

        a = &rec->attempts[rec->nattempts];

        a->exec = ngx_http_idem_record_exec(&table, &token, 0);
        a->n = ngx_atoi(v + 1, last - v - 1);

        if (a->exec == NULL || a->exec->index == 0
            || a->n == (ngx_uint_t) NGX_ERROR
            || (a->nparts = ngx_http_idem_record_split(&elts[i + 1],
                                                       a->parts, 8))
               < 6)
        {
            /* an attempt of an execution that left no other trace */
            continue;
        }

        rec->nattempts++;
    }

    ngx_qsort(rec->attempts, rec->nattempts,
              sizeof(ngx_http_idem_record_attempt_t),
              ngx_http_idem_record_attempt_cmp);

    /* the record's receipt: the newest execution's that has one */

    for (i = rec->nexecs; i > 0; i--) {
        if (rec->execs[i - 1]->receipt.len) {
            rec->receipt = rec->execs[i - 1]->receipt;
            break;
        }
    }

    return NGX_OK;
}


/* "r:<token>" = "<n> <receipt>": an execution's receipt, from attempt n */

static void
ngx_http_idem_record_receipt(ngx_http_idem_record_table_t *table,
    ngx_str_t *field, ngx_str_t *value)
{
    u_char                       *sp;
    ngx_int_t                     n;
    ngx_str_t                     token;
    ngx_http_idem_record_exec_t  *e;

    token.data = field->data + 2;
    token.len = field->len - 2;

    e = ngx_http_idem_record_exec(table, &token, 0);
    if (e == NULL || e->index == 0) {
        return;
    }

    sp = ngx_strlchr(value->data, value->data + value->len, ' ');
    if (sp == NULL || sp + 1 == value->data + value->len) {
        return;
    }

    n = ngx_atoi(value->data, sp - value->data);
    if (n == NGX_ERROR) {
        return;
    }

    e->receipt_n = n;
    e->receipt.data = sp + 1;
    e->receipt.len = value->data + value->len - sp - 1;
}


/* the execution of a token: found, or added when "create" */

static ngx_http_idem_record_exec_t *
ngx_http_idem_record_exec(ngx_http_idem_record_table_t *table,
    ngx_str_t *token, ngx_uint_t create)
{
    ngx_uint_t                    hash;
    ngx_http_idem_record_exec_t  *e;

    hash = ngx_hash_key(token->data, token->len);

    for (e = table->buckets[hash & table->mask]; e; e = e->next) {
        if (e->hash == hash && e->token.len == token->len
            && ngx_strncmp(e->token.data, token->data, token->len) == 0)
        {
            return e;
        }
    }

    if (!create) {
        return NULL;
    }

    e = &table->execs[table->nexecs++];

    ngx_memzero(e, sizeof(ngx_http_idem_record_exec_t));

    e->token = *token;
    e->hash = hash;
    e->next = table->buckets[hash & table->mask];
    table->buckets[hash & table->mask] = e;

    return e;
}


/* "x": the executions a trim dropped (see the top of this file) */

static void
ngx_http_idem_record_summary(ngx_http_idem_record_t *rec, ngx_str_t *value,
    ngx_uint_t *ok, ngx_uint_t *unknown)
{
    ngx_int_t   count, success, unsure;
    ngx_str_t   parts[11];

    if (ngx_http_idem_record_split(value, parts, 11) != 11) {
        return;
    }

    count = ngx_atoi(parts[0].data, parts[0].len);
    success = ngx_atoi(parts[1].data, parts[1].len);
    unsure = ngx_atoi(parts[2].data, parts[2].len);

    /* more succeeded or unsure than summarised: not the module's, ignored */

    if (count == NGX_ERROR || success == NGX_ERROR || unsure == NGX_ERROR
        || success > count || unsure > count - success)
    {
        return;
    }

    rec->summarised = count;
    *ok += success;
    *unknown += unsure;

    rec->updated_ms = ngx_max(rec->updated_ms,
                              ngx_http_idem_record_ms(&parts[3]));

    if (!(parts[4].len == 1 && parts[4].data[0] == '-')) {
        rec->final_status = parts[4];
    }

    ngx_memcpy(rec->info, &parts[5], 6 * sizeof(ngx_str_t));
    rec->created_ms = ngx_http_idem_record_ms(&parts[5]);
}


/* space separated; the last part takes the rest (a URI) */

static ngx_uint_t
ngx_http_idem_record_split(ngx_str_t *value, ngx_str_t *parts, ngx_uint_t n)
{
    u_char      *p, *last, *sp;
    ngx_uint_t   i;

    p = value->data;
    last = p + value->len;

    for (i = 0; i < n; i++) {
        sp = (i == n - 1) ? NULL : ngx_strlchr(p, last, ' ');

        parts[i].data = p;
        parts[i].len = (sp ? sp : last) - p;

        if (sp == NULL) {
            return i + 1;
        }

        p = sp + 1;
    }

    return i;
}


static uint64_t
ngx_http_idem_record_ms(ngx_str_t *value)
{
    off_t  n;

    n = ngx_atoof(value->data, value->len);

    return n > 0 ? (uint64_t) n : 0;
}


static ngx_uint_t
ngx_http_idem_record_is(ngx_str_t *value, char *text)
{
    size_t  len;

    len = ngx_strlen(text);

    return value->len == len && ngx_strncmp(value->data, text, len) == 0;
}


static int ngx_libc_cdecl
ngx_http_idem_record_exec_cmp(const void *one, const void *two)
{
    ngx_int_t                     rc;
    ngx_http_idem_record_exec_t  *a, *b;

    a = *(ngx_http_idem_record_exec_t **) one;
    b = *(ngx_http_idem_record_exec_t **) two;

    if (a->created_ms != b->created_ms) {
        return a->created_ms < b->created_ms ? -1 : 1;
    }

    rc = ngx_memn2cmp(a->token.data, b->token.data, a->token.len,
                      b->token.len);

    return rc < 0 ? -1 : (rc > 0);
}


static int ngx_libc_cdecl
ngx_http_idem_record_attempt_cmp(const void *one, const void *two)
{
    const ngx_http_idem_record_attempt_t  *a = one;
    const ngx_http_idem_record_attempt_t  *b = two;

    if (a->exec->index != b->exec->index) {
        return a->exec->index < b->exec->index ? -1 : 1;
    }

    if (a->n != b->n) {
        return a->n < b->n ? -1 : 1;
    }

    return 0;
}
