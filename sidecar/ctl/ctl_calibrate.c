/*
 * ctl_calibrate.c — memdecayctl's `calibrate` (ctl_calibrate.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib_report.h"
#include "ctl_calibrate.h"
#include "ctl_parse.h"

enum { EXIT_OK = 0, EXIT_ERR = 1, EXIT_USAGE = 2 };

static char *fwd[MD_REGIONS_MAX + 4];
static char fwd_items[MD_REGIONS_MAX][128];

int md__ctl_calibrate(int argc, char **argv, int json, char ***fwd_argv, int *fwd_argc)
{
	const char *from = NULL;
	int apply = 0;
	uint64_t grace = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--apply")) {
			apply = 1;
		} else if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if (!strcmp(argv[i], "--from") && i + 1 < argc) {
			from = argv[++i];
		} else if (!strcmp(argv[i], "--grace-steps") && i + 1 < argc) {
			if (md__parse_u64(argv[++i], &grace) < 0 || grace < 1 || grace > 1000000) {
				fprintf(stderr, "memdecayctl: calibrate --grace-steps '%s': want 1..1000000\n",
					argv[i]);
				return EXIT_USAGE;
			}
		} else {
			fprintf(stderr, "memdecayctl: calibrate: unexpected '%s'; usage: calibrate "
					"[--apply] [--from FILE [--grace-steps N]] [--json]\n",
				argv[i]);
			return EXIT_USAGE;
		}
	}
	if (!from) {
		if (grace) {
			fprintf(stderr, "memdecayctl: calibrate --grace-steps needs --from (a live "
					"daemon uses its --calib-grace-steps)\n");
			return EXIT_USAGE;
		}
		int n = 0;
		fwd[n++] = "calibrate";
		if (apply)
			fwd[n++] = "--apply";
		if (json)
			fwd[n++] = "--json";
		*fwd_argv = fwd;
		*fwd_argc = n;
		return -1;
	}
	struct md__calib_stats *st = malloc(sizeof(*st));
	if (!st) {
		fprintf(stderr, "memdecayctl: out of memory\n");
		return EXIT_ERR;
	}
	md__calib_names names;
	char err[512];
	uint32_t used = 0;
	long rc = md__calib_from_journal(from, (uint32_t)grace, st, names, &used, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "memdecayctl: calibrate --from: %s\n", err);
		free(st);
		return EXIT_ERR;
	}
	char source[4200];
	snprintf(source, sizeof(source), "journal %s (%ld entries)", from, rc);
	struct md__sbuf b = { 0 };
	int n = md__calib_report(st, (const char(*)[MD__JOURNAL_NAME_LEN])names, used, source, json,
				 &b, apply ? fwd_items : NULL, MD_REGIONS_MAX);
	free(st);
	if (b.oom) {
		fprintf(stderr, "memdecayctl: out of memory\n");
		return EXIT_ERR;
	}
	fwrite(b.p, 1, b.len, stdout);
	md__sbuf_free(&b);
	if (!apply || n <= 0)
		return fflush(stdout) == 0 ? EXIT_OK : EXIT_ERR;
	fflush(stdout);
	int k = 0;
	fwd[k++] = "set";
	for (int i = 0; i < n; i++)
		fwd[k++] = fwd_items[i];
	*fwd_argv = fwd;
	*fwd_argc = k;
	return -1;
}
