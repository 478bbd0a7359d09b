/*
 * notify.c — the service-manager side of memdecayd (notify.h).
 *
 * sd_notify: NOTIFY_SOCKET names an AF_UNIX datagram socket, a path or, with
 * a leading '@', an abstract name.  Each notification is one datagram of
 * newline-separated KEY=VALUE assignments.  The watchdog contract: when
 * WATCHDOG_USEC is set (and WATCHDOG_PID, if set, is our pid) the manager
 * expects WATCHDOG=1 at least every WATCHDOG_USEC; we send it at least every
 * half of that, from the event loop's tick, so a wedged loop is what stops it.
 *
 * Socket activation: the manager passes LISTEN_FDS descriptors from fd 3 on,
 * with LISTEN_PID set to the pid they are meant for (a forked child must not
 * take its parent's sockets).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "notify.h"
#include "memdecay_clock.h"

#define MD__LISTEN_FDS_START 3

static struct {
	int fd;
	struct sockaddr_un sa;
	socklen_t salen;
	uint64_t wd_interval_ns, wd_last_ns, wd_sent;
} nt = { .fd = -1 };

/* Parses an unsigned decimal that fills the whole string. */
static int parse_u64(const char *s, uint64_t *out)
{
	if (!s || !*s)
		return -1;
	uint64_t v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return 0;
}

int md__notify_init(char *err, size_t errlen)
{
	const char *path = getenv("NOTIFY_SOCKET");
	const char *usec = getenv("WATCHDOG_USEC");
	const char *wpid = getenv("WATCHDOG_PID");
	int rc = 0;
	if (usec) {
		uint64_t us = 0, pid = 0;
		int ours = !wpid || (parse_u64(wpid, &pid) == 0 && pid == (uint64_t)getpid());
		if (parse_u64(usec, &us) < 0 || !us) {
			snprintf(err, errlen, "WATCHDOG_USEC='%s': want a positive integer", usec);
			rc = -1;
		} else if (ours) {
			nt.wd_interval_ns = us * 1000ull / 2;
		}
	}
	if (path && rc == 0) {
		size_t n = strlen(path);
		memset(&nt.sa, 0, sizeof(nt.sa));
		nt.sa.sun_family = AF_UNIX;
		if ((path[0] != '/' && path[0] != '@') || n < 2 || n >= sizeof(nt.sa.sun_path)) {
			snprintf(err, errlen, "NOTIFY_SOCKET='%s': want an absolute path or @name "
				 "shorter than %zu bytes", path, sizeof(nt.sa.sun_path));
			rc = -1;
		} else {
			memcpy(nt.sa.sun_path, path, n);
			if (path[0] == '@')
				nt.sa.sun_path[0] = 0; /* abstract namespace */
			nt.salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
					       (path[0] == '@' ? 0 : 1));
			nt.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
			if (nt.fd < 0) {
				snprintf(err, errlen, "notify socket: %s", strerror(errno));
				rc = -1;
			} else {
				rc = 1;
			}
		}
	}
	/* children (none today, but engines spawned by wrappers) must not talk
	 * to our manager or feed its watchdog */
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	if (rc < 0 && nt.fd >= 0) {
		close(nt.fd);
		nt.fd = -1;
	}
	if (nt.fd < 0)
		nt.wd_interval_ns = 0; /* nobody to tell */
	return rc;
}

int md__notify_send(const char *state)
{
	if (nt.fd < 0)
		return 0;
	ssize_t n = sendto(nt.fd, state, strlen(state), MSG_NOSIGNAL | MSG_DONTWAIT,
			   (const struct sockaddr *)&nt.sa, nt.salen);
	return n < 0 ? -errno : 0;
}

void md__notify_reload_begin(void)
{
	char msg[96];
	snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
		 (unsigned long long)(md_now_ns() / 1000u));
	md__notify_send(msg);
}

uint64_t md__notify_watchdog_interval_ns(void)
{
	return nt.wd_interval_ns;
}

void md__notify_watchdog(uint64_t now_ns)
{
	/* ticks are not aligned with the interval: allow a quarter early, so a
	 * ping that is due between two ticks goes out at the earlier one */
	if (!nt.wd_interval_ns ||
	    (nt.wd_last_ns && now_ns - nt.wd_last_ns < nt.wd_interval_ns - nt.wd_interval_ns / 4))
		return;
	if (md__notify_send("WATCHDOG=1") == 0)
		nt.wd_sent++;
	nt.wd_last_ns = now_ns;
}

uint64_t md__notify_watchdog_sent(void)
{
	return nt.wd_sent;
}

int md__listen_fd_take(char *path, size_t pathlen, char *err, size_t errlen)
{
	const char *pid_s = getenv("LISTEN_PID"), *fds_s = getenv("LISTEN_FDS");
	uint64_t pid = 0, nfds = 0;
	if (!pid_s || !fds_s || parse_u64(pid_s, &pid) < 0 || pid != (uint64_t)getpid())
		return -1;
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (parse_u64(fds_s, &nfds) < 0 || nfds < 1) {
		snprintf(err, errlen, "LISTEN_FDS='%s': want at least one socket", fds_s);
		return -2;
	}
	int fd = MD__LISTEN_FDS_START;
	/* only the first socket is ours; the others would leak into nothing */
	for (uint64_t i = 1; i < nfds && i < 1024; i++)
		close(fd + (int)i);
	int type = 0, domain = 0, acc = 0;
	socklen_t l1 = sizeof(type), l2 = sizeof(domain), l3 = sizeof(acc);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l1) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l2) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l3) < 0) {
		snprintf(err, errlen, "passed fd %d is not a socket: %s", fd, strerror(errno));
		return -2;
	}
	if (domain != AF_UNIX || type != SOCK_STREAM || !acc) {
		snprintf(err, errlen, "passed fd %d is not a listening AF_UNIX stream socket "
			 "(ListenStream= a path, Accept=no)", fd);
		return -2;
	}
	struct sockaddr_un sa;
	socklen_t sl = sizeof(sa);
	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) < 0 || sa.sun_path[0] != '/') {
		snprintf(err, errlen, "passed fd %d is not bound to a socket path", fd);
		return -2;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
		snprintf(err, errlen, "passed fd %d: fcntl: %s", fd, strerror(errno));
		return -2;
	}
	if (snprintf(path, pathlen, "%.*s", (int)sizeof(sa.sun_path), sa.sun_path) >= (int)pathlen) {
		snprintf(err, errlen, "passed socket's path is too long");
		return -2;
	}
	return fd;
}
