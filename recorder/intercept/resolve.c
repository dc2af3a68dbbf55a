/* Lazy, thread-safe resolution of the real CUDA-library functions.
 *
 * Order: dlsym(RTLD_NEXT) of the strong alias (NCCL exports weak ncclX
 * aliases of strong pncclX, made for interposition), then of the name; when
 * the library was loaded by an RTLD_LOCAL dlopen (Python importing torch),
 * RTLD_NEXT sees nothing, so fall back to dlopen(soname, RTLD_NOLOAD) and
 * dlsym there. A result equal to our own wrapper is rejected (it would
 * recurse). Lock-free: racing threads resolve the same address. */
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "recorder/intercept/intercept.h"

static icpt_fn sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    icpt_fn f = 0;
    memcpy(&f, &p, sizeof f < sizeof p ? sizeof f : sizeof p);
    return f;
}

static icpt_fn lookup(void *h, const icpt_sym *s) {
    icpt_fn f = 0;
    if (s->strong) f = sym(h, s->strong);
    if (f == s->self) f = 0;
    if (!f) f = sym(h, s->name);
    if (f == s->self) f = 0;
    return f;
}

icpt_fn icpt_resolve(icpt_sym *s) {
    icpt_fn f = atomic_load_explicit(&s->fn, memory_order_acquire);
    if (f) return f;
    f = lookup(RTLD_NEXT, s);
    if (!f && s->lib) {
        void *h = dlopen(s->lib, RTLD_NOLOAD | RTLD_LAZY);
        if (h) {
            f = lookup(h, s);
            dlclose(h); /* NOLOAD took a reference: give it back, the library stays */
        }
    }
    if (f) {
        atomic_store_explicit(&s->fn, f, memory_order_release);
        return f;
    }
    icpt_report_once(&s->reported, "cannot find the real %s (%s not loaded?): the call returns an error", s->name,
                     s->lib ? s->lib : "library");
    return 0;
}
