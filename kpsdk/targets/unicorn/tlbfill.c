/* kpsdk's TLB fill in C: Unicorn's UC_HOOK_TLB_FILL callback (kpsdk/targets/unicorn/tlb.py).
 *
 * Written in C because it runs at every TLB miss: a program touching more pages than the
 * TLB's 256 entries without locality (xz's 64 MB dictionary) misses millions of times, and
 * the Python fill costs ~1.9 us a miss.  It answers exactly as the Python fill does (the
 * reference the tests compare against):
 *
 *   - an instruction fetch: every permission;
 *   - a data access: read and write, plus execute when the page lies in an executable
 *     mapping (its stores must stay on Unicorn's slow path, which drops translated code).
 *
 * The executable mappings are a sorted table of spans read from uc_mem_regions at the first
 * fill after Python said the memory map may have changed (the `stale` word, written by
 * Python at every mapping call: one store, no call).
 *
 * ARM (32-bit): Unicorn 2.1.4 calls cpu_restore_state before the hook at every fill, which
 * writes the accessing instruction's Thumb IT state into env->condexec_bits while its
 * translated block goes on running.  QEMU's translator keeps condexec_bits zero for the
 * whole of a block (it zeroes it at the block's start and writes the right value only when
 * it leaves the block inside an IT block), so a block ending after its IT block left the
 * restored state behind, and the next block ran as if inside it.  `clear_it` makes the fill
 * put the invariant back: a data fill comes from inside a block (retaddr set: the restore
 * happened), so the IT bits it finds in CPSR are the restore's and are cleared.  An
 * instruction fetch fill comes from the translator between blocks, where the IT state is
 * real, and is left alone.
 *
 * A TLB that keeps missing is made to grow.  QEMU sizes its TLB (256 entries at first) only
 * when it is flushed: a flush finding more than 70% of the entries used doubles it.  Unicorn
 * flushes only when its memory map changes, so a program whose working set outgrew 256 pages
 * (xz's dictionary) missed at every page it came back to, ~1 us each in Unicorn's own fill
 * path.  So after `grow_at` fills since the last flush the fill flushes the TLB (uc_ctl
 * UC_CTL_TLB_FLUSH: QEMU re-reads the entry after a fill, as a fill may resize the table), and
 * the next threshold doubles, up to `grow_max`: the TLB follows the working set in a few
 * flushes, each at most one refill of what was cached.
 *
 * Every `poll_every` fills the fill calls `poll`, a Python callback: Ctrl-C's
 * KeyboardInterrupt is raised there (a run of misses spends no other time in Python).
 *
 * Unicorn's functions come in as addresses set by Python, so this file needs no Unicorn
 * header; the constants below are Unicorn 2.1.4's (unicorn.h). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define UC_MEM_FETCH 18        /* uc_mem_type: UC_MEM_FETCH (unicorn.h) */
#define UC_PROT_READ 1
#define UC_PROT_WRITE 2
#define UC_PROT_EXEC 4
#define UC_PROT_ALL 7
#define CPSR_IT 0x0600fc00u    /* CPSR's IT[1:0] (bits 26:25) and IT[7:2] (bits 15:10) */

struct uc_tlb_entry {          /* uc_tlb_entry */
    uint64_t paddr;
    int perms;
};

struct uc_mem_region {         /* uc_mem_region */
    uint64_t begin;
    uint64_t end;              /* inclusive */
    uint32_t perms;
};

struct kpsdk_tlb {
    uint64_t fills;            /* fills answered */
    uint64_t stale;            /* nonzero: re-read the executable spans at the next fill */
    uint64_t clear_it;         /* nonzero (ARM): clear the IT state a data fill finds */
    int64_t cpsr_reg;          /* UC_ARM_REG_CPSR */
    uint64_t poll_every;       /* fills between two calls of poll (0: never) */
    uint64_t since_poll;
    uint64_t errors;           /* uc_mem_regions failures (the fill then answered as the CPU's own) */
    int (*mem_regions)(void *uc, struct uc_mem_region **regions, uint32_t *count);
    int (*uc_free)(void *mem);
    int (*reg_read)(void *uc, int regid, void *value);
    int (*reg_write)(void *uc, int regid, const void *value);
    void (*poll)(void);
    int (*ctl)(void *uc, int control, ...);
    int64_t flush_control;     /* UC_CTL_WRITE(UC_CTL_TLB_FLUSH, 0) */
    uint64_t since_flush;      /* fills since the fill last flushed */
    uint64_t grow_at;          /* fills that make the next flush (0: never) */
    uint64_t grow_max;         /* the largest grow_at */
    uint64_t grows;            /* flushes made to grow the TLB */
    uint64_t n;                /* spans in use */
    uint64_t cap;              /* spans allocated */
    uint64_t *starts;          /* the executable spans' first and last bytes, sorted */
    uint64_t *ends;
};

/* Re-read the executable mappings; false when they cannot be read (every page is then
 * answered executable, the CPU's own answer: slower stores, never a stale translation). */
static bool read_spans(void *uc, struct kpsdk_tlb *t)
{
    struct uc_mem_region *regions = NULL;
    uint32_t count = 0;
    if (t->mem_regions(uc, &regions, &count) != 0) {
        t->errors++;
        return false;
    }
    if (count > t->cap) {
        uint64_t cap = count * 2u;
        uint64_t *starts = realloc(t->starts, cap * sizeof *starts);
        if (starts != NULL)
            t->starts = starts;
        uint64_t *ends = starts == NULL ? NULL : realloc(t->ends, cap * sizeof *ends);
        if (ends != NULL)
            t->ends = ends;
        if (starts == NULL || ends == NULL) {
            t->errors++;
            t->uc_free(regions);
            return false;
        }
        t->cap = cap;
    }
    uint64_t n = 0;
    for (uint32_t i = 0; i < count; i++) {  /* Unicorn keeps its regions sorted by address */
        if (regions[i].perms & UC_PROT_EXEC) {
            t->starts[n] = regions[i].begin;
            t->ends[n] = regions[i].end;
            n++;
        }
    }
    if (regions != NULL)
        t->uc_free(regions);
    t->n = n;
    t->stale = 0;
    return true;
}

static bool executable(const struct kpsdk_tlb *t, uint64_t vaddr)
{
    uint64_t lo = 0, hi = t->n;  /* the last span starting at or below vaddr */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (t->starts[mid] <= vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && vaddr <= t->ends[lo - 1];
}

__attribute__((visibility("default")))
bool kpsdk_tlb_fill(void *uc, uint64_t vaddr, int type, struct uc_tlb_entry *entry, struct kpsdk_tlb *t)
{
    t->fills++;
    entry->paddr = vaddr;
    entry->perms = UC_PROT_ALL;
    if (type != UC_MEM_FETCH) {
        if (t->clear_it) {
            uint32_t cpsr = 0;
            if (t->reg_read(uc, (int)t->cpsr_reg, &cpsr) == 0 && (cpsr & CPSR_IT)) {
                cpsr &= ~CPSR_IT;
                t->reg_write(uc, (int)t->cpsr_reg, &cpsr);
            }
        }
        if ((!t->stale || read_spans(uc, t)) && !executable(t, vaddr))
            entry->perms = UC_PROT_READ | UC_PROT_WRITE;
    }
    if (t->grow_at && ++t->since_flush >= t->grow_at) {
        t->since_flush = 0;
        t->grows++;
        if (t->grow_at < t->grow_max)
            t->grow_at *= 2;
        t->ctl(uc, (int)t->flush_control);
    }
    if (t->poll_every && ++t->since_poll >= t->poll_every && t->poll != NULL) {
        t->since_poll = 0;
        t->poll();
    }
    return true;
}

/* The spans' memory, when the engine goes. */
__attribute__((visibility("default")))
void kpsdk_tlb_release(struct kpsdk_tlb *t)
{
    free(t->starts);
    free(t->ends);
    t->starts = t->ends = NULL;
    t->n = t->cap = 0;
    t->stale = 1;
}
