/* kpsdk's text lines of native trace records: the bytes kpsdk.trace.output.TextWriter writes,
 * formatted in C for a whole batch of records (kpsdk/trace/native.py).
 *
 * Why: a trace event run in C at the hit (kpsdk/fetchprog.h) costs ~0.2 us; formatting its
 * line in Python costs ~2-4 us more, most of a record's cost.  This formats what is common
 * (hex and decimal integers, integer arrays, strings that are valid UTF-8, constants Python
 * formatted once) and stops at a record it does not know how to write exactly as Python would
 * (an invalid UTF-8 string, a field Python must format: a symbol, a character, a string
 * array), which Python then writes itself; tests/test_trace_native.py compares the files. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define KL_EXPORT __attribute__((visibility("default")))
#define KL_HEAD 48 /* a record's header (kpsdk/targets/unicorn/tracehook.c) */

enum { KL_HEX = 1, KL_DEC, KL_STR, KL_ARR_HEX, KL_ARR_DEC, KL_CONST, KL_PYTHON };
enum { KL_DONE = 0, KL_FULL = 1, KL_RECORD = 2 };

struct kl_field {
    uint8_t kind, is_signed;
    uint16_t label_len;
    uint32_t index;            /* the scalar's or the variable part's index */
    const uint8_t *label;      /* " name=" */
    const uint8_t *text;       /* KL_CONST: the value as Python formats it */
    uint64_t text_len;
};

struct kl_event {
    uint64_t ip;               /* the ip its records have (another one: Python writes the record) */
    uint32_t nfields, nscalar;
    uint32_t nvar, head_len;
    uint64_t max_line;         /* the longest line it can make, prefix included */
    const uint8_t *head;       /* "EVENT: (where)" */
    const struct kl_field *fields;
    uint64_t written;          /* lines written */
};

struct kl_task {
    const uint8_t *text;       /* "            comm-1000    [000] ..... " */
    uint64_t len;
};

/* Python's strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF): valid input decodes
 * with errors="replace" to the same bytes */
static int kl_utf8(const uint8_t *s, uint32_t n)
{
    uint32_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        uint32_t need;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        for (uint32_t k = 1; k <= need; k++) {
            if (i + k >= n || (s[i + k] & 0xc0) != 0x80) {
                return 0;
            }
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10ffff))
            || (cp >= 0xd800 && cp <= 0xdfff)) {
            return 0;
        }
        i += need + 1;
    }
    return 1;
}

static uint8_t *kl_dec(uint8_t *w, uint64_t v, int is_signed)
{
    char tmp[24];
    int n = 0;
    int neg = is_signed && (int64_t)v < 0;
    uint64_t u = neg ? (uint64_t)0 - v : v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (neg) {
        *w++ = '-';
    }
    while (n) {
        *w++ = (uint8_t)tmp[--n];
    }
    return w;
}

static uint8_t *kl_hex(uint8_t *w, uint64_t v, int is_signed)
{
    static const char digits[] = "0123456789abcdef";
    char tmp[20];
    int n = 0;
    int neg = is_signed && (int64_t)v < 0;
    uint64_t u = neg ? (uint64_t)0 - v : v;
    do {
        tmp[n++] = digits[u & 15];
        u >>= 4;
    } while (u);
    if (neg) {
        *w++ = '-';
    }
    *w++ = '0';
    *w++ = 'x';
    while (n) {
        *w++ = (uint8_t)tmp[--n];
    }
    return w;
}

static uint8_t *kl_put(uint8_t *w, const uint8_t *s, uint64_t n)
{
    memcpy(w, s, n);
    return w + n;
}

/* Lines for the records of buf from *at on, into out; stops at the end (KL_DONE), when out
 * cannot hold the longest line of the next record (KL_FULL), or at a record Python must write
 * (KL_RECORD, *at on it).  *used: the bytes written to out. */
KL_EXPORT int kpsdk_text_lines(const uint8_t *buf, uint64_t len, uint64_t *at, struct kl_event *const *events,
                               uint32_t nevents, const struct kl_task *tasks, uint32_t ntasks, double start,
                               int prefix, uint8_t *out, uint64_t cap, uint64_t *used)
{
    uint8_t *w = out + *used;
    int status = KL_DONE;
    while (*at < len) {
        const uint8_t *rec = buf + *at;
        uint32_t rlen, ident, stamp;
        uint64_t ns, ip, faults;
        memcpy(&ident, rec, 4);
        memcpy(&rlen, rec + 4, 4);
        memcpy(&ns, rec + 8, 8);
        memcpy(&ip, rec + 16, 8);
        memcpy(&stamp, rec + 32, 4);
        memcpy(&faults, rec + 40, 8);
        struct kl_event *ev = ident < nevents ? events[ident] : NULL;
        if (ev == NULL || ev->ip != ip || stamp >= ntasks) {
            status = KL_RECORD;
            break;
        }
        if ((uint64_t)(out + cap - w) < ev->max_line) {
            status = KL_FULL;
            break;
        }
        uint8_t *line = w;
        if (prefix) {
            double now = (double)ns / 1e9 - start;
            double us = nearbyint(now * 1000000.0);
            uint64_t usecs = us > 0 ? (uint64_t)us : 0;
            w = kl_put(w, tasks[stamp].text, tasks[stamp].len);
            uint64_t secs = usecs / 1000000u, frac = usecs % 1000000u;
            uint8_t digits[24];
            uint8_t *d = kl_dec(digits, secs, 0);
            for (long pad = 5 - (d - digits); pad > 0; pad--) {
                *w++ = ' ';
            }
            w = kl_put(w, digits, (uint64_t)(d - digits));
            *w++ = '.';
            for (int k = 5; k >= 0; k--) {
                w[k] = (uint8_t)('0' + frac % 10);
                frac /= 10;
            }
            w += 6;
            *w++ = ':';
            *w++ = ' ';
        }
        w = kl_put(w, ev->head, ev->head_len);
        const uint64_t *scalars = (const uint64_t *)(rec + KL_HEAD);
        /* the variable parts, found in order */
        const uint8_t *var_at[64];
        uint32_t var_len[64], var_count[64];
        const uint8_t *p = rec + KL_HEAD + 8u * ev->nscalar;
        for (uint32_t k = 0; k < ev->nvar && k < 64; k++) {
            memcpy(&var_len[k], p, 4);
            memcpy(&var_count[k], p + 4, 4);
            var_at[k] = p + 8;
            p += 8 + ((var_len[k] + 7u) & ~7u);
        }
        int python = 0;
        for (uint32_t f = 0; f < ev->nfields && !python; f++) {
            const struct kl_field *fd = &ev->fields[f];
            w = kl_put(w, fd->label, fd->label_len);
            if (fd->kind == KL_CONST) {
                w = kl_put(w, fd->text, fd->text_len);
                continue;
            }
            if ((faults >> f) & 1) {
                w = kl_put(w, (const uint8_t *)"(fault)", 7);
                continue;
            }
            switch (fd->kind) {
            case KL_HEX:
                w = kl_hex(w, scalars[fd->index], fd->is_signed);
                break;
            case KL_DEC:
                w = kl_dec(w, scalars[fd->index], fd->is_signed);
                break;
            case KL_STR: {
                const uint8_t *s = var_at[fd->index];
                uint32_t n = var_len[fd->index];
                if (!kl_utf8(s, n)) {
                    python = 1;
                    break;
                }
                *w++ = '"';
                for (uint32_t k = 0; k < n; k++) {
                    uint8_t c = s[k];
                    if (c == '\\' || c == '"') {
                        *w++ = '\\';
                        *w++ = c;
                    } else if (c == '\n') {
                        *w++ = '\\';
                        *w++ = 'n';
                    } else {
                        *w++ = c;
                    }
                }
                *w++ = '"';
                break;
            }
            case KL_ARR_HEX:
            case KL_ARR_DEC: {
                const uint8_t *e = var_at[fd->index];
                *w++ = '{';
                for (uint32_t k = 0; k < var_count[fd->index]; k++) {
                    uint64_t v;
                    memcpy(&v, e + 8u * k, 8);
                    if (k) {
                        *w++ = ',';
                    }
                    w = fd->kind == KL_ARR_HEX ? kl_hex(w, v, fd->is_signed) : kl_dec(w, v, fd->is_signed);
                }
                *w++ = '}';
                break;
            }
            default:
                python = 1;
                break;
            }
        }
        if (python) {
            w = line;
            status = KL_RECORD;
            break;
        }
        *w++ = '\n';
        ev->written++;
        *at += rlen;
    }
    *used = (uint64_t)(w - out);
    return status;
}
