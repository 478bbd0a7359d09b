/*
 * memdecayctl.c — the operator's client for memdecayd: sends one request line
 * on the control socket, prints the reply body.  Exit status: 0 OK, 1 the
 * daemon answered ERR (message on stderr), 2 usage, 3 daemon unreachable.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "ctl_calibrate.h"
#include "ctl_parse.h"
#include "memdecay_abi.h"
#include "memdecay_clock.h"

enum { EXIT_OK = 0, EXIT_ERR = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: memdecayctl [--socket PATH] [--json] [--timeout-ms N] COMMAND [ARGS...]\n\n"
		"commands:\n"
		"  get [KEY]                         show one key or the whole configuration\n"
		"  set KEY=VALUE...                  change keys (all or nothing)\n"
		"  policy NAME [--engine E]          switch policy (docs/policies.md; an unknown NAME is\n"
		"                                    refused with the daemon's list)\n"
		"  policy                            the default policy and every policy name the daemon knows\n"
		"  budget SCOPE N [--engine E]       SCOPE: sequence_tokens, engine_pages, global_pages (0: none)\n"
		"  weight W --engine E               that engine's share weight of budget.global_pages\n"
		"  engines                           attached engines\n"
		"  stats [--engine E]                counters per engine\n"
		"  top N [--engine E]                the N lowest-scored evictable pages, with score terms\n"
		"  sessions [--engine E]             live sequences (an engine's sessions): running or\n"
		"                                    retained, session tag, tokens held and evicted, pages,\n"
		"                                    turns, idle time (docs/operations.md)\n"
		"  metrics                           Prometheus text format\n"
		"  save [FILE]                       write the configuration (default: the --config file;\n"
		"                                    FILE only inside memdecayd's --save-dir)\n"
		"  calibrate [--apply] [--from FILE [--grace-steps N]]\n"
		"                                    per-region attention half-lives and lambda = ln2/h;\n"
		"                                    --apply sets them, --from reads a memdecayd --journal\n"
		"  ping                              check the daemon answers\n\n"
		"exit status: 0 ok, 1 the daemon refused the request, 2 usage error, 3 daemon unreachable\n");
}

static int64_t now_ms(void)
{
	return (int64_t)(md_now_ns() / 1000000u);
}

/* The request line: ARGS joined by single blanks, " --json" when asked, '\n'.
 * Returns its length, or 0 after printing why it cannot be sent. */
static size_t build_request(char *line, size_t cap, char **args, int nargs, int json)
{
	size_t len = 0;
	for (int i = 0; i < nargs; i++) {
		size_t al = strlen(args[i]);
		if (!al || strpbrk(args[i], " \t\r\n") || !md__ctl_text_ok(args[i], al)) {
			fprintf(stderr, "memdecayctl: argument '%s' must be non-empty printable text without blanks\n",
				args[i]);
			return 0;
		}
		if (len + al + 16 > MD_CTL_LINE_MAX || len + al + 16 > cap) {
			fprintf(stderr, "memdecayctl: request longer than %u bytes\n", MD_CTL_LINE_MAX);
			return 0;
		}
		if (len)
			line[len++] = ' ';
		memcpy(line + len, args[i], al);
		len += al;
	}
	if (json) {
		memcpy(line + len, " --json", 7);
		len += 7;
	}
	line[len++] = '\n';
	return len;
}

/* exchange()'s result besides the exit codes: the daemon closed this
 * connection to make room before answering; the request was not run. */
enum { EXCH_EVICTED = -1 };

/* A first reply line "ERR ...": print it, or tell the caller to retry. */
static int err_line(const char *line)
{
	if (!strcmp(line, MD_CTL_EVICTED_LINE))
		return EXCH_EVICTED;
	fprintf(stderr, "memdecayctl: %s\n", line[3] == ' ' ? line + 4 : line + 3);
	return EXIT_ERR;
}

/* Sends LINE on FD; a send that fails because the daemon refused us at once
 * (permissions, limits) and closed still leaves its ERR line to read. */
static int send_request(int fd, const char *path, const char *line, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t n = send(fd, line + off, len - off, MSG_NOSIGNAL);
		if (n >= 0) {
			off += (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		int serr = errno;
		char rb[512];
		ssize_t got = recv(fd, rb, sizeof(rb) - 1, MSG_DONTWAIT);
		if (got > 4 && !strncmp(rb, "ERR ", 4)) {
			rb[got] = 0;
			char *nl = strchr(rb, '\n');
			if (nl)
				*nl = 0;
			return err_line(rb);
		}
		fprintf(stderr, "memdecayctl: sending to %s: %s\n", path, strerror(serr));
		return EXIT_UNREACHABLE;
	}
	return EXIT_OK;
}

/* Reads "OK <n>\n<body>" or "ERR <message>\n" by DEADLINE; on OK the body
 * is (*buf_out)[*body_off, *body_off + *body_len), the caller frees *buf_out. */
static int read_reply(int fd, const char *path, int64_t deadline, uint64_t timeout_ms,
		      char **buf_out, size_t *body_off, size_t *body_len)
{
	size_t cap = 65536, have = 0, head_len = 0, blen = 0;
	char *buf = malloc(cap);
	int rc = EXIT_ERR, ok = 0;
	if (!buf)
		return EXIT_ERR;
	while (!ok || have < head_len + blen) {
		int64_t left = deadline - now_ms();
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int pr = left > 0 ? poll(&pfd, 1, (int)left) : 0;
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0) {
			fprintf(stderr, "memdecayctl: no complete reply from %s within %llu ms\n", path,
				(unsigned long long)timeout_ms);
			rc = EXIT_UNREACHABLE;
			goto fail;
		}
		if (have == cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb)
				goto fail;
			buf = nb;
			cap *= 2;
		}
		ssize_t n = recv(fd, buf + have, cap - have, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "memdecayctl: %s closed the connection before a complete reply\n",
				path);
			rc = EXIT_UNREACHABLE;
			goto fail;
		}
		have += (size_t)n;
		if (ok)
			continue;
		char *nl = memchr(buf, '\n', have);
		if (!nl)
			continue;
		head_len = (size_t)(nl - buf) + 1;
		*nl = 0;
		uint64_t bl;
		if (!strncmp(buf, "ERR", 3)) {
			rc = err_line(buf);
			goto fail;
		}
		if (strncmp(buf, "OK ", 3) || md__parse_u64(buf + 3, &bl) < 0 || bl > (1u << 30)) {
			fprintf(stderr, "memdecayctl: malformed reply from %s\n", path);
			rc = EXIT_UNREACHABLE;
			goto fail;
		}
		blen = (size_t)bl;
		ok = 1;
		if (head_len + blen > cap) {
			char *nb = realloc(buf, head_len + blen);
			if (!nb)
				goto fail;
			buf = nb;
			cap = head_len + blen;
		}
	}
	*buf_out = buf;
	*body_off = head_len;
	*body_len = blen;
	return EXIT_OK;
fail:
	free(buf); /* LeakSanitizer runs at exit in ASan builds */
	return rc;
}

/* One connection: send LINE, print the reply body.  EXCH_EVICTED when the
 * daemon made room by closing us before answering. */
static int exchange(const char *path, const char *line, size_t len, int64_t deadline,
		    uint64_t timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "memdecayctl: cannot reach memdecayd at %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return EXIT_UNREACHABLE;
	}
	char *buf = NULL;
	size_t off = 0, blen = 0;
	int rc = send_request(fd, path, line, len);
	if (rc == EXIT_OK)
		rc = read_reply(fd, path, deadline, timeout_ms, &buf, &off, &blen);
	close(fd);
	if (rc != EXIT_OK)
		return rc;
	fwrite(buf + off, 1, blen, stdout);
	free(buf);
	return fflush(stdout) == 0 ? EXIT_OK : EXIT_ERR;
}

/* Parses the options into PATH, *JSON and *TIMEOUT_MS; returns optind, or
 * -1 - exit status when the program should stop (--help, usage error). */
static int parse_options(int argc, char **argv, char *path, size_t path_cap, int *json,
			 uint64_t *timeout_ms)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "+s:jt:h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (snprintf(path, path_cap, "%s", optarg) >= (int)path_cap) {
				fprintf(stderr, "memdecayctl: --socket %s: path too long\n", optarg);
				return -1 - EXIT_USAGE;
			}
			break;
		case 'j': *json = 1; break;
		case 't':
			if (md__parse_u64(optarg, timeout_ms) < 0 || *timeout_ms == 0 ||
			    *timeout_ms > 3600000) {
				fprintf(stderr, "memdecayctl: --timeout-ms '%s': want 1..3600000\n", optarg);
				return -1 - EXIT_USAGE;
			}
			break;
		case 'h': usage(stdout); return -1 - EXIT_OK;
		default: usage(stderr); return -1 - EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return -1 - EXIT_USAGE;
	}
	if (!path[0] && md__socket_default(path, path_cap) < 0) {
		fprintf(stderr, "memdecayctl: default socket path too long (use --socket)\n");
		return -1 - EXIT_USAGE;
	}
	return optind;
}

int main(int argc, char **argv)
{
	char path[108] = "";
	int json = 0;
	uint64_t timeout_ms = 5000;
	int first = parse_options(argc, argv, path, sizeof(path), &json, &timeout_ms);
	if (first < 0)
		return -1 - first;
	char **args = argv + first;
	int nargs = argc - first;
	if (!strcmp(args[0], "calibrate")) {
		int rc = md__ctl_calibrate(nargs, args, json, &args, &nargs);
		if (rc >= 0)
			return rc;
	}
	char line[MD_CTL_LINE_MAX + 2];
	size_t len = build_request(line, sizeof(line), args, nargs, json);
	if (!len)
		return EXIT_USAGE;
	/* A connection flood can take every operator slot; the daemon then
	 * closes the oldest unanswered connection, ours perhaps, before reading
	 * it (docs/operations.md "Limits").  Send again until the deadline. */
	int64_t deadline = now_ms() + (int64_t)timeout_ms;
	for (unsigned backoff_ms = 2;; backoff_ms = backoff_ms < 200 ? backoff_ms * 2 : 200) {
		int rc = exchange(path, line, len, deadline, timeout_ms);
		if (rc != EXCH_EVICTED)
			return rc;
		if (now_ms() + backoff_ms >= deadline) {
			fprintf(stderr, "memdecayctl: %s kept closing our connection for its connection"
				" limit for %llu ms\n", path, (unsigned long long)timeout_ms);
			return EXIT_UNREACHABLE;
		}
		struct timespec ts = { 0, (long)backoff_ms * 1000000L };
		nanosleep(&ts, NULL);
	}
}
