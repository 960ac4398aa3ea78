
/*
 * What the fuzz targets share: a request made by hand (pool, connection,
 * log, configuration arrays, module ctx), a reader over the fuzz input,
 * and checks of what the module sends (ngx_http_idem_fuzz.c).
 *
 * A target includes the module's .c files it fuzzes, so that their static
 * functions are reachable, and links nginx's own objects (fuzz/nginx.sh);
 * the module's functions it does not include are stand-ins, which abort()
 * where a target is not expected to go.
 */


#ifndef _NGX_HTTP_IDEM_FUZZ_H_INCLUDED_
#define _NGX_HTTP_IDEM_FUZZ_H_INCLUDED_


#include "ngx_http_idem_common.h"
#include "ngx_http_idem_record_parse.h"
#include "ngx_http_idem_round.h"


/* the module index in the fake configuration arrays */
#define NGX_HTTP_IDEM_FUZZ_MODULES  4

/* calls to stand-ins that a target must never reach */
#define ngx_http_idem_fuzz_unreached(name)                                  \
    ngx_http_idem_fuzz_abort("stand-in reached: " name)

/* a check of the module's output that failed: a finding */
#define ngx_http_idem_fuzz_assert(cond)                                     \
    do {                                                                    \
        if (!(cond)) {                                                      \
            ngx_http_idem_fuzz_abort("check failed: " #cond);               \
        }                                                                   \
    } while (0)


/* the fuzz input, taken from the front */
typedef struct {
    u_char                      *pos;
    u_char                      *last;
    ngx_pool_t                  *pool;       /* what is taken is copied */
} ngx_http_idem_fuzz_input_t;


/* what the filters at the top of nginx's chains saw of the answer */
typedef struct {
    ngx_uint_t                   header_sent;
    ngx_uint_t                   status;
    ngx_int_t                    finalized;   /* rc, -100: not called */
    ngx_str_t                    body;        /* copied, pool memory */
} ngx_http_idem_fuzz_answer_t;


typedef struct {
    ngx_pool_t                  *pool;
    ngx_http_request_t          *request;
    ngx_http_idem_main_conf_t   *imcf;
    ngx_http_idem_loc_conf_t    *ilcf;
    ngx_http_idem_ctx_t         *ctx;
} ngx_http_idem_fuzz_t;


extern ngx_http_idem_fuzz_answer_t  ngx_http_idem_fuzz_answer;


/* the largest RESP array a Redis target lets hiredis read */
#define NGX_HTTP_IDEM_FUZZ_ELEMENTS  4096


ngx_int_t ngx_http_idem_fuzz_init(ngx_http_idem_fuzz_t *fz,
    const uint8_t *data, size_t size, ngx_http_idem_fuzz_input_t *in);
void ngx_http_idem_fuzz_done(ngx_http_idem_fuzz_t *fz);
void ngx_http_idem_fuzz_abort(const char *what);

ngx_uint_t ngx_http_idem_fuzz_byte(ngx_http_idem_fuzz_input_t *in);
void ngx_http_idem_fuzz_line(ngx_http_idem_fuzz_input_t *in,
    ngx_str_t *line);
void ngx_http_idem_fuzz_string(ngx_http_idem_fuzz_input_t *in,
    ngx_str_t *s);
ngx_int_t ngx_http_idem_fuzz_header(ngx_http_idem_fuzz_t *fz,
    ngx_list_t *list, char *name, ngx_str_t *value);
ngx_int_t ngx_http_idem_fuzz_names(ngx_http_idem_fuzz_t *fz);

ngx_uint_t ngx_http_idem_fuzz_json(u_char *p, size_t len);
ngx_uint_t ngx_http_idem_fuzz_resp_too_large(u_char *p, u_char *last);
void ngx_http_idem_fuzz_problem_sent(ngx_int_t rc);
ngx_str_t *ngx_http_idem_fuzz_last_value(ngx_http_idem_fuzz_t *fz);
void ngx_http_idem_fuzz_same_header(ngx_table_elt_t *h,
    ngx_table_elt_t *h2);
ngx_uint_t ngx_http_idem_fuzz_id_valid(ngx_str_t *id, size_t max);
ngx_uint_t ngx_http_idem_fuzz_sf_string(ngx_str_t *value, ngx_str_t *content);


#endif /* _NGX_HTTP_IDEM_FUZZ_H_INCLUDED_ */
