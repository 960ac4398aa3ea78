
/*
 * The timeline page: the status endpoint's answer for a person, when the
 * client's Accept prefers text/html to JSON (a browser).  One page, no
 * scripts and nothing fetched from elsewhere: the call id, its state in
 * large type with what it means for the caller, then every execution and
 * attempt on one time axis (CSS bars), coloured by outcome.
 *
 * Everything that comes from the record is HTML-escaped: a URI or a call
 * id is whatever a client sent.  Classes and inline styles hold only what
 * this file writes (known names, numbers).
 */


#include "ngx_http_idem_timeline.h"
#include "ngx_http_idem_record_parse.h"
#include "ngx_http_idem_util.h"


/* q-values in thousandths */
#define NGX_HTTP_IDEM_Q_MAX              1000

/* room for one row, beside the record's own strings (6x, escaped) */
#define NGX_HTTP_IDEM_TIMELINE_ROW       1024
#define NGX_HTTP_IDEM_TIMELINE_HEAD      4096

/* a time as html_time() writes it, at most */
#define NGX_HTTP_IDEM_TIMELINE_TIME      64


typedef struct {
    ngx_uint_t                       html_spec;    /* 3: text/html, 2: any
                                                      text, 1: any type */
    ngx_uint_t                       html_q;
    ngx_uint_t                       json_spec;
    ngx_uint_t                       json_q;
} ngx_http_idem_accept_t;


static void ngx_http_idem_accept_parse(ngx_str_t *value,
    ngx_http_idem_accept_t *acc);
static void ngx_http_idem_accept_range(u_char *p, u_char *last,
    ngx_http_idem_accept_t *acc);
static ngx_uint_t ngx_http_idem_accept_q(u_char *p, u_char *last);
static u_char *ngx_http_idem_timeline_head(u_char *p, ngx_str_t *id,
    ngx_str_t *state, char *meaning);
static u_char *ngx_http_idem_html(u_char *p, ngx_str_t *value);
static u_char *ngx_http_idem_html_time(u_char *p, uint64_t ms);
static u_char *ngx_http_idem_html_bar(u_char *p, uint64_t t0,
    uint64_t span, uint64_t from, uint64_t to, char *klass, ngx_uint_t sent);
static char *ngx_http_idem_state_class(ngx_str_t *state);
static char *ngx_http_idem_outcome_class(ngx_str_t *outcome);
static char *ngx_http_idem_state_meaning(ngx_str_t *state);
static ngx_http_idem_record_exec_t *ngx_http_idem_timeline_decided(
    ngx_http_idem_record_t *rec);
static u_char *ngx_http_idem_timeline_decision(u_char *p,
    ngx_http_idem_record_exec_t *x, ngx_http_idem_record_attempt_t *la);
static uint64_t ngx_http_idem_html_ms(ngx_str_t *value);


static ngx_str_t  ngx_http_idem_timeline_style = ngx_string(
    "<style>\n"
    "body{font:15px/1.4 system-ui,sans-serif;margin:2em;color:#222;"
    "max-width:70em}\n"
    "code{font-family:ui-monospace,monospace;word-break:break-all}\n"
    ".id{font-size:1.1em;margin:0}\n"
    ".state{font-size:3.5em;margin:.1em 0;letter-spacing:.02em}\n"
    ".means{font-size:1.25em;margin:0 0 1.2em}\n"
    ".s-SUCCESS{color:#1b7f2a}.s-FAILED{color:#c0261d}"
    ".s-UNKNOWN{color:#b86e00}.s-PROCESSING,.s-RECEIVED{color:#1f5fbf}"
    ".s-NOT_FOUND,.s-other{color:#666}\n"
    "dl{display:grid;grid-template-columns:max-content auto;"
    "gap:.2em 1em;margin:0 0 1.5em}\n"
    "dt{color:#666}dd{margin:0}\n"
    "table{border-collapse:collapse;width:100%}\n"
    "th,td{text-align:left;padding:.3em .5em;border-bottom:1px solid #e4e4e4;"
    "white-space:nowrap;vertical-align:middle}\n"
    "th{font-weight:600;color:#555;font-size:.9em}\n"
    "tr.execution td{background:#f6f6f6;font-weight:600}\n"
    "td.axis{width:40%;min-width:12em}\n"
    ".track{position:relative;height:14px;background:#eee;"
    "border-radius:2px}\n"
    ".bar{position:absolute;top:1px;height:12px;min-width:3px;"
    "border-radius:2px}\n"
    ".bar.ns{background-image:repeating-linear-gradient(45deg,"
    "rgba(255,255,255,.7) 0 3px,transparent 3px 6px)}\n"
    ".o-ok{background:#1b7f2a}.o-http{background:#c0261d}"
    ".o-connect{background:#8a8a8a}.o-lost{background:#e08a00}"
    ".o-other{background:#6d4c41}\n"
    ".x-SUCCESS{background:#8fd19e}.x-FAILED{background:#f1a39e}"
    ".x-UNKNOWN{background:#f7c873}.x-PROCESSING,.x-RECEIVED"
    "{background:#9dbdf0}.x-other{background:#ccc}\n"
    ".scale{display:flex;justify-content:space-between;color:#666;"
    "font-size:.85em}\n"
    ".legend span{display:inline-block;margin-right:1.2em}\n"
    ".legend i{display:inline-block;width:1.4em;height:.8em;"
    "margin-right:.3em;vertical-align:middle;position:static}\n"
    ".wide{overflow-x:auto}\n"
    "form.resolve{border:1px solid #e0c48f;background:#fff8ea;"
    "border-radius:6px;padding:.8em 1em;margin:0 0 1.5em;max-width:40em}\n"
    "form.resolve h2{margin:.2em 0 .4em;font-size:1.2em}\n"
    "form.resolve label{display:block;margin:.5em 0}\n"
    "form.resolve input[type=text]{display:block;width:100%;"
    "box-sizing:border-box;font:inherit;padding:.35em;margin-top:.2em}\n"
    "form.resolve button{font:inherit;font-weight:600;padding:.5em 1em;"
    "margin:.4em .6em .2em 0;border-radius:4px;border:1px solid #888;"
    "cursor:pointer}\n"
    "button.applied{background:#1b7f2a;color:#fff;border-color:#1b7f2a}\n"
    "button.not_applied{background:#fff;color:#c0261d;"
    "border-color:#c0261d}\n"
    "@media (max-width:40em){body{margin:1em}.state{font-size:2.4em}"
    "form.resolve button{width:100%}}\n"
    "</style>\n");


/*
 * The service's word, from the page (idem_status resolve=on): posted to
 * the page's own URL (its scope_digest kept), as a form, which the
 * status endpoint takes as it takes JSON (status.c).  No script: a
 * browser with JavaScript off resolves as well.
 */

static ngx_str_t  ngx_http_idem_timeline_form = ngx_string(
    "<form method=\"post\" class=\"resolve\">\n"
    "<h2>Resolve</h2>\n"
    "<p>Ask the service whether this call took effect, then say what it "
    "answered. Only its word settles the call: a resend then gets "
    "409 <code>call-applied</code> (applied) or runs (not applied).</p>\n"
    "<label>Receipt (the service's, if any)"
    "<input type=\"text\" name=\"receipt\" maxlength=\"128\" "
    "autocomplete=\"off\"></label>\n"
    "<label>By (who decides)"
    "<input type=\"text\" name=\"by\" maxlength=\"128\" "
    "autocomplete=\"off\"></label>\n"
    "<label><input type=\"checkbox\" name=\"force\" value=\"true\"> "
    "Force: the gateway that ran it is known to be gone</label>\n"
    "<button name=\"outcome\" value=\"applied\" class=\"applied\">"
    "Applied: it took effect</button>"
    "<button name=\"outcome\" value=\"not_applied\" "
    "class=\"not_applied\">Not applied</button>\n"
    "</form>\n");


/*
 * Does the client prefer text/html to JSON?  JSON stays the answer when
 * there is no Accept, when both are equally welcome (any type), and when
 * text/html is only as welcome as JSON.  The most specific range that
 * matches a type gives its q-value (RFC 9110, 12.5.1).
 */

ngx_uint_t
ngx_http_idem_timeline_wanted(ngx_http_request_t *r)
{
    ngx_table_elt_t              *h;
    ngx_http_idem_accept_t        acc;
    ngx_http_idem_header_iter_t   it;

    ngx_memzero(&acc, sizeof(ngx_http_idem_accept_t));

    for (h = ngx_http_idem_header_first(&it, &r->headers_in.headers);
         h != NULL;
         h = ngx_http_idem_header_next(&it))
    {
        if (h->key.len == sizeof("Accept") - 1
            && ngx_strncasecmp(h->key.data, (u_char *) "Accept",
                               sizeof("Accept") - 1)
               == 0)
        {
            ngx_http_idem_accept_parse(&h->value, &acc);
        }
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: accept html %ui/q%ui, json %ui/q%ui",
                   acc.html_spec, acc.html_q, acc.json_spec, acc.json_q);

    return acc.html_spec && acc.html_q > acc.json_q;
}


static void
ngx_http_idem_accept_parse(ngx_str_t *value, ngx_http_idem_accept_t *acc)
{
    u_char  *p, *end, *last;

    p = value->data;
    last = p + value->len;

    while (p < last) {
        end = ngx_strlchr(p, last, ',');
        if (end == NULL) {
            end = last;
        }

        ngx_http_idem_accept_range(p, end, acc);

        p = end + 1;
    }
}


/* one "type/subtype *(; param)" */

static void
ngx_http_idem_accept_range(u_char *p, u_char *last,
    ngx_http_idem_accept_t *acc)
{
    u_char      *end, *q;
    size_t       len;
    ngx_uint_t   weight, html, json;

    while (p < last && (*p == ' ' || *p == '\t')) {
        p++;
    }

    end = ngx_strlchr(p, last, ';');
    if (end == NULL) {
        end = last;
    }

    len = end - p;

    while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) {
        len--;
    }

    html = 0;
    json = 0;

    if (len == sizeof("*/*") - 1 && ngx_strncmp(p, "*/*", len) == 0) {
        html = 1;
        json = 1;

    } else if (len == sizeof("text/*") - 1
               && ngx_strncasecmp(p, (u_char *) "text/*", len) == 0)
    {
        html = 2;

    } else if (len == sizeof("text/html") - 1
               && ngx_strncasecmp(p, (u_char *) "text/html", len) == 0)
    {
        html = 3;

    } else if (len == sizeof("application/*") - 1
               && ngx_strncasecmp(p, (u_char *) "application/*", len) == 0)
    {
        json = 2;

    } else if (len == sizeof("application/json") - 1
               && ngx_strncasecmp(p, (u_char *) "application/json", len)
                  == 0)
    {
        json = 3;
    }

    if (html <= acc->html_spec && json <= acc->json_spec) {
        return;
    }

    /* its parameters: only q matters */

    weight = NGX_HTTP_IDEM_Q_MAX;
    p = end;

    while (p < last) {
        p++;

        while (p < last && (*p == ' ' || *p == '\t')) {
            p++;
        }

        end = ngx_strlchr(p, last, ';');
        if (end == NULL) {
            end = last;
        }

        if (end - p >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
            for (q = end; q > p + 2 && (q[-1] == ' ' || q[-1] == '\t'); q--)
            {
                /* void */
            }

            weight = ngx_http_idem_accept_q(p + 2, q);
        }

        p = end;
    }

    if (html > acc->html_spec) {
        acc->html_spec = html;
        acc->html_q = weight;
    }

    if (json > acc->json_spec) {
        acc->json_spec = json;
        acc->json_q = weight;
    }
}


/* "0", "0.5", "1.000": thousandths; anything else: 0, not acceptable */

static ngx_uint_t
ngx_http_idem_accept_q(u_char *p, u_char *last)
{
    ngx_uint_t  q, digits, scale;

    if (p == last || (*p != '0' && *p != '1')) {
        return 0;
    }

    q = (*p++ - '0') * NGX_HTTP_IDEM_Q_MAX;

    if (p == last) {
        return q;
    }

    if (*p++ != '.') {
        return 0;
    }

    scale = 100;

    for (digits = 0; p < last; p++, digits++) {
        if (digits == 3 || *p < '0' || *p > '9') {
            return 0;
        }

        q += (*p - '0') * scale;
        scale /= 10;
    }

    return ngx_min(q, NGX_HTTP_IDEM_Q_MAX);
}


/*
 * The record as a page; the executions shown are those the JSON shows
 * (the newest idem_record_max_executions).  NGX_DECLINED: no execution.
 */

ngx_int_t
ngx_http_idem_timeline_page(ngx_http_request_t *r, ngx_str_t *id,
    uint64_t now, ngx_str_t *elts, ngx_uint_t n, ngx_uint_t flags,
    ngx_str_t *out)
{
    u_char                          *p, *last;
    size_t                           len;
    uint64_t                         t0, t1, s, e, span;
    ngx_int_t                        rc;
    ngx_str_t                       *parts, none;
    ngx_uint_t                       i, j, k, from, shown, sent;
    ngx_http_idem_record_t           rec;
    ngx_http_idem_main_conf_t       *imcf;
    ngx_http_idem_record_exec_t     *x, *decided;
    ngx_http_idem_record_attempt_t  *a, *la;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idem_module);

    rc = ngx_http_idem_record_parse(r->pool, elts, n, now, &rec);
    if (rc != NGX_OK) {
        return rc;
    }

    if (rec.nexecs == 0) {
        return NGX_DECLINED;
    }

    from = (rec.nexecs > imcf->record_max_executions)
           ? rec.nexecs - imcf->record_max_executions : 0;

    /* the axis: from the first arrival shown to the last thing seen */

    t0 = (uint64_t) -1;
    t1 = 0;
    /* the id and the state twice: the title and the page */

    len = NGX_HTTP_IDEM_TIMELINE_HEAD + ngx_http_idem_timeline_style.len
          + ngx_http_idem_timeline_form.len
          + 6 * (2 * id->len + 2 * rec.state.len + rec.final_status.len)
          + sizeof("<dt>Receipt</dt><dd><code></code></dd>\n")
          + 6 * rec.receipt.len
          + sizeof("<dt>Resolved</dt><dd>#: not_applied, forced (its "
                   "owner's gateway taken to be gone), by <code></code> "
                   "at , receipt <code></code>; overridden by its final "
                   "write, which came later</dd>\n")
          + NGX_INT_T_LEN + NGX_HTTP_IDEM_TIMELINE_TIME;

    if (rec.resolved != NULL) {
        len += 6 * (rec.resolved->resolved[2].len
                    + rec.resolved->resolved[3].len);
    }

    /* a person's word decides the headline: its last attempt, who, when */

    decided = ngx_http_idem_timeline_decided(&rec);
    la = NULL;

    if (decided != NULL) {
        for (i = 0; i < rec.nattempts; i++) {
            if (rec.attempts[i].exec == decided) {
                la = &rec.attempts[i];
            }
        }

        len += NGX_HTTP_IDEM_TIMELINE_ROW + NGX_HTTP_IDEM_TIMELINE_TIME
               + 6 * (decided->resolved[3].len + decided->final_status.len);

        if (la != NULL) {
            len += NGX_HTTP_IDEM_TIMELINE_OUTCOME
                   + 6 * (la->parts[2].len + la->parts[4].len);
        }
    }

    for (i = 0; i < 6; i++) {
        len += 6 * rec.info[i].len;
    }

    for (i = from; i < rec.nexecs; i++) {
        x = rec.execs[i];

        t0 = ngx_min(t0, x->created_ms);
        t1 = ngx_max(t1, ngx_max(x->updated_ms, x->created_ms));

        len += NGX_HTTP_IDEM_TIMELINE_ROW
               + 6 * (x->token.len + x->state.len + x->final_status.len)
               + sizeof(" <code class=\"receipt\"></code>")
               + 6 * x->receipt.len;
    }

    a = rec.attempts;
    shown = 0;

    for (i = 0; i < rec.nattempts; i++) {
        if (a[i].exec->index < rec.execs[from]->index) {
            continue;
        }

        s = ngx_http_idem_html_ms(&a[i].parts[0]);
        e = s + ngx_http_idem_html_ms(&a[i].parts[1]);

        if (s) {
            t0 = ngx_min(t0, s);
            t1 = ngx_max(t1, e);
        }

        len += NGX_HTTP_IDEM_TIMELINE_ROW;

        for (k = 0; k < a[i].nparts; k++) {
            len += 6 * a[i].parts[k].len;
        }

        shown++;
    }

    if (t0 == (uint64_t) -1 || t1 < t0) {
        t0 = t1;
    }

    span = ngx_max(t1 - t0, 1);

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: page of \"%V\": %ui executions shown, "
                   "%ui attempts, axis %uL ms, %uz bytes at most",
                   id, rec.nexecs - from, shown, t1 - t0, len);

    out->data = ngx_pnalloc(r->pool, len);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    last = out->data + len;

    p = ngx_http_idem_timeline_head(out->data, id, &rec.state,
                                    decided ? NULL
                                    : ngx_http_idem_state_meaning(&rec.state));

    if (decided != NULL) {
        p = ngx_http_idem_timeline_decision(p, decided, la);
    }

    /* the list beside it (calls_list.c): "./" drops the id */

    if (flags & NGX_HTTP_IDEM_TIMELINE_LIST) {
        p = ngx_cpymem(p, "<p class=\"nav\"><a href=\"./\">"
                       "&larr; Calls that need a person</a></p>\n",
                       sizeof("<p class=\"nav\"><a href=\"./\">"
                              "&larr; Calls that need a person</a></p>\n")
                       - 1);
    }

    p = ngx_cpymem(p, "<dl>\n<dt>Trace id</dt><dd><code>",
                   sizeof("<dl>\n<dt>Trace id</dt><dd><code>") - 1);
    p = ngx_http_idem_html(p, &rec.info[4]);
    p = ngx_cpymem(p, "</code></dd>\n<dt>Node</dt><dd><code>",
                   sizeof("</code></dd>\n<dt>Node</dt><dd><code>") - 1);
    p = ngx_http_idem_html(p, &rec.info[2]);
    p = ngx_cpymem(p, "</code></dd>\n<dt>Request</dt><dd><code>",
                   sizeof("</code></dd>\n<dt>Request</dt><dd><code>") - 1);
    p = ngx_http_idem_html(p, &rec.info[3]);
    *p++ = ' ';
    p = ngx_http_idem_html(p, &rec.info[5]);
    p = ngx_cpymem(p, "</code></dd>\n<dt>Id from</dt><dd>",
                   sizeof("</code></dd>\n<dt>Id from</dt><dd>") - 1);
    p = ngx_http_idem_html(p, &rec.info[1]);
    p = ngx_cpymem(p, "</dd>\n<dt>First arrival</dt><dd>",
                   sizeof("</dd>\n<dt>First arrival</dt><dd>") - 1);
    p = ngx_http_idem_html_time(p, rec.created_ms);
    p = ngx_cpymem(p, "</dd>\n<dt>Last seen</dt><dd>",
                   sizeof("</dd>\n<dt>Last seen</dt><dd>") - 1);
    p = ngx_http_idem_html_time(p, rec.updated_ms);
    p = ngx_cpymem(p, "</dd>\n<dt>Final status</dt><dd>",
                   sizeof("</dd>\n<dt>Final status</dt><dd>") - 1);

    if (rec.final_status.len) {
        p = ngx_http_idem_html(p, &rec.final_status);

    } else {
        *p++ = '-';
    }

    if (rec.receipt.len) {
        p = ngx_cpymem(p, "</dd>\n<dt>Receipt</dt><dd><code>",
                       sizeof("</dd>\n<dt>Receipt</dt><dd><code>") - 1);
        p = ngx_http_idem_html(p, &rec.receipt);
        p = ngx_cpymem(p, "</code>", sizeof("</code>") - 1);
    }

    if (rec.resolved != NULL) {
        x = rec.resolved;

        p = ngx_sprintf(p, "</dd>\n<dt>Resolved</dt><dd>#%ui: %s", x->index,
                        x->resolved[0].len == 7 ? "applied" : "not_applied");

        if (x->forced) {
            p = ngx_cpymem(p, ", forced (its owner's gateway taken to be "
                           "gone)",
                           sizeof(", forced (its owner's gateway taken to "
                                  "be gone)") - 1);
        }

        if (!(x->resolved[3].len == 1 && x->resolved[3].data[0] == '-')) {
            p = ngx_cpymem(p, ", by <code>", sizeof(", by <code>") - 1);
            p = ngx_http_idem_html(p, &x->resolved[3]);
            p = ngx_cpymem(p, "</code>", sizeof("</code>") - 1);
        }

        p = ngx_cpymem(p, " at ", sizeof(" at ") - 1);
        p = ngx_http_idem_html_time(p, ngx_http_idem_html_ms(&x->resolved[1]));

        if (!(x->resolved[2].len == 1 && x->resolved[2].data[0] == '-')) {
            p = ngx_cpymem(p, ", receipt <code>",
                           sizeof(", receipt <code>") - 1);
            p = ngx_http_idem_html(p, &x->resolved[2]);
            p = ngx_cpymem(p, "</code>", sizeof("</code>") - 1);
        }

        if (x->overridden) {
            p = ngx_cpymem(p, "; overridden by its final write, which came "
                           "later",
                           sizeof("; overridden by its final write, which "
                                  "came later") - 1);
        }
    }

    p = ngx_sprintf(p, "</dd>\n<dt>Executions</dt><dd>%ui", rec.executions);

    if (rec.summarised || from) {
        p = ngx_sprintf(p, " (the %ui newest shown)", rec.nexecs - from);
    }

    p = ngx_cpymem(p, "</dd>\n</dl>\n", sizeof("</dd>\n</dl>\n") - 1);

    /* an UNKNOWN call, where the location takes resolutions: the form */

    if ((flags & NGX_HTTP_IDEM_TIMELINE_FORM)
        && ngx_strcmp(ngx_http_idem_state_class(&rec.state), "UNKNOWN") == 0)
    {
        p = ngx_cpymem(p, ngx_http_idem_timeline_form.data,
                       ngx_http_idem_timeline_form.len);
    }

    p = ngx_sprintf(p, "<h2>Timeline</h2>\n"
                    "<p class=\"legend\">"
                    "<span><i class=\"bar o-ok\"></i>answered</span>"
                    "<span><i class=\"bar o-http\"></i>error answer</span>"
                    "<span><i class=\"bar o-lost\"></i>sent, no answer</span>"
                    "<span><i class=\"bar o-connect ns\"></i>not sent</span>"
                    "</p>\n"
                    "<div class=\"wide\"><table class=\"timeline\">\n"
                    "<thead><tr>"
                    "<th>Execution</th><th>Attempt</th><th>Outcome</th>"
                    "<th>Sent</th><th>Status</th><th>Duration</th>"
                    "<th>Span id</th><th class=\"axis\">"
                    "<div class=\"scale\"><span>0 ms</span>"
                    "<span>%uL ms</span><span>%uL ms</span></div>"
                    "</th></tr></thead>\n<tbody>\n",
                    (t1 - t0) / 2, t1 - t0);

    ngx_str_null(&none);

    for (i = from, j = 0; i < rec.nexecs; i++) {
        x = rec.execs[i];

        p = ngx_sprintf(p, "<tr class=\"execution\"><td>#%ui</td>"
                        "<td colspan=\"3\" class=\"s-%s\">",
                        x->index, ngx_http_idem_state_class(&x->state));
        p = ngx_http_idem_html(p, &x->state);
        p = ngx_cpymem(p, "</td><td>", sizeof("</td><td>") - 1);
        p = ngx_http_idem_html(p, x->final_status.len ? &x->final_status
                                                      : &none);

        if (x->receipt.len) {
            p = ngx_cpymem(p, " <code class=\"receipt\">",
                           sizeof(" <code class=\"receipt\">") - 1);
            p = ngx_http_idem_html(p, &x->receipt);
            p = ngx_cpymem(p, "</code>", sizeof("</code>") - 1);
        }

        p = ngx_sprintf(p, "</td><td>%uL ms</td><td><code>",
                        x->updated_ms > x->created_ms
                        ? x->updated_ms - x->created_ms : 0);
        p = ngx_http_idem_html(p, &x->token);
        p = ngx_cpymem(p, "</code></td><td class=\"axis\">",
                       sizeof("</code></td><td class=\"axis\">") - 1);
        p = ngx_http_idem_html_bar(p, t0, span, x->created_ms,
                                   ngx_max(x->updated_ms, x->created_ms),
                                   ngx_http_idem_state_class(&x->state),
                                   2);
        p = ngx_cpymem(p, "</td></tr>\n", sizeof("</td></tr>\n") - 1);

        /* its attempts: sorted as the executions are */

        while (j < rec.nattempts && a[j].exec->index < x->index) {
            j++;
        }

        for ( /* void */ ; j < rec.nattempts && a[j].exec == x; j++) {
            parts = a[j].parts;
            sent = (parts[3].len == 1 && parts[3].data[0] == '1');

            s = ngx_http_idem_html_ms(&parts[0]);
            e = s + ngx_http_idem_html_ms(&parts[1]);

            p = ngx_sprintf(p, "<tr class=\"attempt\"><td></td>"
                            "<td>%ui</td><td>", a[j].n);
            p = ngx_http_idem_html(p, &parts[2]);

            if (a[j].nparts > 6
                && !(parts[6].len == 1 && parts[6].data[0] == '-'))
            {
                p = ngx_cpymem(p, " (no retry: ", sizeof(" (no retry: ") - 1);
                p = ngx_http_idem_html(p, &parts[6]);
                *p++ = ')';
            }

            p = ngx_sprintf(p, "</td><td>%s</td><td>",
                            sent ? "sent" : "not sent");

            if (parts[4].len == 1 && parts[4].data[0] == '0') {
                *p++ = '-';

            } else {
                p = ngx_http_idem_html(p, &parts[4]);
            }

            if (a[j].nparts > 7) {
                p = ngx_cpymem(p, " grpc-status ",
                               sizeof(" grpc-status ") - 1);
                p = ngx_http_idem_html(p, &parts[7]);
            }

            p = ngx_cpymem(p, "</td><td>", sizeof("</td><td>") - 1);
            p = ngx_http_idem_html(p, &parts[1]);
            p = ngx_cpymem(p, " ms</td><td><code>",
                           sizeof(" ms</td><td><code>") - 1);
            p = ngx_http_idem_html(p, (parts[5].len == 1
                                       && parts[5].data[0] == '-')
                                      ? &none : &parts[5]);
            p = ngx_cpymem(p, "</code></td><td class=\"axis\">",
                           sizeof("</code></td><td class=\"axis\">") - 1);
            p = ngx_http_idem_html_bar(p, t0, span, s ? s : t0, s ? e : t0,
                                       ngx_http_idem_outcome_class(&parts[2]),
                                       sent);
            p = ngx_cpymem(p, "</td></tr>\n", sizeof("</td></tr>\n") - 1);
        }
    }

    p = ngx_cpymem(p, "</tbody>\n</table></div>\n</body>\n</html>\n",
                   sizeof("</tbody>\n</table></div>\n</body>\n</html>\n")
                   - 1);

    if (p > last) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "idem: timeline buffer overrun");
        return NGX_ERROR;
    }

    out->len = p - out->data;

    return NGX_OK;
}


/* the pages of 404 NOT_FOUND and 503 UNKNOWN: the id and what it means */

ngx_int_t
ngx_http_idem_timeline_answer(ngx_http_request_t *r, ngx_str_t *id,
    ngx_uint_t status, ngx_str_t *out)
{
    u_char     *p;
    char       *meaning;
    size_t      len;
    ngx_str_t   state;

    if (status == NGX_HTTP_NOT_FOUND) {
        ngx_str_set(&state, "NOT_FOUND");
        meaning = ngx_http_idem_state_meaning(&state);

    } else {
        /* no record read: the store did not answer */
        ngx_str_set(&state, "UNKNOWN");
        meaning = "The record store cannot be read now, so whether it took "
                  "effect is not known: ask again later, never resend it "
                  "with a new id.";
    }

    len = NGX_HTTP_IDEM_TIMELINE_HEAD + ngx_http_idem_timeline_style.len
          + 2 * 6 * id->len;

    out->data = ngx_pnalloc(r->pool, len);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_http_idem_timeline_head(out->data, id, &state, meaning);

    p = ngx_cpymem(p, "</body>\n</html>\n", sizeof("</body>\n</html>\n") - 1);

    out->len = p - out->data;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: page of \"%V\": %ui", id, status);

    return NGX_OK;
}


/*
 * A status read the endpoint refused before reading the record (its
 * scope is empty, say), as a page for a person: the problem's title, and
 * its detail, which says what the request lacks.
 */

ngx_int_t
ngx_http_idem_timeline_refused(ngx_http_request_t *r, ngx_str_t *id,
    ngx_str_t *title, ngx_str_t *detail, ngx_str_t *out)
{
    u_char  *p;
    size_t   len;

    len = NGX_HTTP_IDEM_TIMELINE_HEAD + ngx_http_idem_timeline_style.len
          + 6 * (2 * id->len + 2 * title->len + detail->len);

    out->data = ngx_pnalloc(r->pool, len);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_http_idem_timeline_head(out->data, id, title,
                                    "The call's record was not read.");

    p = ngx_cpymem(p, "<p class=\"means\">",
                   sizeof("<p class=\"means\">") - 1);
    p = ngx_http_idem_html(p, detail);
    p = ngx_cpymem(p, "</p>\n</body>\n</html>\n",
                   sizeof("</p>\n</body>\n</html>\n") - 1);

    out->len = p - out->data;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem status: page of \"%V\": refused", id);

    return NGX_OK;
}

/* from the doctype to the state and what it means for the caller */

static u_char *
ngx_http_idem_timeline_head(u_char *p, ngx_str_t *id, ngx_str_t *state,
    char *meaning)
{

    p = ngx_cpymem(p, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                   "<meta charset=\"utf-8\">\n"
                   "<meta name=\"viewport\" content=\"width=device-width\">\n"
                   "<title>",
                   sizeof("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                          "<meta charset=\"utf-8\">\n"
                          "<meta name=\"viewport\" "
                          "content=\"width=device-width\">\n"
                          "<title>") - 1);
    p = ngx_http_idem_html(p, state);
    p = ngx_cpymem(p, ": call ", sizeof(": call ") - 1);
    p = ngx_http_idem_html(p, id);
    p = ngx_cpymem(p, "</title>\n", sizeof("</title>\n") - 1);
    p = ngx_cpymem(p, ngx_http_idem_timeline_style.data,
                   ngx_http_idem_timeline_style.len);
    p = ngx_cpymem(p, "</head>\n<body>\n<p class=\"id\">Call <code>",
                   sizeof("</head>\n<body>\n<p class=\"id\">Call <code>")
                   - 1);
    p = ngx_http_idem_html(p, id);
    p = ngx_sprintf(p, "</code></p>\n<h1 class=\"state s-%s\">",
                    ngx_http_idem_state_class(state));
    p = ngx_http_idem_html(p, state);
    p = ngx_cpymem(p, "</h1>\n", sizeof("</h1>\n") - 1);

    /* NULL: the caller writes what it means */

    if (meaning != NULL) {
        p = ngx_sprintf(p, "<p class=\"means\">%s</p>\n", meaning);
    }

    return p;
}


/*
 * The execution whose resolution the headline stands on, or NULL: where
 * no execution succeeded by the service's answer, the newest one a
 * person resolved applied (SUCCESS); the latest one, where a person
 * resolved it not_applied (FAILED).  A resolution that its final write
 * overrode decides nothing.
 */

static ngx_http_idem_record_exec_t *
ngx_http_idem_timeline_decided(ngx_http_idem_record_t *rec)
{
    ngx_uint_t                    i;
    ngx_http_idem_record_exec_t  *e, *x;

    x = NULL;

    if (ngx_http_idem_str_is(&rec->state, "SUCCESS")) {
        for (i = 0; i < rec->nexecs; i++) {
            e = rec->execs[i];

            if (!ngx_http_idem_str_is(&e->state, "SUCCESS")) {
                continue;
            }

            if (e->resolved[0].len == 0 || e->overridden) {
                return NULL;
            }

            x = e;
        }

        return x;
    }

    if (ngx_http_idem_str_is(&rec->state, "FAILED")) {
        e = rec->execs[rec->nexecs - 1];

        if (e->resolved[0].len && !e->overridden) {
            return e;
        }
    }

    return NULL;
}


/*
 * What a person's word means: that it is a person's, what the service
 * (never) answered and what the caller got, who decided and when
 */

static u_char *
ngx_http_idem_timeline_decision(u_char *p, ngx_http_idem_record_exec_t *x,
    ngx_http_idem_record_attempt_t *la)
{
    ngx_str_t   *status, *by;
    ngx_uint_t   applied;

    applied = ngx_http_idem_str_is(&x->state, "SUCCESS");

    p = ngx_sprintf(p, "<p class=\"means\">%s, in a person's word: ",
                    applied ? "It took effect" : "It did not take effect");

    status = la ? &la->parts[4] : NULL;

    if (la == NULL && x->final_status.len == 0) {
        p = ngx_cpymem(p, "its gateway never said how it ended",
                       sizeof("its gateway never said how it ended") - 1);

    } else {
        if (status == NULL || status->len == 0
            || (status->len == 1 && status->data[0] == '0'))
        {
            p = ngx_cpymem(p, "the service never answered it",
                           sizeof("the service never answered it") - 1);

        } else {
            p = ngx_cpymem(p, "the service's last answer (",
                           sizeof("the service's last answer (") - 1);
            p = ngx_http_idem_html(p, status);
            p = ngx_cpymem(p, ") never came whole",
                           sizeof(") never came whole") - 1);
        }

        if (la != NULL) {
            p = ngx_cpymem(p, " (its last attempt ",
                           sizeof(" (its last attempt ") - 1);
            p = ngx_http_idem_timeline_outcome(p, &la->parts[2]);
            p = ngx_cpymem(p, x->final_status.len ? "; " : ")",
                           x->final_status.len ? 2 : 1);

        } else {
            p = ngx_cpymem(p, " (", 2);
        }

        if (x->final_status.len) {
            p = ngx_cpymem(p, "the caller got ",
                           sizeof("the caller got ") - 1);
            p = ngx_http_idem_html(p, &x->final_status);
            *p++ = ')';
        }
    }

    by = &x->resolved[3];

    if (by->len == 1 && by->data[0] == '-') {
        p = ngx_cpymem(p, ". Someone (no name given)",
                       sizeof(". Someone (no name given)") - 1);

    } else {
        p = ngx_cpymem(p, ". <code>", sizeof(". <code>") - 1);
        p = ngx_http_idem_html(p, by);
        p = ngx_cpymem(p, "</code>", sizeof("</code>") - 1);
    }

    p = ngx_cpymem(p, " decided so at ", sizeof(" decided so at ") - 1);
    p = ngx_http_idem_html_time(p, ngx_http_idem_html_ms(&x->resolved[1]));

    if (x->forced) {
        p = ngx_cpymem(p, ", forced (that gateway taken to be gone)",
                       sizeof(", forced (that gateway taken to be gone)")
                       - 1);
    }

    if (applied) {
        p = ngx_cpymem(p, ".</p>\n", sizeof(".</p>\n") - 1);

    } else {
        p = ngx_cpymem(p, ". A resend runs it again.</p>\n",
                       sizeof(". A resend runs it again.</p>\n") - 1);
    }

    return p;
}


/*
 * How an attempt ended, in words that follow "its last attempt" or
 * "1 attempt:" (the list's cards too); a name this file does not know,
 * escaped.  At most NGX_HTTP_IDEM_TIMELINE_OUTCOME bytes and 6x the
 * name's.
 */

u_char *
ngx_http_idem_timeline_outcome(u_char *p, ngx_str_t *outcome)
{
    static struct {
        ngx_str_t   name;
        char       *words;
    }  words[] = {
        { ngx_string("ok"), "was answered" },
        { ngx_string("connect_error"), "could not connect (not sent)" },
        { ngx_string("timeout"), "timed out waiting for an answer" },
        { ngx_string("error_after_send"),
          "lost its connection after sending, no answer" },
        { ngx_string("client_abort"),
          "was given up when the client left, no answer" },
        { ngx_string("deadline"), "was cut off by the deadline, no answer" },
        { ngx_null_string, NULL }
    };

    ngx_uint_t  i;

    for (i = 0; words[i].words; i++) {
        if (outcome->len == words[i].name.len
            && ngx_strncmp(outcome->data, words[i].name.data, outcome->len)
               == 0)
        {
            return ngx_cpymem(p, words[i].words, ngx_strlen(words[i].words));
        }
    }

    if (outcome->len == sizeof("http_999") - 1
        && ngx_strncmp(outcome->data, "http_", 5) == 0
        && outcome->data[5] >= '1' && outcome->data[5] <= '5'
        && outcome->data[6] >= '0' && outcome->data[6] <= '9'
        && outcome->data[7] >= '0' && outcome->data[7] <= '9')
    {
        return ngx_sprintf(p, "was answered %*s", (size_t) 3,
                           outcome->data + 5);
    }

    p = ngx_cpymem(p, "ended <code>", sizeof("ended <code>") - 1);
    p = ngx_http_idem_html(p, outcome);

    return ngx_cpymem(p, "</code>", sizeof("</code>") - 1);
}


static char *
ngx_http_idem_state_meaning(ngx_str_t *state)
{
    char  *klass;

    klass = ngx_http_idem_state_class(state);

    if (ngx_strcmp(klass, "SUCCESS") == 0) {
        return "It took effect: the service answered with a success.";
    }

    if (ngx_strcmp(klass, "FAILED") == 0) {
        return "It did not succeed: the service answered with an error, "
               "or the call was never sent.";
    }

    if (ngx_strcmp(klass, "UNKNOWN") == 0) {
        return "It may have taken effect: ask again later, never resend it "
               "with a new id.";
    }

    if (ngx_strcmp(klass, "PROCESSING") == 0
        || ngx_strcmp(klass, "RECEIVED") == 0)
    {
        return "It is still running: ask again later.";
    }

    if (ngx_strcmp(klass, "NOT_FOUND") == 0) {
        return "No call with this id is recorded here: it never arrived, "
               "its record expired, or it belongs to another scope.";
    }

    return "The record holds a state this gateway does not know.";
}


/* the record's states and outcomes, as names of classes this file knows */

static char *
ngx_http_idem_state_class(ngx_str_t *state)
{
    static char  *states[] = { "SUCCESS", "FAILED", "UNKNOWN", "PROCESSING",
                               "RECEIVED", "NOT_FOUND", NULL };
    ngx_uint_t    i;

    for (i = 0; states[i]; i++) {
        if (state->len == ngx_strlen(states[i])
            && ngx_strncmp(state->data, states[i], state->len) == 0)
        {
            return states[i];
        }
    }

    return "other";
}


static char *
ngx_http_idem_outcome_class(ngx_str_t *outcome)
{
    static char  *lost[] = { "timeout", "error_after_send", "client_abort",
                             "deadline", NULL };
    ngx_uint_t    i;

    if (outcome->len == 2 && ngx_strncmp(outcome->data, "ok", 2) == 0) {
        return "ok";
    }

    if (outcome->len > 5 && ngx_strncmp(outcome->data, "http_", 5) == 0) {
        return "http";
    }

    if (outcome->len == sizeof("connect_error") - 1
        && ngx_strncmp(outcome->data, "connect_error", outcome->len) == 0)
    {
        return "connect";
    }

    for (i = 0; lost[i]; i++) {
        if (outcome->len == ngx_strlen(lost[i])
            && ngx_strncmp(outcome->data, lost[i], outcome->len) == 0)
        {
            return "lost";
        }
    }

    return "other";
}


/*
 * A bar on the axis: per mille of the span, as inline style (numbers only);
 * sent 2: an execution's bar, coloured by its state.
 */

static u_char *
ngx_http_idem_html_bar(u_char *p, uint64_t t0, uint64_t span, uint64_t from,
    uint64_t to, char *klass, ngx_uint_t sent)
{
    uint64_t  left, width;

    from = ngx_max(from, t0);
    to = ngx_max(to, from);

    left = ngx_min((from - t0) * 1000 / span, 1000);
    width = ngx_min((to - from) * 1000 / span, 1000 - left);

    return ngx_sprintf(p, "<div class=\"track\"><div class=\"bar %s-%s%s\" "
                       "style=\"left:%uL.%uL%%;width:%uL.%uL%%\"></div>"
                       "</div>",
                       sent == 2 ? "x" : "o", klass,
                       sent == 0 ? " ns" : "",
                       left / 10, left % 10, width / 10, width % 10);
}


static u_char *
ngx_http_idem_html(u_char *p, ngx_str_t *value)
{
    if (value->len == 0) {
        return p;
    }

    return (u_char *) ngx_escape_html(p, value->data, value->len);
}


/* unix ms as "2026-12-01 03:04:05.678 UTC" */

static u_char *
ngx_http_idem_html_time(u_char *p, uint64_t ms)
{
    ngx_tm_t  tm;

    if (ms == 0) {
        *p++ = '-';
        return p;
    }

    ngx_gmtime((time_t) (ms / 1000), &tm);

    return ngx_sprintf(p, "%4d-%02d-%02d %02d:%02d:%02d.%03uL UTC",
                       tm.ngx_tm_year, tm.ngx_tm_mon, tm.ngx_tm_mday,
                       tm.ngx_tm_hour, tm.ngx_tm_min, tm.ngx_tm_sec,
                       ms % 1000);
}


/* a record's number, 0 when it is not one */

static uint64_t
ngx_http_idem_html_ms(ngx_str_t *value)
{
    ngx_int_t  n;

    n = ngx_atoi(value->data, value->len);

    return (n == NGX_ERROR) ? 0 : (uint64_t) n;
}


/*
 * Vary: the answer depends on Accept; a page also says that nothing in it
 * may run or be fetched, should an escape ever be missed.
 */

ngx_int_t
ngx_http_idem_timeline_headers(ngx_http_request_t *r, ngx_uint_t html)
{
    ngx_str_t  value;

    ngx_str_set(&value, "Accept");

    if (ngx_http_idem_add_response_header(r, "Vary", &value) != NGX_OK) {
        return NGX_ERROR;
    }

    if (!html) {
        return NGX_OK;
    }

    /* a form posts to the gateway only (its resolutions) */

    ngx_str_set(&value, "default-src 'none'; style-src 'unsafe-inline'; "
                "form-action 'self'");

    return ngx_http_idem_add_response_header(r, "Content-Security-Policy",
                                             &value);
}
