
/*
 * The setters of the module's directives (the command table is in
 * ngx_http_idem_module.c).
 */


#ifndef _NGX_HTTP_IDEM_DIRECTIVE_H_INCLUDED_
#define _NGX_HTTP_IDEM_DIRECTIVE_H_INCLUDED_


#include "ngx_http_idem_common.h"


/* cmd->post of ngx_http_idem_set_time() and ngx_http_idem_set_header() */
typedef struct {
    ngx_flag_t                off;          /* "off" is a value */
    ngx_msec_t                max;          /* the longest time */
    ngx_msec_t                warn;         /* longer: a warning, 0: none */
} ngx_http_idem_conf_bounds_t;


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
char *ngx_http_idem_set_time(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_retry(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_scope(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_fingerprint(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_replay(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_durable(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_status_url(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_idem_set_redis(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_idem_merge_header(ngx_conf_t *cf,
    ngx_http_idem_header_t *conf, ngx_http_idem_header_t *prev, char *def);
void ngx_http_idem_check_retry(ngx_conf_t *cf,
    ngx_http_idem_loc_conf_t *conf, ngx_uint_t retry_here,
    ngx_uint_t idempotent_here);
char *ngx_http_idem_check_loc_conf(ngx_conf_t *cf,
    ngx_http_idem_loc_conf_t *conf, ngx_uint_t here,
    ngx_uint_t durable_here);


#endif /* _NGX_HTTP_IDEM_DIRECTIVE_H_INCLUDED_ */
