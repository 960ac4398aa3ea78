
/*
 * A resolution's body: a small JSON object, read strictly.  Its values
 * end up in a record field ("z:<token>", space-separated), in JSON and in
 * a page, so they take a call id's characters only: no escapes to undo,
 * nothing to quote.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_http_idem_resolution.h"


static u_char *ngx_http_idem_resolution_space(u_char *p, u_char *last);
static u_char *ngx_http_idem_resolution_string(u_char *p, u_char *last,
    ngx_str_t *s);
static u_char *ngx_http_idem_resolution_literal(u_char *p, u_char *last,
    ngx_str_t *s);
static ngx_uint_t ngx_http_idem_resolution_value(ngx_str_t *s);
static ngx_int_t ngx_http_idem_resolution_check(
    ngx_http_idem_resolution_t *res, u_char *err, size_t errlen);


ngx_int_t
ngx_http_idem_resolution_parse(ngx_str_t *body,
    ngx_http_idem_resolution_t *res, u_char *err, size_t errlen)
{
    u_char     *p, *last;
    ngx_str_t   name, value, *member;

    ngx_memzero(res, sizeof(ngx_http_idem_resolution_t));

    p = body->data;
    last = p + body->len;

    p = ngx_http_idem_resolution_space(p, last);

    if (p == last || *p++ != '{') {
        ngx_cpystrn(err, (u_char *) "the body is not a JSON object", errlen);
        return NGX_DECLINED;
    }

    for ( ;; ) {
        p = ngx_http_idem_resolution_space(p, last);

        p = ngx_http_idem_resolution_string(p, last, &name);
        if (p == NULL) {
            ngx_cpystrn(err, (u_char *) "a member's name is not a plain "
                        "string", errlen);
            return NGX_DECLINED;
        }

        p = ngx_http_idem_resolution_space(p, last);

        if (p == last || *p++ != ':') {
            ngx_cpystrn(err, (u_char *) "a member has no value", errlen);
            return NGX_DECLINED;
        }

        p = ngx_http_idem_resolution_space(p, last);

        if (name.len == 5 && ngx_strncmp(name.data, "force", 5) == 0) {

            /*
             * the literal true only: a string or a number is a client's
             * mistake, and false would be a resolution that is not forced
             * spelt as one that might be
             */

            p = ngx_http_idem_resolution_literal(p, last, &value);

            if (p == NULL
                || !(value.len == 4 && ngx_strncmp(value.data, "true", 4)
                                       == 0))
            {
                ngx_cpystrn(err, (u_char *) "\"force\" takes true alone "
                            "(left out: not forced)", errlen);
                return NGX_DECLINED;
            }

            if (res->force) {
                ngx_cpystrn(err, (u_char *) "a member is given twice",
                            errlen);
                return NGX_DECLINED;
            }

            res->force = 1;

            goto next;
        }

        p = ngx_http_idem_resolution_string(p, last, &value);
        if (p == NULL) {
            ngx_cpystrn(err, (u_char *) "a value is not a plain string",
                        errlen);
            return NGX_DECLINED;
        }

        if (name.len == 7 && ngx_strncmp(name.data, "outcome", 7) == 0) {
            member = &res->outcome;

        } else if (name.len == 7
                   && ngx_strncmp(name.data, "receipt", 7) == 0)
        {
            member = &res->receipt;

        } else if (name.len == 2 && ngx_strncmp(name.data, "by", 2) == 0) {
            member = &res->by;

        } else {
            ngx_cpystrn(err, (u_char *) "a member is none of \"outcome\", "
                        "\"receipt\", \"by\", \"force\"", errlen);
            return NGX_DECLINED;
        }

        if (member->data != NULL) {
            ngx_cpystrn(err, (u_char *) "a member is given twice", errlen);
            return NGX_DECLINED;
        }

        *member = value;

    next:

        p = ngx_http_idem_resolution_space(p, last);

        if (p == last) {
            ngx_cpystrn(err, (u_char *) "the object is not closed", errlen);
            return NGX_DECLINED;
        }

        if (*p == ',') {
            p++;
            continue;
        }

        if (*p++ != '}') {
            ngx_cpystrn(err, (u_char *) "members are not separated by a "
                        "comma", errlen);
            return NGX_DECLINED;
        }

        break;
    }

    if (ngx_http_idem_resolution_space(p, last) != last) {
        ngx_cpystrn(err, (u_char *) "something follows the object", errlen);
        return NGX_DECLINED;
    }

    return ngx_http_idem_resolution_check(res, err, errlen);
}


ngx_int_t
ngx_http_idem_resolution_parse_form(ngx_str_t *body,
    ngx_http_idem_resolution_t *res, u_char *err, size_t errlen)
{
    u_char     *p, *last, *end, *eq, *dst, *src;
    ngx_str_t   name, value, *member;

    ngx_memzero(res, sizeof(ngx_http_idem_resolution_t));

    p = body->data;
    last = p + body->len;

    while (p < last) {
        end = ngx_strlchr(p, last, '&');
        if (end == NULL) {
            end = last;
        }

        if (end == p) {
            p++;
            continue;
        }

        eq = ngx_strlchr(p, end, '=');
        if (eq == NULL) {
            ngx_cpystrn(err, (u_char *) "a form field has no value",
                        errlen);
            return NGX_DECLINED;
        }

        name.data = p;
        name.len = eq - p;

        /* decoded in place: never longer than what it decodes */

        src = eq + 1;
        dst = eq + 1;
        ngx_unescape_uri(&dst, &src, end - (eq + 1), 0);

        value.data = eq + 1;
        value.len = dst - value.data;

        p = end + 1;

        if (name.len == 5 && ngx_strncmp(name.data, "force", 5) == 0) {
            if (!(value.len == 4 && ngx_strncmp(value.data, "true", 4) == 0))
            {
                ngx_cpystrn(err, (u_char *) "\"force\" takes true alone "
                            "(left out: not forced)", errlen);
                return NGX_DECLINED;
            }

            if (res->force) {
                ngx_cpystrn(err, (u_char *) "a field is given twice",
                            errlen);
                return NGX_DECLINED;
            }

            res->force = 1;
            continue;
        }

        if (name.len == 7 && ngx_strncmp(name.data, "outcome", 7) == 0) {
            member = &res->outcome;

        } else if (name.len == 7
                   && ngx_strncmp(name.data, "receipt", 7) == 0)
        {
            member = &res->receipt;

        } else if (name.len == 2 && ngx_strncmp(name.data, "by", 2) == 0) {
            member = &res->by;

        } else {
            ngx_cpystrn(err, (u_char *) "a form field is none of "
                        "\"outcome\", \"receipt\", \"by\", \"force\"",
                        errlen);
            return NGX_DECLINED;
        }

        if (member->data != NULL) {
            ngx_cpystrn(err, (u_char *) "a field is given twice", errlen);
            return NGX_DECLINED;
        }

        /* an empty field is one left empty: absent, but only once */

        *member = value;
    }

    if (res->receipt.data != NULL && res->receipt.len == 0) {
        res->receipt.data = NULL;
    }

    if (res->by.data != NULL && res->by.len == 0) {
        res->by.data = NULL;
    }

    return ngx_http_idem_resolution_check(res, err, errlen);
}


/* the outcome, receipt and by, whatever the body's form */

static ngx_int_t
ngx_http_idem_resolution_check(ngx_http_idem_resolution_t *res, u_char *err,
    size_t errlen)
{
    if (res->outcome.len == 7
        && ngx_strncmp(res->outcome.data, "applied", 7) == 0)
    {
        res->applied = 1;

    } else if (!(res->outcome.len == 11
                 && ngx_strncmp(res->outcome.data, "not_applied", 11) == 0))
    {
        ngx_cpystrn(err, (u_char *) "\"outcome\" must be \"applied\" or "
                    "\"not_applied\"", errlen);
        return NGX_DECLINED;
    }

    if ((res->receipt.data != NULL
         && !ngx_http_idem_resolution_value(&res->receipt))
        || (res->by.data != NULL
            && !ngx_http_idem_resolution_value(&res->by)))
    {
        ngx_cpystrn(err, (u_char *) "\"receipt\" and \"by\" take 1 to 128 "
                    "of A-Z a-z 0-9 - . _ ~ :", errlen);
        return NGX_DECLINED;
    }

    if (res->receipt.data == NULL) {
        ngx_str_set(&res->receipt, "-");
    }

    if (res->by.data == NULL) {
        ngx_str_set(&res->by, "-");
    }

    return NGX_OK;
}


static u_char *
ngx_http_idem_resolution_space(u_char *p, u_char *last)
{
    while (p < last
           && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
    {
        p++;
    }

    return p;
}


/* a string without escapes or control bytes; NULL: not one */

static u_char *
ngx_http_idem_resolution_string(u_char *p, u_char *last, ngx_str_t *s)
{
    if (p == NULL || p == last || *p++ != '"') {
        return NULL;
    }

    s->data = p;

    while (p < last && *p != '"') {
        if (*p == '\\' || *p < 0x20) {
            return NULL;
        }

        p++;
    }

    if (p == last) {
        return NULL;
    }

    s->len = p - s->data;

    return p + 1;
}


/* a bare word of a-z (true, false, null); NULL: none there */

static u_char *
ngx_http_idem_resolution_literal(u_char *p, u_char *last, ngx_str_t *s)
{
    s->data = p;

    while (p < last && *p >= 'a' && *p <= 'z') {
        p++;
    }

    s->len = p - s->data;

    return s->len ? p : NULL;
}


/* 1 to 128 of A-Z a-z 0-9 - . _ ~ : */

static ngx_uint_t
ngx_http_idem_resolution_value(ngx_str_t *s)
{
    u_char      c;
    ngx_uint_t  i;

    if (s->len == 0 || s->len > NGX_HTTP_IDEM_RESOLUTION_MAX_VALUE) {
        return 0;
    }

    for (i = 0; i < s->len; i++) {
        c = s->data[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9')
              || c == '-' || c == '.' || c == '_' || c == '~' || c == ':'))
        {
            return 0;
        }
    }

    return 1;
}
