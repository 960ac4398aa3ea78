
/*
 * The $idem_* variables.
 */


#ifndef _NGX_HTTP_IDEM_VARIABLES_H_INCLUDED_
#define _NGX_HTTP_IDEM_VARIABLES_H_INCLUDED_


#include "ngx_http_idem_common.h"


ngx_int_t ngx_http_idem_add_variables(ngx_conf_t *cf);


#endif /* _NGX_HTTP_IDEM_VARIABLES_H_INCLUDED_ */
