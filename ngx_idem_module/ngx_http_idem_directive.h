
/*
 * The setters of the module's directives (the command table is in
 * ngx_http_idem_module.c).
 */


#ifndef _NGX_HTTP_IDEM_DIRECTIVE_H_INCLUDED_
#define _NGX_HTTP_IDEM_DIRECTIVE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


char *ngx_http_idem_enable(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_header(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_enum(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_id_part(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_max_length(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_pattern(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_deadline(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_retry(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_scope(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_status_url(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_redis(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_IDEM_DIRECTIVE_H_INCLUDED_ */
