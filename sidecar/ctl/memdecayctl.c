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

enum { EXIT_OK = 0, EXIT_ERR = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: memdecayctl [--socket PATH] [--json] [--timeout-ms N] COMMAND [ARGS...]\n\n"
		"commands:\n"
		"  get [KEY]                         show one key or the whole configuration\n"
		"  set KEY=VALUE...                  change keys (all or nothing)\n"
		"  policy NAME [--engine E]          memdecay, memdecay-norm, h2o, recency, random, memdecay-turn\n"
		"  budget SCOPE N [--engine E]       SCOPE: sequence_tokens, engine_pages, global_pages (0: none)\n"
		"  weight W --engine E               that engine's share weight of budget.global_pages\n"
		"  engines                           attached engines\n"
		"  stats [--engine E]                counters per engine\n"
		"  top N [--engine E]                the N lowest-scored evictable pages, with score terms\n"
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
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	char path[108] = "";
	int json = 0, c;
	uint64_t timeout_ms = 5000;
	while ((c = getopt_long(argc, argv, "+s:jt:h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (snprintf(path, sizeof(path), "%s", optarg) >= (int)sizeof(path)) {
				fprintf(stderr, "memdecayctl: --socket %s: path too long\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'j': json = 1; break;
		case 't':
			if (md__parse_u64(optarg, &timeout_ms) < 0 || timeout_ms == 0 ||
			    timeout_ms > 3600000) {
				fprintf(stderr, "memdecayctl: --timeout-ms '%s': want 1..3600000\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'h': usage(stdout); return EXIT_OK;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!path[0] && md__socket_default(path, sizeof(path)) < 0) {
		fprintf(stderr, "memdecayctl: default socket path too long (use --socket)\n");
		return EXIT_USAGE;
	}
	char **args = argv + optind;
	int nargs = argc - optind;
	if (!strcmp(args[0], "calibrate")) {
		int rc = md__ctl_calibrate(nargs, args, json, &args, &nargs);
		if (rc >= 0)
			return rc;
	}
	char line[MD_CTL_LINE_MAX + 2];
	size_t len = 0;
	for (int i = 0; i < nargs; i++) {
		size_t al = strlen(args[i]);
		if (!al || strpbrk(args[i], " \t\r\n") || !md__ctl_text_ok(args[i], al)) {
			fprintf(stderr, "memdecayctl: argument '%s' must be non-empty printable text without blanks\n",
				args[i]);
			return EXIT_USAGE;
		}
		if (len + al + 16 > MD_CTL_LINE_MAX) {
			fprintf(stderr, "memdecayctl: request longer than %u bytes\n", MD_CTL_LINE_MAX);
			return EXIT_USAGE;
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

	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "memdecayctl: cannot reach memdecayd at %s: %s\n", path, strerror(errno));
		return EXIT_UNREACHABLE;
	}
	size_t off = 0;
	while (off < len) {
		ssize_t n = send(fd, line + off, len - off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			/* The daemon may have refused us at once (permissions, limits)
			 * and closed: its ERR line is still ours to read. */
			int serr = errno;
			char rb[512];
			ssize_t got = recv(fd, rb, sizeof(rb) - 1, MSG_DONTWAIT);
			if (got > 4 && !strncmp(rb, "ERR ", 4)) {
				rb[got] = 0;
				char *nl = strchr(rb, '\n');
				if (nl)
					*nl = 0;
				fprintf(stderr, "memdecayctl: %s\n", rb + 4);
				return EXIT_ERR;
			}
			fprintf(stderr, "memdecayctl: sending to %s: %s\n", path, strerror(serr));
			return EXIT_UNREACHABLE;
		}
		off += (size_t)n;
	}

	/* Reply: "OK <n>\n<body>" or "ERR <message>\n". */
	size_t cap = 65536, have = 0;
	char *buf = malloc(cap);
	if (!buf)
		return EXIT_ERR;
	int64_t deadline = now_ms() + (int64_t)timeout_ms;
	size_t head_len = 0, body_len = 0;
	int ok = -1;
	for (;;) {
		if (ok >= 0 && have >= head_len + body_len)
			break;
		int64_t left = deadline - now_ms();
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int pr = left > 0 ? poll(&pfd, 1, (int)left) : 0;
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0) {
			fprintf(stderr, "memdecayctl: no complete reply from %s within %llu ms\n", path,
				(unsigned long long)timeout_ms);
			free(buf);
			return EXIT_UNREACHABLE;
		}
		if (have == cap) {
			cap *= 2;
			char *nb = realloc(buf, cap);
			if (!nb)
				return EXIT_ERR;
			buf = nb;
		}
		ssize_t n = recv(fd, buf + have, cap - have, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "memdecayctl: %s closed the connection before a complete reply\n",
				path);
			free(buf);
			return EXIT_UNREACHABLE;
		}
		have += (size_t)n;
		if (ok < 0) {
			char *nl = memchr(buf, '\n', have);
			if (!nl)
				continue;
			head_len = (size_t)(nl - buf) + 1;
			*nl = 0;
			if (!strncmp(buf, "ERR", 3)) {
				const char *msg = buf[3] == ' ' ? buf + 4 : buf + 3;
				fprintf(stderr, "memdecayctl: %s\n", msg);
				free(buf); /* LeakSanitizer runs at exit in ASan builds */
				return EXIT_ERR;
			}
			uint64_t bl;
			if (strncmp(buf, "OK ", 3) || md__parse_u64(buf + 3, &bl) < 0 || bl > (1u << 30)) {
				fprintf(stderr, "memdecayctl: malformed reply from %s\n", path);
				free(buf);
				return EXIT_UNREACHABLE;
			}
			body_len = (size_t)bl;
			ok = 1;
			if (head_len + body_len > cap) {
				cap = head_len + body_len;
				char *nb = realloc(buf, cap);
				if (!nb)
					return EXIT_ERR;
				buf = nb;
			}
		}
	}
	fwrite(buf + head_len, 1, body_len, stdout);
	free(buf);
	close(fd);
	return fflush(stdout) == 0 ? EXIT_OK : EXIT_ERR;
}
