/*
 * kpsdk's fetch programs: a trace event's fetch arguments and filter, run in C at the hit.
 *
 * Why: evaluated in Python, a trace event's fetch arguments cost most of a hit (10-12 us on
 * Unicorn, a Python call per record on the QEMU plugin).  The kernel compiles FETCHARGS into a
 * fetch_insn array at registration and runs it at each hit; kpsdk does the same:
 * kpsdk/fetchprog.py compiles the bound arguments into the program below, and the hosts that
 * run it (kpsdk/targets/unicorn/tracehook.c in a Unicorn code hook, and kpsdk's QEMU plugin)
 * include this one file, so the two cannot drift apart.  The host gives two callbacks: a
 * register by the id the program names (Unicorn's register id, the plugin's index) and a
 * memory read.
 *
 * The layout of a program and of its output is fetchprog.py's (which decodes the output
 * into the values kpsdk.trace.fetch's interpreter gives; tests/test_trace_native.py
 * compares them hit by hit).  A program:
 *
 *   head (32 bytes) | insns[ninsn] (16 bytes each) | filter insns[nfilter] | string pool
 *
 * Each field is a run of instructions that computes a value v (a register, an immediate,
 * words loaded from memory: a dereference chain) ended by one store that writes the field:
 * an integer cut to its type (size, sign, bitfield) into the scalar block, or a string or an
 * array into the variable part.  A load that faults marks the field (a bit per field in the
 * record's fault mask: the kernel prints "(fault)") and skips to the field's store.
 * Output: scalars[nscalar] (8 bytes each, in the order of their stores) then, per variable
 * field in order, u32 bytes, u32 count, the data padded to 8.
 */
#ifndef KPSDK_FETCHPROG_H
#define KPSDK_FETCHPROG_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#define KFP_MAGIC 0x3150464bu /* "KFP1" */
#define KFP_MAX_FIELDS 64
#define KFP_PIECE 256         /* a string's first read (most end there); later ones to the page's end */
#define KFP_PAGE 4096u

enum kfp_op {
    KFP_REG = 1,      /* v = reg(arg) & imm */
    KFP_IMM,          /* v = imm */
    KFP_ADD,          /* v = (v + imm) & word mask */
    KFP_LOADW,        /* v = the word at v (a fault marks the field) */
    KFP_ST_VAL,       /* store v as an integer (size, flags, bitfield in arg) */
    KFP_ST_MEM,       /* store the integer of `size` bytes at v */
    KFP_ST_STR,       /* store the NUL-terminated string at v, at most imm bytes */
    KFP_ST_ARR,       /* store arg integers of `size` bytes at v */
    KFP_ST_STRARR,    /* store the strings the arg words at v point at, each at most imm bytes */
};
enum { KFP_SIGNED = 1, KFP_BITFIELD = 2 };
/* filter instructions: a stack of booleans */
enum kfp_fop {
    KFP_F_INT = 1,    /* push field `slot` (a scalar at scalar index arg) OP imm; flags: KFP_SIGNED, KFP_F_BIG */
    KFP_F_STR,        /* push field `slot` (variable index arg) ==/!= the pool's bytes (imm: offset, size: ...) */
    KFP_F_GLOB,       /* push field `slot` matches the pool's '*' pattern */
    KFP_F_CONST,      /* push imm != 0 */
    KFP_F_NOT,
    KFP_F_AND,        /* pop arg values, push their conjunction */
    KFP_F_OR,
};
enum { KFP_F_BIG = 4 }; /* the filter's integer is imm as an unsigned 64-bit value (>= 2**63) */
enum { KFP_EQ = 1, KFP_NE, KFP_LT, KFP_LE, KFP_GT, KFP_GE, KFP_AND_BITS };

struct kfp_head {
    uint32_t magic;
    uint16_t ninsn, nfilter;
    uint16_t nscalar, nvar;
    uint8_t word, big_endian, nfields, pad0;
    uint32_t pool;            /* bytes of string pool after the filter */
    uint32_t max_len;         /* the most bytes one output can take */
    uint32_t pad1, pad2;
};

struct kfp_insn {
    uint8_t op, size, flags, slot; /* slot: the field this instruction belongs to */
    uint32_t arg;
    int64_t imm;
};

_Static_assert(sizeof(struct kfp_head) == 32, "kfp_head layout");
_Static_assert(sizeof(struct kfp_insn) == 16, "kfp_insn layout");

struct kfp_host {
    /* 0 when len bytes at addr were read into buf */
    int (*read)(void *ctx, uint64_t addr, void *buf, uint32_t len);
    uint64_t (*reg)(void *ctx, uint32_t id);
    void *ctx;
};

static inline uint64_t kfp_bytes_int(const uint8_t *b, unsigned size, int big)
{
    uint64_t v = 0;
    if (big) {
        for (unsigned i = 0; i < size; i++) {
            v = (v << 8) | b[i];
        }
    } else {
        for (unsigned i = size; i-- > 0;) {
            v = (v << 8) | b[i];
        }
    }
    return v;
}

/* an integer cut to its type: size, bitfield, sign (kpsdk.trace.fetch's _convert) */
static inline uint64_t kfp_convert(uint64_t raw, const struct kfp_insn *in)
{
    unsigned bits = 8u * in->size;
    uint64_t v = bits >= 64 ? raw : raw & ((1ull << bits) - 1);
    if (in->flags & KFP_BITFIELD) {
        unsigned width = in->arg >> 8, off = in->arg & 0xff;
        v >>= off;
        if (width < 64) {
            v &= (1ull << width) - 1;
        }
    } else if ((in->flags & KFP_SIGNED) && bits < 64 && (v >> (bits - 1)) & 1) {
        v |= ~0ull << bits;
    }
    return v;
}

static inline int kfp_load_word(const struct kfp_host *h, const struct kfp_head *p, uint64_t addr, uint64_t *v)
{
    uint8_t b[8];
    if (h->read(h->ctx, addr, b, p->word)) {
        return -1;
    }
    *v = kfp_bytes_int(b, p->word, p->big_endian);
    return 0;
}

/* The string at addr, at most cap bytes (without the NUL), into out: its length, or -1 where a
 * piece could not be read (the whole string is a fault, as kpsdk reads it in Python). */
static inline int64_t kfp_string(const struct kfp_host *h, uint64_t addr, uint32_t cap, uint8_t *out)
{
    uint32_t got = 0, piece = KFP_PIECE;
    while (got < cap) {
        uint64_t at = addr + got;
        uint32_t n = KFP_PAGE - (uint32_t)(at % KFP_PAGE);
        if (n > piece) {
            n = piece;
        }
        if (n > cap - got) {
            n = cap - got;
        }
        if (h->read(h->ctx, at, out + got, n)) {
            return -1;
        }
        const uint8_t *nul = memchr(out + got, 0, n);
        if (nul != NULL) {
            return (int64_t)(nul - out);
        }
        got += n;
        piece = KFP_PAGE;
    }
    return got;
}

static inline uint8_t *kfp_var_head(uint8_t *w, uint32_t bytes, uint32_t count)
{
    memcpy(w, &bytes, 4);
    memcpy(w + 4, &count, 4);
    return w + 8;
}

static inline uint32_t kfp_pad8(uint32_t n)
{
    return (n + 7u) & ~7u;
}

/* Run the fetch part of program p: the output at out (at least p->max_len bytes), its fault
 * mask in *faults.  Returns the output's length. */
static inline uint32_t kfp_run(const struct kfp_head *p, const struct kfp_host *h, uint8_t *out, uint64_t *faults)
{
    const struct kfp_insn *in = (const struct kfp_insn *)(p + 1);
    uint64_t *scalars = (uint64_t *)out;
    uint8_t *w = out + 8u * p->nscalar;
    uint64_t wmask = p->word == 8 ? ~0ull : 0xffffffffull;
    uint64_t v = 0, fault = 0;
    unsigned ns = 0;
    *faults = 0;
    for (unsigned i = 0; i < p->ninsn; i++, in++) {
        if (fault && in->op < KFP_ST_VAL) {
            continue;  /* the field faulted: on to its store */
        }
        switch (in->op) {
        case KFP_REG:
            v = h->reg(h->ctx, in->arg) & (uint64_t)in->imm;
            break;
        case KFP_IMM:
            v = (uint64_t)in->imm;
            break;
        case KFP_ADD:
            v = (v + (uint64_t)in->imm) & wmask;
            break;
        case KFP_LOADW:
            if (kfp_load_word(h, p, v, &v)) {
                fault = 1;
            }
            break;
        case KFP_ST_VAL:
        case KFP_ST_MEM: {
            uint64_t raw = v;
            if (!fault && in->op == KFP_ST_MEM) {
                uint8_t b[8];
                if (h->read(h->ctx, v, b, in->size)) {
                    fault = 1;
                } else {
                    raw = kfp_bytes_int(b, in->size, p->big_endian);
                }
            }
            scalars[ns++] = fault ? 0 : kfp_convert(raw, in);
            break;
        }
        case KFP_ST_STR: {
            int64_t n = fault ? -1 : kfp_string(h, v, (uint32_t)in->imm, w + 8);
            if (n < 0) {
                fault = 1;
                n = 0;
            }
            kfp_var_head(w, (uint32_t)n, 1);
            w += 8 + kfp_pad8((uint32_t)n);
            break;
        }
        case KFP_ST_ARR: {
            uint32_t count = in->arg, total = count * in->size;
            uint8_t *data = w + 8;
            uint8_t raw[8 * 64];
            if (!fault && total <= sizeof(raw) && h->read(h->ctx, v, raw, total) == 0) {
                for (uint32_t k = 0; k < count; k++) {
                    uint64_t e = kfp_convert(kfp_bytes_int(raw + k * in->size, in->size, p->big_endian), in);
                    memcpy(data + 8 * k, &e, 8);
                }
            } else {
                fault = 1;
                memset(data, 0, 8u * count);
            }
            kfp_var_head(w, 8u * count, count);
            w += 8 + 8u * count;
            break;
        }
        case KFP_ST_STRARR: {
            /* count entries of u32 length (0xffffffff: that string faulted), u32 0, the bytes padded */
            uint32_t count = in->arg;
            uint8_t *start = w;
            uint8_t *e = w + 8;
            for (uint32_t k = 0; k < count && !fault; k++) {
                uint64_t ptr;
                if (kfp_load_word(h, p, (v + (uint64_t)k * p->word) & wmask, &ptr)) {
                    fault = 1;  /* a pointer that cannot be read: the whole array faults */
                    break;
                }
                int64_t n = kfp_string(h, ptr, (uint32_t)in->imm, e + 8);
                uint32_t len = n < 0 ? 0xffffffffu : (uint32_t)n;
                kfp_var_head(e, len, 0);
                e += 8 + (n < 0 ? 0 : kfp_pad8((uint32_t)n));
            }
            if (fault) {
                e = w + 8;
            }
            kfp_var_head(start, (uint32_t)(e - (w + 8)), count);
            w = e;
            break;
        }
        default:
            break;
        }
        if (in->op >= KFP_ST_VAL) {
            if (fault) {
                *faults |= 1ull << in->slot;
            }
            fault = 0;
            v = 0;
        }
    }
    return (uint32_t)(w - out);
}

/* '*' globs on bytes (the compiler sends only patterns whose other bytes are literal) */
static inline int kfp_glob(const uint8_t *s, uint32_t n, const uint8_t *pat, uint32_t m)
{
    uint32_t si = 0, pi = 0, star = UINT32_MAX, mark = 0;
    while (si < n) {
        if (pi < m && pat[pi] == '*') {
            star = pi++;
            mark = si;
        } else if (pi < m && pat[pi] == s[si]) {
            pi++;
            si++;
        } else if (star != UINT32_MAX) {
            pi = star + 1;
            si = ++mark;
        } else {
            return 0;
        }
    }
    while (pi < m && pat[pi] == '*') {
        pi++;
    }
    return pi == m;
}

static inline int kfp_cmp_int(uint64_t got, int got_signed, uint64_t want, int want_big, unsigned op)
{
    __int128 g = got_signed ? (__int128)(int64_t)got : (__int128)got;
    __int128 x = want_big ? (__int128)want : (__int128)(int64_t)want;
    switch (op) {
    case KFP_EQ: return g == x;
    case KFP_NE: return g != x;
    case KFP_LT: return g < x;
    case KFP_LE: return g <= x;
    case KFP_GT: return g > x;
    case KFP_GE: return g >= x;
    case KFP_AND_BITS: return (g & x) != 0;
    default: return 0;
    }
}

/* Whether the output of kfp_run passes the program's filter (no filter: it does). */
static inline int kfp_filter(const struct kfp_head *p, const uint8_t *out, uint64_t faults)
{
    if (p->nfilter == 0) {
        return 1;
    }
    const struct kfp_insn *f = (const struct kfp_insn *)(p + 1) + p->ninsn;
    const uint8_t *pool = (const uint8_t *)(f + p->nfilter);
    const uint64_t *scalars = (const uint64_t *)out;
    /* each variable field's bytes and length, found once */
    const uint8_t *var_at[KFP_MAX_FIELDS];
    uint32_t var_len[KFP_MAX_FIELDS];
    const uint8_t *w = out + 8u * p->nscalar;
    for (unsigned k = 0; k < p->nvar && k < KFP_MAX_FIELDS; k++) {
        uint32_t bytes;
        memcpy(&bytes, w, 4);
        var_at[k] = w + 8;
        var_len[k] = bytes;
        w += 8 + kfp_pad8(bytes);
    }
    uint8_t stack[KFP_MAX_FIELDS * 2];
    unsigned sp = 0;
    for (unsigned i = 0; i < p->nfilter; i++, f++) {
        int r = 0;
        int faulted = (faults >> f->slot) & 1;
        switch (f->op) {
        case KFP_F_INT:
            r = !faulted && kfp_cmp_int(scalars[f->arg], f->flags & KFP_SIGNED, (uint64_t)f->imm,
                                        f->flags & KFP_F_BIG, f->size);
            break;
        case KFP_F_STR: {
            uint32_t at = (uint32_t)f->imm & 0xffffffffu, len = (uint32_t)((uint64_t)f->imm >> 32);
            int eq = !faulted && var_len[f->arg] == len && memcmp(var_at[f->arg], pool + at, len) == 0;
            r = faulted ? 0 : (f->size == KFP_EQ ? eq : !eq);
            break;
        }
        case KFP_F_GLOB: {
            uint32_t at = (uint32_t)f->imm & 0xffffffffu, len = (uint32_t)((uint64_t)f->imm >> 32);
            r = !faulted && kfp_glob(var_at[f->arg], var_len[f->arg], pool + at, len);
            break;
        }
        case KFP_F_CONST:
            r = f->imm != 0;
            break;
        case KFP_F_NOT:
            r = !stack[--sp];
            break;
        case KFP_F_AND:
        case KFP_F_OR: {
            unsigned n = f->arg;
            int all = 1, any = 0;
            for (unsigned k = 0; k < n; k++) {
                all &= stack[sp - 1 - k];
                any |= stack[sp - 1 - k];
            }
            sp -= n;
            r = f->op == KFP_F_AND ? all : any;
            break;
        }
        default:
            break;
        }
        stack[sp++] = (uint8_t)r;
    }
    return sp ? stack[sp - 1] : 1;
}

/* ---- hist triggers aggregated at the hit (kpsdk.trace.histtrigger's table, kpsdk/trace/nativehist.py) ----
 * Up to three keys and three values; a key is a scalar field (cut to its size, sign-extended,
 * cut to the word, as the kernel reads it; then .log2 or .buckets=N) or the task stamp (Python
 * turns it into common_pid); a value a scalar field's sum (wrapping at 64 bits).  Entries keep
 * the order their keys first came in (the sort's ties); a hit on a new key once `capacity`
 * entries are there is dropped, as the kernel's tracing_map does. */
#define KFP_HIST_KEYS 3
enum { KFP_HK_FIELD = 0, KFP_HK_STAMP = 1 };
enum { KFP_HK_PLAIN = 0, KFP_HK_LOG2 = 1, KFP_HK_BUCKETS = 2 };

struct kfp_hist_field {
    uint8_t src, bits, is_signed, mode;
    uint32_t index;               /* the scalar's index (KFP_HK_FIELD) */
    uint64_t buckets;
    uint64_t overflow;            /* a .log2 key whose exponent reaches the word's bits (has_overflow) */
    uint32_t has_overflow, slot;  /* slot: the field's number (its fault bit) */
};

struct kfp_hist {
    uint32_t nkeys, nvals;
    uint32_t capacity, count;     /* entries allowed (a power of two), entries used */
    uint64_t hits, dropped;
    uint64_t word_mask;
    uint32_t word_bits, pad;
    struct kfp_hist_field key[KFP_HIST_KEYS], val[KFP_HIST_KEYS];
    uint32_t *index;              /* 2 * capacity slots: entry + 1, 0 empty */
    uint64_t *entries;            /* per entry: keys[3], hitcount, vals[3], first stamp */
};

#define KFP_HIST_ENTRY 8

static inline uint64_t kfp_hist_raw(const struct kfp_hist *h, const struct kfp_hist_field *f, const uint64_t *scalars,
                                    uint64_t faults, uint32_t stamp)
{
    if (f->src == KFP_HK_STAMP) {
        return stamp;
    }
    uint64_t v = ((faults >> f->slot) & 1) ? 0 : scalars[f->index];
    if (f->bits < 64) {
        v &= (1ull << f->bits) - 1;
        if (f->is_signed && (v >> (f->bits - 1)) & 1) {
            v |= ~0ull << f->bits;
        }
    }
    return v & h->word_mask;
}

static inline uint64_t kfp_hist_key(const struct kfp_hist *h, const struct kfp_hist_field *f, uint64_t v)
{
    if (f->mode == KFP_HK_LOG2) {
        uint64_t w = (v - 1) & h->word_mask;
        uint64_t exponent = w ? 64u - (uint64_t)__builtin_clzll(w) : 0;
        return f->has_overflow && exponent >= h->word_bits ? f->overflow : exponent;
    }
    if (f->mode == KFP_HK_BUCKETS && f->buckets) {
        return v / f->buckets * f->buckets;
    }
    return v;
}

static inline void kfp_hist_add(struct kfp_hist *h, const uint8_t *out, uint64_t faults, uint32_t stamp)
{
    const uint64_t *scalars = (const uint64_t *)out;
    uint64_t key[KFP_HIST_KEYS] = {0, 0, 0};
    for (uint32_t k = 0; k < h->nkeys; k++) {
        key[k] = kfp_hist_key(h, &h->key[k], kfp_hist_raw(h, &h->key[k], scalars, faults, stamp));
    }
    h->hits++;
    uint64_t hash = 0xcbf29ce484222325ull;
    for (uint32_t k = 0; k < KFP_HIST_KEYS; k++) {
        hash = (hash ^ key[k]) * 0x100000001b3ull;
        hash ^= hash >> 29;
    }
    uint64_t mask = 2ull * h->capacity - 1;
    uint64_t *e = NULL;
    for (uint64_t at = hash & mask;; at = (at + 1) & mask) {
        uint32_t slot = h->index[at];
        if (slot == 0) {
            if (h->count >= h->capacity) {
                h->dropped++;
                return;
            }
            e = h->entries + (uint64_t)h->count * KFP_HIST_ENTRY;
            memset(e, 0, KFP_HIST_ENTRY * 8);
            memcpy(e, key, sizeof(key));
            e[7] = stamp;
            h->index[at] = ++h->count;
            break;
        }
        uint64_t *c = h->entries + (uint64_t)(slot - 1) * KFP_HIST_ENTRY;
        if (c[0] == key[0] && c[1] == key[1] && c[2] == key[2]) {
            e = c;
            break;
        }
    }
    e[3]++;
    for (uint32_t k = 0; k < h->nvals; k++) {
        e[4 + k] += kfp_hist_raw(h, &h->val[k], scalars, faults, stamp);
    }
}

#endif
