/*
 * fuzz_ctl.c — libFuzzer harness for the control protocol: each input line
 * goes through the parsers (md__hello_parse for HELLO, md__ctl_parse for the
 * rest) and then through md__control_exec() against a real, engine-less
 * daemon state, the way the server hands it a complete line.  Replies must be
 * framed ("OK <n>\n" + exactly n bytes, or one "ERR ...\n" line).  `save` is
 * skipped: it writes files.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_parse.h"
#include "daemon.h"
#include "log.h"

static struct md__daemon *daemon_state(void)
{
	static struct md__daemon d;
	static int ready;
	if (!ready) {
		md__log_threshold = -1; /* quiet */
		memset(&d, 0, sizeof(d));
		d.listen_fd = d.signal_fd = -1;
		struct md__params p;
		md__params_defaults(&p);
		d.instance_id = 42;
		int why = 0;
		d.loop = md__loop_new(MD__LOOP_EPOLL, &why);
		d.host = md__host_new(&p); /* the one copy of the parameters */
		if (!d.loop || !d.host)
			abort();
		ready = 1;
	}
	return &d;
}

static void check_framing(const struct md__sbuf *r)
{
	if (r->oom)
		return;
	if (r->len >= 4 && !memcmp(r->p, "ERR ", 4)) {
		const char *nl = memchr(r->p, '\n', r->len);
		if (!nl || (size_t)(nl - r->p) + 1 != r->len)
			abort(); /* ERR is exactly one line */
		return;
	}
	if (r->len < 5 || memcmp(r->p, "OK ", 3))
		abort();
	const char *nl = memchr(r->p, '\n', r->len);
	if (!nl)
		abort();
	size_t n = strtoull(r->p + 3, NULL, 10);
	if ((size_t)(nl - r->p) + 1 + n != r->len)
		abort(); /* body length as announced */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct md__daemon *d = daemon_state();
	size_t off = 0;
	while (off < size) {
		const uint8_t *nl = memchr(data + off, '\n', size - off);
		size_t len = nl ? (size_t)(nl - (data + off)) : size - off;
		if (len <= MD_CTL_LINE_MAX) {
			char line[MD_CTL_LINE_MAX + 1];
			memcpy(line, data + off, len);
			line[len] = 0;
			int has_nul = memchr(line, 0, len) != NULL;
			char err[256];
			if (!strncmp(line, "HELLO", 5)) {
				struct md__hello h;
				md__hello_parse(line, &h, err, sizeof(err));
			} else if (!has_nul && !strstr(line, "save")) {
				char copy[MD_CTL_LINE_MAX + 1];
				memcpy(copy, line, len + 1);
				struct md__ctl_req r;
				md__ctl_parse(copy, &r, err, sizeof(err));
				md__ctl_text_ok(line, len);
				struct md__sbuf reply = { 0 };
				md__control_exec(d, NULL, line, &reply);
				check_framing(&reply);
				md__sbuf_free(&reply);
			}
		}
		off += len + 1;
	}
	/* keep the state from drifting too far between inputs */
	struct md__params p;
	md__params_defaults(&p);
	md__daemon_apply_params(d, &p);
	return 0;
}
