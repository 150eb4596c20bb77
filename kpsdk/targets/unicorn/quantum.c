/* kpsdk's quantum counter: a Unicorn block hook that counts translated blocks and stops the
 * engine when a task's quantum is used up (kpsdk/targets/unicorn/quantum.py).
 *
 * Written in C because it runs at every block: a Python callback there costs ~1 us, this
 * a few nanoseconds.  The hook's user data is the struct below, owned by Python (ctypes);
 * uc_emu_stop's address is passed in by Python, so this file needs no Unicorn header. */
#include <stdint.h>

struct kpsdk_quantum {
    uint64_t left;           /* blocks before the engine is stopped; 0: no limit */
    uint64_t counted;        /* blocks run since Python last reset it */
    void (*stop)(void *uc);  /* uc_emu_stop */
    uint64_t expired;        /* set when the quantum ran out */
};

__attribute__((visibility("default")))
void kpsdk_quantum_block(void *uc, uint64_t address, uint32_t size, struct kpsdk_quantum *q)
{
    (void)address;
    (void)size;
    q->counted++;
    if (q->left && --q->left == 0) {
        q->expired = 1;
        q->stop(uc);
    }
}
