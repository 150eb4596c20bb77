/* kpsdk's task numbers for native trace records from the QEMU plugin (kpsdk/targets/live/tcg/native.py).
 *
 * Each record the plugin makes for a trace event run natively ends with what the trace prefix
 * needs (the vCPU, the flags register, the task's memory the plugin read); kpsdk numbers each
 * distinct task state once (its comm, pid and flags through the target's task_info) and writes
 * the number into the record's stamp field.  Looked up in Python this cost ~2.7 us a record,
 * most of a record's cost; here a record costs a hash and a probe.  A state not seen yet stops
 * the walk (its hash out), Python numbers it, adds it, and walks on. */
#include <stdint.h>
#include <string.h>

#define KR_EXPORT __attribute__((visibility("default")))
#define KR_HEAD 48

static uint64_t kr_mix(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0x100000001b3ull;
    return h ^ (h >> 31);
}

static uint64_t kr_bytes(uint64_t h, const uint8_t *p, uint32_t n)
{
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = kr_mix(h, w);
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = kr_mix(h, w);
    }
    return h;
}

/* The hash of a record's task state: its program, the stack's base (sp kept to sp_mask), the
 * vCPU, the flags register (when has_flags) kept to flags_mask, and each memory read's status,
 * address and bytes, of the reads that `ranges` names (triples: read index, offset, length)
 * only those bytes: a task_struct read from pid to comm holds counters that change at every
 * hit, where the prefix reads the pid and the comm alone. */
static uint64_t kr_hash(const uint8_t *rec, uint32_t len, uint32_t outlen, uint64_t sp, int has_flags,
                        uint64_t flags_mask, uint64_t sp_mask, const uint32_t *ranges, uint32_t nranges)
{
    const uint8_t *tail = rec + KR_HEAD + outlen;
    const uint8_t *end = rec + len;
    uint32_t ident;
    memcpy(&ident, rec, 4);
    uint64_t h = 0xcbf29ce484222325ull;
    h = kr_mix(h, ident);  /* each program's records are numbered in its own trace */
    h = kr_mix(h, sp & sp_mask);
    const uint8_t *p = tail;
    if (p + 8 <= end) {
        uint64_t vcpu;
        memcpy(&vcpu, p, 8);
        h = kr_mix(h, vcpu);
        p += 8;
    }
    if (has_flags && p + 8 <= end) {
        uint64_t flags;
        memcpy(&flags, p, 8);
        h = kr_mix(h, flags & flags_mask);
        p += 8;
    }
    for (uint32_t i = 0; p + 16 <= end; i++) {
        uint32_t got;
        uint64_t head[2];
        memcpy(head, p, 16);
        memcpy(&got, p, 4);
        h = kr_mix(kr_mix(h, head[0]), head[1]);
        const uint8_t *bytes = p + 16;
        uint32_t padded = (got + 7u) & ~7u;
        if (bytes + padded > end) {
            break;
        }
        int named = 0;
        for (uint32_t r = 0; r < nranges; r++) {
            if (ranges[3 * r] != i) {
                continue;
            }
            named = 1;
            uint32_t off = ranges[3 * r + 1], n = ranges[3 * r + 2];
            if (off < got) {
                h = kr_bytes(h, bytes + off, off + n <= got ? n : got - off);
            }
        }
        if (!named) {
            h = kr_bytes(h, bytes, padded);
        }
        p = bytes + padded;
    }
    return h;
}

/* Stamps for the records of buf[*at:len): keys/stamps an open-addressing table of `size`
 * slots (a power of two; key 0: empty).  Returns 0 at the end, 1 at a record whose state is not
 * in the table (*at on it, its hash in *hash). */
KR_EXPORT int kpsdk_restamp(uint8_t *buf, uint64_t len, uint64_t *at, int has_flags, uint64_t flags_mask,
                            uint64_t sp_mask, const uint64_t *keys, const uint32_t *stamps, uint64_t size,
                            uint64_t *hash, const uint32_t *ranges, uint32_t nranges)
{
    while (*at < len) {
        uint8_t *rec = buf + *at;
        uint32_t rlen, outlen;
        uint64_t sp;
        memcpy(&rlen, rec + 4, 4);
        memcpy(&sp, rec + 24, 8);
        memcpy(&outlen, rec + 36, 4);
        uint64_t h = kr_hash(rec, rlen, outlen, sp, has_flags, flags_mask, sp_mask, ranges, nranges) | 1;  /* never 0 */
        uint64_t slot = h & (size - 1);
        for (;;) {
            if (keys[slot] == h) {
                memcpy(rec + 32, &stamps[slot], 4);
                break;
            }
            if (keys[slot] == 0) {
                *hash = h;
                return 1;
            }
            slot = (slot + 1) & (size - 1);
        }
        *at += rlen;
    }
    return 0;
}
