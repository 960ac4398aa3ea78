
/*
 * Rounds: attempts may outnumber the servers of an upstream.
 */


#ifndef _NGX_HTTP_IDEM_ROUND_H_INCLUDED_
#define _NGX_HTTP_IDEM_ROUND_H_INCLUDED_


#include "ngx_http_idem_common.h"


/*
 * After the balancer found every server of the upstream tried (NGX_BUSY):
 * starts a new round over them.  On NGX_OK, ctx->upstream.original_get may be
 * called again; u->peer keeps the module's callbacks and its tries left.
 */
ngx_int_t ngx_http_idem_new_round(ngx_http_request_t *r,
    ngx_http_idem_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEM_ROUND_H_INCLUDED_ */
