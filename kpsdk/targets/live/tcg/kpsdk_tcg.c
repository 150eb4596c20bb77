/*
 * kpsdk's QEMU TCG plugin: probe points at translation time, hits streamed to
 * kpsdk through shared memory, no gdb stop per hit.
 *
 * Why: QEMU's gdbstub flushes the whole translation cache at every debug stop,
 * so a breakpoint hit costs milliseconds; an instruction callback costs
 * nanoseconds.  kpsdk (kpsdk/targets/live/tcg/plugin.py) owns one shared file,
 * mapped here and there:
 *
 *   header (64 bytes) | entries[capacity] (288 bytes each) | programs (PROG_AREA) | ring (ring_size bytes)
 *
 * kpsdk edits the entries only while the guest is stopped under gdb (QEMU's
 * gdbstub has flushed the translation cache by then), then bumps
 * `generation`; the next translation here rebuilds the address lookup.  At a
 * probed instruction the callback counts the hit in its entry and, for an
 * entry that streams, appends one record to the ring: the point's id, the
 * registers it asked for (raw, target byte order, in 8-byte slots), the host's
 * CLOCK_MONOTONIC at the hit, and the memory it asked for: up to MAX_MEM reads
 * at a register + offset, an absolute address, or the pointer an earlier read
 * of the same hit loaded + offset (a dereference chain, as a kprobe_events
 * fetch argument `+0(+8(%di))` does), each a fixed size or a string up to its
 * NUL (up to 4096 bytes).  A full ring
 * makes the hit wait for kpsdk to take records (the guest then runs at the
 * pace of kpsdk's handlers); only when kpsdk makes no progress for 10 s is the
 * record dropped and counted (`dropped` in the entry): kpsdk reports it as the probe's nmissed,
 * as the kernel counts a missed kprobe.
 *
 * An entry may also carry a fetch program (kpsdk/fetchprog.h, the interpreter kpsdk's Unicorn
 * hook includes too): a trace event's fetch arguments and filter, run here at the hit.  Its
 * record is then the native trace record (the header of kpsdk/trace/native.py, the program's
 * output), followed by the vCPU, the registers and the memory reads kpsdk asked for the
 * task (the prefix's comm and pid); a hit its filter rejects writes nothing.  Programs live in
 * the table's program area (PROG_AREA bytes after the entries).
 *
 * Only QEMU's documented plugin API is used, declared below as QEMU 10.0's
 * include/qemu/qemu-plugin.h has it (API version 4: register reads since 2,
 * qemu_plugin_read_memory_vaddr since 4).  Debian does not package that
 * header, and GLib's two array types are declared by their public layout
 * (QEMU links GLib; its functions resolve there).
 */
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fetchprog.h"

/* ---- QEMU's plugin API (v4), the part used here ---- */
typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t {
    const char *target_name;
    struct { int min; int cur; } version;
    bool system_emulation;
    union { struct { int smp_vcpus; int max_vcpus; } system; };
} qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_plugin_register;
typedef struct {
    struct qemu_plugin_register *handle;
    const char *name;
    const char *feature;
} qemu_plugin_reg_descriptor;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
typedef void (*qemu_plugin_vcpu_simple_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);

/* GLib's GArray and GByteArray: their public fields */
typedef struct { char *data; unsigned int len; } GArray;
typedef struct { uint8_t *data; unsigned int len; } GByteArray;
extern GByteArray *g_byte_array_new(void);
extern GByteArray *g_byte_array_set_size(GByteArray *array, unsigned int length);
extern char *g_array_free(GArray *array, int free_segment);

void qemu_plugin_register_vcpu_init_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_simple_cb_t cb);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
GArray *qemu_plugin_get_registers(void);
int qemu_plugin_read_register(struct qemu_plugin_register *handle, GByteArray *buf);
bool qemu_plugin_read_memory_vaddr(uint64_t addr, GByteArray *data, size_t len);
void qemu_plugin_outs(const char *string);

__attribute__((visibility("default"))) int qemu_plugin_version = 4;

/* ---- the shared file (kpsdk/targets/live/tcg/plugin.py has the same layout) ---- */
#define KPT_MAGIC 0x3154504bu /* "KPT1" */
#define MAX_REGS 24
#define MAX_MEM 12
#define MAX_MEM_SIZE 4096
/* a string is read in pieces of this size (never across a page): most end in the first */
#define STRING_PIECE 64
#define MAX_KNOWN_REGS 512
/* fetch programs: the area's size, the longest output one may make (kpsdk checks both) */
#define PROG_AREA (1u << 20)
#define PROG_OUTPUT (1u << 16)
#define NATIVE_HEAD 48

enum { F_ENABLED = 1, F_STREAM = 2 };
/* memfetch flags: M_STRING stops after the NUL; M_WORD32: a 32-bit guest, whose addresses
 * wrap at 32 bits (base + a negative offset, a per-cpu sum) */
enum { M_STRING = 1, M_WORD32 = 2 };
enum { R_FAULT = 1 };           /* a record's memory status: not (wholly) readable */

struct header {
    uint32_t magic, version;
    uint64_t generation;        /* kpsdk: bumped after each edit */
    uint32_t capacity;          /* entries */
    uint32_t nregs;             /* plugin: registers it can read (names in the regs file) */
    uint64_t ring_size;         /* bytes, a power of two */
    uint64_t head;              /* plugin: bytes written to the ring, ever */
    uint64_t tail;              /* kpsdk: bytes read from the ring, ever */
    uint64_t ready;             /* plugin: 1 once the registers are known */
    uint64_t progress;          /* kpsdk: bumped as it takes and handles records */
};

struct memfetch {
    int16_t reg;                /* register index; -1: an absolute address; -2-k: the word read k loaded */
    uint16_t size;              /* bytes (a string: at most, its NUL included), <= MAX_MEM_SIZE */
    uint32_t flags;             /* M_STRING: stop after the NUL; M_WORD32: wrap at 32 bits */
    int64_t offset;
};

struct entry {
    uint64_t addr;
    uint64_t hits;              /* plugin: every hit while enabled */
    uint32_t id;                /* kpsdk's id; 0: a free entry */
    uint32_t flags;
    uint32_t nregs;
    uint32_t nmem;
    uint16_t regs[MAX_REGS];
    uint64_t dropped;           /* plugin: records the full ring could not take */
    struct memfetch mem[MAX_MEM];
    uint64_t prog;              /* a fetch program: its offset in the program area + 1 | its bytes << 32; 0: none */
};

_Static_assert(sizeof(struct header) == 64, "header layout");
_Static_assert(sizeof(struct entry) == 288, "entry layout");

static struct header *hdr;
static struct entry *entries;
static uint8_t *ring;
static uint64_t ring_mask;
static uint8_t *programs;

/* registers, from the first vCPU (every vCPU has the same list) */
static struct qemu_plugin_register *reg_handle[MAX_KNOWN_REGS];
static unsigned int n_known_regs;
static GByteArray *scratch;

/* the address lookup, rebuilt when kpsdk's generation changes: open addressing */
static uint64_t seen_generation = ~0ull;
static uint32_t *slots;        /* entry index + 1, 0 = empty */
static uint64_t slot_mask;

/* what one instrumented instruction's callback gets: never freed (old blocks may still run) */
struct site { uint64_t addr; uint32_t index; };

static void rebuild(void)
{
    uint64_t n = 16;
    while (n < 2ull * hdr->capacity) {
        n <<= 1;
    }
    if (slots == NULL) {
        slots = calloc(n, sizeof(*slots));
        slot_mask = n - 1;
    } else {
        memset(slots, 0, n * sizeof(*slots));
    }
    for (uint32_t i = 0; i < hdr->capacity; i++) {
        struct entry *e = &entries[i];
        if (e->id == 0) {
            continue;
        }
        uint64_t h = (e->addr * 0x9E3779B97F4A7C15ull) >> 17;
        while (slots[h & slot_mask] != 0) {
            h++;
        }
        slots[h & slot_mask] = i + 1;
    }
    seen_generation = __atomic_load_n(&hdr->generation, __ATOMIC_ACQUIRE);
}

static int lookup(uint64_t addr)
{
    uint64_t h = (addr * 0x9E3779B97F4A7C15ull) >> 17;
    for (;;) {
        uint32_t s = slots[h & slot_mask];
        if (s == 0) {
            return -1;
        }
        if (entries[s - 1].addr == addr && entries[s - 1].id != 0) {
            return (int)(s - 1);
        }
        h++;
    }
}

static void ring_put(const void *src, uint64_t at, uint64_t len)
{
    uint64_t off = at & ring_mask;
    uint64_t first = hdr->ring_size - off;
    if (first >= len) {
        memcpy(ring + off, src, len);
    } else {
        memcpy(ring + off, src, first);
        memcpy(ring, (const uint8_t *)src + first, len - first);
    }
}

/* Whether the ring has room for len more bytes, waiting for kpsdk to take records while it is
 * full (the guest runs at the pace of kpsdk's handlers then).  The wait ends without room only
 * when kpsdk made no progress (took or handled no record) for RING_WAIT_NS: it is not there. */
#define RING_WAIT_NS 10000000000ll
static bool ring_room(uint64_t head, uint64_t len)
{
    if (hdr->ring_size - (head - __atomic_load_n(&hdr->tail, __ATOMIC_ACQUIRE)) >= len) {
        return true;
    }
    struct timespec start, now, nap = {0, 50000};
    uint64_t progress = __atomic_load_n(&hdr->progress, __ATOMIC_ACQUIRE);
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        nanosleep(&nap, NULL);
        if (hdr->ring_size - (head - __atomic_load_n(&hdr->tail, __ATOMIC_ACQUIRE)) >= len) {
            return true;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t seen = __atomic_load_n(&hdr->progress, __ATOMIC_ACQUIRE);
        if (seen != progress) {
            progress = seen;
            start = now;
        }
        if ((now.tv_sec - start.tv_sec) * 1000000000ll + (now.tv_nsec - start.tv_nsec) > RING_WAIT_NS) {
            return false;
        }
    }
}

/* The entry's memory reads, each: u32 bytes read, u32 status (R_FAULT), u64 address, the bytes
 * padded to 8, written at w; returns the end. */
static uint64_t *read_memory(const struct entry *e, uint32_t nmem, uint64_t *w)
{
    uint64_t loaded[MAX_MEM];  /* each read's first word (little-endian host): a chain's base */
    bool readable[MAX_MEM];
    for (uint32_t i = 0; i < nmem; i++) {
        const struct memfetch *m = &e->mem[i];
        uint64_t base = 0;
        uint32_t size = m->size <= MAX_MEM_SIZE ? m->size : MAX_MEM_SIZE;
        uint32_t got = 0, status = 0;
        bool string = (m->flags & M_STRING) != 0;
        if (m->reg >= 0 && (unsigned int)m->reg < n_known_regs) {
            g_byte_array_set_size(scratch, 0);
            int n = qemu_plugin_read_register(reg_handle[m->reg], scratch);
            if (n > 0) {
                memcpy(&base, scratch->data, n > 8 ? 8 : (size_t)n);
            }
        } else if (m->reg <= -2) {
            uint32_t k = (uint32_t)(-2 - m->reg);
            if (k >= i || !readable[k]) {
                status = R_FAULT;  /* the pointer it dereferences could not be read */
            } else {
                base = loaded[k];
            }
        }
        uint64_t addr = base + (uint64_t)m->offset;
        uint64_t wrap = (m->flags & M_WORD32) ? 0xffffffffull : ~0ull;
        addr &= wrap;
        uint8_t *bytes = (uint8_t *)(w + 2);
        /* piece by piece, never across a page: the bytes asked for may end before an unmapped page */
        bool ended = false;
        while (status == 0 && got < size && !ended) {
            uint32_t chunk = 4096 - (uint32_t)(((addr + got) & wrap) & 4095);
            if (chunk > size - got) {
                chunk = size - got;
            }
            if (string && chunk > STRING_PIECE) {
                chunk = STRING_PIECE;
            }
            g_byte_array_set_size(scratch, 0);
            if (!qemu_plugin_read_memory_vaddr((addr + got) & wrap, scratch, chunk)) {
                status = R_FAULT;
                break;
            }
            if (string) {
                const uint8_t *nul = memchr(scratch->data, 0, chunk);
                if (nul != NULL) {
                    chunk = (uint32_t)(nul - scratch->data) + 1;
                    ended = true;
                }
            }
            memcpy(bytes + got, scratch->data, chunk);
            got += chunk;
        }
        /* a chain's pointer is the guest's word (4 bytes on i386/arm, 8 elsewhere): usable
         * when the whole word asked for was read; little-endian guests and host */
        readable[i] = status == 0 && got == size && size > 0 && !string;
        loaded[i] = 0;
        if (readable[i]) {
            memcpy(&loaded[i], bytes, got < 8 ? got : 8);
        }
        w[0] = (uint64_t)got | ((uint64_t)status << 32);  /* little-endian host */
        w[1] = addr;
        memset(bytes + got, 0, ((got + 7) & ~7u) - got);
        w += 2 + (got + 7) / 8;
    }
    return w;
}

/* ---- fetch programs run at the hit (kpsdk/fetchprog.h) ---- */
static uint64_t plugin_reg(void *ctx, uint32_t id)
{
    (void)ctx;
    uint64_t v = 0;
    if (id < n_known_regs) {
        g_byte_array_set_size(scratch, 0);
        int got = qemu_plugin_read_register(reg_handle[id], scratch);
        if (got > 0) {
            memcpy(&v, scratch->data, got > 8 ? 8 : (size_t)got);
        }
    }
    return v;
}

static int plugin_read(void *ctx, uint64_t addr, void *buf, uint32_t len)
{
    (void)ctx;
    uint32_t got = 0;
    while (got < len) {  /* never across a page: the next one may be unmapped */
        uint32_t chunk = 4096 - (uint32_t)((addr + got) & 4095);
        if (chunk > len - got) {
            chunk = len - got;
        }
        g_byte_array_set_size(scratch, 0);
        if (!qemu_plugin_read_memory_vaddr(addr + got, scratch, chunk)) {
            return -1;
        }
        memcpy((uint8_t *)buf + got, scratch->data, chunk);
        got += chunk;
    }
    return 0;
}

static uint64_t native_buf[(NATIVE_HEAD + PROG_OUTPUT) / 8 + 1 + MAX_REGS + MAX_MEM * (2 + MAX_MEM_SIZE / 8)];

/* A hit of an entry with a program: the native record (kpsdk/trace/native.py's header: program
 * id, length, ns, ip, sp, task stamp (kpsdk's: 0 here), the output's length, the fault mask; the
 * output), then the vCPU, the registers and the memory reads kpsdk asked for (the task's). */
static void native_hit(struct entry *e, const struct site *site, unsigned int vcpu, uint64_t ns, uint32_t nregs,
                       uint32_t nmem)
{
    uint64_t at = (uint32_t)e->prog - 1, size = e->prog >> 32;
    if (at + size > PROG_AREA || size < sizeof(struct kfp_head)) {
        return;
    }
    const struct kfp_head *p = (const struct kfp_head *)(programs + at);
    if (p->magic != KFP_MAGIC || p->max_len > PROG_OUTPUT) {
        return;
    }
    struct kfp_host host = {plugin_read, plugin_reg, NULL};
    uint8_t *rec = (uint8_t *)native_buf;
    uint64_t faults;
    uint32_t n = kfp_run(p, &host, rec + NATIVE_HEAD, &faults);
    if (!kfp_filter(p, rec + NATIVE_HEAD, faults)) {
        return;
    }
    uint64_t *w = (uint64_t *)(rec + NATIVE_HEAD + n);
    *w++ = vcpu;
    for (uint32_t i = 0; i < nregs; i++) {
        *w++ = plugin_reg(NULL, e->regs[i]);
    }
    w = read_memory(e, nmem, w);
    uint64_t len = (uint64_t)((uint8_t *)w - rec);
    uint32_t words[2] = {p->pad1, (uint32_t)len};
    uint64_t sp = plugin_reg(NULL, p->pad2);
    uint32_t stamp[2] = {0, n};
    memcpy(rec, words, 8);
    memcpy(rec + 8, &ns, 8);
    memcpy(rec + 16, &site->addr, 8);
    memcpy(rec + 24, &sp, 8);
    memcpy(rec + 32, stamp, 8);
    memcpy(rec + 40, &faults, 8);
    uint64_t head = hdr->head;
    if (!ring_room(head, len)) {
        e->dropped++;
        return;
    }
    ring_put(rec, head, len);
    __atomic_store_n(&hdr->head, head + len, __ATOMIC_RELEASE);
}

static void on_hit(unsigned int vcpu, void *userdata)
{
    const struct site *site = userdata;
    struct entry *e = &entries[site->index];
    if (e->addr != site->addr || e->id == 0 || !(e->flags & F_ENABLED)) {
        return;  /* a block translated before kpsdk changed this entry */
    }
    e->hits++;
    if (!(e->flags & F_STREAM)) {
        return;
    }
    /* record: u32 id, u32 length, u64 vcpu, u64 pc, u64 host CLOCK_MONOTONIC ns, u64 regs[nregs],
     * then per memory read: u32 bytes read, u32 status (R_FAULT), u64 address, the bytes padded to 8 */
    uint64_t buf[4 + MAX_REGS + MAX_MEM * (2 + MAX_MEM_SIZE / 8)];
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint32_t nregs = e->nregs < MAX_REGS ? e->nregs : MAX_REGS;
    uint32_t nmem = e->nmem < MAX_MEM ? e->nmem : MAX_MEM;
    if (e->prog != 0) {
        native_hit(e, site, vcpu, (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec, nregs, nmem);
        return;
    }
    uint64_t *w = buf + 4;
    for (uint32_t i = 0; i < nregs; i++) {
        uint64_t v = 0;
        uint16_t r = e->regs[i];
        if (r < n_known_regs) {
            g_byte_array_set_size(scratch, 0);
            int got = qemu_plugin_read_register(reg_handle[r], scratch);
            if (got > 0) {
                memcpy(&v, scratch->data, got > 8 ? 8 : (size_t)got);
            }
        }
        *w++ = v;
    }
    w = read_memory(e, nmem, w);
    uint64_t len = (uint64_t)(w - buf) * 8;
    uint32_t words[2] = {e->id, (uint32_t)len};
    memcpy(buf, words, sizeof(words));
    buf[1] = vcpu;
    buf[2] = site->addr;
    buf[3] = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    uint64_t head = hdr->head;
    if (!ring_room(head, len)) {
        e->dropped++;
        return;
    }
    ring_put(buf, head, len);
    __atomic_store_n(&hdr->head, head + len, __ATOMIC_RELEASE);
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    if (__atomic_load_n(&hdr->generation, __ATOMIC_ACQUIRE) != seen_generation) {
        rebuild();
    }
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t vaddr = qemu_plugin_insn_vaddr(insn);
        int index = lookup(vaddr);
        if (index < 0) {
            continue;
        }
        struct site *site = malloc(sizeof(*site));
        if (site == NULL) {
            continue;
        }
        site->addr = vaddr;
        site->index = (uint32_t)index;
        qemu_plugin_register_vcpu_insn_exec_cb(insn, on_hit, QEMU_PLUGIN_CB_R_REGS, site);
    }
}

static const char *regs_path;

static void on_vcpu_init(qemu_plugin_id_t id, unsigned int vcpu)
{
    (void)id;
    if (vcpu != 0 || n_known_regs != 0) {
        return;
    }
    GArray *regs = qemu_plugin_get_registers();
    qemu_plugin_reg_descriptor *d = (qemu_plugin_reg_descriptor *)regs->data;
    FILE *out = fopen(regs_path, "w");
    for (unsigned int i = 0; i < regs->len && i < MAX_KNOWN_REGS; i++) {
        reg_handle[i] = d[i].handle;
        g_byte_array_set_size(scratch, 0);
        int size = qemu_plugin_read_register(d[i].handle, scratch);
        if (out != NULL) {
            fprintf(out, "%s %d\n", d[i].name, size);
        }
    }
    n_known_regs = regs->len < MAX_KNOWN_REGS ? regs->len : MAX_KNOWN_REGS;
    if (out != NULL) {
        fclose(out);
    }
    g_array_free(regs, 1);
    hdr->nregs = n_known_regs;
    __atomic_store_n(&hdr->ready, 1, __ATOMIC_RELEASE);
}

__attribute__((visibility("default")))
int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    const char *table = NULL;
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "table=", 6) == 0) {
            table = argv[i] + 6;
        } else if (strncmp(argv[i], "regs=", 5) == 0) {
            regs_path = argv[i] + 5;
        } else {
            fprintf(stderr, "kpsdk_tcg: unknown argument %s\n", argv[i]);
            return 1;
        }
    }
    if (table == NULL || regs_path == NULL) {
        fprintf(stderr, "kpsdk_tcg: needs table=FILE and regs=FILE\n");
        return 1;
    }
    int fd = open(table, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(struct header)) {
        fprintf(stderr, "kpsdk_tcg: cannot open the table %s\n", table);
        return 1;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        fprintf(stderr, "kpsdk_tcg: cannot map the table %s\n", table);
        return 1;
    }
    hdr = map;
    uint64_t need = sizeof(struct header) + (uint64_t)hdr->capacity * sizeof(struct entry) + PROG_AREA
        + hdr->ring_size;
    if (hdr->magic != KPT_MAGIC || hdr->version != 3 || need > (uint64_t)st.st_size
        || hdr->ring_size == 0 || (hdr->ring_size & (hdr->ring_size - 1)) != 0) {
        fprintf(stderr, "kpsdk_tcg: %s is not a kpsdk table of this version\n", table);
        return 1;
    }
    entries = (struct entry *)(hdr + 1);
    programs = (uint8_t *)(entries + hdr->capacity);
    ring = programs + PROG_AREA;
    ring_mask = hdr->ring_size - 1;
    scratch = g_byte_array_new();
    qemu_plugin_register_vcpu_init_cb(id, on_vcpu_init);
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    return 0;
}
