
/*
 * The status endpoint (idem_status).
 */


#ifndef _NGX_HTTP_IDEM_STATUS_H_INCLUDED_
#define _NGX_HTTP_IDEM_STATUS_H_INCLUDED_


#include "ngx_http_idem_common.h"


char *ngx_http_idem_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);


#endif /* _NGX_HTTP_IDEM_STATUS_H_INCLUDED_ */
