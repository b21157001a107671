#ifndef BROWSER_LOGIN_CQRENCODE_SHIM_H
#define BROWSER_LOGIN_CQRENCODE_SHIM_H
#include <qrencode.h>
#endif
