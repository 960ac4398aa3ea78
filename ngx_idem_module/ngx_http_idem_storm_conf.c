
/*
 * idem_retry_budget and idem_breaker: parsing, inheritance, and the zone
 * the first of them asks for.
 */


#include "ngx_http_idem_storm.h"
#include "ngx_http_idem_storm_zone.h"
#include "ngx_http_idem_util.h"


static ngx_int_t ngx_http_idem_storm_parse(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *value, char *name, ngx_uint_t *n,
    ngx_uint_t min, ngx_uint_t max);
static ngx_int_t ngx_http_idem_storm_parse_time(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *value, char *name, ngx_msec_t *ms,
    ngx_msec_t min, ngx_msec_t max);


/*
 * idem_retry_budget ratio=R [min=N] [window=T] | off
 */

char *
ngx_http_idem_storm_set_budget(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idem_storm_conf_t  *scf;

    ngx_int_t    ratio;
    ngx_str_t   *value, s, v;
    ngx_uint_t   i;

    scf = (ngx_http_idem_storm_conf_t *) ((char *) conf + cmd->offset);

    if (scf->budget != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_http_idem_conf_off(cf)) {
        scf->budget = 0;
        return NGX_CONF_OK;
    }

    scf->budget = 1;
    scf->ratio = NGX_CONF_UNSET_UINT;
    scf->min = 10;
    scf->window = 10000;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_http_idem_conf_param(&value[i], &s, &v) != NGX_OK) {
            return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
        }

        if (ngx_http_idem_str_is(&s, "ratio")) {

            /* three decimals: "0.2" is 200 retries per 1000 calls */

            ratio = v.len ? ngx_atofp(v.data, v.len, 3) : NGX_ERROR;

            if (ratio == NGX_ERROR || ratio > 100000) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid value \"%V\" in \"%V\" "
                                   "directive, \"ratio\" must be a number "
                                   "from 0 to 100 with at most three "
                                   "decimals", &value[i], &cmd->name);
                return NGX_CONF_ERROR;
            }

            scf->ratio = ratio;

        } else if (ngx_http_idem_str_is(&s, "min")) {

            if (ngx_http_idem_storm_parse(cf, cmd, &value[i], "min",
                                          &scf->min, 0, 1000000)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (ngx_http_idem_str_is(&s, "window")) {

            if (ngx_http_idem_storm_parse_time(cf, cmd, &value[i], "window",
                                               &scf->window,
                                               NGX_HTTP_IDEM_STORM_TICK,
                                               NGX_HTTP_IDEM_STORM_MAX_WINDOW)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else {
            return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
        }
    }

    if (scf->ratio == NGX_CONF_UNSET_UINT) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" needs \"ratio=\" (or \"off\")",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_idem_storm_zone(cf, 1) == NULL) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * idem_breaker [failures=P%] [min_calls=N] [window=T] [open=T] [probes=N]
 *     | off
 */

char *
ngx_http_idem_storm_set_breaker(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idem_storm_conf_t  *scf;

    ngx_str_t   *value, s, v;
    ngx_uint_t   i;

    scf = (ngx_http_idem_storm_conf_t *) ((char *) conf + cmd->offset);

    if (scf->breaker != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_http_idem_conf_off(cf)) {
        scf->breaker = 0;
        return NGX_CONF_OK;
    }

    scf->breaker = 1;
    scf->failures = 50;
    scf->min_calls = 20;
    scf->breaker_window = 10000;
    scf->open = 5000;
    scf->probes = 1;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_http_idem_conf_param(&value[i], &s, &v) != NGX_OK) {
            return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
        }

        if (ngx_http_idem_str_is(&s, "failures")) {

            if (v.len && v.data[v.len - 1] == '%') {
                value[i].len--;
            }

            if (ngx_http_idem_storm_parse(cf, cmd, &value[i], "failures",
                                          &scf->failures, 1, 100)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (ngx_http_idem_str_is(&s, "min_calls")) {

            if (ngx_http_idem_storm_parse(cf, cmd, &value[i], "min_calls",
                                          &scf->min_calls, 1, 1000000)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (ngx_http_idem_str_is(&s, "probes")) {

            if (ngx_http_idem_storm_parse(cf, cmd, &value[i], "probes",
                                          &scf->probes, 1, 1000)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (ngx_http_idem_str_is(&s, "window")) {

            if (ngx_http_idem_storm_parse_time(cf, cmd, &value[i], "window",
                                               &scf->breaker_window,
                                               NGX_HTTP_IDEM_STORM_TICK,
                                               NGX_HTTP_IDEM_STORM_MAX_WINDOW)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (ngx_http_idem_str_is(&s, "open")) {

            if (ngx_http_idem_storm_parse_time(cf, cmd, &value[i], "open",
                                               &scf->open, 1,
                                               24 * 60 * 60 * 1000)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else {
            return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
        }
    }

    if (ngx_http_idem_storm_zone(cf, 1) == NULL) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* "name=N", N from min to max */

static ngx_int_t
ngx_http_idem_storm_parse(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *value, char *name, ngx_uint_t *n, ngx_uint_t min,
    ngx_uint_t max)
{
    size_t     len;
    ngx_int_t  v;

    len = ngx_strlen(name) + 1;

    v = ngx_atoi(value->data + len, value->len - len);

    if (v == NGX_ERROR || (ngx_uint_t) v < min || (ngx_uint_t) v > max) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "\"%s\" must be from %ui to %ui",
                           value, &cmd->name, name, min, max);
        return NGX_ERROR;
    }

    *n = v;

    return NGX_OK;
}


/* "name=T", T from min to max ms */

static ngx_int_t
ngx_http_idem_storm_parse_time(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *value, char *name, ngx_msec_t *ms, ngx_msec_t min,
    ngx_msec_t max)
{
    size_t      len;
    ngx_str_t   v;
    ngx_msec_t  t;

    len = ngx_strlen(name) + 1;

    v.data = value->data + len;
    v.len = value->len - len;

    t = ngx_parse_time(&v, 0);

    if (t == (ngx_msec_t) NGX_ERROR || t < min || t > max) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "\"%s\" must be from %Mms to %Mms",
                           value, &cmd->name, name, min, max);
        return NGX_ERROR;
    }

    *ms = t;

    return NGX_OK;
}


void
ngx_http_idem_storm_create_conf(ngx_http_idem_storm_conf_t *conf)
{
    /*
     * set by ngx_pcalloc():
     *
     *     conf->ratio = 0; ... conf->probes = 0;
     *     conf->zone = NULL;
     */

    conf->budget = NGX_CONF_UNSET;
    conf->breaker = NGX_CONF_UNSET;
}


/* each directive is one: its parameters are inherited together */

char *
ngx_http_idem_storm_merge_conf(ngx_conf_t *cf,
    ngx_http_idem_storm_conf_t *conf, ngx_http_idem_storm_conf_t *prev)
{
    if (conf->budget == NGX_CONF_UNSET) {
        conf->budget = prev->budget;
        conf->ratio = prev->ratio;
        conf->min = prev->min;
        conf->window = prev->window;
    }

    ngx_conf_merge_value(conf->budget, prev->budget, 0);

    if (conf->breaker == NGX_CONF_UNSET) {
        conf->breaker = prev->breaker;
        conf->failures = prev->failures;
        conf->min_calls = prev->min_calls;
        conf->breaker_window = prev->breaker_window;
        conf->open = prev->open;
        conf->probes = prev->probes;
    }

    ngx_conf_merge_value(conf->breaker, prev->breaker, 0);

    /* the whole http{} block is parsed by now: the zone exists, or not */

    if (conf->zone == NULL) {
        conf->zone = ngx_http_idem_storm_zone(cf, 0);
    }

    return NGX_CONF_OK;
}
