/*
 * fake_libcuda.c: a stand-in for the NVIDIA driver library (libcuda.so.1), for tests only.
 *
 * Where no GPU and no NVIDIA driver can run (CI, laptops), this library lets the REAL
 * cuda-python bindings (cuda.bindings.driver) load and call a driver, so the argument
 * marshalling and result unpacking of our engine and fingerprint code run through them.
 * The bindings find every function through cuGetProcAddress_v2 (name + CUDA version of the
 * ABI they want); this file answers with functions of exactly that ABI (the _v2 variants
 * where the version says so) and "not found" for everything else.
 *
 * Modelled: devices (FAKECUDA_DEVICES, FAKECUDA_MEMORY bytes each, FAKECUDA_NAME,
 * FAKECUDA_DRIVER_VERSION, read once at first use); device memory as host memory tracked per
 * device, with a capacity; one primary context per device (retain/release refcount, destroyed
 * with its memory, streams and events at refcount 0); a per-thread context stack; calls that
 * need a context fail with CUDA_ERROR_INVALID_CONTEXT without one; pinned host memory, and
 * async copies that refuse host memory which is not pinned; streams and events as real handles
 * of one context, checked on every use.
 *
 * NOT modelled: real DMA or any asynchrony (every copy runs at once, so stream/event ordering
 * bugs are invisible here: tests/fixtures_gpu.py SimulatedDriver covers those), kernels,
 * modules, the runtime's private export tables (cuGetExportTable: CUDA_ERROR_NOT_SUPPORTED).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct { char bytes[16]; } CUuuid;

enum {
    SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, NO_DEVICE = 100,
    INVALID_DEVICE = 101, INVALID_CONTEXT = 201, INVALID_HANDLE = 400, NOT_FOUND = 500,
    NOT_SUPPORTED = 801,
};
enum { ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76, POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9 };
enum { PROC_SUCCESS = 0, PROC_SYMBOL_NOT_FOUND = 1, PROC_VERSION_NOT_SUFFICIENT = 2 };
#define MAX_DEVICES 16
#define STACK_DEPTH 64

typedef struct Ctx { int device, refs; } Ctx;
typedef struct Handle { Ctx *ctx; struct Handle *next; } Handle; /* a stream or an event */
typedef struct { uintptr_t base; size_t size; int device; } Block; /* device (>=0) or pinned (-1) */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int initialised, ndevices = 1, driver_version = 13040;
static size_t capacity = 1ull << 30, used[MAX_DEVICES];
static const char *name_override;
static Ctx primary[MAX_DEVICES];
static Handle *streams, *events;
static Block *blocks;
static size_t nblocks;
static __thread Ctx *stack[STACK_DEPTH];
static __thread int depth;

static void configure(void) {
    const char *s;
    if ((s = getenv("FAKECUDA_DEVICES"))) ndevices = atoi(s);
    if (ndevices < 0 || ndevices > MAX_DEVICES) ndevices = MAX_DEVICES;
    if ((s = getenv("FAKECUDA_MEMORY"))) capacity = strtoull(s, NULL, 10);
    if ((s = getenv("FAKECUDA_DRIVER_VERSION"))) driver_version = atoi(s);
    name_override = getenv("FAKECUDA_NAME");
    for (int i = 0; i < MAX_DEVICES; i++) primary[i].device = i;
}

static Ctx *current(void) { return depth ? stack[depth - 1] : NULL; }
static int valid_ctx(Ctx *c) { return c >= primary && c < primary + ndevices && c->refs > 0; }

/* The block holding [p, p + n), pinned (device -1) or on any device (device -2); NULL if none. */
static Block *find_block(uintptr_t p, size_t n, int device) {
    for (size_t i = 0; i < nblocks; i++) {
        Block *b = &blocks[i];
        if ((device == -1) != (b->device == -1)) continue;
        if (p >= b->base && p - b->base < b->size && n <= b->size - (p - b->base)) return b;
    }
    return NULL;
}

static CUresult add_block(size_t size, int device, uintptr_t *out) {
    void *mem = aligned_alloc(256, (size + 255) / 256 * 256);
    Block *grown = realloc(blocks, (nblocks + 1) * sizeof *blocks);
    if (!mem || !grown) { free(mem); if (grown) blocks = grown; return OUT_OF_MEMORY; }
    blocks = grown;
    blocks[nblocks++] = (Block){(uintptr_t)mem, size, device};
    *out = (uintptr_t)mem;
    return SUCCESS;
}

static CUresult free_block(uintptr_t p, int pinned) {
    for (size_t i = 0; i < nblocks; i++) {
        if (blocks[i].base != p || (blocks[i].device == -1) != pinned) continue;
        if (!pinned) used[blocks[i].device] -= blocks[i].size;
        free((void *)p);
        blocks[i] = blocks[--nblocks];
        return SUCCESS;
    }
    return INVALID_VALUE;
}

static Handle *find_handle(Handle *list, void *h) {
    for (Handle *x = list; x; x = x->next) if (x == h) return x;
    return NULL;
}

static CUresult create_handle(Handle **list, void **out) {
    Ctx *c = current();
    if (!c) return INVALID_CONTEXT;
    Handle *h = malloc(sizeof *h);
    if (!h) return OUT_OF_MEMORY;
    *h = (Handle){c, *list};
    *list = h;
    *out = h;
    return SUCCESS;
}

static CUresult destroy_handle(Handle **list, void *h) {
    for (Handle **x = list; *x; x = &(*x)->next) {
        if (*x != h) continue;
        *x = ((Handle *)h)->next;
        free(h);
        return SUCCESS;
    }
    return INVALID_HANDLE;
}

/* What the real driver does when a context is destroyed: its memory, streams and events go. */
static void destroy_context(Ctx *c) {
    for (size_t i = nblocks; i-- > 0;)
        if (blocks[i].device == c->device) free_block(blocks[i].base, 0);
    Handle **lists[] = {&streams, &events};
    for (int l = 0; l < 2; l++)
        for (Handle **x = lists[l]; *x;) {
            if ((*x)->ctx == c) { Handle *dead = *x; *x = dead->next; free(dead); }
            else x = &(*x)->next;
        }
}

/* A stream handle usable in the current context: NULL and the legacy/per-thread default
 * streams (1, 2) mean the current context's default stream. */
static CUresult check_stream(void *s) {
    Ctx *c = current();
    if (!c) return INVALID_CONTEXT;
    if ((uintptr_t)s <= 2) return SUCCESS;
    Handle *h = find_handle(streams, s);
    if (!h) return INVALID_HANDLE;
    return h->ctx == c ? SUCCESS : INVALID_CONTEXT;
}

#define LOCKED(expr) do { pthread_mutex_lock(&lock); CUresult r_ = (expr); \
    pthread_mutex_unlock(&lock); return r_; } while (0)
#define NEED_INIT() do { if (!initialised) return NOT_INITIALIZED; } while (0)
#define NEED_DEVICE(d) do { NEED_INIT(); if ((d) < 0 || (d) >= ndevices) return INVALID_DEVICE; \
    } while (0)

/* ---- initialisation, versions, errors ------------------------------------------------ */
CUresult cuInit(unsigned int flags) {
    pthread_once(&once, configure);
    if (flags) return INVALID_VALUE;
    if (ndevices == 0) return NO_DEVICE;
    initialised = 1;
    return SUCCESS;
}

CUresult cuDriverGetVersion(int *v) {
    pthread_once(&once, configure);
    if (!v) return INVALID_VALUE;
    *v = driver_version;
    return SUCCESS;
}

CUresult cuDeviceGetCount(int *n) { NEED_INIT(); *n = ndevices; return SUCCESS; }
CUresult cuGetExportTable(const void **table, const CUuuid *id) {
    (void)table; (void)id;
    return NOT_SUPPORTED;
}

static const struct { CUresult code; const char *name, *text; } errors[] = {
    {SUCCESS, "CUDA_SUCCESS", "no error"},
    {INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

static CUresult error_text(CUresult e, const char **out, int name) {
    for (size_t i = 0; i < sizeof errors / sizeof *errors; i++)
        if (errors[i].code == e) { *out = name ? errors[i].name : errors[i].text; return SUCCESS; }
    *out = NULL;
    return INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult e, const char **s) { return error_text(e, s, 0); }
CUresult cuGetErrorName(CUresult e, const char **s) { return error_text(e, s, 1); }

/* ---- devices ----------------------------------------------------------------------- */
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    NEED_DEVICE(ordinal);
    *d = ordinal;
    return SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    NEED_DEVICE(d);
    if (!name || len <= 0) return INVALID_VALUE;
    char buf[256];
    if (name_override) snprintf(buf, sizeof buf, "%s", name_override);
    else snprintf(buf, sizeof buf, "Fake GPU %d", d);
    strncpy(name, buf, (size_t)len - 1);
    name[len - 1] = 0;
    return SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) {
    NEED_DEVICE(d);
    for (int i = 0; i < 16; i++) u->bytes[i] = (char)(0xf0 ^ (16 * d + i));
    return SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    NEED_DEVICE(d);
    *bytes = capacity;
    return SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice d) {
    NEED_DEVICE(d);
    if (attr == ATTR_CC_MAJOR) *value = 9;
    else if (attr == ATTR_CC_MINOR) *value = 0;
    else return INVALID_VALUE;
    return SUCCESS;
}

/* ---- contexts ---------------------------------------------------------------------- */
static CUresult ctx_retain(Ctx **out, CUdevice d) {
    primary[d].refs++;
    *out = &primary[d];
    return SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(Ctx **out, CUdevice d) {
    NEED_DEVICE(d); LOCKED(ctx_retain(out, d));
}

static CUresult ctx_release(CUdevice d) {
    if (primary[d].refs == 0) return INVALID_CONTEXT;
    if (--primary[d].refs == 0) destroy_context(&primary[d]);
    return SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { NEED_DEVICE(d); LOCKED(ctx_release(d)); }

CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) {
    NEED_DEVICE(d);
    *flags = 0;
    *active = primary[d].refs > 0;
    return SUCCESS;
}

CUresult cuCtxPushCurrent_v2(Ctx *c) {
    NEED_INIT();
    if (!valid_ctx(c)) return INVALID_CONTEXT;
    if (depth == STACK_DEPTH) return OUT_OF_MEMORY;
    stack[depth++] = c;
    return SUCCESS;
}

CUresult cuCtxPopCurrent_v2(Ctx **out) {
    NEED_INIT();
    if (!depth) return INVALID_CONTEXT;
    Ctx *c = stack[--depth];
    if (out) *out = c;
    return SUCCESS;
}

CUresult cuCtxSetCurrent(Ctx *c) {
    NEED_INIT();
    if (!c) { if (depth) depth--; return SUCCESS; }
    if (!valid_ctx(c)) return INVALID_CONTEXT;
    if (depth) stack[depth - 1] = c; else stack[depth++] = c;
    return SUCCESS;
}

CUresult cuCtxGetCurrent(Ctx **out) { NEED_INIT(); *out = current(); return SUCCESS; }

CUresult cuCtxGetDevice_v2(CUdevice *d, Ctx *c) {
    NEED_INIT();
    if (!c) c = current();
    if (!c || !valid_ctx(c)) return INVALID_CONTEXT;
    *d = c->device;
    return SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice *d) { return cuCtxGetDevice_v2(d, NULL); }

/* Every copy already ran: synchronizing only checks the context. */
CUresult cuCtxSynchronize_v2(Ctx *c) {
    NEED_INIT();
    if (!c) c = current();
    return c && valid_ctx(c) ? SUCCESS : INVALID_CONTEXT;
}
CUresult cuCtxSynchronize(void) { return cuCtxSynchronize_v2(NULL); }

/* ---- memory ------------------------------------------------------------------------ */
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    NEED_INIT();
    Ctx *c = current();
    if (!c) return INVALID_CONTEXT;
    *free_bytes = capacity - used[c->device];
    *total = capacity;
    return SUCCESS;
}

static CUresult mem_alloc(CUdeviceptr *p, size_t n) {
    Ctx *c = current();
    if (!c) return INVALID_CONTEXT;
    if (n == 0) return INVALID_VALUE;
    if (n > capacity - used[c->device]) return OUT_OF_MEMORY;
    uintptr_t base;
    CUresult r = add_block(n, c->device, &base);
    if (r == SUCCESS) used[c->device] += n, *p = base;
    return r;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { NEED_INIT(); LOCKED(mem_alloc(p, n)); }
CUresult cuMemFree_v2(CUdeviceptr p) { NEED_INIT(); LOCKED(free_block(p, 0)); }

static CUresult host_alloc(void **p, size_t n) {
    if (!current()) return INVALID_CONTEXT;
    if (n == 0) return INVALID_VALUE;
    uintptr_t base;
    CUresult r = add_block(n, -1, &base);
    if (r == SUCCESS) *p = (void *)base;
    return r;
}
CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
    NEED_INIT();
    if (flags & ~0xfu) return INVALID_VALUE;
    LOCKED(host_alloc(p, n));
}
CUresult cuMemFreeHost(void *p) { NEED_INIT(); LOCKED(free_block((uintptr_t)p, 1)); }

/* One copy between host memory and device memory; ``stream`` NULL: a synchronous copy
 * (any host memory); else an async one (host memory must be pinned, as the DMA engine needs). */
static CUresult copy(void *dst, const void *src, size_t n, CUdeviceptr dev, const void *host,
                     void *stream, int async) {
    if (!current()) return INVALID_CONTEXT;
    CUresult r = async ? check_stream(stream) : SUCCESS;
    if (r != SUCCESS) return r;
    if (!find_block(dev, n, -2)) return INVALID_VALUE;
    if (async && !find_block((uintptr_t)host, n, -1)) return INVALID_VALUE;
    memmove(dst, src, n);
    return SUCCESS;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) {
    NEED_INIT(); LOCKED(copy((void *)d, h, n, d, h, NULL, 0));
}
CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) {
    NEED_INIT(); LOCKED(copy(h, (void *)d, n, d, h, NULL, 0));
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *s) {
    NEED_INIT(); LOCKED(copy((void *)d, h, n, d, h, s, 1));
}
CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, void *s) {
    NEED_INIT(); LOCKED(copy(h, (void *)d, n, d, h, s, 1));
}

static CUresult memset8(CUdeviceptr d, unsigned char v, size_t n) {
    if (!current()) return INVALID_CONTEXT;
    if (!find_block(d, n, -2)) return INVALID_VALUE;
    memset((void *)d, v, n);
    return SUCCESS;
}
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
    NEED_INIT(); LOCKED(memset8(d, v, n));
}

static CUresult pointer_ordinal(void *data, CUdeviceptr p) {
    Block *b = find_block(p, 1, -2);
    if (!b) return INVALID_VALUE;
    *(int *)data = b->device;
    return SUCCESS;
}
CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
    NEED_INIT();
    if (attr != POINTER_ATTRIBUTE_DEVICE_ORDINAL) return NOT_SUPPORTED;
    LOCKED(pointer_ordinal(data, p));
}

/* ---- streams and events -------------------------------------------------------------- */
CUresult cuStreamCreate(void **s, unsigned int flags) {
    NEED_INIT();
    if (flags & ~1u) return INVALID_VALUE;
    LOCKED(create_handle(&streams, s));
}
CUresult cuStreamSynchronize(void *s) { NEED_INIT(); LOCKED(check_stream(s)); }
CUresult cuStreamDestroy_v2(void *s) { NEED_INIT(); LOCKED(destroy_handle(&streams, s)); }

CUresult cuEventCreate(void **e, unsigned int flags) {
    NEED_INIT();
    if (flags & ~0xfu) return INVALID_VALUE;
    LOCKED(create_handle(&events, e));
}

static CUresult event_record(void *e, void *s) {
    Handle *h = find_handle(events, e);
    if (!h) return INVALID_HANDLE;
    CUresult r = check_stream(s);
    if (r != SUCCESS) return r;
    return h->ctx == current() ? SUCCESS : INVALID_HANDLE;
}
CUresult cuEventRecord(void *e, void *s) { NEED_INIT(); LOCKED(event_record(e, s)); }
CUresult cuEventSynchronize(void *e) {
    NEED_INIT(); LOCKED(find_handle(events, e) ? SUCCESS : INVALID_HANDLE);
}
CUresult cuEventDestroy_v2(void *e) { NEED_INIT(); LOCKED(destroy_handle(&events, e)); }

/* ---- cuGetProcAddress: the bindings' only way in --------------------------------------- */
CUresult cuGetProcAddress_v2(const char *, void **, int, uint64_t, int *);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

/* name, first CUDA version with this ABI, function: a request gets the newest ABI <= its
 * version (cuCtxSynchronize at 2000 and at 13000 are two functions, as in the real driver). */
static const struct { const char *name; int since; void *fn; } procs[] = {
#define P(name, since, fn) {name, since, (void *)fn}
    P("cuInit", 2000, cuInit), P("cuDriverGetVersion", 2020, cuDriverGetVersion),
    P("cuDeviceGetCount", 2000, cuDeviceGetCount), P("cuGetExportTable", 3000, cuGetExportTable),
    P("cuGetProcAddress", 11030, cuGetProcAddress),
    P("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    P("cuGetErrorString", 6000, cuGetErrorString), P("cuGetErrorName", 6000, cuGetErrorName),
    P("cuDeviceGet", 2000, cuDeviceGet), P("cuDeviceGetName", 2000, cuDeviceGetName),
    P("cuDeviceGetUuid", 9020, cuDeviceGetUuid_v2), P("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    P("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    P("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    P("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    P("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    P("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    P("cuCtxSetCurrent", 4000, cuCtxSetCurrent), P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    P("cuCtxGetDevice", 2000, cuCtxGetDevice), P("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    P("cuCtxSynchronize", 2000, cuCtxSynchronize),
    P("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    P("cuMemGetInfo", 3020, cuMemGetInfo_v2), P("cuMemAlloc", 3020, cuMemAlloc_v2),
    P("cuMemFree", 3020, cuMemFree_v2), P("cuMemFreeHost", 2000, cuMemFreeHost),
    P("cuMemHostAlloc", 2020, cuMemHostAlloc), P("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    P("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2), P("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
    P("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2), P("cuMemsetD8", 3020, cuMemsetD8_v2),
    P("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    P("cuStreamCreate", 2000, cuStreamCreate), P("cuStreamSynchronize", 2000, cuStreamSynchronize),
    P("cuStreamDestroy", 4000, cuStreamDestroy_v2), P("cuEventCreate", 2000, cuEventCreate),
    P("cuEventRecord", 2000, cuEventRecord), P("cuEventSynchronize", 2000, cuEventSynchronize),
    P("cuEventDestroy", 4000, cuEventDestroy_v2),
#undef P
};

/* As documented: a version above the driver's is CUDA_ERROR_INVALID_VALUE; an unknown symbol
 * (or one without an ABI as old as asked) is CUDA_SUCCESS with *pfn NULL and a status saying so. */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags,
                             int *status) {
    (void)flags; /* per-thread default stream variants: same functions, streams run at once */
    pthread_once(&once, configure);
    if (!symbol || !pfn) return INVALID_VALUE;
    *pfn = NULL;
    if (version > driver_version) {
        if (status) *status = PROC_VERSION_NOT_SUFFICIENT;
        return INVALID_VALUE;
    }
    int best = -1;
    for (int i = 0; i < (int)(sizeof procs / sizeof *procs); i++)
        if (!strcmp(procs[i].name, symbol) && procs[i].since <= version
            && (best < 0 || procs[i].since > procs[best].since))
            best = i;
    if (best >= 0) *pfn = procs[best].fn;
    if (status) *status = best >= 0 ? PROC_SUCCESS : PROC_SYMBOL_NOT_FOUND;
    return SUCCESS;
}
