/* hub_int.h - the hub's request handler, apart from its poll loop, so that it can be fuzzed. */
#ifndef WSYNC_HUB_INT_H
#define WSYNC_HUB_INT_H

#include "net_int.h"
#include "wsync.h"

/*
 * Serves one message as received on the ROUTER: [identity][empty][request]
 * or [identity][empty][request][data]. Replies go out on the ROUTER; what
 * does not decode is logged and dropped. p stays the caller's.
 */
void wsync_hub_serve(wsync_hub_t *hub, wsync_parts_t *p);

#endif
