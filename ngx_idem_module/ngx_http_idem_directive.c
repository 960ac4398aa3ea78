
/*
 * Directive setters: each checks its value at "nginx -t" and names the
 * directive and the value in its error.
 */


#include "ngx_http_idem_directive.h"
#include "ngx_http_idem_call_id.h"
#include "ngx_http_idem_headers.h"
#include "ngx_http_idem_store.h"
#include "ngx_http_idem_util.h"


#define NGX_HTTP_IDEM_GRPC_STATUSES  17


static ngx_int_t ngx_http_idem_grpc_statuses(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *list, ngx_uint_t *mask);
static ngx_int_t ngx_http_idem_durable_kind(ngx_conf_t *cf,
    ngx_http_idem_store_conf_t *store, ngx_http_idem_loc_conf_t *conf);


/* idem_retry on=: the failures a retry may follow */

static ngx_conf_bitmask_t  ngx_http_idem_retry_on[] = {
    { ngx_string("error"), NGX_HTTP_UPSTREAM_FT_ERROR },
    { ngx_string("timeout"), NGX_HTTP_UPSTREAM_FT_TIMEOUT },
    { ngx_string("http_500"), NGX_HTTP_UPSTREAM_FT_HTTP_500 },
    { ngx_string("http_502"), NGX_HTTP_UPSTREAM_FT_HTTP_502 },
    { ngx_string("http_503"), NGX_HTTP_UPSTREAM_FT_HTTP_503 },
    { ngx_string("http_504"), NGX_HTTP_UPSTREAM_FT_HTTP_504 },
    { ngx_string("http_429"), NGX_HTTP_UPSTREAM_FT_HTTP_429 },
    { ngx_null_string, 0 }
};


/* idem_dedupe_replay grpc=: gRPC's status codes, by number */

static ngx_str_t  ngx_http_idem_grpc_names[] = {
    ngx_string("OK"),
    ngx_string("CANCELLED"),
    ngx_string("UNKNOWN"),
    ngx_string("INVALID_ARGUMENT"),
    ngx_string("DEADLINE_EXCEEDED"),
    ngx_string("NOT_FOUND"),
    ngx_string("ALREADY_EXISTS"),
    ngx_string("PERMISSION_DENIED"),
    ngx_string("RESOURCE_EXHAUSTED"),
    ngx_string("FAILED_PRECONDITION"),
    ngx_string("ABORTED"),
    ngx_string("OUT_OF_RANGE"),
    ngx_string("UNIMPLEMENTED"),
    ngx_string("INTERNAL"),
    ngx_string("UNAVAILABLE"),
    ngx_string("DATA_LOSS"),
    ngx_string("UNAUTHENTICATED")
};


char *
ngx_http_idem_enable(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    char                       *rv;
    ngx_http_idem_main_conf_t  *imcf;

    rv = ngx_conf_set_flag_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    if (ilcf->enable) {
        imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);
        imcf->used = 1;
    }

    return NGX_CONF_OK;
}


char *
ngx_http_idem_set_header(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t                    *value;
    ngx_http_idem_header_t       *h;
    ngx_http_idem_conf_bounds_t  *bounds;

    h = (ngx_http_idem_header_t *) (p + cmd->offset);
    bounds = cmd->post;

    if (h->name.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (bounds != NULL && bounds->off
        && ngx_strcmp(value[1].data, "off") == 0)
    {
        ngx_str_set(&h->name, "");
        return NGX_CONF_OK;
    }

    if (ngx_http_idem_header_name_valid(&value[1]) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid header name \"%V\" in \"%V\" directive",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_idem_header_init(cf->pool, h, &value[1]) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* ngx_conf_set_enum_slot, with an error that names the directive */

char *
ngx_http_idem_set_enum(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    u_char           *last, buf[128];
    ngx_str_t        *value;
    ngx_uint_t        i;
    ngx_uint_t       *np;
    ngx_conf_enum_t  *e;

    np = (ngx_uint_t *) (p + cmd->offset);

    if (*np != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    e = cmd->post;

    for (i = 0; e[i].name.len != 0; i++) {
        if (e[i].name.len == value[1].len
            && ngx_strcasecmp(e[i].name.data, value[1].data) == 0)
        {
            *np = e[i].value;
            return NGX_CONF_OK;
        }
    }

    last = buf;

    for (i = 0; e[i].name.len != 0; i++) {
        last = ngx_slprintf(last, buf + sizeof(buf), "%s\"%V\"",
                            i ? " or " : "", &e[i].name);
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, "
                       "it must be %*s",
                       &value[1], &cmd->name, last - buf, buf);

    return NGX_CONF_ERROR;
}


/* a string that becomes part of generated call ids: the call id charset */

char *
ngx_http_idem_set_id_part(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t  *field, *value;

    field = (ngx_str_t *) (p + cmd->offset);

    if (field->data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0 || value[1].len > 64
        || ngx_http_idem_check_charset(&value[1]) != NGX_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be 1 to 64 characters from "
                           "A-Z a-z 0-9 - . _ ~ :",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    *field = value[1];

    return NGX_CONF_OK;
}


char *
ngx_http_idem_set_max_length(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_int_t    n;
    ngx_str_t   *value;
    ngx_uint_t  *np;

    np = (ngx_uint_t *) (p + cmd->offset);

    if (*np != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    n = ngx_atoi(value[1].data, value[1].len);

    if (n < 1 || n > NGX_HTTP_IDEM_MAX_ID_LEN) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a number from 1 to %d",
                           &value[1], &cmd->name, NGX_HTTP_IDEM_MAX_ID_LEN);
        return NGX_CONF_ERROR;
    }

    *np = n;

    return NGX_CONF_OK;
}


char *
ngx_http_idem_set_pattern(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
#if (NGX_PCRE)
    ngx_http_idem_loc_conf_t *ilcf = conf;

    u_char               errstr[NGX_MAX_CONF_ERRSTR];
    ngx_str_t           *value;
    ngx_regex_compile_t  rc;

    if (ilcf->call_id_pattern != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    ngx_memzero(&rc, sizeof(ngx_regex_compile_t));

    rc.pattern = value[1];
    rc.pool = cf->pool;
    rc.err.len = NGX_MAX_CONF_ERRSTR;
    rc.err.data = errstr;

    if (value[1].len == 0 || ngx_regex_compile(&rc) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive: %V",
                           &value[1], &cmd->name, &rc.err);
        return NGX_CONF_ERROR;
    }

    ilcf->call_id_pattern = rc.regex;
    ilcf->call_id_pattern_src = value[1];

    return NGX_CONF_OK;

#else

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"%V\" requires PCRE library", &cmd->name);
    return NGX_CONF_ERROR;

#endif
}


/*
 * a time up to bounds->max, or "off" (0) where bounds->off allows it; a
 * warning above bounds->warn, or for a bare number that reads as ms
 */

char *
ngx_http_idem_set_time(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    u_char                       *last;
    ngx_str_t                    *value;
    ngx_msec_t                   *msp;
    ngx_http_idem_conf_bounds_t  *bounds;

    msp = (ngx_msec_t *) (p + cmd->offset);
    bounds = cmd->post;

    if (*msp != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (bounds->off && ngx_strcmp(value[1].data, "off") == 0) {
        *msp = 0;
        return NGX_CONF_OK;
    }

    *msp = ngx_parse_time(&value[1], 0);

    if (*msp == (ngx_msec_t) NGX_ERROR || *msp == 0 || *msp > bounds->max) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a time greater than 0%s",
                           &value[1], &cmd->name,
                           bounds->off ? " or \"off\"" : "");
        return NGX_CONF_ERROR;
    }

    if (bounds->warn == 0) {
        return NGX_CONF_OK;
    }

    /* a number without a unit is seconds: "2000" was meant as ms, mostly */

    last = value[1].data + value[1].len - 1;

    if (*last >= '0' && *last <= '9' && *msp >= 100 * 1000) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"%V %V\" is %V seconds: a number without a "
                           "unit is seconds (\"%Vms\" for milliseconds)",
                           &cmd->name, &value[1], &value[1], &value[1]);

    } else if (*msp > bounds->warn) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"%V %V\" is longer than %M minutes: the "
                           "route's calls may wait that long",
                           &cmd->name, &value[1], bounds->warn / 60000);
    }

    return NGX_CONF_OK;
}


/* idem_retry N [backoff=T] [max_backoff=T] [per_try_timeout=T] [on=LIST] */

char *
ngx_http_idem_set_retry(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    u_char              *p, *last;
    ngx_int_t            n;
    ngx_str_t           *value, s, v;
    ngx_uint_t           i, j;
    ngx_msec_t           ms, *msp;
    ngx_conf_bitmask_t  *b;

    if (ilcf->retry_attempts != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    n = ngx_atoi(value[1].data, value[1].len);

    if (n < 1 || n > NGX_HTTP_IDEM_MAX_ATTEMPTS) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "the number of attempts must be from 1 to %d",
                           &value[1], &cmd->name, NGX_HTTP_IDEM_MAX_ATTEMPTS);
        return NGX_CONF_ERROR;
    }

    ilcf->retry_attempts = n;
    ilcf->retry_backoff = NGX_HTTP_IDEM_RETRY_BACKOFF;
    ilcf->retry_max_backoff = NGX_HTTP_IDEM_RETRY_MAX_BACKOFF;
    ilcf->retry_per_try_timeout = 0;
    ilcf->retry_on = NGX_HTTP_IDEM_RETRY_ON;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_http_idem_conf_param(&value[i], &s, &v) != NGX_OK) {
            return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
        }

        msp = NULL;

        if (ngx_http_idem_str_is(&s, "backoff")) {
            msp = &ilcf->retry_backoff;

        } else if (ngx_http_idem_str_is(&s, "max_backoff")) {
            msp = &ilcf->retry_max_backoff;

        } else if (ngx_http_idem_str_is(&s, "per_try_timeout")) {
            msp = &ilcf->retry_per_try_timeout;

        } else if (ngx_http_idem_str_is(&s, "on")) {

            ilcf->retry_on = 0;
            last = v.data + v.len;

            while (v.data < last) {
                p = ngx_strlchr(v.data, last, ',');
                s.data = v.data;
                s.len = (p ? p : last) - v.data;

                for (b = ngx_http_idem_retry_on, j = 0; b[j].name.len; j++) {
                    if (b[j].name.len == s.len
                        && ngx_strncmp(b[j].name.data, s.data, s.len) == 0)
                    {
                        break;
                    }
                }

                if (b[j].name.len == 0) {
                    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                       "invalid value \"%V\" in \"%V\" "
                                       "directive, \"on\" takes error, "
                                       "timeout, http_500, http_502, "
                                       "http_503, http_504, http_429",
                                       &s, &cmd->name);
                    return NGX_CONF_ERROR;
                }

                ilcf->retry_on |= b[j].mask;
                v.data = p ? p + 1 : last;
            }

            if (ilcf->retry_on == 0) {
                return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
            }

            continue;

        } else {
            return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
        }

        ms = ngx_parse_time(&v, 0);

        if (ms == (ngx_msec_t) NGX_ERROR || ms > NGX_MAX_INT32_VALUE
            || (ms == 0 && msp == &ilcf->retry_per_try_timeout))
        {
            return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
        }

        *msp = ms;
    }

    return NGX_CONF_OK;
}


/* idem_dedupe_durable replicas=N [timeout=T] | off */

char *
ngx_http_idem_set_durable(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    ngx_int_t    n;
    ngx_str_t   *value, s, v;
    ngx_uint_t   i;
    ngx_msec_t   ms;

    if (ilcf->dedupe_durable != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    ilcf->dedupe_durable = 0;
    ilcf->dedupe_durable_timeout = 0;

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        return NGX_CONF_OK;
    }

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_http_idem_conf_param(&value[i], &s, &v) != NGX_OK) {
            return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
        }

        if (ngx_http_idem_str_is(&s, "replicas")) {
            n = ngx_atoi(v.data, v.len);

            if (n < 1 || n > NGX_HTTP_IDEM_MAX_REPLICAS) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid value \"%V\" in \"%V\" "
                                   "directive, replicas must be a number "
                                   "from 1 to %d", &value[i], &cmd->name,
                                   NGX_HTTP_IDEM_MAX_REPLICAS);
                return NGX_CONF_ERROR;
            }

            ilcf->dedupe_durable = n;
            continue;
        }

        if (!ngx_http_idem_str_is(&s, "timeout")) {
            return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
        }

        /* WAIT's 0 is "forever": a worker's claim must end */

        ms = ngx_parse_time(&v, 0);

        if (ms == (ngx_msec_t) NGX_ERROR || ms == 0
            || ms > NGX_MAX_INT32_VALUE)
        {
            return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
        }

        ilcf->dedupe_durable_timeout = ms;
    }

    if (ilcf->dedupe_durable == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" needs \"replicas=N\" or \"off\"",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* idem_dedupe_scope COMPLEX_VALUE | off */

char *
ngx_http_idem_set_scope(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    ngx_str_t                         *value;
    ngx_http_compile_complex_value_t   ccv;

    if (ilcf->dedupe_scope_set != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    ilcf->dedupe_scope_set = 1;

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        return NGX_CONF_OK;
    }

    if (value[1].len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "empty value in \"%V\" directive", &cmd->name);
        return NGX_CONF_ERROR;
    }

    ilcf->dedupe_scope = ngx_palloc(cf->pool,
                                    sizeof(ngx_http_complex_value_t));
    if (ilcf->dedupe_scope == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = ilcf->dedupe_scope;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* idem_dedupe_fingerprint method uri [body]: what a duplicate must match */

char *
ngx_http_idem_set_fingerprint(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    ngx_str_t  *value;

    if (ilcf->dedupe_fingerprint_body != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (!ngx_http_idem_str_is(&value[1], "method")) {
        return ngx_http_idem_conf_invalid(cf, cmd, &value[1]);
    }

    if (!ngx_http_idem_str_is(&value[2], "uri")) {
        return ngx_http_idem_conf_invalid(cf, cmd, &value[2]);
    }

    if (cf->args->nelts == 4 && !ngx_http_idem_str_is(&value[3], "body")) {
        return ngx_http_idem_conf_invalid(cf, cmd, &value[3]);
    }

    ilcf->dedupe_fingerprint_body = (cf->args->nelts == 4);

    return NGX_CONF_OK;
}


/*
 * idem_dedupe_replay [2xx 3xx 4xx 5xx | CODE ...] [grpc=STATUS,...]: which
 * answers are kept for duplicates; a class is kept as its digit, a code as
 * itself, gRPC statuses (names or numbers) as bits of their own
 */

char *
ngx_http_idem_set_replay(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    ngx_int_t    n;
    ngx_str_t   *value, list;
    ngx_uint_t   i, *code;

    if (ilcf->dedupe_replay != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    ilcf->dedupe_replay = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                           sizeof(ngx_uint_t));
    if (ilcf->dedupe_replay == NULL) {
        return NGX_CONF_ERROR;
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        if (value[i].len >= 5
            && ngx_strncmp(value[i].data, "grpc=", 5) == 0)
        {
            if (ilcf->dedupe_replay_grpc != 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "duplicate \"grpc=\" in \"%V\" directive",
                                   &cmd->name);
                return NGX_CONF_ERROR;
            }

            list.data = value[i].data + 5;
            list.len = value[i].len - 5;

            if (ngx_http_idem_grpc_statuses(cf, cmd, &list,
                                            &ilcf->dedupe_replay_grpc)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (value[i].len == 3
            && value[i].data[1] == 'x' && value[i].data[2] == 'x'
            && value[i].data[0] >= '1' && value[i].data[0] <= '5')
        {
            n = value[i].data[0] - '0';

        } else {
            n = ngx_atoi(value[i].data, value[i].len);

            if (value[i].len != 3 || n < 100 || n > 599) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid value \"%V\" in \"%V\" "
                                   "directive, it must be a class (2xx ...), "
                                   "a status code (100 to 599) or grpc=",
                                   &value[i], &cmd->name);
                return NGX_CONF_ERROR;
            }
        }

        code = ngx_array_push(ilcf->dedupe_replay);
        if (code == NULL) {
            return NGX_CONF_ERROR;
        }

        *code = (ngx_uint_t) n;
    }

    return NGX_CONF_OK;
}


/*
 * "OK,NOT_FOUND,5": gRPC status names (any case) or numbers 0 to 16, a bit
 * each in "mask"
 */

static ngx_int_t
ngx_http_idem_grpc_statuses(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *list, ngx_uint_t *mask)
{
    u_char      *p, *last, *comma;
    ngx_int_t    n;
    ngx_str_t    name;
    ngx_uint_t   k;

    p = list->data;
    last = list->data + list->len;

    for ( ;; ) {
        comma = ngx_strlchr(p, last, ',');

        name.data = p;
        name.len = (comma ? comma : last) - p;

        n = ngx_atoi(name.data, name.len);

        if (n == NGX_ERROR) {
            for (k = 0; k < NGX_HTTP_IDEM_GRPC_STATUSES; k++) {
                if (name.len == ngx_http_idem_grpc_names[k].len
                    && ngx_strncasecmp(name.data,
                                       ngx_http_idem_grpc_names[k].data,
                                       name.len)
                       == 0)
                {
                    n = (ngx_int_t) k;
                    break;
                }
            }
        }

        if (n == NGX_ERROR || n >= NGX_HTTP_IDEM_GRPC_STATUSES) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid gRPC status \"%V\" in \"%V\" "
                               "directive, it must be a name (OK, "
                               "NOT_FOUND ...) or a number (0 to 16)",
                               &name, &cmd->name);
            return NGX_ERROR;
        }

        *mask |= (ngx_uint_t) 1 << n;

        if (comma == NULL) {
            return NGX_OK;
        }

        p = comma + 1;
    }
}


/* idem_status_url URL: it goes into a Link header as "<URL<id>>" */

char *
ngx_http_idem_set_status_url(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_loc_conf_t *ilcf = conf;

    u_char     *p;
    ngx_str_t  *value;

    if (ilcf->status_url.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (p = value[1].data; p < value[1].data + value[1].len; p++) {
        if (*p <= ' ' || *p >= 0x7f || *p == '<' || *p == '>' || *p == '"') {
            break;
        }
    }

    if (value[1].len == 0 || p < value[1].data + value[1].len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a URL without spaces, quotes or "
                           "angle brackets", &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    ilcf->status_url = value[1];

    return NGX_CONF_OK;
}


char *
ngx_http_idem_set_redis(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_main_conf_t *imcf = conf;

    return ngx_http_idem_store_parse(cf, cmd, &imcf->store);
}


/* an unset header takes its parent's, or the default name */

ngx_int_t
ngx_http_idem_merge_header(ngx_conf_t *cf, ngx_http_idem_header_t *conf,
    ngx_http_idem_header_t *prev, char *def)
{
    ngx_str_t  name;

    if (conf->name.data != NULL) {
        return NGX_OK;
    }

    if (prev->name.data == NULL) {
        name.data = (u_char *) def;
        name.len = ngx_strlen(def);

        if (ngx_http_idem_header_init(cf->pool, prev, &name) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    *conf = *prev;

    return NGX_OK;
}


/*
 * Retries that cannot happen where they are written (warn): idem_retry on
 * a route that is not idempotent gets one attempt, and idem_idempotent or
 * idem_retry where "idem" is off do nothing.  Said in the location that
 * writes the directive ("here"), not at the server's level, whose
 * locations may still turn "idem" or idem_idempotent on.
 */

void
ngx_http_idem_check_retry(ngx_conf_t *cf, ngx_http_idem_loc_conf_t *conf,
    ngx_uint_t retry_here, ngx_uint_t idempotent_here)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if ((!retry_here && !idempotent_here) || clcf->name.len == 0) {
        return;
    }

    if (!conf->enable) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"%s\" is set in location \"%V\" where "
                           "\"idem\" is off: it has no effect there",
                           retry_here ? "idem_retry" : "idem_idempotent",
                           &clcf->name);
        return;
    }

    if (retry_here && !conf->idempotent && conf->retry_attempts > 1) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"idem_retry %ui\" in location \"%V\" where "
                           "\"idem_idempotent\" is off: its calls get one "
                           "attempt (\"idem_idempotent on\" lets them be "
                           "retried)", conf->retry_attempts, &clcf->name);
    }
}


/*
 * A location's kind of durable claim (replicas, timeout), once among the
 * store's: each kind gets a connection of its own to each node, so that
 * a WAIT for one kind never holds up the claims of another.
 */

static ngx_int_t
ngx_http_idem_durable_kind(ngx_conf_t *cf, ngx_http_idem_store_conf_t *store,
    ngx_http_idem_loc_conf_t *conf)
{
    ngx_uint_t                      i;
    ngx_http_idem_store_durable_t  *kind;

    if (store->durable == NULL) {
        store->durable = ngx_array_create(cf->pool, 2,
                                    sizeof(ngx_http_idem_store_durable_t));
        if (store->durable == NULL) {
            return NGX_ERROR;
        }
    }

    kind = store->durable->elts;

    for (i = 0; i < store->durable->nelts; i++) {
        if (kind[i].replicas == conf->dedupe_durable
            && kind[i].wait == conf->dedupe_durable_timeout)
        {
            return NGX_OK;
        }
    }

    kind = ngx_array_push(store->durable);
    if (kind == NULL) {
        return NGX_ERROR;
    }

    kind->replicas = conf->dedupe_durable;
    kind->wait = conf->dedupe_durable_timeout;

    return NGX_OK;
}


/*
 * What a merged location cannot run with (emerg), or does not do what its
 * directives seem to say (warn).  "here": idem_dedupe or
 * idem_call_id_missing is set at this level, where a warning belongs.
 */

char *
ngx_http_idem_check_loc_conf(ngx_conf_t *cf, ngx_http_idem_loc_conf_t *conf,
    ngx_uint_t here, ngx_uint_t durable_here)
{
    size_t                      len;
    ngx_http_idem_main_conf_t  *imcf;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idem_module);

    if (conf->dedupe && !conf->dedupe_scope_set) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_dedupe\" is on but \"idem_dedupe_scope\" "
                           "is not set: say who owns a call id (e.g. "
                           "$http_authorization), or \"off\" for one "
                           "shared scope");
        return NGX_CONF_ERROR;
    }

    if (conf->dedupe && imcf->store.addr.data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_dedupe\" is on but there is no "
                           "\"idem_redis\" to claim call ids in");
        return NGX_CONF_ERROR;
    }

    if (conf->dedupe_durable && durable_here && !conf->dedupe) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_dedupe_durable\" is set where "
                           "\"idem_dedupe\" is off: there is no claim "
                           "to make durable");
        return NGX_CONF_ERROR;
    }

    if (conf->dedupe_durable && conf->dedupe) {

        /* the WAIT's timeout: idem_redis's by default */

        if (conf->dedupe_durable_timeout == 0) {
            conf->dedupe_durable_timeout = imcf->store.timeout;
        }

        /* the store opens a connection of their own to each node */

        if (ngx_http_idem_durable_kind(cf, &imcf->store, conf) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    if (conf->dedupe && conf->dedupe_wait && imcf->store.wake.len == 0) {

        /*
         * Waiters are woken by their owner's final write: the store
         * subscribes to "<prefix>wake", where owners publish their keys
         */

        imcf->store.wake.len = imcf->key_prefix.len + sizeof("wake") - 1;
        imcf->store.wake.data = ngx_pnalloc(cf->pool, imcf->store.wake.len);
        if (imcf->store.wake.data == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memcpy(ngx_cpymem(imcf->store.wake.data, imcf->key_prefix.data,
                              imcf->key_prefix.len),
                   "wake", sizeof("wake") - 1);
    }

    if (conf->dedupe && here && !conf->enable) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"idem_dedupe\" is on where \"idem\" is off: "
                           "it has no effect there");
    }

    /*
     * A sender whose id comes from a variable or the body never reads a
     * generated one back: generating is for its messages without one
     * (Slack's url_verification), not a retry that lost its id.
     */

    if (conf->dedupe && here && conf->enable
        && conf->call_id_missing == NGX_HTTP_IDEM_MISSING_GENERATE
        && conf->call_id_from == NULL && conf->call_id_json == NULL)
    {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"idem_dedupe\" is on where missing call ids "
                           "are generated: a client that timed out never "
                           "learned the id its retry should carry "
                           "(\"idem_call_id_missing reject\" avoids this)");
    }

    if (conf->record && imcf->store.addr.data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_record\" is on but there is no "
                           "\"idem_redis\" to record into");
        return NGX_CONF_ERROR;
    }

    if (conf->status && imcf->store.addr.data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_status\" needs \"idem_redis\" to read "
                           "records from");
        return NGX_CONF_ERROR;
    }

    if (conf->call_id_header.hash == conf->trace_id_header.hash
        && conf->call_id_header.name.len == conf->trace_id_header.name.len
        && ngx_strncmp(conf->call_id_header.lowcase,
                       conf->trace_id_header.lowcase,
                       conf->call_id_header.name.len) == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_call_id_header\" and "
                           "\"idem_trace_id_header\" must differ, "
                           "both are \"%V\"", &conf->call_id_header.name);
        return NGX_CONF_ERROR;
    }

    if (conf->call_id_missing == NGX_HTTP_IDEM_MISSING_GENERATE) {
        len = ngx_http_idem_generated_length(conf, &imcf->node_id);

        if (len > conf->call_id_max_length) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"idem_call_id_max_length\" %ui is shorter "
                               "than the generated call ids (%uz bytes)",
                               conf->call_id_max_length, len);
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}
