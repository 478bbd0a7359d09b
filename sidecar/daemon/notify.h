/*
 * notify.h — memdecayd under a service manager (docs/operations.md, "Running
 * under systemd"): the sd_notify datagram protocol (READY=1, WATCHDOG=1,
 * RELOADING=1, STOPPING=1) and socket activation (LISTEN_FDS).  Both are
 * written against systemd's documented environment contract, so the daemon
 * needs no library and does nothing when the variables are absent.
 */
#ifndef MD_NOTIFY_H
#define MD_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

/* Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID, then removes them
 * from the environment so that no child inherits them.  Returns 1 if a
 * notification socket is configured, 0 if not, -1 (err filled) if it is
 * malformed. */
int md__notify_init(char *err, size_t errlen);
/* Sends one state string ("READY=1\nSTATUS=..."); no-op without a socket.
 * Returns 0, or -errno. */
int md__notify_send(const char *state);
/* RELOADING=1 with MONOTONIC_USEC (what systemd wants before a reload's
 * READY=1). */
void md__notify_reload_begin(void);
/* Interval at which WATCHDOG=1 is due (half of WATCHDOG_USEC), in ns; 0 when
 * the manager asked for no watchdog. */
uint64_t md__notify_watchdog_interval_ns(void);
/* Called from the event loop (every tick): sends WATCHDOG=1 when due. */
void md__notify_watchdog(uint64_t now_ns);
/* WATCHDOG=1 datagrams sent so far (exposed for logs and tests). */
uint64_t md__notify_watchdog_sent(void);

/* Socket activation: if LISTEN_PID is this process and LISTEN_FDS >= 1,
 * returns the first passed fd (3) after checking that it is a listening
 * AF_UNIX stream socket, made non-blocking and close-on-exec, and clears
 * the LISTEN_* variables; the fd's bound path is written to path.  Returns
 * -1 when nothing was passed, -2 (err filled) when what was passed is
 * unusable. */
int md__listen_fd_take(char *path, size_t pathlen, char *err, size_t errlen);

#endif
