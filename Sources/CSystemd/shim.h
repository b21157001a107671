#ifndef BROWSER_LOGIN_CSYSTEMD_SHIM_H
#define BROWSER_LOGIN_CSYSTEMD_SHIM_H
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#endif
