// libFuzzer's driver, when the program is linked with -sanitize=fuzzer.
// A weak reference: in an ordinary build nothing defines it and it is NULL,
// so the same fuzz program runs its inputs from files instead.
#include <stddef.h>
#include <stdint.h>

typedef int (*bl_fuzz_callback)(const uint8_t *_Nonnull data, size_t size);

extern int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size))
    __attribute__((weak));

static inline int bl_fuzzer_linked(void) { return LLVMFuzzerRunDriver != NULL; }

static inline int bl_fuzzer_run(int *argc, char ***argv, bl_fuzz_callback callback) {
    return LLVMFuzzerRunDriver(argc, argv, (int (*)(const uint8_t *, size_t))callback);
}
