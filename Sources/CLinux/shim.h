#ifndef BROWSER_LOGIN_CLINUX_SHIM_H
#define BROWSER_LOGIN_CLINUX_SHIM_H
/* memfd_create(2), which the Glibc module leaves out (glibc declares it only
   with _GNU_SOURCE), and its flags. Part of libc and the kernel's headers:
   nothing to link, nothing to install. Used by SystemSupport's journal writer.
   (The file seals of fcntl(2) are in Swift there: <linux/fcntl.h> would
   clash with glibc's struct flock.) */
#include <linux/memfd.h>
int memfd_create(const char *name, unsigned int flags);

/* sched_setaffinity(2) and sched_getaffinity(2), also declared by glibc only
   with _GNU_SOURCE; the mask as bytes (cpu_set_t is 128 of them). Used by the
   benchmark to place its client and its servers on CPUs of their own. */
#include <sys/types.h>
int sched_setaffinity(pid_t pid, size_t cpusetsize, const void *mask);
int sched_getaffinity(pid_t pid, size_t cpusetsize, void *mask);
#endif
