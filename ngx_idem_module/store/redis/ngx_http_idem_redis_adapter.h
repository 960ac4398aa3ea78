
/*
 * hiredis' asynchronous context on nginx's event loop: the one place where
 * the two meet.
 */


#ifndef _NGX_HTTP_IDEM_REDIS_ADAPTER_H_INCLUDED_
#define _NGX_HTTP_IDEM_REDIS_ADAPTER_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>


/*
 * Watches the context's socket with an nginx connection and arms the write
 * event, by which hiredis learns that connect(2) finished.  NGX_ERROR:
 * nothing is attached, the caller frees the context.
 */
ngx_int_t ngx_http_idem_redis_attach(redisAsyncContext *ac, ngx_log_t *log);
void ngx_http_idem_redis_flush(redisAsyncContext *ac);


#endif /* _NGX_HTTP_IDEM_REDIS_ADAPTER_H_INCLUDED_ */
