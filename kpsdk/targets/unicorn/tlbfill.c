/* kpsdk's TLB fill in C: Unicorn's UC_HOOK_TLB_FILL callback (kpsdk/targets/unicorn/tlb.py).
 *
 * Written in C because it runs at every TLB miss: a program touching more pages than the
 * TLB's 256 entries without locality (xz's 64 MB dictionary) misses millions of times, and
 * the Python fill costs ~1.9 us a miss.  It answers exactly as the Python fill does (the
 * reference the tests compare against):
 *
 *   - an instruction fetch: every permission;
 *   - a data access: the mapping's read and write permissions, plus execute when it is
 *     executable (its stores must stay on Unicorn's slow path, which drops translated code);
 *   - a data access the mapping refuses (none there, or a load from an unreadable one, a store
 *     to an unwritable one): no entry.  Unicorn then raises the fault at once and precisely
 *     (raise_mmu_exception: cpu_loop_exit_restore), as UC_ERR_EXCEPTION; the fill records the
 *     kind (`fault_type`, `fault_why`) and Python gives the run's error its real name
 *     (tlb.py).  A refused store found later in Unicorn's store helper only asks the engine
 *     to exit and lets the block run on, which was precise only through the exit check after
 *     every store that kpsdk turns off where it can (engine.py).
 *   - a store to a page a write watchpoint traps (`traps`, watchpages.py), made by an
 *     instruction the watch engine has learned (`sites`, or `once`): read and write, so that
 *     the store reaches Unicorn's write-protection hooks on that page (which empty the TLB
 *     after it, so that the next store is filled again); by any other instruction: refused,
 *     precisely (`fault_why` 3), and the watch engine learns that instruction.
 *
 *   - a data access to a page of an arena (space.py: one engine mapping holding many small
 *     anonymous mappings): that page's byte says what is mapped there (`arenas`, Python's
 *     memory, read at each fill): its read and write permissions, or a refusal as unmapped
 *     (`fault_why` 1) or protected (2), whether or not `refuse` is on: the engine's mapping
 *     there allows both.  A carved page (a mapping of its own) and a trapped one are answered
 *     as any mapping's.
 *
 * The mappings are a sorted table read from uc_mem_regions at the first fill after Python
 * said the memory map may have changed (the `stale` word, written by Python at every mapping
 * call: one store, no call).
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

#define UC_MEM_WRITE 17        /* uc_mem_type (unicorn.h) */
#define UC_MEM_FETCH 18
#define UC_PROT_READ 1
#define UC_PROT_WRITE 2
#define UC_PROT_EXEC 4
#define UC_PROT_ALL 7
#define CPSR_IT 0x0600fc00u    /* CPSR's IT[1:0] (bits 26:25) and IT[7:2] (bits 15:10) */
#define MAX_TRAPS 64           /* pages trapped for write watchpoints (watchpages.py's limit) */
#define MAX_SITES 256          /* instructions allowed to store into trapped pages */

struct uc_tlb_entry {          /* uc_tlb_entry */
    uint64_t paddr;
    int perms;
};

struct uc_mem_region {         /* uc_mem_region */
    uint64_t begin;
    uint64_t end;              /* inclusive */
    uint32_t perms;
};

/* An arena (space.py): one engine mapping holding many small anonymous mappings; one byte a
 * 4 KiB page says what the program has there: 0 nothing (refused as unmapped), ARENA_MAPPED |
 * its read and write permissions, or ARENA_CARVED (a mapping of its own in the engine: the
 * engine's regions answer). */
#define ARENA_MAPPED 0x40
#define ARENA_CARVED 0x80
struct kpsdk_arena {
    uint64_t start;
    uint64_t end;              /* exclusive */
    const uint8_t *pages;
};

struct kpsdk_tlb {
    uint64_t fills;            /* fills answered */
    uint64_t stale;            /* nonzero: re-read the mappings at the next fill */
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
    uint64_t refuse;           /* nonzero: refuse what the mapping refuses (else answer as before) */
    int64_t fault_type;        /* the access last refused (uc_mem_type; -1: none since Python reset it) */
    uint64_t fault_addr;
    uint64_t fault_why;        /* 1: nothing mapped there, 2: the mapping's permissions */
    uint64_t page_mask;        /* ~(the target's page size - 1) */
    uint64_t ntraps;
    uint64_t traps[MAX_TRAPS]; /* pages whose stores must reach the write-protection hooks */
    int64_t pc_reg;            /* the arch's pc, for uc_reg_read */
    uint64_t nsites;
    uint64_t sites[MAX_SITES]; /* the instructions whose stores into a trapped page go on to the hooks */
    uint64_t once;             /* one more instruction allowed while it is re-run (0: none) */
    uint64_t n;                /* regions in use */
    uint64_t cap;              /* regions allocated */
    struct uc_mem_region *regions;  /* the mappings, sorted */
    uint64_t narenas;
    const struct kpsdk_arena *arenas;  /* the current space's arenas (Python's memory) */
};

/* Re-read the mappings; false when they cannot be read (every access is then answered as
 * the CPU's own fill would: every permission, Unicorn's own checks and exit checks). */
static bool read_regions(void *uc, struct kpsdk_tlb *t)
{
    struct uc_mem_region *regions = NULL;
    uint32_t count = 0;
    if (t->mem_regions(uc, &regions, &count) != 0) {
        t->errors++;
        return false;
    }
    if (count > t->cap) {
        struct uc_mem_region *grown = realloc(t->regions, count * 2u * sizeof *grown);
        if (grown == NULL) {
            t->errors++;
            t->uc_free(regions);
            return false;
        }
        t->regions = grown;
        t->cap = count * 2u;
    }
    for (uint32_t i = 0; i < count; i++)  /* Unicorn keeps its regions sorted by address */
        t->regions[i] = regions[i];
    if (regions != NULL)
        t->uc_free(regions);
    t->n = count;
    t->stale = 0;
    return true;
}

static const struct uc_mem_region *region_of(const struct kpsdk_tlb *t, uint64_t vaddr)
{
    uint64_t lo = 0, hi = t->n;  /* the last region starting at or below vaddr */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (t->regions[mid].begin <= vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && vaddr <= t->regions[lo - 1].end ? &t->regions[lo - 1] : NULL;
}

static bool trapped(const struct kpsdk_tlb *t, uint64_t page)
{
    for (uint64_t i = 0; i < t->ntraps; i++)
        if (t->traps[i] == page)
            return true;
    return false;
}

/* The storing instruction (the CPU state was restored to it before the fill) is one whose
 * stores into a trapped page the watch engine follows: learned, or let through once. */
static bool site_allowed(void *uc, struct kpsdk_tlb *t)
{
    uint64_t pc = 0;
    if (t->reg_read(uc, (int)t->pc_reg, &pc) != 0)
        return false;
    if (t->once && t->once == pc)  /* until the watch engine's step of it ends */
        return true;
    for (uint64_t i = 0; i < t->nsites; i++)
        if (t->sites[i] == pc)
            return true;
    return false;
}

static bool refused(struct kpsdk_tlb *t, uint64_t vaddr, int type, uint64_t why)
{
    t->fault_type = type;
    t->fault_addr = vaddr;
    t->fault_why = why;
    return false;
}

#define NOT_ARENA (-1)
#define REFUSED (-2)

/* A data access to an arena page: the page's permissions (read, write; never execute), or
 * REFUSED (recorded: nothing mapped there, or not the access's permission); NOT_ARENA outside
 * the arenas, on a carved page and on a page a write watchpoint traps (the engine's regions and
 * their hooks answer there).  Arenas exist only while the fill refuses (space.py). */
static int arena_perms(struct kpsdk_tlb *t, uint64_t vaddr, int type)
{
    for (uint64_t i = 0; i < t->narenas; i++) {  /* a handful: 16 MiB each */
        const struct kpsdk_arena *a = &t->arenas[i];
        if (vaddr < a->start || vaddr >= a->end)
            continue;
        uint8_t page = a->pages[(vaddr - a->start) >> 12];
        if (page & ARENA_CARVED || (t->ntraps && trapped(t, vaddr & t->page_mask)))
            return NOT_ARENA;
        if (!(page & ARENA_MAPPED))
            return refused(t, vaddr, type, 1), REFUSED;
        if (!(page & (type == UC_MEM_WRITE ? UC_PROT_WRITE : UC_PROT_READ)))
            return refused(t, vaddr, type, 2), REFUSED;
        return page & (UC_PROT_READ | UC_PROT_WRITE);
    }
    return NOT_ARENA;
}

__attribute__((visibility("default")))
bool kpsdk_tlb_fill(void *uc, uint64_t vaddr, int type, struct uc_tlb_entry *entry, struct kpsdk_tlb *t)
{
    t->fills++;
    entry->paddr = vaddr;
    entry->perms = UC_PROT_ALL;
    if (t->poll_every && ++t->since_poll >= t->poll_every && t->poll != NULL) {
        t->since_poll = 0;
        t->poll();
    }
    if (t->grow_at && ++t->since_flush >= t->grow_at) {
        t->since_flush = 0;
        t->grows++;
        if (t->grow_at < t->grow_max)
            t->grow_at *= 2;
        t->ctl(uc, (int)t->flush_control);
    }
    if (type == UC_MEM_FETCH)
        return true;
    int perms = arena_perms(t, vaddr, type);
    if (perms == REFUSED)
        return false;
    if (perms == NOT_ARENA) {  /* not in an arena: the engine's mappings answer */
        if (t->stale && !read_regions(uc, t))
            return true;
        const struct uc_mem_region *r = region_of(t, vaddr);
        if (r == NULL)
            return t->refuse ? refused(t, vaddr, type, 1) : (entry->perms = UC_PROT_READ | UC_PROT_WRITE, true);
        perms = (int)r->perms & UC_PROT_ALL;
        if (t->refuse) {
            int need = type == UC_MEM_WRITE ? UC_PROT_WRITE : UC_PROT_READ;
            if (!(perms & need)) {
                if (type == UC_MEM_WRITE && t->ntraps && trapped(t, vaddr & t->page_mask)) {
                    if (!site_allowed(uc, t))
                        return refused(t, vaddr, type, 3);  /* a store the watch engine has not seen */
                    perms |= UC_PROT_READ | UC_PROT_WRITE;  /* on to the write-protection hooks */
                } else {
                    return refused(t, vaddr, type, 2);
                }
            }
        } else {
            perms |= UC_PROT_READ | UC_PROT_WRITE;
        }
    }
    if (t->clear_it) {  /* the access is made: its block runs on (see the top of this file) */
        uint32_t cpsr = 0;
        if (t->reg_read(uc, (int)t->cpsr_reg, &cpsr) == 0 && (cpsr & CPSR_IT)) {
            cpsr &= ~CPSR_IT;
            t->reg_write(uc, (int)t->cpsr_reg, &cpsr);
        }
    }
    entry->perms = perms;
    return true;
}

/* A write-protection hook bounded to a page a write watchpoint traps (watchpages.py).  A store
 * that touches no watched range of the page, on a page that is the program's to write
 * (`allowed`), is made here, into the page's host memory, and answered handled: Unicorn itself
 * discards it (the engine sees the page read-only, TLB_DISCARD_WRITE).  A store that reaches a
 * watched range is left to the watchpoint's own hook (false). */
struct kpsdk_page_trap {
    int64_t allowed;
    uint64_t n;
    uint64_t lo[16], hi[16];   /* watched ranges, first and last byte */
    uint64_t page;             /* the page's guest address */
    uint64_t host;             /* and its host address */
    int64_t big;               /* the guest is big-endian */
    uint64_t outside;          /* stores made here (beside the watched ranges) */
    int (*ctl)(void *uc, int control, ...);
    int64_t flush_control;     /* UC_CTL_WRITE(UC_CTL_TLB_FLUSH, 0); 0: no flush (the fill refuses nothing) */
};

__attribute__((visibility("default")))
void kpsdk_page_store(struct kpsdk_page_trap *p, uint64_t addr, int size, int64_t value)
{
    uint64_t v = (uint64_t)value;
    for (int i = 0; i < size; i++) {
        uint64_t at = addr + (uint64_t)i;
        if (at < p->page || at >= p->page + 0x1000)
            continue;  /* the next page's bytes: Unicorn stores them byte by byte */
        int shift = 8 * (p->big ? size - 1 - i : i);
        ((unsigned char *)(uintptr_t)p->host)[at - p->page] = (unsigned char)(v >> shift);
    }
}

__attribute__((visibility("default")))
bool kpsdk_page_allow(void *uc, int type, uint64_t addr, int size, int64_t value, struct kpsdk_page_trap *p)
{
    (void)type;
    if (!p->allowed)
        return false;
    uint64_t last = addr + (uint64_t)(size > 0 ? size - 1 : 0);
    for (uint64_t i = 0; i < p->n; i++)
        if (addr <= p->hi[i] && last >= p->lo[i])
            return false;
    kpsdk_page_store(p, addr, size, value);
    p->outside++;
    /* The page's write entry goes with the TLB: the next store into it is filled again, and
     * the fill sees which instruction makes it.  Safe here: Unicorn's store helper reads
     * nothing of the entry after these hooks for a page it sees read-only (it returns at
     * TLB_DISCARD_WRITE, from its own copy of the entry's flags). */
    if (p->flush_control)
        p->ctl(uc, (int)p->flush_control);
    return true;
}

/* The regions' memory, when the engine goes. */
__attribute__((visibility("default")))
void kpsdk_tlb_release(struct kpsdk_tlb *t)
{
    free(t->regions);
    t->regions = NULL;
    t->n = t->cap = 0;
    t->stale = 1;
}
