/* A bare-metal Cortex-M3 payload (tests/test_gdbserver.py): QEMU's lm3s6965evb board starts it
 * from the vector table at address 0; it calls step(i) for i = 0, 1, 2... forever and counts
 * the calls in `calls`.  No auxv, no libraries: what a board behind OpenOCD gives kpsdk. */
volatile unsigned long calls;

__attribute__((noinline)) unsigned long step(unsigned long i)
{
    calls++;
    return i * 3 + 1;
}

void reset(void)
{
    unsigned long acc = 0;
    for (unsigned long i = 0;; i++)
        acc += step(i);
}

extern unsigned long stack_top;
__attribute__((section(".vectors"), used)) const void *const vectors[] = {&stack_top, (void *)reset};
