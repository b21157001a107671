#ifndef BROWSER_LOGIN_CCURL_SHIM_H
#define BROWSER_LOGIN_CCURL_SHIM_H
#include <curl/curl.h>

/// curl_easy_setopt and curl_easy_getinfo are variadic; Swift needs typed wrappers.
static inline CURLcode bl_curl_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode bl_curl_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode bl_curl_setopt_pointer(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode bl_curl_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode bl_curl_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
typedef size_t (*bl_curl_write_callback)(char *ptr, size_t size, size_t nmemb, void *userdata);
static inline CURLcode bl_curl_setopt_writefn(CURL *h, CURLoption o, bl_curl_write_callback v) { return curl_easy_setopt(h, o, v); }
typedef int (*bl_curl_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
static inline CURLcode bl_curl_setopt_xferinfofn(CURL *h, bl_curl_xferinfo_callback v) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, v); }
static inline CURLcode bl_curl_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode bl_curl_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }

/// CURL_GLOBAL_ALL is a macro expression Swift does not import.
static inline CURLcode bl_curl_global_init_all(void) { return curl_global_init(CURL_GLOBAL_ALL); }
#endif
