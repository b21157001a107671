#ifndef BROWSER_LOGIN_CLINUX_SHIM_H
#define BROWSER_LOGIN_CLINUX_SHIM_H
/* memfd_create(2), which the Glibc module leaves out (glibc declares it only
   with _GNU_SOURCE), and its flags. Part of libc and the kernel's headers:
   nothing to link, nothing to install. Used by SystemSupport's journal writer.
   (The file seals of fcntl(2) are in Swift there: <linux/fcntl.h> would
   clash with glibc's struct flock.) */
#include <linux/memfd.h>
int memfd_create(const char *name, unsigned int flags);
#endif
