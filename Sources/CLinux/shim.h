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
/* epoll(7) for BrokerRPC's own event thread. struct epoll_event is packed on
   x86_64, so Swift sees it only through these two: an event as its mask and
   the 64-bit datum the registration put in it. */
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
static const uint32_t bl_epoll_in = EPOLLIN;
static const uint32_t bl_epoll_out = EPOLLOUT;
static const uint32_t bl_epoll_err = EPOLLERR;
static const uint32_t bl_epoll_hup = EPOLLHUP;
static const uint32_t bl_epoll_oneshot = EPOLLONESHOT;
static inline int bl_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t datum) {
    struct epoll_event event;
    event.events = events;
    event.data.u64 = datum;
    return epoll_ctl(epfd, op, fd, &event);
}
/* Waits for at most 64 events; writes each one's mask and datum to the arrays. */
static inline int bl_epoll_wait(int epfd, uint32_t *masks, uint64_t *data, int timeout) {
    struct epoll_event events[64];
    int count = epoll_wait(epfd, events, 64, timeout);
    for (int i = 0; i < count; i++) {
        masks[i] = events[i].events;
        data[i] = events[i].data.u64;
    }
    return count;
}
/* timerfd(2), which the Glibc module leaves out: SystemSupport's WallClockAlarm
   sleeps until a wall-clock deadline on a CLOCK_REALTIME timer that also wakes
   when the clock is set (TFD_TIMER_CANCEL_ON_SET). */
#include <sys/timerfd.h>
static const int bl_tfd_cloexec = TFD_CLOEXEC;
static const int bl_tfd_nonblock = TFD_NONBLOCK;
static const int bl_tfd_timer_abstime = TFD_TIMER_ABSTIME;
static const int bl_tfd_timer_cancel_on_set = TFD_TIMER_CANCEL_ON_SET;
#endif
