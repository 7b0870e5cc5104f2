// A fake CUDA driver for testing the purego binding without a GPU: device
// memory is host memory, modules are PTX texts kept as given, and launches
// are recorded for the test to inspect (fake_last_launch). Built by
// fake_test.go with the system C compiler into a temporary directory.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_IMAGE = 200, INVALID_CONTEXT = 201, NOT_FOUND = 500 };

static int inited, current;
static int retained, inits;

CUresult cuInit(unsigned flags) { inits++; inited = flags == 0; return inited ? OK : INVALID_VALUE; }
CUresult cuDriverGetVersion(int *v) { *v = 12080; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = inited ? 1 : 0; return OK; }
CUresult cuDeviceGet(int *dev, int ordinal) { if (ordinal != 0) return INVALID_VALUE; *dev = 7; return OK; }
CUresult cuDeviceGetName(char *name, int n, int dev) {
	if (dev != 7 || n < 16) return INVALID_VALUE;
	strcpy(name, "Fake GPU 9000");
	return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
	if (dev != 7) return INVALID_VALUE;
	switch (attr) {
	case 13: *v = 1980000; return OK;  // clock, kHz
	case 16: *v = 132; return OK;      // SMs
	case 75: *v = 9; return OK;        // compute capability
	case 76: *v = 0; return OK;
	case 97: *v = 232448; return OK;   // opt-in shared memory
	}
	return INVALID_VALUE;
}
CUresult cuDeviceTotalMem_v2(uint64_t *b, int dev) { *b = 80ull << 30; return dev == 7 ? OK : INVALID_VALUE; }
CUresult cuDevicePrimaryCtxRetain(uintptr_t *ctx, int dev) { *ctx = 0xc0ffee; retained++; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { retained--; return OK; }
CUresult cuCtxSetCurrent(uintptr_t ctx) { current = ctx == 0xc0ffee; return OK; }
CUresult cuCtxSynchronize(void) { return current ? OK : INVALID_CONTEXT; }

// Streams: handles counted so that the test sees creates and destroys pair
// up; cuStreamCreate is left out of the library built with
// -DFAKE_MISSING_SYMBOL (a driver that is too old).
static int streams;
#ifndef FAKE_MISSING_SYMBOL
CUresult cuStreamCreate(uintptr_t *s, unsigned flags) {
	if (!current || flags != 1) return INVALID_VALUE;
	*s = 0x5000 + ++streams;
	return OK;
}
#endif
CUresult cuStreamDestroy_v2(uintptr_t s) { if (!current || s == 0) return INVALID_VALUE; streams--; return OK; }
CUresult cuStreamSynchronize(uintptr_t s) { return current ? OK : INVALID_CONTEXT; }

#define NEED_CTX if (!current) return INVALID_CONTEXT

CUresult cuMemAlloc_v2(uint64_t *p, uint64_t n) {
	NEED_CTX;
	if (n > (1ull << 32)) return OUT_OF_MEMORY;
	*p = (uint64_t)(uintptr_t)malloc(n);
	return OK;
}
CUresult cuMemFree_v2(uint64_t p) { NEED_CTX; free((void *)(uintptr_t)p); return OK; }
CUresult cuMemcpyHtoD_v2(uint64_t dst, const void *src, uint64_t n) { NEED_CTX; memcpy((void *)(uintptr_t)dst, src, n); return OK; }
CUresult cuMemcpyDtoH_v2(void *dst, uint64_t src, uint64_t n) { NEED_CTX; memcpy(dst, (void *)(uintptr_t)src, n); return OK; }
CUresult cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, uint64_t n) { NEED_CTX; memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n); return OK; }
CUresult cuMemsetD8_v2(uint64_t dst, unsigned char v, uint64_t n) { NEED_CTX; memset((void *)(uintptr_t)dst, v, n); return OK; }
static uintptr_t lastStream;
CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, uint64_t n, uintptr_t s) { NEED_CTX; lastStream = s; memcpy((void *)(uintptr_t)dst, src, n); return OK; }
CUresult cuMemsetD8Async(uint64_t dst, unsigned char v, uint64_t n, uintptr_t s) { NEED_CTX; lastStream = s; memset((void *)(uintptr_t)dst, v, n); return OK; }

// Modules: the image must be NUL-terminated PTX; "FAIL" in it makes the JIT
// fail with a log written into the caller's error-log buffer (option 5,
// size option 6), as the real driver does.
CUresult cuModuleLoadDataEx(uintptr_t *mod, const void *image, unsigned n, int *opts, void **vals) {
	NEED_CTX;
	const char *text = image;
	if (strstr(text, "FAIL")) {
		char *log = 0;
		size_t size = 0;
		for (unsigned i = 0; i < n; i++) {
			if (opts[i] == 5) log = vals[i];
			if (opts[i] == 6) size = (size_t)(uintptr_t)vals[i];
		}
		if (log && size > 40) strcpy(log, "ptxas fatal   : fake error in line 3");
		return 218; // CUDA_ERROR_INVALID_PTX
	}
	*mod = (uintptr_t)strdup(text);
	return OK;
}
CUresult cuModuleUnload(uintptr_t mod) { NEED_CTX; free((void *)mod); return OK; }
CUresult cuModuleGetFunction(uintptr_t *f, uintptr_t mod, const char *name) {
	NEED_CTX;
	char entry[256] = ".entry ";
	strncat(entry, name, 200);
	if (!strstr((const char *)mod, entry)) return NOT_FOUND;
	*f = (uintptr_t)strdup(name);
	return OK;
}
static int attrSet, attrVal;
CUresult cuFuncSetAttribute(uintptr_t f, int attr, int v) { NEED_CTX; attrSet = attr; attrVal = v; return OK; }
// A kernel's attributes: attribute a of every kernel is 100 + a (168 for
// max threads, 0: distinct from the others).
CUresult cuFuncGetAttribute(int *v, int attr, uintptr_t f) {
	NEED_CTX;
	if (f == 0 || attr < 0 || attr > 9) return INVALID_VALUE;
	*v = attr == 0 ? 168 : 100 + attr;
	return OK;
}

// The last launch: grid, block, shared memory and the first 16 argument
// slots (8 bytes each, read through the kernelParams pointers).
static unsigned lastDims[7];
static uint64_t lastArgs[16];
CUresult cuLaunchKernel(uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, uintptr_t stream, void **params, void **extra) {
	NEED_CTX;
	if (extra != 0) return INVALID_VALUE;
	lastStream = stream;
	unsigned d[7] = {gx, gy, gz, bx, by, bz, smem};
	memcpy(lastDims, d, sizeof d);
	for (int i = 0; i < 16; i++) memcpy(&lastArgs[i], params[i], 8);
	return OK;
}

static const char *names[] = {"CUDA_SUCCESS", "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_OUT_OF_MEMORY"};
CUresult cuGetErrorName(CUresult r, const char **s) {
	if (r >= 0 && r <= 2) { *s = names[r]; return OK; }
	if (r == 218) { *s = "CUDA_ERROR_INVALID_PTX"; return OK; }
	return INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
	if (r == 2) { *s = "out of memory"; return OK; }
	if (r == 218) { *s = "a PTX JIT compilation failed"; return OK; }
	return INVALID_VALUE;
}

// Test hooks.
void fake_last_launch(unsigned *dims, uint64_t *args) { memcpy(dims, lastDims, sizeof lastDims); memcpy(args, lastArgs, sizeof lastArgs); }
int fake_attr(int *v) { *v = attrVal; return attrSet; }
int fake_retained(void) { return retained; }
int fake_inits(void) { return inits; }
int fake_streams(void) { return streams; }
uintptr_t fake_last_stream(void) { return lastStream; }
