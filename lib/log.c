/* log.c - log lines for the hub and its store (see log_int.h). */
#include <stdarg.h>
#include <stdio.h>

#include "log_int.h"

void
wsync_logf(wsync_log_fn log, void *arg, const char *fmt, ...)
{
	char line[2048];
	va_list ap;

	if (log == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	log(arg, line);
}

const char *
wsync_log_quote(const char *s, char *buf, size_t size)
{
	size_t n = 0;

	for (; *s != '\0' && n + 5 < size; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			buf[n++] = '\\';
			buf[n++] = (char)c;
		} else if (c < ' ' || c >= 0x7f)
			n += (size_t)snprintf(buf + n, size - n, "\\x%02x", c);
		else
			buf[n++] = (char)c;
	}
	buf[n] = '\0';
	return buf;
}
