
/*
 * The module's configuration: created, merged, checked.
 */


#ifndef _NGX_HTTP_IDEM_CONF_H_INCLUDED_
#define _NGX_HTTP_IDEM_CONF_H_INCLUDED_


#include "ngx_http_idem_common.h"


void *ngx_http_idem_create_main_conf(ngx_conf_t *cf);
char *ngx_http_idem_init_main_conf(ngx_conf_t *cf, void *conf);
void *ngx_http_idem_create_srv_conf(ngx_conf_t *cf);
void *ngx_http_idem_create_loc_conf(ngx_conf_t *cf);
char *ngx_http_idem_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);


#endif /* _NGX_HTTP_IDEM_CONF_H_INCLUDED_ */
