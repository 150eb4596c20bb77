/* The library tests/libprogs/calls.c dlopen()s. */
long lib_mix(long a, long b)
{
    return a * 3 + b;
}
