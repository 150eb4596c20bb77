/* kpsdk's DWARF fixture: types, scopes, inlining and recursion a debugger must see through. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned int u32;
typedef long long s64;

enum color { RED, GREEN = 5, BLUE };

struct flags {
    unsigned int ready : 1;
    unsigned int mode : 3;
    signed int delta : 5;
    unsigned char tag;
};

union word {
    u32 u;
    float f;
    unsigned char bytes[4];
};

struct inner { short a; long b; };
struct outer { int id; struct inner in; struct outer *next; const char *name; };

struct buffer {
    size_t size;
    size_t used;
    char data[16];
    struct flags fl;
    enum color color;
    union word w;
    int grid[2][3];
};

volatile int sink;
struct buffer global_buf = { 16, 3, "abc", { 1, 5, -3, 'z' }, GREEN, { 0x41424344 }, { {1, 2, 3}, {4, 5, 6} } };
static int counter = 7;
const char *greeting = "hello";

static inline int clamp(int v, int lo, int hi)
{
    int r = v;
    if (r < lo)
        r = lo;
    if (r > hi)
        r = hi;
    return r;
}

static inline unsigned scale(unsigned x, unsigned k)
{
    unsigned t = x * k;
    return t + (unsigned)clamp((int)t, 0, 100);
}

__attribute__((noinline)) int fact(int n)
{
    if (n <= 1)
        return 1;
    return n * fact(n - 1);
}

__attribute__((noinline)) size_t parse_line(struct buffer *buf, const char *line, int len)
{
    size_t total = 0;
    int i;
    for (i = 0; i < len; i++) {
        char c = line[i];
        if (c == ' ')
            continue;
        if (buf->used < sizeof(buf->data) - 1)
            buf->data[buf->used++] = c;
        total += (unsigned char)c;
    }
    buf->data[buf->used] = 0;
    sink = clamp(len, 1, 10);
    return total + buf->size;
}

__attribute__((noinline)) long many_locals(int a, long b, short c, char d, unsigned long e, int *p)
{
    int l1 = a + 1;
    long l2 = b * 2;
    short l3 = (short)(c - 1);
    char l4 = (char)(d + 1);
    unsigned long l5 = e ^ 0xff;
    long long l6 = (long long)l1 * l2;
    u32 l7 = (u32)l5;
    s64 l8 = l6 - l3;
    double l9 = (double)l4 / 2.0;
    int l10 = *p;
    {
        int inner_block = l1 + l10;
        sink = inner_block;
    }
    sink = (int)l9;
    return l1 + l2 + l3 + l4 + (long)l5 + l6 + l7 + l8 + l10;
}

__attribute__((noinline)) int use_inline(int x, unsigned y)
{
    int a = clamp(x, -5, 5);
    unsigned b = scale(y, 3);
    struct outer o = { x, { (short)y, (long)x * 2 }, NULL, "outer" };
    struct outer *po = &o;
    sink = po->in.a;
    return a + (int)b + (int)o.in.b;
}

__attribute__((noinline)) int walk(struct outer *o, union word w, enum color col, struct flags f)
{
    int depth = 0;
    while (o) {
        depth += o->id;
        o = o->next;
    }
    return depth + (int)w.bytes[0] + (int)col + (int)f.mode + f.delta;
}

__attribute__((noinline)) int deep3(int v) { sink = v; return fact(v) + 1; }
__attribute__((noinline)) int deep2(int v) { int r = deep3(v + 1); sink = r; return r + 1; }
__attribute__((noinline)) int deep1(int v) { int r = deep2(v + 1); sink = r; return r + 1; }

int main(int argc, char **argv)
{
    struct buffer buf = { 16, 0, "", { 0, 3, -2, 'q' }, BLUE, { 7 }, { {0} } };
    const char *text = argc > 1 ? argv[1] : "a b c d";
    struct inner in2 = { 3, 30 };
    struct outer o2 = { 2, { 2, 20 }, NULL, "o2" };
    struct outer o1 = { 1, { 1, 10 }, &in2 == NULL ? NULL : &o2, "o1" };
    int n = 4;
    long r;
    r = (long)parse_line(&buf, text, (int)strlen(text));
    r += fact(n);
    r += many_locals(argc, 100000L, 7, 'x', 0xabcdUL, &n);
    r += use_inline(argc + 10, 42u);
    r += walk(&o1, global_buf.w, buf.color, buf.fl);
    r += deep1(2);
    r += counter;
    printf("%s %ld %s\n", greeting, r, buf.data);
    return 0;
}
