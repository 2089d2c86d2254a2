/* memcpy's calls and bytes by call site, for `scripts/miss-cost.sh` with COPIES=1
 * (LD_PRELOAD into mdproxy). SIGUSR2 starts counting from zero; the next SIGUSR2
 * stops and writes "calls bytes offset object" lines, one per call site (the
 * return address as an offset in its object), to $MEMCPY_CENSUS_OUT. Only calls
 * through the PLT are seen: Rust's moves and copies are, libc's own are not. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SITES 65536
static uintptr_t site[SITES];
static uint64_t calls[SITES], bytes[SITES];
static void *(*real_memcpy)(void *, const void *, size_t);
static volatile int counting;

static void count(uintptr_t at, size_t n) {
    uint64_t h = (at * 0x9E3779B97F4A7C15ull) >> 48;
    for (int i = 0; i < SITES; i++) {
        uint64_t j = (h + i) & (SITES - 1);
        uintptr_t seen = __atomic_load_n(&site[j], __ATOMIC_RELAXED);
        if (seen == 0) {
            uintptr_t empty = 0;
            if (!__atomic_compare_exchange_n(&site[j], &empty, at, 0, __ATOMIC_RELAXED,
                                             __ATOMIC_RELAXED))
                seen = empty;
            else
                seen = at;
        }
        if (seen == at) {
            __atomic_fetch_add(&calls[j], 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(&bytes[j], n, __ATOMIC_RELAXED);
            return;
        }
    }
}

void *memcpy(void *dst, const void *src, size_t n) {
    if (!real_memcpy) {
        char *d = dst;
        const char *s = src;
        for (size_t i = 0; i < n; i++) d[i] = s[i];
        return dst;
    }
    if (counting) count((uintptr_t)__builtin_return_address(0), n);
    return real_memcpy(dst, src, n);
}

static void dump(void) {
    const char *path = getenv("MEMCPY_CENSUS_OUT");
    FILE *f = fopen(path ? path : "memcpy-census.txt", "w");
    if (!f) return;
    for (int j = 0; j < SITES; j++) {
        if (!site[j]) continue;
        Dl_info info;
        if (dladdr((void *)site[j], &info) && info.dli_fname)
            fprintf(f, "%lu %lu 0x%lx %s\n", (unsigned long)calls[j], (unsigned long)bytes[j],
                    (unsigned long)(site[j] - (uintptr_t)info.dli_fbase), info.dli_fname);
    }
    fclose(f);
}

static void toggle(int sig) {
    (void)sig;
    if (counting) {
        counting = 0;
        dump();
    } else {
        memset(site, 0, sizeof site);
        memset(calls, 0, sizeof calls);
        memset(bytes, 0, sizeof bytes);
        counting = 1;
    }
}

__attribute__((constructor)) static void start(void) {
    real_memcpy = dlsym(RTLD_NEXT, "memcpy");
    signal(SIGUSR2, toggle);
}
