
/*
 * A resolution's body, as a client of the status endpoint sends it
 * (POST, idem_status resolve=on): parsed by a pure function of its bytes
 * (nginx's core only), which a fuzz target shares.
 */


#ifndef _NGX_HTTP_IDEM_RESOLUTION_H_INCLUDED_
#define _NGX_HTTP_IDEM_RESOLUTION_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


/* the largest body taken */
#define NGX_HTTP_IDEM_RESOLUTION_MAX_BODY  4096

/* the longest "receipt" and "by" */
#define NGX_HTTP_IDEM_RESOLUTION_MAX_VALUE 128


/*
 * outcome: "applied" or "not_applied"; receipt and by: "-" when absent;
 * force: "force": true was given (an operator's override, status.c)
 */
typedef struct {
    ngx_str_t                  outcome;
    ngx_str_t                  receipt;
    ngx_str_t                  by;
    ngx_uint_t                 applied;
    ngx_uint_t                 force;
} ngx_http_idem_resolution_t;


/*
 * {"outcome": "applied" | "not_applied"[, "receipt": "..."][, "by":
 * "..."][, "force": true]}, members in any order, each once, strings of a
 * call id's characters (A-Z a-z 0-9 - . _ ~ :), at most 128 bytes;
 * "force" the literal true alone (false is refused: it would say
 * nothing); nothing else.
 * The result points into body.  NGX_DECLINED: not that; "err" (of
 * "errlen" bytes) says why, NUL-terminated.
 */
ngx_int_t ngx_http_idem_resolution_parse(ngx_str_t *body,
    ngx_http_idem_resolution_t *res, u_char *err, size_t errlen);

/*
 * The same, from a form (application/x-www-form-urlencoded, the timeline
 * page's): outcome=applied|not_applied[&receipt=...][&by=...]
 * [&force=true], names in any order, each once, nothing else; an empty
 * receipt or by is left out (a form sends its empty fields); values
 * percent-decoded in place, in body, then held to the same rules.
 */
ngx_int_t ngx_http_idem_resolution_parse_form(ngx_str_t *body,
    ngx_http_idem_resolution_t *res, u_char *err, size_t errlen);


#endif /* _NGX_HTTP_IDEM_RESOLUTION_H_INCLUDED_ */
