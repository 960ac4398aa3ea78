
/*
 * Counters shared by all workers, and the idem_metrics handler.
 */


#ifndef _NGX_HTTP_IDEM_METRICS_H_INCLUDED_
#define _NGX_HTTP_IDEM_METRICS_H_INCLUDED_


#include "ngx_http_idem_common.h"


/*
 * Counts only where some location shows the counters (idem_metrics).  The
 * counters are found through the cycle in use, never kept in a process
 * global: a reload that fails after creating a zone must not leave later
 * workers pointing into freed memory.
 */
#define ngx_http_idem_count(field)                                           \
    do {                                                                     \
        ngx_http_idem_counters_t  *counters_;                                \
                                                                             \
        counters_ = ngx_http_idem_counters();                                \
                                                                             \
        if (counters_ != NULL) {                                             \
            (void) ngx_atomic_fetch_add(&counters_->field, 1);               \
        }                                                                    \
    } while (0)

char *ngx_http_idem_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
ngx_http_idem_counters_t *ngx_http_idem_counters(void);


#endif /* _NGX_HTTP_IDEM_METRICS_H_INCLUDED_ */
