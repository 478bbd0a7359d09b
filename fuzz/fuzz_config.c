/*
 * fuzz_config.c — libFuzzer harness for the config parser
 * md__params_load_text().  Any text is either refused with a message or
 * loaded; a loaded configuration must survive its own round trip: every key
 * read back with md__params_get() is accepted again by md__params_set().
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"

struct rt {
	struct md__params *dst;
	int bad;
	char key[128];
};

static void reset_key(const char *key, const char *value, void *ud)
{
	struct rt *r = ud;
	char err[256];
	if (md__params_set(r->dst, key, value, err, sizeof(err)) < 0 && !r->bad) {
		r->bad = 1;
		snprintf(r->key, sizeof(r->key), "%s", key);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	struct md__params p;
	md__params_defaults(&p);
	char err[512];
	if (md__params_load_text(&p, text, "fuzz", err, sizeof(err)) == 0) {
		struct md__params q = p;
		struct rt r = { &q, 0, "" };
		md__params_foreach(&p, reset_key, &r);
		if (r.bad) {
			fprintf(stderr, "round trip refused key %s\n", r.key);
			abort();
		}
	} else if (!err[0]) {
		abort(); /* a refusal must say why */
	}
	free(text);
	return 0;
}
