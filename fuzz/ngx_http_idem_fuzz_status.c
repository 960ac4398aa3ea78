
/*
 * Fuzz target: the record parser behind the status endpoint and the 409
 * bodies, ngx_http_idem_status_json(): a record's fields, as the store
 * gives them, to JSON.  It is the one function this file calls, so that
 * a rewrite of the parser only needs the call below re-pointed.
 *
 * Input: strings, each a length byte (255: two bytes of length follow)
 * and its bytes: Redis's time (unix ms, in decimal), then the record's
 * fields and values, in turns.
 */


#include "ngx_http_idem_status.c"

#include "ngx_http_idem_fuzz.h"


#define NGX_HTTP_IDEM_FUZZ_FIELDS  512


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    off_t                        now;
    ngx_int_t                    rc;
    ngx_str_t                    id, time, out, *elts;
    ngx_uint_t                   n;
    ngx_http_idem_fuzz_t         fz;
    ngx_http_idem_fuzz_input_t   input;

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

    ngx_str_set(&id, "order-1234");

    rc = ngx_http_idem_status_json(fz.request, &id,
                                   now > 0 ? (uint64_t) now : 0, elts, n,
                                   &out);

    ngx_http_idem_fuzz_assert(rc == NGX_OK || rc == NGX_DECLINED);

    if (rc == NGX_OK && !ngx_http_idem_fuzz_json(out.data, out.len)) {
        fprintf(stderr, "not JSON: %.*s\n", (int) out.len, out.data);
        ngx_http_idem_fuzz_abort("check failed: the record's JSON");
    }

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}
