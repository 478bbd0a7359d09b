/*
 * memdecayd.c — the MemDecay policy daemon: command line, configuration,
 * socket path resolution, then server.c's loop until SIGTERM/SIGINT.
 * See docs/operations.md for every flag and exit code.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>

#include "ctl_parse.h"
#include "daemon.h"
#include "log.h"
#include "metrics_http.h"
#include "notify.h"
#include "server.h"
#include "memdecay_clock.h"

#define MEMDECAYD_VERSION "0.1.0"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: memdecayd [OPTIONS]\n"
		"MemDecay policy daemon: serves KV-cache eviction decisions to engines over shared memory.\n\n"
		"  --socket PATH        control socket (default $MEMDECAY_SOCKET, else\n"
		"                       $XDG_RUNTIME_DIR/memdecay/memdecayd.sock, else /run/memdecay/memdecayd.sock)\n"
		"  --config FILE        policy configuration (key = value lines); SIGHUP reloads it\n"
		"  --event-loop B       uring or epoll (default: uring, epoll if io_uring is refused)\n"
		"  --socket-group GROUP also accept peers of GROUP (socket 0660, directory 0750);\n"
		"                       they see and tune only their own engines\n"
		"  --operator-group GROUP  peers of GROUP are operators like the daemon's uid\n"
		"  --save-dir DIR       `save FILE` writes FILE only inside DIR\n"
		"  --foreground         do not detach from the terminal\n"
		"  --log-level L        error, warn, info (default) or debug\n"
		"  --journal FILE       record a stats journal for offline calibration (truncates FILE)\n"
		"  --journal-max-bytes N  stop recording at N bytes (default 1 GiB)\n"
		"  --calib-grace-steps N  steps without refresh that end a token's attention (default 32)\n"
		"  --metrics-listen ADDR:PORT  serve Prometheus metrics at http://ADDR:PORT/metrics\n"
		"                       (off by default; ADDR loopback: 127.0.0.1, [::1], localhost;\n"
		"                       PORT 0 picks a free port, logged)\n"
		"  --metrics-allow-remote  let --metrics-listen use a non-loopback address\n"
		"  --help               this text\n"
		"  --version            print the version and ABI\n\n"
		"Under systemd (Type=notify) it sends READY=1 once the socket listens and\n"
		"WATCHDOG=1 from the event loop when WatchdogSec= is set; a listening socket\n"
		"passed by socket activation (LISTEN_FDS) replaces --socket.\n\n"
		"exit status: 0 clean stop, 1 runtime error (socket busy, bad config ...), 2 usage error\n");
}

/* The command line, once parsed; what is not here went straight into the
 * daemon's state (config path, save directory, groups, socket path). */
struct cmdline {
	const char *socket_arg, *group_arg, *journal_arg, *op_group_arg, *metrics_arg;
	int metrics_remote, foreground;
	uint64_t journal_max, grace;
	enum md__loop_backend backend;
	struct sockaddr_storage metrics_ss;
	socklen_t metrics_sslen;
};

/* returned by the setup steps that may end the program: go on */
#define MD__GO_ON (-1)

static const struct option long_opts[] = {
	{ "socket", required_argument, NULL, 's' },
	{ "config", required_argument, NULL, 'c' },
	{ "event-loop", required_argument, NULL, 'e' },
	{ "socket-group", required_argument, NULL, 'g' },
	{ "foreground", no_argument, NULL, 'f' },
	{ "log-level", required_argument, NULL, 'l' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ "journal", required_argument, NULL, 'J' },
	{ "journal-max-bytes", required_argument, NULL, 'M' },
	{ "calib-grace-steps", required_argument, NULL, 'G' },
	{ "operator-group", required_argument, NULL, 'O' },
	{ "save-dir", required_argument, NULL, 'D' },
	{ "metrics-listen", required_argument, NULL, 'm' },
	{ "metrics-allow-remote", no_argument, NULL, 'R' },
	{ 0 },
};

/* One option from getopt_long: MD__GO_ON, or the exit status. */
static int parse_option(int c, const char *arg, struct md__daemon *d, struct cmdline *cl)
{
	switch (c) {
	case 's': cl->socket_arg = arg; break;
	case 'c':
		if (snprintf(d->config_path, sizeof(d->config_path), "%s", arg) >=
		    (int)sizeof(d->config_path)) {
			fprintf(stderr, "memdecayd: --config path too long\n");
			return 2;
		}
		d->have_config = 1;
		break;
	case 'e':
		if (!strcmp(arg, "uring"))
			cl->backend = MD__LOOP_URING;
		else if (!strcmp(arg, "epoll"))
			cl->backend = MD__LOOP_EPOLL;
		else {
			fprintf(stderr, "memdecayd: --event-loop '%s': want uring or epoll\n", arg);
			return 2;
		}
		break;
	case 'g': cl->group_arg = arg; break;
	case 'O': cl->op_group_arg = arg; break;
	case 'D':
		/* resolved once, so `save` compares against a fixed real path */
		if (!realpath(arg, d->save_dir)) {
			fprintf(stderr, "memdecayd: --save-dir '%s': %s\n", arg, strerror(errno));
			return 2;
		}
		break;
	case 'f': cl->foreground = 1; break;
	case 'm': cl->metrics_arg = arg; break;
	case 'R': cl->metrics_remote = 1; break;
	case 'l':
		if ((md__log_threshold = md__log_level_from_name(arg)) < 0) {
			fprintf(stderr, "memdecayd: --log-level '%s': want error, warn, info or debug\n",
				arg);
			return 2;
		}
		break;
	case 'J': cl->journal_arg = arg; break;
	case 'M':
		if (md__parse_u64(arg, &cl->journal_max) < 0 ||
		    cl->journal_max < sizeof(struct md__journal_header)) {
			fprintf(stderr, "memdecayd: --journal-max-bytes '%s': want an integer >= %zu\n",
				arg, sizeof(struct md__journal_header));
			return 2;
		}
		break;
	case 'G':
		if (md__parse_u64(arg, &cl->grace) < 0 || cl->grace < 1 || cl->grace > 1000000) {
			fprintf(stderr, "memdecayd: --calib-grace-steps '%s': want 1..1000000\n", arg);
			return 2;
		}
		break;
	case 'h': usage(stdout); return 0;
	case 'V':
		printf("memdecayd %s (ABI %u.%u)\n", MEMDECAYD_VERSION, MD_ABI_MAJOR, MD_ABI_MINOR);
		return 0;
	default: usage(stderr); return 2;
	}
	return MD__GO_ON;
}

/* GROUP as a group name, else as a numeric gid. */
static int resolve_group(const char *opt, const char *name, gid_t *gid, int *have)
{
	struct group *g = getgrnam(name);
	char *end;
	unsigned long n = strtoul(name, &end, 10);
	if (g)
		*gid = g->gr_gid;
	else if (*name && !*end)
		*gid = (gid_t)n;
	else {
		fprintf(stderr, "memdecayd: %s '%s': no such group\n", opt, name);
		return -1;
	}
	*have = 1;
	return 0;
}

/* The options, then what they name: MD__GO_ON, or the exit status. */
static int parse_cmdline(int argc, char **argv, struct md__daemon *d, struct cmdline *cl)
{
	int c, rc;
	while ((c = getopt_long(argc, argv, "s:c:e:g:fl:hVJ:M:G:O:D:m:R", long_opts, NULL)) != -1)
		if ((rc = parse_option(c, optarg, d, cl)) != MD__GO_ON)
			return rc;
	if (optind < argc) {
		fprintf(stderr, "memdecayd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (cl->socket_arg) {
		if (snprintf(d->socket_path, sizeof(d->socket_path), "%s", cl->socket_arg) >=
		    (int)sizeof(d->socket_path)) {
			fprintf(stderr, "memdecayd: --socket %s: longer than %zu bytes\n", cl->socket_arg,
				sizeof(d->socket_path) - 1);
			return 2;
		}
	} else if (md__socket_default(d->socket_path, sizeof(d->socket_path)) < 0) {
		fprintf(stderr, "memdecayd: default socket path too long (set --socket)\n");
		return 2;
	}
	if (cl->group_arg && resolve_group("--socket-group", cl->group_arg, &d->group, &d->have_group))
		return 2;
	if (cl->op_group_arg &&
	    resolve_group("--operator-group", cl->op_group_arg, &d->op_group, &d->have_op_group))
		return 2;
	char err[512];
	if (cl->metrics_arg && md__metrics_parse_listen(cl->metrics_arg, cl->metrics_remote,
							&cl->metrics_ss, &cl->metrics_sslen, err,
							sizeof(err)) < 0) {
		fprintf(stderr, "memdecayd: %s\n", err);
		return 2;
	}
	return MD__GO_ON;
}

/* Parameters, identity and the calibration journal; then the event loop
 * and the policy host that keeps the parameters from here on. */
static int setup_state(struct md__daemon *d, const struct cmdline *cl)
{
	char err[512];
	if (md__notify_init(err, sizeof(err)) < 0)
		md__warn("service manager notifications off: %s", err);

	struct md__params params;
	md__params_defaults(&params);
	if (d->have_config && md__params_load_file(&params, d->config_path, err, sizeof(err)) < 0) {
		md__err("config not loaded: %s", err);
		return -1;
	}
	while (!d->instance_id) {
		if (getrandom(&d->instance_id, sizeof(d->instance_id), 0) != sizeof(d->instance_id))
			d->instance_id = md_now_ns() ^ ((uint64_t)getpid() << 32);
	}
	d->start_ns = md_now_ns();
	md__calib_names names;
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++)
		snprintf(names[r], sizeof(names[r]), "%s", params.region_name[r]);
	if (md__calib_live_open(&d->calib, cl->journal_arg, cl->journal_max, (uint32_t)cl->grace,
				d->instance_id, names, err, sizeof(err)) < 0) {
		md__err("%s", err);
		return -1;
	}

	int why = 0;
	d->loop = md__loop_new(cl->backend, &why);
	if (!d->loop) {
		md__err("cannot create the %s event loop: %s",
			cl->backend == MD__LOOP_EPOLL ? "epoll" : "io_uring", strerror(errno));
		return -1;
	}
	if (why)
		md__warn("io_uring refused (%s): using the epoll event loop", strerror(-why));
	d->host = md__host_new(&params);
	if (!d->host) {
		md__err("cannot create the policy host: out of memory");
		return -1;
	}
	return 0;
}

/* The listening socket (passed by the service manager, or our own), the
 * server, the detach from the terminal, then the metrics endpoint. */
static int start_serving(struct md__daemon *d, const struct cmdline *cl,
			 struct md__metrics_http **metrics)
{
	char err[512];
	char passed[sizeof(d->socket_path)];
	int lfd = md__listen_fd_take(passed, sizeof(passed), err, sizeof(err));
	if (lfd == -2) {
		md__err("socket activation: %s", err);
		return -1;
	}
	if (lfd >= 0) {
		/* the manager created, owns and removes the socket file */
		if (cl->socket_arg && strcmp(cl->socket_arg, passed))
			md__warn("--socket %s ignored: serving the socket passed by the service "
				 "manager, %s", cl->socket_arg, passed);
		memcpy(d->socket_path, passed, sizeof(d->socket_path));
		d->listen_fd = lfd;
		d->socket_inherited = 1;
		md__info("socket activation: serving the listening socket passed on fd %d", lfd);
	} else if (md__server_listen(d, err, sizeof(err)) < 0) {
		md__err("%s", err);
		return -1;
	}
	if (md__server_start(d, err, sizeof(err)) < 0) {
		md__err("%s", err);
		if (!d->socket_inherited)
			unlink(d->socket_path);
		return -1;
	}
	if (!cl->foreground) {
		if (daemon(0, 1) < 0) {
			md__err("cannot detach: %s (use --foreground)", strerror(errno));
			if (!d->socket_inherited)
				unlink(d->socket_path);
			return -1;
		}
	}
	/* After md__server_start (its signal mask is inherited, so SIGTERM stays
	 * with the signalfd) and after daemon() (a fork keeps no threads). */
	*metrics = NULL;
	if (cl->metrics_arg) {
		char bound[96];
		*metrics = md__metrics_http_start(d, &cl->metrics_ss, cl->metrics_sslen, bound,
						  sizeof(bound), err, sizeof(err));
		if (!*metrics) {
			md__err("%s", err);
			md__server_shutdown(d);
			return -1;
		}
		md__info("metrics on http://%s/metrics", bound);
	}
	return 0;
}

/* Tells the service manager we are ready, serves until SIGTERM/SIGINT, then
 * takes everything down. */
static void serve_and_stop(struct md__daemon *d, struct md__metrics_http *metrics)
{
	md__info("memdecayd %s listening on %s (instance %llu, %s loop, policy %s, pid %d)",
		 MEMDECAYD_VERSION, d->socket_path, (unsigned long long)d->instance_id,
		 md__loop_backend_name(d->loop), md__policy_name(md__daemon_params(d)->policy), (int)getpid());
	char ready[160];
	snprintf(ready, sizeof(ready), "READY=1\nMAINPID=%d\nSTATUS=listening on %s", (int)getpid(),
		 d->socket_path);
	md__notify_send(ready);
	md__server_run(d);
	md__notify_send("STOPPING=1");
	md__metrics_http_stop(metrics);
	md__server_shutdown(d);
	md__calib_live_close(d->calib);
	d->calib = NULL;
	md__host_free(d->host);
	md__loop_free(d->loop);
	md__info("memdecayd stopped");
}

int main(int argc, char **argv)
{
	static struct md__daemon daemon_state;
	struct md__daemon *d = &daemon_state;
	d->listen_fd = d->signal_fd = -1;
	struct cmdline cl = {
		.journal_max = MD__JOURNAL_MAX_DEFAULT,
		.grace = MD__CALIB_GRACE_DEFAULT,
		.backend = MD__LOOP_AUTO,
	};
	int rc = parse_cmdline(argc, argv, d, &cl);
	if (rc != MD__GO_ON)
		return rc;
	struct md__metrics_http *metrics;
	if (setup_state(d, &cl) || start_serving(d, &cl, &metrics))
		return 1;
	serve_and_stop(d, metrics);
	return 0;
}
