/*
 * ctl_parse.h — parsing what arrives on the control socket, with no I/O and
 * no daemon state, so every malformed input can be unit-tested: the engine's
 * HELLO line (shm_layout/memdecay_abi.h) and operator requests.
 *
 * Operator framing (docs/operations.md): one request per line, tokens split
 * on blanks, printable ASCII only, at most MD_CTL_LINE_MAX bytes:
 *     CMD [ARG…] [--json] [--engine E]\n
 * reply: "OK <nbytes>\n" followed by exactly nbytes of body, or
 *        "ERR <message>\n" (one line, the message names the bad key/value).
 */
#ifndef MD_CTL_PARSE_H
#define MD_CTL_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "memdecay_hello.h"   /* struct md__hello: the HELLO field table */

#define MD__CTL_ARGS_MAX 64
#define MD__TOP_MAX 1000u
#define MD__SESSIONS_MAX 4096u   /* rows in one `sessions` reply; the rest are counted */

/* Parses and validates a whole HELLO line (without the newline).  Returns 0,
 * or -EINVAL / -EPROTO (ABI major mismatch) with a message naming the field. */
int md__hello_parse(const char *line, struct md__hello *out, char *err, size_t errlen);

enum md__ctl_cmd {
	MD__CTL_GET = 1,
	MD__CTL_SET,
	MD__CTL_POLICY,
	MD__CTL_BUDGET,
	MD__CTL_ENGINES,
	MD__CTL_STATS,
	MD__CTL_TOP,
	MD__CTL_METRICS,
	MD__CTL_SAVE,
	MD__CTL_CALIBRATE,
	MD__CTL_PING,
	MD__CTL_WEIGHT,
	MD__CTL_SESSIONS,
};

struct md__ctl_req {
	enum md__ctl_cmd cmd;
	const char *cmd_name;
	int json;
	const char *engine;       /* --engine value, NULL if none */
	int argc;                 /* positional arguments after the command */
	char *argv[MD__CTL_ARGS_MAX];
	uint64_t number;          /* top N, budget N */
	double weight;            /* weight W */
	const char *scope;        /* budget: sequence_tokens | engine_pages | global_pages */
	int apply;                /* calibrate --apply */
};

/* 1 if buf[0..len) is printable ASCII (blanks and tabs allowed), else 0. */
int md__ctl_text_ok(const char *buf, size_t len);

/* Splits line in place and validates the command's shape (argument counts,
 * numbers, option placement).  Returns 0 or -EINVAL with a message. */
int md__ctl_parse(char *line, struct md__ctl_req *req, char *err, size_t errlen);

/* Strict unsigned decimal: no sign, no blanks, no overflow.  0 or -EINVAL. */
int md__parse_u64(const char *s, uint64_t *out);

/* JSON string body escaping into dst (always NUL-terminated); returns length. */
size_t md__json_escape(const char *s, char *dst, size_t cap);

/* $MEMDECAY_SOCKET, else $XDG_RUNTIME_DIR/memdecay/memdecayd.sock, else
 * /run/memdecay/memdecayd.sock.  0 or -ENAMETOOLONG. */
int md__socket_default(char *buf, size_t len);

#endif
