/*
 * control.c — one operator request on memdecayd's control socket, for
 * engines and adapters that need what the daemon knows before they attach
 * (the vLLM plugin's API server checks a request's policy name against the
 * daemon's table and its labels against the pinned regions).  The framing is
 * docs/operations.md "Control protocol": one line out, "OK <n>\n" and n bytes
 * of body, or "ERR <message>\n", back.  Bounded in time and size: a daemon
 * that stalls or floods costs at most timeout_ms and cap bytes.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_internal.h"
#include "memdecay.h"
#include "memdecay_clock.h"

#define MD__EXPORT __attribute__((visibility("default")))

static int wait_fd(int fd, short ev, uint64_t deadline_ns)
{
	for (;;) {
		uint64_t now = md_now_ns();
		if (now >= deadline_ns)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = fd, .events = ev };
		int ms = (int)((deadline_ns - now + 999999) / 1000000);
		int n = poll(&p, 1, ms);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static int connect_to(const char *socket_path, int *fd_out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int rc = md__resolve_socket_path(socket_path, sa.sun_path, sizeof(sa.sun_path));
	if (rc < 0)
		return rc;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		rc = -errno;
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

static int send_all(int fd, const char *p, size_t len, uint64_t deadline_ns)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		int rc = wait_fd(fd, POLLOUT, deadline_ns);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Reads until the reply is whole: the header line, then its body.  Returns
 * the reply's length in buf (NUL-terminated), or a negative error. */
static int read_reply(int fd, char *buf, size_t cap, size_t *body_at, size_t *body_len,
		      uint64_t deadline_ns)
{
	size_t have = 0;
	*body_at = 0;
	for (;;) {
		char *nl = have ? memchr(buf, '\n', have) : NULL;
		if (nl) {
			*body_at = (size_t)(nl - buf) + 1;
			if (strncmp(buf, "ERR ", 4) == 0) {
				*body_len = 0;
				*nl = 0;
				return 0;
			}
			char *end = NULL;
			if (strncmp(buf, "OK ", 3) != 0)
				return MD_EPROTO;
			unsigned long long n = strtoull(buf + 3, &end, 10);
			if (end != nl)
				return MD_EPROTO;
			if (n > cap - 1 - *body_at)
				return -EMSGSIZE;
			*body_len = (size_t)n;
			if (have >= *body_at + *body_len)
				return 0;
		}
		if (have + 1 >= cap)
			return -EMSGSIZE;
		ssize_t n = recv(fd, buf + have, cap - 1 - have, 0);
		if (n > 0) {
			have += (size_t)n;
			buf[have] = 0;
			continue;
		}
		if (n == 0)
			return MD_EPROTO;        /* closed before the reply was whole */
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		int rc = wait_fd(fd, POLLIN, deadline_ns);
		if (rc < 0)
			return rc;
	}
}

MD__EXPORT int md_control(const char *socket_path, const char *request, char *reply, size_t cap,
	       int timeout_ms)
{
	if (!request || !reply || cap < 2 || timeout_ms <= 0)
		return -EINVAL;
	reply[0] = 0;
	size_t len = strlen(request);
	if (len == 0 || len > MD_CTL_LINE_MAX || strchr(request, '\n'))
		return -EINVAL;
	char *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	uint64_t deadline = md_now_ns() + (uint64_t)timeout_ms * 1000000u;
	int fd = -1;
	int rc = connect_to(socket_path, &fd);
	if (rc == 0)
		rc = wait_fd(fd, POLLOUT, deadline);
	if (rc == 0)
		rc = send_all(fd, request, len, deadline);
	if (rc == 0)
		rc = send_all(fd, "\n", 1, deadline);
	size_t at = 0, n = 0;
	if (rc == 0)
		rc = read_reply(fd, buf, cap, &at, &n, deadline);
	if (fd >= 0)
		close(fd);
	if (rc == 0 && strncmp(buf, "ERR ", 4) == 0) {
		snprintf(reply, cap, "%s", buf + 4);
		rc = MD_EREFUSED;
	} else if (rc == 0) {
		memcpy(reply, buf + at, n);
		reply[n] = 0;
		rc = (int)n;
	}
	free(buf);
	return rc;
}
