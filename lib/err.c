/* err.c - filling a wsync_err_t. */
#include <stdarg.h>
#include <stdio.h>

#include "wsync.h"

int
wsync_err_set(wsync_err_t *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return -1;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return -1;
}
