/* log_int.h - key=value log lines, handed to the program's callback. */
#ifndef WSYNC_LOG_INT_H
#define WSYNC_LOG_INT_H

#include <stddef.h>

/* Receives one log line (no newline), key=value style. */
typedef void (*wsync_log_fn)(void *arg, const char *line);
/* Formats one log line and gives it to log (nothing when log is NULL). */
void wsync_logf(wsync_log_fn log, void *arg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*
 * s made fit for a quoted log value (key="..."): '"' and '\' escaped, control
 * and non-ASCII bytes as \xNN, cut to fit size. Returns buf.
 */
const char *wsync_log_quote(const char *s, char *buf, size_t size);

#endif
