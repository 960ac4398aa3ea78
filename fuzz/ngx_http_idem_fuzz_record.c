
/*
 * Fuzz target: the record parser, ngx_http_idem_record_parse(), on a
 * record's fields as the store gives them back (the status endpoint and
 * the 409 bodies read records through it).  Beyond the sanitizers: what
 * it returns is consistent with itself and with the fields it was given
 * (executions in arrival order and numbered on from the summarised ones,
 * attempts of kept executions in order, the record's state by its rule,
 * the record's receipt the newest execution's).
 *
 * Input: strings, each a length byte (255: two bytes of length follow)
 * and its bytes: Redis's time (unix ms, in decimal), then the record's
 * fields and values, in turns.
 */


#include "ngx_http_idem_record_parse.c"

#include "ngx_http_idem_fuzz.h"


#define NGX_HTTP_IDEM_FUZZ_FIELDS  512


static ngx_uint_t ngx_http_idem_fuzz_kept(ngx_http_idem_record_t *rec,
    ngx_http_idem_record_exec_t *e);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char                            *want;
    off_t                            now;
    ngx_int_t                        rc;
    ngx_str_t                        time, *elts;
    ngx_uint_t                       n, i, j, ok, unknown;
    ngx_http_idem_record_t           rec;
    ngx_http_idem_fuzz_t             fz;
    ngx_http_idem_fuzz_input_t       input;
    ngx_http_idem_record_exec_t     *e;
    ngx_http_idem_record_attempt_t  *a;

    if (ngx_http_idem_fuzz_init(&fz, data, size, &input) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    ngx_http_idem_fuzz_string(&input, &time);

    now = ngx_atoof(time.data, time.len);

    elts = ngx_palloc(fz.pool, NGX_HTTP_IDEM_FUZZ_FIELDS * sizeof(ngx_str_t));
    if (elts == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    for (n = 0; input.pos < input.last && n < NGX_HTTP_IDEM_FUZZ_FIELDS; n++)
    {
        ngx_http_idem_fuzz_string(&input, &elts[n]);
    }

    rc = ngx_http_idem_record_parse(fz.pool, elts, n,
                                    now > 0 ? (uint64_t) now : 0, &rec);

    ngx_http_idem_fuzz_assert(rc == NGX_OK || rc == NGX_DECLINED);

    if (rc == NGX_DECLINED) {
        ngx_http_idem_fuzz_done(&fz);
        return 0;
    }

    /* executions: kept ones, by arrival, numbered after the summarised */

    ngx_http_idem_fuzz_assert(rec.nexecs >= 1);
    ngx_http_idem_fuzz_assert(rec.executions == rec.summarised + rec.nexecs);

    ok = 0;
    unknown = 0;

    for (i = 0; i < rec.nexecs; i++) {
        e = rec.execs[i];

        ngx_http_idem_fuzz_assert(e->info[0].len > 0);
        ngx_http_idem_fuzz_assert(e->index == rec.summarised + i + 1);
        ngx_http_idem_fuzz_assert(e->state.len > 0);
        ngx_http_idem_fuzz_assert(rec.updated_ms >= e->updated_ms);
        ngx_http_idem_fuzz_assert(e->updated_ms >= e->created_ms);

        if (i > 0) {
            ngx_http_idem_fuzz_assert(
                rec.execs[i - 1]->created_ms < e->created_ms
                || (rec.execs[i - 1]->created_ms == e->created_ms
                    && ngx_memn2cmp(rec.execs[i - 1]->token.data,
                                    e->token.data,
                                    rec.execs[i - 1]->token.len,
                                    e->token.len) < 0));
        }

        /* no two executions of one token */

        for (j = 0; j < i; j++) {
            ngx_http_idem_fuzz_assert(
                rec.execs[j]->token.len != e->token.len
                || ngx_memcmp(rec.execs[j]->token.data, e->token.data,
                              e->token.len) != 0);
        }

        /*
         * a claim lapsed by "now" without a final state: UNKNOWN, or what
         * the service resolved it to
         */

        if (e->final_status.len == 0 && e->lease_ms && now > 0
            && (uint64_t) now >= e->lease_ms)
        {
            want = (e->resolved[0].len == 0) ? "UNKNOWN"
                   : (e->resolved[0].len == 7) ? "SUCCESS" : "FAILED";

            ngx_http_idem_fuzz_assert(e->state.len == ngx_strlen(want)
                                      && ngx_strncmp(e->state.data, want,
                                                     e->state.len) == 0);
        }

        /* overridden: resolved, then a final write that was not UNKNOWN */

        if (e->overridden) {
            ngx_http_idem_fuzz_assert(e->resolved[0].len > 0
                                      && e->final_status.len > 0
                                      && !(e->state.len == 7
                                           && ngx_strncmp(e->state.data,
                                                          "UNKNOWN", 7)
                                              == 0));
        }

        if (e->state.len == 7
            && ngx_strncmp(e->state.data, "SUCCESS", 7) == 0)
        {
            ok++;

        } else if (e->state.len == 7
                   && ngx_strncmp(e->state.data, "UNKNOWN", 7) == 0)
        {
            unknown++;
        }
    }

    /* the record's state: SUCCESS, else UNKNOWN, else the latest's */

    if (ok) {
        ngx_http_idem_fuzz_assert(rec.state.len == 7
                                  && ngx_strncmp(rec.state.data, "SUCCESS",
                                                 7) == 0);

    } else if (unknown && rec.summarised == 0) {
        ngx_http_idem_fuzz_assert(rec.state.len == 7
                                  && ngx_strncmp(rec.state.data, "UNKNOWN",
                                                 7) == 0);

    } else if (rec.summarised == 0) {
        ngx_http_idem_fuzz_assert(
            rec.state.data == rec.execs[rec.nexecs - 1]->state.data
            && rec.state.len == rec.execs[rec.nexecs - 1]->state.len);
    }

    if (rec.summarised == 0) {
        ngx_http_idem_fuzz_assert(rec.created_ms == rec.execs[0]->created_ms);
        ngx_http_idem_fuzz_assert(rec.info[0].data
                                  == rec.execs[0]->info[0].data);
    }

    /* the receipt: the newest kept execution's that has one, whole */

    for (i = rec.nexecs; i > 0; i--) {
        e = rec.execs[i - 1];

        if (e->receipt.len) {
            ngx_http_idem_fuzz_assert(e->receipt.data != NULL);
            ngx_http_idem_fuzz_assert(rec.receipt.data == e->receipt.data
                                      && rec.receipt.len == e->receipt.len);
            break;
        }
    }

    if (i == 0) {
        ngx_http_idem_fuzz_assert(rec.receipt.len == 0);
    }

    /* attempts: of kept executions, by execution then number, whole */

    for (i = 0; i < rec.nattempts; i++) {
        a = &rec.attempts[i];

        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_kept(&rec, a->exec));
        ngx_http_idem_fuzz_assert(a->nparts >= 6 && a->nparts <= 8);
        ngx_http_idem_fuzz_assert(a->n <= NGX_MAX_INT_T_VALUE);

        for (j = 0; j < a->nparts; j++) {
            ngx_http_idem_fuzz_assert(a->parts[j].len == 0
                                      || a->parts[j].data != NULL);
        }

        if (i > 0) {
            ngx_http_idem_fuzz_assert(
                rec.attempts[i - 1].exec->index < a->exec->index
                || (rec.attempts[i - 1].exec->index == a->exec->index
                    && rec.attempts[i - 1].n <= a->n));
        }
    }

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}


static ngx_uint_t
ngx_http_idem_fuzz_kept(ngx_http_idem_record_t *rec,
    ngx_http_idem_record_exec_t *e)
{
    ngx_uint_t  i;

    for (i = 0; i < rec->nexecs; i++) {
        if (rec->execs[i] == e) {
            return 1;
        }
    }

    return 0;
}
