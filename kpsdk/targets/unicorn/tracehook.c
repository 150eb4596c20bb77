/* kpsdk's native trace hook: a Unicorn code hook that runs trace events' fetch programs
 * (kpsdk/fetchprog.h) at the hit and appends binary records to a ring Python drains in
 * batches (kpsdk/targets/unicorn/nativetrace.py, kpsdk/trace/native.py).
 *
 * Written in C because a trace event evaluated in Python costs 10-12 us a hit, most of it the
 * fetch arguments; here a hit is the hook's dispatch, a few register and memory reads, and a
 * copy.  Registered per probe point (the hook's user data is the point's site); the functions
 * of Unicorn it calls (uc_reg_read, uc_mem_read) are handed in by Python, so this file needs
 * no Unicorn header.  Single-threaded: the hook runs in the thread that runs the engine, the
 * one that drains the ring (a full ring is drained from inside the hook, through Python). */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "fetchprog.h"

#define KT_EXPORT __attribute__((visibility("default")))
#define KT_SLOTS 8
#define KT_HEAD 48 /* a record's header, below */

typedef int (*uc_reg_read_t)(void *uc, int regid, void *value);
typedef int (*uc_mem_read_t)(void *uc, uint64_t address, void *bytes, size_t size);

static uc_reg_read_t reg_read;
static uc_mem_read_t mem_read;

struct kt_ring {
    uint8_t *buf;
    uint64_t size;
    uint64_t head;             /* bytes of records in buf */
    void (*drain)(struct kt_ring *ring);  /* Python: takes the records, sets head to 0 */
    uint32_t stamp;            /* the task the hits run in now (Python's number for it) */
    uint32_t pad;
    uint64_t dropped;          /* records a full ring could not take (Python did not drain) */
};

struct kt_slot {
    const struct kfp_head *prog;
    struct kt_ring *ring;
    uint64_t hits;             /* every hit (the probe's hits, filtered out or not) */
    uint32_t id;               /* the record's program id */
    uint32_t records;          /* 0: a hist trigger's event whose records nothing reads: none written */
    struct kfp_hist *hist;     /* the event's hist trigger, aggregated here (NULL: none) */
};

struct kt_site {
    uint64_t addr;             /* the probed address: a record's ip */
    uint32_t nslots;
    uint32_t quiet;            /* Python: the current address space holds other code here */
    int32_t sp_id;             /* Unicorn's id of the stack pointer */
    uint32_t pad;
    struct kt_slot slot[KT_SLOTS];
};

static uint64_t kt_reg(void *ctx, uint32_t id)
{
    uint64_t v = 0;
    reg_read(ctx, (int)id, &v);
    return v;
}

static int kt_read(void *ctx, uint64_t addr, void *buf, uint32_t len)
{
    return mem_read(ctx, addr, buf, len) != 0;
}

KT_EXPORT void kpsdk_trace_init(void *uc_reg_read, void *uc_mem_read)
{
    reg_read = (uc_reg_read_t)uc_reg_read;
    mem_read = (uc_mem_read_t)uc_mem_read;
}

/* record (kpsdk's QEMU plugin writes the same): u32 program id, u32 length, u64 CLOCK_MONOTONIC ns, u64 ip, u64 sp, u32 task stamp,
 * u32 0, u64 fault mask, then the program's output (fetchprog.h) */
KT_EXPORT void kpsdk_trace_hook(void *uc, uint64_t address, uint32_t size, struct kt_site *site)
{
    (void)address;
    (void)size;
    if (site->quiet) {
        return;
    }
    struct kfp_host host = {kt_read, kt_reg, uc};
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    uint64_t sp = kt_reg(uc, (uint32_t)site->sp_id);
    for (uint32_t k = 0; k < site->nslots && k < KT_SLOTS; k++) {
        struct kt_slot *s = &site->slot[k];
        struct kt_ring *ring = s->ring;
        s->hits++;
        uint64_t need = KT_HEAD + s->prog->max_len;
        if (ring->head + need > ring->size && ring->drain != NULL) {
            ring->drain(ring);
        }
        if (ring->head + need > ring->size) {
            ring->dropped++;
            continue;
        }
        uint8_t *rec = ring->buf + ring->head;
        uint64_t faults;
        uint32_t n = kfp_run(s->prog, &host, rec + KT_HEAD, &faults);
        if (!kfp_filter(s->prog, rec + KT_HEAD, faults)) {
            continue;
        }
        if (s->hist != NULL) {
            kfp_hist_add(s->hist, rec + KT_HEAD, faults, ring->stamp);
        }
        if (!s->records) {
            continue;
        }
        uint32_t words[2] = {s->id, KT_HEAD + n};
        memcpy(rec, words, 8);
        memcpy(rec + 8, &ns, 8);
        memcpy(rec + 16, &site->addr, 8);
        memcpy(rec + 24, &sp, 8);
        uint32_t stamp[2] = {ring->stamp, 0};
        memcpy(rec + 32, stamp, 8);
        memcpy(rec + 40, &faults, 8);
        ring->head += KT_HEAD + n;
    }
}
