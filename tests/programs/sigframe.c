/*
 * Ground truth for kpsdk's signal frames (tests/test_sigframes.py).
 *
 * Built static with each arch's cross compiler and run under qemu-user, it prints
 *  1. "off NAME VALUE": offsetof() of the fields kpsdk's frame builder writes, from the C
 *     library's ucontext_t, struct sigcontext and siginfo_t (the kernel's UAPI layouts);
 *  2. for each case (a handler installed with some sa_flags), the signal frame as the
 *     kernel (here QEMU) built it.  The case's raise is assembly: it loads known values
 *     into the general and floating-point registers, stores the stack pointer, sends
 *     itself SIGUSR1 with tgkill, and after the signal returns stores every register
 *     again ("post").  The handler's entry is assembly too: it records the registers the
 *     kernel set for the call (sp, arguments, return address...) before any C code runs.
 *     The C part of the handler copies the frame (from the handler's sp up to the stack
 *     the signal interrupted) and then changes one saved general register and one saved
 *     FP register in the frame, as a handler changing its context does: "post" shows
 *     that sigreturn restored them.
 *
 * Below the interrupted stack pointer the stack is painted with 0xa5 first, so that the
 * bytes the kernel did not write can be told from those it did.
 *
 * Every value is printed as hex; a line is "KEY VALUE" or "KEY HEXBYTES".
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

typedef unsigned long word;
#if defined(__riscv)
#define UC_FLAGS __uc_flags
#else
#define UC_FLAGS uc_flags
#endif

#define NREGS 40
word pre_vals[NREGS], post_vals[NREGS], entry_vals[16];
word pre_sp;
word flags_in, post_flags;
unsigned char fp_in[512] __attribute__((aligned(16)));
unsigned char fp_pre[1024] __attribute__((aligned(64)));
unsigned char fp_post[1024] __attribute__((aligned(64)));
unsigned int fp_ctl_in;         /* x87 control word / FPSCR / fcsr to load */
unsigned int fp_ctl2_in;        /* MXCSR on x86 */
double fp_ctl_d;                /* ppc64: the FPSCR value as mtfsf takes it */
double fp_zero_d;
unsigned short post_seg[8];

void do_raise(void);
void entry_stub(int);
extern char after_syscall[];

static unsigned char frame_copy[16384];
static word frame_len;
static word frame_top;
static word victim_old, victim_new, fvictim_old, fvictim_new;

/* ------------------------------------------------------------------ per-arch code */

#if defined(__x86_64__)
#define ARCH "x86_64"
#define FP_IMAGE 512
static const char *const reg_names[] = {"rbx", "rbp", "r12", "r13", "r14", "r15", "r8", "r9", "r10",
                                        "rcx", "r11", "rax", "rdi", "rsi", "rdx", 0};
enum { R_NR = 11, R_A0 = 12, R_A1 = 13, R_A2 = 14, R_VICTIM = 2 };
static const char *const entry_names[] = {"rsp", "rdi", "rsi", "rdx", "rax", "ret", "flags", "fpcw", "mxcsr",
                                          "fpsw", "xmm0lo", 0};
__asm__(
    ".text\n.globl do_raise\n.type do_raise,@function\ndo_raise:\n"
    " push %rbx\n push %rbp\n push %r12\n push %r13\n push %r14\n push %r15\n"
    " fninit\n fldcw fp_ctl_in(%rip)\n ldmxcsr fp_ctl2_in(%rip)\n"
    " lea fp_in(%rip),%rax\n"
    " movdqu 0(%rax),%xmm0\n movdqu 16(%rax),%xmm1\n movdqu 32(%rax),%xmm2\n movdqu 48(%rax),%xmm3\n"
    " movdqu 64(%rax),%xmm4\n movdqu 80(%rax),%xmm5\n movdqu 96(%rax),%xmm6\n movdqu 112(%rax),%xmm7\n"
    " movdqu 128(%rax),%xmm8\n movdqu 144(%rax),%xmm9\n movdqu 160(%rax),%xmm10\n movdqu 176(%rax),%xmm11\n"
    " movdqu 192(%rax),%xmm12\n movdqu 208(%rax),%xmm13\n movdqu 224(%rax),%xmm14\n movdqu 240(%rax),%xmm15\n"
    " fld1\n fldpi\n fldz\n"
    " fxsave fp_pre(%rip)\n"
    " pushq flags_in(%rip)\n popfq\n"
    " mov pre_vals+0(%rip),%rbx\n mov pre_vals+8(%rip),%rbp\n mov pre_vals+16(%rip),%r12\n"
    " mov pre_vals+24(%rip),%r13\n mov pre_vals+32(%rip),%r14\n mov pre_vals+40(%rip),%r15\n"
    " mov pre_vals+48(%rip),%r8\n mov pre_vals+56(%rip),%r9\n mov pre_vals+64(%rip),%r10\n"
    " mov pre_vals+72(%rip),%rcx\n mov pre_vals+80(%rip),%r11\n mov pre_vals+88(%rip),%rax\n"
    " mov pre_vals+96(%rip),%rdi\n mov pre_vals+104(%rip),%rsi\n mov pre_vals+112(%rip),%rdx\n"
    " mov %rsp,pre_sp(%rip)\n"
    " syscall\n"
    ".globl after_syscall\nafter_syscall:\n"
    " pushfq\n popq post_flags(%rip)\n"
    " mov %rbx,post_vals+0(%rip)\n mov %rbp,post_vals+8(%rip)\n mov %r12,post_vals+16(%rip)\n"
    " mov %r13,post_vals+24(%rip)\n mov %r14,post_vals+32(%rip)\n mov %r15,post_vals+40(%rip)\n"
    " mov %r8,post_vals+48(%rip)\n mov %r9,post_vals+56(%rip)\n mov %r10,post_vals+64(%rip)\n"
    " mov %rcx,post_vals+72(%rip)\n mov %r11,post_vals+80(%rip)\n mov %rax,post_vals+88(%rip)\n"
    " mov %rdi,post_vals+96(%rip)\n mov %rsi,post_vals+104(%rip)\n mov %rdx,post_vals+112(%rip)\n"
    " mov %cs,post_seg+0(%rip)\n mov %ss,post_seg+2(%rip)\n"
    " cld\n fxsave fp_post(%rip)\n fninit\n"
    " pop %r15\n pop %r14\n pop %r13\n pop %r12\n pop %rbp\n pop %rbx\n ret\n"
    ".globl entry_stub\n.type entry_stub,@function\nentry_stub:\n"
    " mov %rsp,entry_vals+0(%rip)\n mov %rdi,entry_vals+8(%rip)\n mov %rsi,entry_vals+16(%rip)\n"
    " mov %rdx,entry_vals+24(%rip)\n mov %rax,entry_vals+32(%rip)\n"
    " mov (%rsp),%rax\n mov %rax,entry_vals+40(%rip)\n mov entry_vals+32(%rip),%rax\n"
    " pushfq\n popq entry_vals+48(%rip)\n fnstcw entry_vals+56(%rip)\n stmxcsr entry_vals+64(%rip)\n"
    " fnstsw entry_vals+72(%rip)\n movq %xmm0,entry_vals+80(%rip)\n"
    " jmp c_handler\n");

static void setup_fp(void)
{
    fp_ctl_in = 0x027f;  /* x87: 53-bit precision, all exceptions masked */
    fp_ctl2_in = 0x9fa0; /* MXCSR: flush to zero, exceptions masked, the precision flag */
    flags_in = 0xed7;    /* CF PF AF ZF SF DF OF, IF and the reserved bit 1 */
}

static void change_victims(siginfo_t *info, void *ucv, int rt)
{
    ucontext_t *uc = ucv; /* x86_64 passes &uc in rdx with or without SA_SIGINFO */
    (void)info;
    (void)rt;
    victim_old = uc->uc_mcontext.gregs[REG_R12];
    victim_new = victim_old ^ 0x5a5a5a5a5a5a5a5aUL;
    uc->uc_mcontext.gregs[REG_R12] = victim_new;
    fvictim_old = uc->uc_mcontext.fpregs->_xmm[3].element[0];
    fvictim_new = fvictim_old ^ 0xffffffffUL;
    uc->uc_mcontext.fpregs->_xmm[3].element[0] = (uint32_t)fvictim_new;
}

static void print_layout(void)
{
#define UC(f) printf("off %s %#zx\n", #f, offsetof(ucontext_t, f))
#define SC(name, f) printf("off reg.%s %#zx\n", name, offsetof(ucontext_t, uc_mcontext) + offsetof(struct sigcontext, f))
    printf("off uc.flags %#zx\n", offsetof(ucontext_t, UC_FLAGS));
    UC(uc_link);
    UC(uc_stack);
    UC(uc_mcontext);
    UC(uc_sigmask);
    SC("r8", r8); SC("r9", r9); SC("r10", r10); SC("r11", r11); SC("r12", r12); SC("r13", r13);
    SC("r14", r14); SC("r15", r15); SC("rdi", rdi); SC("rsi", rsi); SC("rbp", rbp); SC("rbx", rbx);
    SC("rdx", rdx); SC("rax", rax); SC("rcx", rcx); SC("rsp", rsp); SC("rip", rip); SC("eflags", eflags);
    SC("cs", cs); SC("gs", gs); SC("fs", fs); SC("ss", __pad0); SC("err", err); SC("trapno", trapno);
    SC("oldmask", oldmask); SC("cr2", cr2); SC("fpstate", fpstate);
    printf("off fx.cwd %#zx\n", offsetof(struct _fpstate, cwd));
    printf("off fx.mxcsr %#zx\n", offsetof(struct _fpstate, mxcsr));
    printf("off fx.st %#zx\n", offsetof(struct _fpstate, _st));
    printf("off fx.xmm %#zx\n", offsetof(struct _fpstate, _xmm));
    /* glibc's reserved area is the kernel's reserved2[12] then sw_reserved (struct _fpstate_64) */
    printf("off fx.sw_bytes %#zx\n", offsetof(struct _fpstate, __glibc_reserved1) + 48);
    printf("size fx %#zx\n", sizeof(struct _fpstate));
}

#elif defined(__i386__)
#define ARCH "i386"
#define FP_IMAGE 512
static const char *const reg_names[] = {"ebx", "ecx", "edx", "esi", "edi", "ebp", "eax", 0};
enum { R_NR = 6, R_A0 = 0, R_A1 = 1, R_A2 = 2, R_VICTIM = 3 };
static const char *const entry_names[] = {"esp", "eax", "edx", "ecx", "ret", "arg0", "arg1", "arg2", "flags",
                                          "fpcw", "mxcsr", "fpsw", "xmm0lo", 0};
__asm__(
    ".text\n.globl do_raise\n.type do_raise,@function\ndo_raise:\n"
    " push %ebx\n push %esi\n push %edi\n push %ebp\n"
    " fninit\n fldcw fp_ctl_in\n ldmxcsr fp_ctl2_in\n"
    " movdqu fp_in+0,%xmm0\n movdqu fp_in+16,%xmm1\n movdqu fp_in+32,%xmm2\n movdqu fp_in+48,%xmm3\n"
    " movdqu fp_in+64,%xmm4\n movdqu fp_in+80,%xmm5\n movdqu fp_in+96,%xmm6\n movdqu fp_in+112,%xmm7\n"
    " fld1\n fldpi\n fldz\n"
    " fxsave fp_pre\n"
    " pushl flags_in\n popfl\n"
    " mov pre_vals+0,%ebx\n mov pre_vals+4,%ecx\n mov pre_vals+8,%edx\n mov pre_vals+12,%esi\n"
    " mov pre_vals+16,%edi\n mov pre_vals+20,%ebp\n mov pre_vals+24,%eax\n"
    " mov %esp,pre_sp\n"
    " int $0x80\n"
    ".globl after_syscall\nafter_syscall:\n"
    " pushfl\n popl post_flags\n"
    " mov %ebx,post_vals+0\n mov %ecx,post_vals+4\n mov %edx,post_vals+8\n mov %esi,post_vals+12\n"
    " mov %edi,post_vals+16\n mov %ebp,post_vals+20\n mov %eax,post_vals+24\n"
    " movw %gs,post_seg+0\n movw %fs,post_seg+2\n movw %es,post_seg+4\n movw %ds,post_seg+6\n"
    " movw %cs,post_seg+8\n movw %ss,post_seg+10\n"
    " cld\n fxsave fp_post\n fninit\n"
    " pop %ebp\n pop %edi\n pop %esi\n pop %ebx\n ret\n"
    ".globl entry_stub\n.type entry_stub,@function\nentry_stub:\n"
    " mov %esp,entry_vals+0\n mov %eax,entry_vals+4\n mov %edx,entry_vals+8\n mov %ecx,entry_vals+12\n"
    " mov 0(%esp),%eax\n mov %eax,entry_vals+16\n mov 4(%esp),%eax\n mov %eax,entry_vals+20\n"
    " mov 8(%esp),%eax\n mov %eax,entry_vals+24\n mov 12(%esp),%eax\n mov %eax,entry_vals+28\n"
    " mov entry_vals+4,%eax\n"
    " pushfl\n popl entry_vals+32\n fnstcw entry_vals+36\n stmxcsr entry_vals+40\n fnstsw entry_vals+44\n"
    " movd %xmm0,entry_vals+48\n"
    " jmp c_handler\n");

static void setup_fp(void)
{
    fp_ctl_in = 0x027f;
    fp_ctl2_in = 0x9fa0;
    flags_in = 0xed7;
}

static void change_victims(siginfo_t *info, void *ucv, int rt)
{
    /* the sigcontext: uc_mcontext of the rt frame's ucontext, or right after the old
       frame's return address and signal number */
    struct sigcontext *sc = rt ? (struct sigcontext *)&((ucontext_t *)ucv)->uc_mcontext
                               : (struct sigcontext *)((char *)entry_vals[0] + 8);
    unsigned char *fx;
    (void)info;
    victim_old = sc->esi;
    victim_new = victim_old ^ 0x5a5a5a5aUL;
    sc->esi = victim_new;
    /* xmm3 in the fxsave image after the 112-byte fsave header */
    fx = (unsigned char *)sc->fpstate + 112;
    memcpy(&fvictim_old, fx + 160 + 3 * 16, 4);
    fvictim_new = fvictim_old ^ 0xffffffffUL;
    memcpy(fx + 160 + 3 * 16, &fvictim_new, 4);
}

static void print_layout(void)
{
#define UC(f) printf("off %s %#zx\n", #f, offsetof(ucontext_t, f))
#define SC(name, f) printf("off reg.%s %#zx\n", name, offsetof(ucontext_t, uc_mcontext) + offsetof(struct sigcontext, f))
    printf("off uc.flags %#zx\n", offsetof(ucontext_t, UC_FLAGS));
    UC(uc_link);
    UC(uc_stack);
    UC(uc_mcontext);
    UC(uc_sigmask);
    SC("gs", gs); SC("fs", fs); SC("es", es); SC("ds", ds); SC("edi", edi); SC("esi", esi);
    SC("ebp", ebp); SC("esp", esp); SC("ebx", ebx); SC("edx", edx); SC("ecx", ecx); SC("eax", eax);
    SC("trapno", trapno); SC("err", err); SC("eip", eip); SC("cs", cs); SC("eflags", eflags);
    SC("esp_at_signal", esp_at_signal); SC("ss", ss); SC("fpstate", fpstate); SC("oldmask", oldmask);
    SC("cr2", cr2);
    printf("off fp.status %#zx\n", offsetof(struct _fpstate, status));
    printf("off fp.magic %#zx\n", offsetof(struct _fpstate, magic));
    printf("off fp.fxsr %#zx\n", offsetof(struct _fpstate, _fxsr_env));
    printf("off fp.mxcsr %#zx\n", offsetof(struct _fpstate, mxcsr));
    printf("off fp.xmm %#zx\n", offsetof(struct _fpstate, _xmm));
    printf("size sigcontext %#zx\n", sizeof(struct sigcontext));
    printf("size fpstate %#zx\n", sizeof(struct _fpstate));
}

#elif defined(__arm__)
#define ARCH "arm"
#define FP_IMAGE 264
static const char *const reg_names[] = {"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9",
                                        "r10", "r11", "r12", "lr", 0};
enum { R_NR = 7, R_A0 = 0, R_A1 = 1, R_A2 = 2, R_VICTIM = 4 };
static const char *const entry_names[] = {"sp", "r0", "r1", "r2", "lr", "pc", "fpscr", "apsr", 0};
void thumb_entry_stub(int);
__asm__(
    ".syntax unified\n.arm\n.fpu neon\n.text\n"
    ".globl do_raise\n.type do_raise,%function\ndo_raise:\n"
    " push {r4-r11, lr}\n"
    " ldr r0, =fp_in\n vldmia r0!, {d0-d15}\n vldmia r0, {d16-d31}\n"
    " ldr r0, =fp_ctl_in\n ldr r0, [r0]\n vmsr fpscr, r0\n"
    " ldr r0, =fp_pre\n vstmia r0!, {d0-d15}\n vstmia r0!, {d16-d31}\n vmrs r1, fpscr\n str r1, [r0]\n"
    " ldr r0, =pre_sp\n str sp, [r0]\n"
    " ldr r0, =flags_in\n ldr r0, [r0]\n msr APSR_nzcvqg, r0\n"
    " ldr lr, =pre_vals\n"
    " ldr r0, [lr, #0]\n ldr r1, [lr, #4]\n ldr r2, [lr, #8]\n ldr r3, [lr, #12]\n"
    " ldr r4, [lr, #16]\n ldr r5, [lr, #20]\n ldr r6, [lr, #24]\n ldr r7, [lr, #28]\n"
    " ldr r8, [lr, #32]\n ldr r9, [lr, #36]\n ldr r10, [lr, #40]\n ldr r11, [lr, #44]\n"
    " ldr r12, [lr, #48]\n ldr lr, [lr, #52]\n"
    " svc #0\n"
    ".globl after_syscall\nafter_syscall:\n"
    " str lr, [sp, #-4]\n"
    " ldr lr, =post_vals\n"
    " str r0, [lr, #0]\n str r1, [lr, #4]\n str r2, [lr, #8]\n str r3, [lr, #12]\n"
    " str r4, [lr, #16]\n str r5, [lr, #20]\n str r6, [lr, #24]\n str r7, [lr, #28]\n"
    " str r8, [lr, #32]\n str r9, [lr, #36]\n str r10, [lr, #40]\n str r11, [lr, #44]\n"
    " str r12, [lr, #48]\n ldr r0, [sp, #-4]\n str r0, [lr, #52]\n"
    " mrs r0, apsr\n ldr r1, =post_flags\n str r0, [r1]\n"
    " ldr r0, =fp_post\n vstmia r0!, {d0-d15}\n vstmia r0!, {d16-d31}\n vmrs r1, fpscr\n str r1, [r0]\n"
    " mov r1, #0\n vmsr fpscr, r1\n"
    " pop {r4-r11, pc}\n"
    ".ltorg\n"
    ".globl entry_stub\n.type entry_stub,%function\nentry_stub:\n"
    " ldr r3, =entry_vals\n mov r12, sp\n str r12, [r3, #0]\n str r0, [r3, #4]\n str r1, [r3, #8]\n"
    " str r2, [r3, #12]\n str lr, [r3, #16]\n adr r12, entry_stub\n str r12, [r3, #20]\n"
    " vmrs r12, fpscr\n str r12, [r3, #24]\n mrs r12, apsr\n str r12, [r3, #28]\n"
    " b c_handler\n"
    ".ltorg\n"
    ".thumb\n.globl thumb_entry_stub\n.type thumb_entry_stub,%function\n.thumb_func\nthumb_entry_stub:\n"
    " ldr r3, =entry_vals\n mov r12, sp\n str r12, [r3, #0]\n str r0, [r3, #4]\n str r1, [r3, #8]\n"
    " str r2, [r3, #12]\n mov r12, lr\n str r12, [r3, #16]\n adr r12, thumb_entry_stub\n str r12, [r3, #20]\n"
    " vmrs r12, fpscr\n str r12, [r3, #24]\n mrs r12, apsr\n str r12, [r3, #28]\n"
    " ldr r12, =c_handler\n bx r12\n"
    ".ltorg\n.arm\n");

static void setup_fp(void)
{
    fp_ctl_in = 0x03c0009f; /* FPSCR: FZ, DN, round to zero, the cumulative exception flags */
    flags_in = 0xb8000000;  /* N, C, V, Q */
}

static void change_victims(siginfo_t *info, void *ucv, int rt)
{
    ucontext_t *uc = rt ? ucv : (ucontext_t *)entry_vals[0];
    unsigned long *aux = uc->uc_regspace;
    (void)info;
    victim_old = uc->uc_mcontext.arm_r4;
    victim_new = victim_old ^ 0x5a5a5a5aUL;
    uc->uc_mcontext.arm_r4 = victim_new;
    /* the VFP record: magic 0x56465001, size, then d0-d31 */
    while (aux[0] && aux[0] != 0x56465001UL)
        aux = (unsigned long *)((char *)aux + aux[1]);
    if (aux[0]) {
        memcpy(&fvictim_old, (char *)aux + 8 + 5 * 8, 4);
        fvictim_new = fvictim_old ^ 0xffffffffUL;
        memcpy((char *)aux + 8 + 5 * 8, &fvictim_new, 4);
    }
}

static void print_layout(void)
{
#define UC(f) printf("off %s %#zx\n", #f, offsetof(ucontext_t, f))
#define MC(name, f) printf("off reg.%s %#zx\n", name, offsetof(ucontext_t, uc_mcontext.f))
    printf("off uc.flags %#zx\n", offsetof(ucontext_t, UC_FLAGS));
    UC(uc_link);
    UC(uc_stack);
    UC(uc_mcontext);
    UC(uc_sigmask);
    UC(uc_regspace);
    MC("trapno", trap_no); MC("err", error_code); MC("oldmask", oldmask);
    MC("r0", arm_r0); MC("r1", arm_r1); MC("r2", arm_r2); MC("r3", arm_r3); MC("r4", arm_r4);
    MC("r5", arm_r5); MC("r6", arm_r6); MC("r7", arm_r7); MC("r8", arm_r8); MC("r9", arm_r9);
    MC("r10", arm_r10); MC("r11", arm_fp); MC("r12", arm_ip); MC("sp", arm_sp); MC("lr", arm_lr);
    MC("pc", arm_pc); MC("cpsr", arm_cpsr); MC("fault_address", fault_address);
}

#elif defined(__riscv)
#define ARCH "riscv64"
#define FP_IMAGE 264
static const char *const reg_names[] = {"ra", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4", "a5",
                                        "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11",
                                        "t3", "t4", "t5", "t6", 0};
enum { R_NR = 13, R_A0 = 6, R_A1 = 7, R_A2 = 8, R_VICTIM = 14 };
static const char *const entry_names[] = {"sp", "a0", "a1", "a2", "ra", "fcsr", 0};
#define FL(i) " fld f" #i ", " #i "*8(t0)\n"
#define FS(i) " fsd f" #i ", " #i "*8(t0)\n"
#define FALL(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15) \
    M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23) M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31)
#define GL(r, i) " ld " #r ", " #i "*8(ra)\n"
#define GS(r, i) " sd " #r ", " #i "*8(ra)\n"
#define GALL(M) M(t0, 1) M(t1, 2) M(t2, 3) M(s0, 4) M(s1, 5) M(a0, 6) M(a1, 7) M(a2, 8) M(a3, 9) M(a4, 10) \
    M(a5, 11) M(a6, 12) M(a7, 13) M(s2, 14) M(s3, 15) M(s4, 16) M(s5, 17) M(s6, 18) M(s7, 19) M(s8, 20) \
    M(s9, 21) M(s10, 22) M(s11, 23) M(t3, 24) M(t4, 25) M(t5, 26) M(t6, 27)
__asm__(
    ".text\n.globl do_raise\n.type do_raise,@function\ndo_raise:\n"
    " addi sp, sp, -224\n sd ra, 0(sp)\n sd s0, 8(sp)\n sd s1, 16(sp)\n sd s2, 24(sp)\n sd s3, 32(sp)\n"
    " sd s4, 40(sp)\n sd s5, 48(sp)\n sd s6, 56(sp)\n sd s7, 64(sp)\n sd s8, 72(sp)\n sd s9, 80(sp)\n"
    " sd s10, 88(sp)\n sd s11, 96(sp)\n"
    " fsd fs0, 104(sp)\n fsd fs1, 112(sp)\n fsd fs2, 120(sp)\n fsd fs3, 128(sp)\n fsd fs4, 136(sp)\n"
    " fsd fs5, 144(sp)\n fsd fs6, 152(sp)\n fsd fs7, 160(sp)\n fsd fs8, 168(sp)\n fsd fs9, 176(sp)\n"
    " fsd fs10, 184(sp)\n fsd fs11, 192(sp)\n"
    " la t0, fp_in\n" FALL(FL)
    " la t0, fp_ctl_in\n lw t1, 0(t0)\n fscsr t1\n"
    " la t0, fp_pre\n" FALL(FS) " frcsr t1\n sw t1, 256(t0)\n"
    " la t0, pre_sp\n sd sp, 0(t0)\n"
    " la ra, pre_vals\n" GALL(GL) " ld ra, 0(ra)\n"
    " ecall\n"
    ".globl after_syscall\nafter_syscall:\n"
    " sd ra, -8(sp)\n la ra, post_vals\n" GALL(GS) " ld t0, -8(sp)\n sd t0, 0(ra)\n"
    " la t0, fp_post\n" FALL(FS) " frcsr t1\n sw t1, 256(t0)\n fscsr zero\n"
    " ld ra, 0(sp)\n ld s0, 8(sp)\n ld s1, 16(sp)\n ld s2, 24(sp)\n ld s3, 32(sp)\n"
    " ld s4, 40(sp)\n ld s5, 48(sp)\n ld s6, 56(sp)\n ld s7, 64(sp)\n ld s8, 72(sp)\n ld s9, 80(sp)\n"
    " ld s10, 88(sp)\n ld s11, 96(sp)\n"
    " fld fs0, 104(sp)\n fld fs1, 112(sp)\n fld fs2, 120(sp)\n fld fs3, 128(sp)\n fld fs4, 136(sp)\n"
    " fld fs5, 144(sp)\n fld fs6, 152(sp)\n fld fs7, 160(sp)\n fld fs8, 168(sp)\n fld fs9, 176(sp)\n"
    " fld fs10, 184(sp)\n fld fs11, 192(sp)\n"
    " addi sp, sp, 224\n ret\n"
    ".globl entry_stub\n.type entry_stub,@function\nentry_stub:\n"
    " sd t0, -8(sp)\n la t0, entry_vals\n sd sp, 0(t0)\n sd a0, 8(t0)\n sd a1, 16(t0)\n sd a2, 24(t0)\n"
    " sd ra, 32(t0)\n sd t1, -16(sp)\n frcsr t1\n sd t1, 40(t0)\n ld t1, -16(sp)\n ld t0, -8(sp)\n"
    " j c_handler\n");

static void setup_fp(void)
{
    fp_ctl_in = 0x3f; /* fcsr: round toward +inf (frm 3) and the NV DZ OF UF NX flags */
}

static void change_victims(siginfo_t *info, void *ucv, int rt)
{
    ucontext_t *uc = ucv; /* riscv passes &uc in a2 with or without SA_SIGINFO */
    (void)info;
    (void)rt;
    victim_old = uc->uc_mcontext.__gregs[18]; /* s2 is x18 */
    victim_new = victim_old ^ 0x5a5a5a5a5a5a5a5aUL;
    uc->uc_mcontext.__gregs[18] = victim_new;
    fvictim_old = uc->uc_mcontext.__fpregs.__d.__f[5];
    fvictim_new = fvictim_old ^ 0xffffffffUL;
    uc->uc_mcontext.__fpregs.__d.__f[5] = fvictim_new;
}

static void print_layout(void)
{
    static const char *const x[] = {"pc", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1",
                                    "a2", "a3", "a4", "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7",
                                    "s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6"};
#define UC(f) printf("off %s %#zx\n", #f, offsetof(ucontext_t, f))
    printf("off uc.flags %#zx\n", offsetof(ucontext_t, UC_FLAGS));
    UC(uc_link);
    UC(uc_stack);
    UC(uc_mcontext);
    UC(uc_sigmask);
    for (int i = 0; i < 32; i++)
        printf("off reg.%s %#zx\n", x[i], offsetof(ucontext_t, uc_mcontext.__gregs) + 8 * i);
    printf("off reg.f0 %#zx\n", offsetof(ucontext_t, uc_mcontext.__fpregs.__d.__f));
    printf("off reg.fcsr %#zx\n", offsetof(ucontext_t, uc_mcontext.__fpregs.__d.__fcsr));
    printf("size mcontext %#zx\n", sizeof(mcontext_t));
}

#elif defined(__powerpc64__)
#if _CALL_ELF == 2
#define ARCH "ppc64le"
#define FUNC(name) ".globl " #name "\n.type " #name ",@function\n" #name ":\n"
#else
#define ARCH "ppc64"
#define FUNC(name) ".section \".opd\",\"aw\"\n.align 3\n.globl " #name "\n" #name ":\n" \
    ".quad .L." #name ",.TOC.@tocbase,0\n.previous\n.type " #name ",@function\n.L." #name ":\n"
#endif
#define FP_IMAGE 264
static const char *const reg_names[] = {"r0", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12",
                                        "r14", "r15", "r16", "r17", "r18", "r19", "r20", "r21", "r22", "r23",
                                        "r24", "r25", "r26", "r27", "r28", "r29", "r30", "r31",
                                        "cr", "xer", "ctr", "lr", 0};
enum { R_NR = 0, R_A0 = 1, R_A1 = 2, R_A2 = 3, R_VICTIM = 17 };
static const char *const entry_names[] = {"r1", "r3", "r4", "r5", "r6", "lr", "r2", "r12", "ctr", "fpscr", "cr", 0};
#define TOCADDR(r, sym) " addis " #r ",2," #sym "@toc@ha\n addi " #r "," #r "," #sym "@toc@l\n"
#define FL(i) " lfd " #i "," #i "*8(9)\n"
#define FS(i) " stfd " #i "," #i "*8(9)\n"
#define FALL(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15) \
    M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23) M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31)
/* slot i of pre_vals/post_vals holds reg_names[i] */
#define GALL(M) M(0, 0) M(3, 1) M(4, 2) M(5, 3) M(6, 4) M(7, 5) M(8, 6) M(10, 8) M(11, 9) M(12, 10) \
    M(14, 11) M(15, 12) M(16, 13) M(17, 14) M(18, 15) M(19, 16) M(20, 17) M(21, 18) M(22, 19) M(23, 20) \
    M(24, 21) M(25, 22) M(26, 23) M(27, 24) M(28, 25) M(29, 26) M(30, 27) M(31, 28)
#define GL(r, i) " ld " #r "," #i "*8(9)\n"
#define GS(r, i) " std " #r "," #i "*8(9)\n"
#define SAVE(r, i) " std " #r "," #i "(1)\n"
#define REST(r, i) " ld " #r "," #i "(1)\n"
#define CALLEE(M) M(14, 112) M(15, 120) M(16, 128) M(17, 136) M(18, 144) M(19, 152) M(20, 160) M(21, 168) \
    M(22, 176) M(23, 184) M(24, 192) M(25, 200) M(26, 208) M(27, 216) M(28, 224) M(29, 232) M(30, 240) M(31, 248)
#define FSAVE(r, i) " stfd " #r "," #i "(1)\n"
#define FREST(r, i) " lfd " #r "," #i "(1)\n"
#define FCALLEE(M) M(14, 256) M(15, 264) M(16, 272) M(17, 280) M(18, 288) M(19, 296) M(20, 304) M(21, 312) \
    M(22, 320) M(23, 328) M(24, 336) M(25, 344) M(26, 352) M(27, 360) M(28, 368) M(29, 376) M(30, 384) M(31, 392)
__asm__(
    ".text\n" FUNC(do_raise)
    " mflr 0\n std 0,16(1)\n stdu 1,-416(1)\n" CALLEE(SAVE) FCALLEE(FSAVE) " mfcr 0\n std 0,400(1)\n"
    TOCADDR(9, fp_ctl_d) " lfd 0,0(9)\n mtfsf 0xff,0\n"
    TOCADDR(9, fp_in) FALL(FL)
    TOCADDR(9, fp_pre) FALL(FS) " mffs 0\n stfd 0,256(9)\n" TOCADDR(9, fp_in) " lfd 0,0(9)\n"
    TOCADDR(9, pre_sp) " std 1,0(9)\n"
    TOCADDR(9, pre_vals)
    " ld 10,29*8(9)\n mtcrf 0xff,10\n ld 10,30*8(9)\n mtxer 10\n ld 10,31*8(9)\n mtctr 10\n"
    " ld 10,32*8(9)\n mtlr 10\n"
    GALL(GL) " ld 9,7*8(9)\n"
    " sc\n"
    ".globl after_syscall\nafter_syscall:\n"
    " std 9,-8(1)\n" TOCADDR(9, post_vals) GALL(GS) " ld 10,-8(1)\n std 10,7*8(9)\n"
    " mfcr 10\n std 10,29*8(9)\n mfxer 10\n std 10,30*8(9)\n mfctr 10\n std 10,31*8(9)\n"
    " mflr 10\n std 10,32*8(9)\n"
    TOCADDR(9, fp_post) FALL(FS) " mffs 0\n stfd 0,256(9)\n"
    TOCADDR(9, fp_zero_d) " lfd 0,0(9)\n mtfsf 0xff,0\n"
    " ld 0,400(1)\n mtcrf 0xff,0\n" CALLEE(REST) FCALLEE(FREST)
    " addi 1,1,416\n ld 0,16(1)\n mtlr 0\n blr\n"
#if _CALL_ELF == 2
    FUNC(entry_stub)
    "0: addis 11,12,entry_vals-0b@ha\n addi 11,11,entry_vals-0b@l\n"
#else
    FUNC(entry_stub)
    TOCADDR(11, entry_vals)
#endif
    " std 1,0(11)\n std 3,8(11)\n std 4,16(11)\n std 5,24(11)\n std 6,32(11)\n"
    " mflr 0\n std 0,40(11)\n std 2,48(11)\n std 12,56(11)\n mfctr 0\n std 0,64(11)\n"
    " mffs 0\n stfd 0,72(11)\n mfcr 0\n std 0,80(11)\n"
#if _CALL_ELF == 2
    " addis 12,12,c_handler-0b@ha\n addi 12,12,c_handler-0b@l\n mtctr 12\n bctr\n"
#else
    " b c_handler\n nop\n"
#endif
);

static void setup_fp(void)
{
    union { double d; uint64_t u; } v;
    v.u = 0x82000003ULL; /* FPSCR: FX, XX and round toward -inf */
    fp_ctl_d = v.d;
    fp_ctl_in = 0x82000003U;
    fp_zero_d = 0.0;
}

static void change_victims(siginfo_t *info, void *ucv, int rt)
{
    /* without SA_SIGINFO Linux passes &uc->uc_mcontext in r4 and leaves r5 as it was;
       QEMU 7.2 passes the siginfo and the ucontext anyway (r5 is then on the stack) */
    word r5 = (word)ucv, sp = entry_vals[0];
    ucontext_t *uc = rt || (r5 > sp && r5 - sp < 0x10000) ? ucv
                   : (ucontext_t *)((char *)info - offsetof(ucontext_t, uc_mcontext));
    victim_old = uc->uc_mcontext.gp_regs[20];
    victim_new = victim_old ^ 0x5a5a5a5a5a5a5a5aUL;
    uc->uc_mcontext.gp_regs[20] = victim_new;
    memcpy(&fvictim_old, &uc->uc_mcontext.fp_regs[5], 8);
    fvictim_new = fvictim_old ^ 0xffffffffUL;
    memcpy(&uc->uc_mcontext.fp_regs[5], &fvictim_new, 8);
}

static void print_layout(void)
{
#define UC(f) printf("off %s %#zx\n", #f, offsetof(ucontext_t, f))
#define MC(name, f) printf("off %s %#zx\n", name, offsetof(ucontext_t, uc_mcontext.f))
    printf("off uc.flags %#zx\n", offsetof(ucontext_t, UC_FLAGS));
    UC(uc_link);
    UC(uc_stack);
    UC(uc_mcontext);
    UC(uc_sigmask);
    MC("mc.signal", signal); MC("mc.handler", handler); MC("mc.oldmask", oldmask); MC("mc.regs", regs);
    MC("mc.gp_regs", gp_regs); MC("mc.fp_regs", fp_regs); MC("mc.v_regs", v_regs);
    MC("mc.vmx_reserve", vmx_reserve);
}

#elif defined(__aarch64__)
#define ARCH "aarch64"
#define FP_IMAGE 520
static const char *const reg_names[] = {"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10",
                                        "x11", "x12", "x13", "x14", "x15", "x16", "x17", "x18", "x19", "x20",
                                        "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28", "x29", "x30", 0};
enum { R_NR = 8, R_A0 = 0, R_A1 = 1, R_A2 = 2, R_VICTIM = 20 };
static const char *const entry_names[] = {"sp", "x0", "x1", "x2", "x29", "x30", "fpcr", "fpsr", "nzcv", 0};
#define ADR(r, sym) " adrp " #r ", " #sym "\n add " #r ", " #r ", :lo12:" #sym "\n"
#define V8(op) " " #op " {v0.16b-v3.16b}, [x9], #64\n " #op " {v4.16b-v7.16b}, [x9], #64\n" \
    " " #op " {v8.16b-v11.16b}, [x9], #64\n " #op " {v12.16b-v15.16b}, [x9], #64\n" \
    " " #op " {v16.16b-v19.16b}, [x9], #64\n " #op " {v20.16b-v23.16b}, [x9], #64\n" \
    " " #op " {v24.16b-v27.16b}, [x9], #64\n " #op " {v28.16b-v31.16b}, [x9], #64\n"
#define GPAIRS(op) " " #op " x0, x1, [x30, #0]\n " #op " x2, x3, [x30, #16]\n " #op " x4, x5, [x30, #32]\n" \
    " " #op " x6, x7, [x30, #48]\n " #op " x8, x9, [x30, #64]\n " #op " x10, x11, [x30, #80]\n" \
    " " #op " x12, x13, [x30, #96]\n " #op " x14, x15, [x30, #112]\n " #op " x16, x17, [x30, #128]\n" \
    " " #op " x18, x19, [x30, #144]\n " #op " x20, x21, [x30, #160]\n " #op " x22, x23, [x30, #176]\n" \
    " " #op " x24, x25, [x30, #192]\n " #op " x26, x27, [x30, #208]\n " #op " x28, x29, [x30, #224]\n"
__asm__(
    ".text\n.globl do_raise\n.type do_raise,%function\ndo_raise:\n"
    " stp x29, x30, [sp, #-176]!\n mov x29, sp\n"
    " stp x19, x20, [sp, #16]\n stp x21, x22, [sp, #32]\n stp x23, x24, [sp, #48]\n stp x25, x26, [sp, #64]\n"
    " stp x27, x28, [sp, #80]\n stp d8, d9, [sp, #96]\n stp d10, d11, [sp, #112]\n stp d12, d13, [sp, #128]\n"
    " stp d14, d15, [sp, #144]\n"
    ADR(x9, fp_in) V8(ld1)
    ADR(x9, fp_ctl_in) " ldr w10, [x9]\n msr fpcr, x10\n"
    ADR(x9, fp_ctl2_in) " ldr w10, [x9]\n msr fpsr, x10\n"
    ADR(x9, fp_pre) V8(st1) " mrs x10, fpsr\n str w10, [x9]\n mrs x10, fpcr\n str w10, [x9, #4]\n"
    ADR(x9, pre_sp) " mov x10, sp\n str x10, [x9]\n"
    ADR(x9, flags_in) " ldr x10, [x9]\n msr nzcv, x10\n"
    ADR(x30, pre_vals) GPAIRS(ldp) " ldr x30, [x30, #240]\n"
    " svc #0\n"
    ".globl after_syscall\nafter_syscall:\n"
    " str x30, [sp, #-16]\n" ADR(x30, post_vals) GPAIRS(stp) " ldr x9, [sp, #-16]\n str x9, [x30, #240]\n"
    " mrs x9, nzcv\n" ADR(x10, post_flags) " str x9, [x10]\n"
    ADR(x9, fp_post) V8(st1) " mrs x10, fpsr\n str w10, [x9]\n mrs x10, fpcr\n str w10, [x9, #4]\n"
    " msr fpcr, xzr\n msr fpsr, xzr\n"
    " ldp x19, x20, [sp, #16]\n ldp x21, x22, [sp, #32]\n ldp x23, x24, [sp, #48]\n ldp x25, x26, [sp, #64]\n"
    " ldp x27, x28, [sp, #80]\n ldp d8, d9, [sp, #96]\n ldp d10, d11, [sp, #112]\n ldp d12, d13, [sp, #128]\n"
    " ldp d14, d15, [sp, #144]\n ldp x29, x30, [sp], #176\n ret\n"
    ".globl entry_stub\n.type entry_stub,%function\nentry_stub:\n"
    " str x9, [sp, #-16]\n" ADR(x9, entry_vals)
    " mov x10, sp\n str x10, [x9, #0]\n str x0, [x9, #8]\n str x1, [x9, #16]\n str x2, [x9, #24]\n"
    " str x29, [x9, #32]\n str x30, [x9, #40]\n mrs x10, fpcr\n str x10, [x9, #48]\n mrs x10, fpsr\n"
    " str x10, [x9, #56]\n mrs x10, nzcv\n str x10, [x9, #64]\n ldr x9, [sp, #-16]\n"
    " b c_handler\n");

static void setup_fp(void)
{
    fp_ctl_in = 0x03c00000;  /* FPCR: DN, FZ, round toward zero */
    fp_ctl2_in = 0x0800009f; /* FPSR: QC and the cumulative exception flags */
    flags_in = 0xb0000000;   /* N, C, V */
}

static void change_victims(siginfo_t *info, void *ucv, int rt)
{
    /* aarch64 passes &uc in x2 only with SA_SIGINFO: without it, the ucontext is at the
       handler's sp + 128 (after the siginfo) */
    ucontext_t *uc = rt ? ucv : (ucontext_t *)((char *)entry_vals[0] + 128);
    unsigned int *rec = (unsigned int *)uc->uc_mcontext.__reserved;
    (void)info;
    victim_old = uc->uc_mcontext.regs[20];
    victim_new = victim_old ^ 0x5a5a5a5a5a5a5a5aUL;
    uc->uc_mcontext.regs[20] = victim_new;
    /* the FP/SIMD record: magic 0x46508001, size, fpsr, fpcr, then v0-v31 */
    while (rec[0] && rec[0] != 0x46508001U)
        rec = (unsigned int *)((char *)rec + rec[1]);
    if (rec[0]) {
        memcpy(&fvictim_old, (char *)rec + 16 + 5 * 16, 4);
        fvictim_new = fvictim_old ^ 0xffffffffUL;
        memcpy((char *)rec + 16 + 5 * 16, &fvictim_new, 4);
    }
}

static void print_layout(void)
{
#define UC(f) printf("off %s %#zx\n", #f, offsetof(ucontext_t, f))
#define MC(name, f) printf("off %s %#zx\n", name, offsetof(ucontext_t, uc_mcontext.f))
    printf("off uc.flags %#zx\n", offsetof(ucontext_t, UC_FLAGS));
    UC(uc_link);
    UC(uc_stack);
    UC(uc_mcontext);
    UC(uc_sigmask);
    MC("reg.fault_address", fault_address); MC("reg.sp", sp); MC("reg.pc", pc); MC("reg.pstate", pstate);
    MC("mc.reserved", __reserved);
    for (int i = 0; i < 31; i++)
        printf("off reg.x%d %#zx\n", i, offsetof(ucontext_t, uc_mcontext.regs) + 8 * (size_t)i);
}

#elif defined(__mips__)
#include <sys/prctl.h>
#if _MIPS_SIM == _ABIO32
#define ARCH MIPS_ARCH_O32
#ifdef __MIPSEB__
#define MIPS_ARCH_O32 "mips"
#else
#define MIPS_ARCH_O32 "mipsel"
#endif
#define W "4"
#define L_ "lw"
#define S_ "sw"
#define LA_ "la"
#define ADDIU_ "addiu"
/* Debian's o32 code is FPXX: Linux (and QEMU) run it in FR=1 on a CPU with a 64-bit FPU, where
   the odd registers are 64-bit registers of their own (the program prints its mode: fp_mode) */
#define FCALLEE(M) M(20, 96) M(21, 104) M(22, 112) M(23, 120) M(24, 128) M(25, 136) M(26, 144) M(27, 152) \
    M(28, 160) M(29, 168) M(30, 176) M(31, 184)
static const char *const reg_names[] = {"ra", "v0", "v1", "a0", "a1", "a2", "a3", "t0", "t1", "t2", "t3", "t4",
                                        "t5", "t6", "t7", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "t8",
                                        "t9", "s8", "hi", "lo", 0};
#else
#define ARCH "mips64el"
#define W "8"
#define L_ "ld"
#define S_ "sd"
#define LA_ "dla"
#define ADDIU_ "daddiu"
#define FCALLEE(M) M(24, 96) M(25, 104) M(26, 112) M(27, 120) M(28, 128) M(29, 136) M(30, 144) M(31, 152)
static const char *const reg_names[] = {"ra", "v0", "v1", "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "t0",
                                        "t1", "t2", "t3", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "t8",
                                        "t9", "s8", "hi", "lo", 0};
#endif
#define FALL(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15) \
    M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23) M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31)
#define FP_IMAGE 264
enum { R_NR = 1, R_A0 = 3, R_A1 = 4, R_A2 = 5, R_VICTIM = 17 };
static const char *const entry_names[] = {"sp", "a0", "a1", "a2", "ra", "t9", "fcsr", 0};
#define FL(i) " ldc1 $f" #i ", " #i "*8($8)\n"
#define FS(i) " sdc1 $f" #i ", " #i "*8($8)\n"
/* slot i of pre_vals/post_vals holds reg_names[i]: $31 first, then $2-$25, $30 (hi, lo apart) */
#define GALL(M) M(2, 1) M(3, 2) M(4, 3) M(5, 4) M(6, 5) M(7, 6) M(8, 7) M(9, 8) M(10, 9) M(11, 10) M(12, 11) \
    M(13, 12) M(14, 13) M(15, 14) M(16, 15) M(17, 16) M(18, 17) M(19, 18) M(20, 19) M(21, 20) M(22, 21) \
    M(23, 22) M(24, 23) M(25, 24) M(30, 25)
#define GL(r, i) " " L_ " $" #r ", " #i "*" W "($31)\n"
#define GS(r, i) " " S_ " $" #r ", " #i "*" W "($31)\n"
#define SAVE(r, i) " " S_ " $" #r ", " #i "($29)\n"
#define REST(r, i) " " L_ " $" #r ", " #i "($29)\n"
#define CALLEE(M) M(31, 0) M(16, 8) M(17, 16) M(18, 24) M(19, 32) M(20, 40) M(21, 48) M(22, 56) M(23, 64) \
    M(28, 72) M(30, 80)
#define FSAVE(r, i) " sdc1 $f" #r ", " #i "($29)\n"
#define FREST(r, i) " ldc1 $f" #r ", " #i "($29)\n"
__asm__(
    ".text\n.set push\n.set noat\n.set fp=64\n.set oddspreg\n.globl do_raise\n.type do_raise,@function\n.ent do_raise\n"
    "do_raise:\n"
    " " ADDIU_ " $29, $29, -208\n" CALLEE(SAVE) FCALLEE(FSAVE)
    " .set at\n " LA_ " $8, fp_ctl_in\n .set noat\n lw $9, 0($8)\n ctc1 $9, $31\n"
    " .set at\n " LA_ " $8, fp_in\n .set noat\n" FALL(FL)
    " .set at\n " LA_ " $8, fp_pre\n .set noat\n" FALL(FS) " cfc1 $9, $31\n sw $9, 256($8)\n"
    " .set at\n " LA_ " $8, pre_sp\n .set noat\n " S_ " $29, 0($8)\n"
    " .set at\n " LA_ " $31, pre_vals\n .set noat\n"
    " " L_ " $8, 26*" W "($31)\n mthi $8\n " L_ " $8, 27*" W "($31)\n mtlo $8\n"
    GALL(GL) " " L_ " $31, 0($31)\n"
    " syscall\n"
    ".globl after_syscall\nafter_syscall:\n"
    " " S_ " $31, -" W "($29)\n .set at\n " LA_ " $31, post_vals\n .set noat\n" GALL(GS)
    " mfhi $8\n " S_ " $8, 26*" W "($31)\n mflo $8\n " S_ " $8, 27*" W "($31)\n"
    " " L_ " $8, -" W "($29)\n " S_ " $8, 0($31)\n"
    " .set at\n " LA_ " $8, fp_post\n .set noat\n" FALL(FS) " cfc1 $9, $31\n sw $9, 256($8)\n ctc1 $0, $31\n"
    CALLEE(REST) FCALLEE(FREST)
    " " ADDIU_ " $29, $29, 208\n jr $31\n"
    ".end do_raise\n"
    /* 8-byte aligned: run_case prints the handler's first two words (ppc64's descriptor) */
    ".align 3\n.globl entry_stub\n.type entry_stub,@function\n.ent entry_stub\nentry_stub:\n"
    " " S_ " $8, -" W "($29)\n .set at\n " LA_ " $8, entry_vals\n .set noat\n"
    " " S_ " $29, 0($8)\n " S_ " $4, " W "($8)\n " S_ " $5, 2*" W "($8)\n " S_ " $6, 3*" W "($8)\n"
    " " S_ " $31, 4*" W "($8)\n " S_ " $25, 5*" W "($8)\n cfc1 $9, $31\n " S_ " $9, 6*" W "($8)\n"
    " .set at\n " LA_ " $25, c_handler\n .set noat\n jr $25\n"
    ".end entry_stub\n.set pop\n");

static void setup_fp(void)
{
    fp_ctl_in = 0x00000f83; /* FCSR: round toward -inf (RM 3), the V Z O U I enables on */
}

static void change_victims(siginfo_t *info, void *ucv, int rt)
{
    unsigned long long *regs, *fpr;
    (void)info;
#if _MIPS_SIM == _ABIO32
    /* o32 without SA_SIGINFO: a2 is the old frame's sigcontext, else the ucontext */
    regs = rt ? ((ucontext_t *)ucv)->uc_mcontext.gregs : ((struct sigcontext *)ucv)->sc_regs;
    fpr = rt ? (unsigned long long *)&((ucontext_t *)ucv)->uc_mcontext.fpregs : ((struct sigcontext *)ucv)->sc_fpregs;
#else
    (void)rt;
    regs = (unsigned long long *)((ucontext_t *)ucv)->uc_mcontext.gregs;
    fpr = (unsigned long long *)&((ucontext_t *)ucv)->uc_mcontext.fpregs;
#endif
    victim_old = (word)regs[18]; /* s2 is $18 */
    victim_new = victim_old ^ (word)0x5a5a5a5a5a5a5a5aULL;
    regs[18] = victim_new;
    memcpy(&fvictim_old, &fpr[4], 4); /* f4: an even register, saved on o32 too */
    fvictim_new = fvictim_old ^ 0xffffffffUL;
    memcpy(&fpr[4], &fvictim_new, 4);
}

static void print_layout(void)
{
    static const char *const x[] = {"zero", "at", "v0", "v1", "a0", "a1", "a2", "a3",
#if _MIPS_SIM == _ABIO32
                                    "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7",
#else
                                    "a4", "a5", "a6", "a7", "t0", "t1", "t2", "t3",
#endif
                                    "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "t8", "t9", "k0", "k1", "gp",
                                    "sp", "s8", "ra"};
#define UC(f) printf("off %s %#zx\n", #f, offsetof(ucontext_t, f))
#define MC(name, f) printf("off %s %#zx\n", name, offsetof(ucontext_t, uc_mcontext.f))
    printf("off uc.flags %#zx\n", offsetof(ucontext_t, UC_FLAGS));
    UC(uc_link);
    UC(uc_stack);
    UC(uc_mcontext);
    UC(uc_sigmask);
    MC("reg.pc", pc); MC("reg.f0", fpregs); MC("reg.fcsr", fpc_csr); MC("reg.hi", mdhi); MC("reg.lo", mdlo);
    MC("reg.used_math", used_math);
    printf("fp_mode %d\n", prctl(PR_GET_FP_MODE)); /* PR_FP_MODE_FR: 1 */
    for (int i = 0; i < 32; i++)
        printf("off reg.%s %#zx\n", x[i], offsetof(ucontext_t, uc_mcontext.gregs) + 8 * (size_t)i);
}

#else
#error "sigframe.c: no code for this architecture"
#endif

/* ------------------------------------------------------------------ common part */

static int case_rt;

void c_handler(int sig, siginfo_t *info, void *uc)
{
    word sp = entry_vals[0];
    word top = frame_top ? frame_top : pre_sp;
    (void)sig;
    frame_len = top > sp ? top - sp : 0;
    if (frame_len > sizeof frame_copy)
        frame_len = sizeof frame_copy;
    memcpy(frame_copy, (void *)sp, frame_len);
    /* then change one saved general and one saved FP register, as a handler that
       changes its context does */
    change_victims(info, uc, case_rt);
}

static void paint(void)
{
    volatile unsigned char buf[12288];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = 0xa5;
}

static void hex(const char *key, const void *p, size_t n)
{
    const unsigned char *b = p;
    printf("%s ", key);
    for (size_t i = 0; i < n; i++)
        printf("%02x", b[i]);
    printf("\n");
}

static unsigned char altstack[65536] __attribute__((aligned(16)));

struct scase {
    const char *name;
    int flags;
    int onstack;
    void (*stub)(int);
};

static void run_case(const struct scase *c)
{
    struct sigaction sa;
    stack_t ss;
    sigset_t mask;
    int i;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = c->stub;
    sa.sa_flags = c->flags;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, 0);

    if (c->onstack) {
        memset(altstack, 0xa5, sizeof altstack);
        ss.ss_sp = altstack;
        ss.ss_size = sizeof altstack;
        ss.ss_flags = 0;
        sigaltstack(&ss, 0);
    }
    /* the mask saved in the frame: two signals, one in each 32-bit half */
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR2);
    sigaddset(&mask, 42);
    sigprocmask(SIG_SETMASK, &mask, 0);

    for (i = 0; reg_names[i]; i++)
        pre_vals[i] = (word)0x1234567890abc000ULL + (word)(i << 4) + 0x100 * (word)i;
    pre_vals[R_NR] = SYS_tgkill;
    pre_vals[R_A0] = (word)getpid();
    pre_vals[R_A1] = (word)syscall(SYS_gettid);
    pre_vals[R_A2] = SIGUSR1;
    for (i = 0; i < (int)sizeof fp_in; i++)
        fp_in[i] = (unsigned char)(0x11 * (i / 8 + 1) + i % 8);
    setup_fp();

    case_rt = (c->flags & SA_SIGINFO) != 0;
    frame_top = c->onstack ? (word)(altstack + sizeof altstack) : 0;
    paint();
    /* frame_top for the main stack: do_raise's sp, known only once it ran; the copy
       is taken up to pre_sp, which do_raise stores before the syscall */
    do_raise();

    if (c->onstack) {
        ss.ss_flags = SS_DISABLE;
        sigaltstack(&ss, 0);
    }
    sigemptyset(&mask);
    sigprocmask(SIG_SETMASK, &mask, 0);

    printf("case %s\n", c->name);
    printf("flags %#x\n", c->flags);
    printf("handler %#lx\n", (word)c->stub);
    /* ppc64 ELFv1: the handler is a function descriptor (entry, TOC) */
    printf("handler_words %#lx %#lx\n", ((word *)((word)c->stub & ~(word)1))[0],
           ((word *)((word)c->stub & ~(word)1))[1]);
    printf("after_syscall %#lx\n", (word)after_syscall);
    printf("pre_sp %#lx\n", pre_sp);
    printf("altstack %#lx %#lx\n", c->onstack ? (word)altstack : 0UL, c->onstack ? (word)sizeof altstack : 0UL);
    printf("pid %#lx\n", pre_vals[R_A0]);
    printf("uid %#lx\n", (word)getuid());
    for (i = 0; reg_names[i]; i++) {
        printf("pre.%s %#lx\n", reg_names[i], pre_vals[i]);
        printf("post.%s %#lx\n", reg_names[i], post_vals[i]);
    }
    printf("victim %s %#lx %#lx\n", reg_names[R_VICTIM], victim_old, victim_new);
    printf("fvictim %#lx %#lx\n", fvictim_old, fvictim_new);
    printf("flags_in %#lx\n", flags_in);
    printf("post_flags %#lx\n", post_flags);
    hex("post_seg", post_seg, sizeof post_seg);
    for (i = 0; entry_names[i]; i++)
        printf("entry.%s %#lx\n", entry_names[i], entry_vals[i]);
    printf("frame_sp %#lx\n", entry_vals[0]);
    hex("frame", frame_copy, frame_len);
    hex("fp_pre", fp_pre, FP_IMAGE);
    hex("fp_post", fp_post, FP_IMAGE);
    printf("end\n");
    fflush(stdout);
}

int main(void)
{
    static const struct scase cases[] = {
        {"rt", SA_SIGINFO, 0, entry_stub},
        {"onstack", SA_SIGINFO | SA_ONSTACK, 1, entry_stub},
        {"plain", 0, 0, entry_stub},
#if defined(__arm__)
        {"thumb", SA_SIGINFO, 0, thumb_entry_stub},
        {"thumb_plain", 0, 0, thumb_entry_stub},
#endif
    };
    setvbuf(stdout, 0, _IOFBF, 1 << 16);
    printf("arch %s\n", ARCH);
    printf("word %zu\n", sizeof(word));
    printf("off si.signo %#zx\n", offsetof(siginfo_t, si_signo));
    printf("off si.errno %#zx\n", offsetof(siginfo_t, si_errno));
    printf("off si.code %#zx\n", offsetof(siginfo_t, si_code));
    printf("off si.pid %#zx\n", offsetof(siginfo_t, si_pid));
    printf("off si.uid %#zx\n", offsetof(siginfo_t, si_uid));
    printf("off si.status %#zx\n", offsetof(siginfo_t, si_status));
    printf("off si.utime %#zx\n", offsetof(siginfo_t, si_utime));
    printf("off si.stime %#zx\n", offsetof(siginfo_t, si_stime));
    printf("off si.value %#zx\n", offsetof(siginfo_t, si_value));
    printf("off si.timerid %#zx\n", offsetof(siginfo_t, si_timerid));
    printf("off si.overrun %#zx\n", offsetof(siginfo_t, si_overrun));
    printf("off si.addr %#zx\n", offsetof(siginfo_t, si_addr));
    printf("off si.addr_lsb %#zx\n", offsetof(siginfo_t, si_addr_lsb));
    printf("off si.band %#zx\n", offsetof(siginfo_t, si_band));
    printf("off si.fd %#zx\n", offsetof(siginfo_t, si_fd));
    printf("size siginfo %#zx\n", sizeof(siginfo_t));
    printf("off uc.stack.sp %#zx\n", offsetof(ucontext_t, uc_stack.ss_sp));
    printf("off uc.stack.flags %#zx\n", offsetof(ucontext_t, uc_stack.ss_flags));
    printf("off uc.stack.size %#zx\n", offsetof(ucontext_t, uc_stack.ss_size));
    printf("sig SIGUSR1 %d SIGUSR2 %d\n", SIGUSR1, SIGUSR2);
    printf("sa SA_SIGINFO %#x SA_ONSTACK %#x SA_RESTART %#x SA_NODEFER %#x SA_RESETHAND %#x SA_NOCLDSTOP %#x "
           "SA_NOCLDWAIT %#x\n", SA_SIGINFO, SA_ONSTACK, SA_RESTART, SA_NODEFER, SA_RESETHAND, SA_NOCLDSTOP,
           SA_NOCLDWAIT);
    print_layout();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    return 0;
}
