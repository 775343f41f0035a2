#include <string.h>
#include <xcb/xcb.h>
#include <xcb/xproto.h>

/* Overwrites 64 KiB of this thread's stack below the caller's frame: libc and libxcb leave
 * pieces of the bytes they sent in their stack frames (copies through vector registers
 * spilled on the way to writev), and a wiped value must leave no such trace behind. */
__attribute__((noinline)) static void vault_clipboard_overwrite_stack(void) {
    unsigned char below[65536];
    explicit_bzero(below, sizeof below);
    __asm__ __volatile__("" : : "r"(below) : "memory");
}
