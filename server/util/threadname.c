/* threadname: pthread_setname_np with a common prefix and printf formatting. */
#include "threadname.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#define PREFIX       "dedupd-"
#define NAME_MAX_LEN 15 /* the kernel's TASK_COMM_LEN, less its NUL */

void
threadname_set(const char *fmt, ...)
{
    char name[64] = PREFIX;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + sizeof(PREFIX) - 1, sizeof(name) - (sizeof(PREFIX) - 1), fmt, ap);
    va_end(ap);
    name[NAME_MAX_LEN] = '\0'; /* longer names make pthread_setname_np fail with ERANGE */
    (void) pthread_setname_np(pthread_self(), name);
}
