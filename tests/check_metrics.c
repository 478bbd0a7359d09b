/*
 * check_metrics.c — the daemon's metrics table (sidecar/daemon/metrics.c)
 * against its three renderings: every row appears in each rendering it
 * names (its JSON key, its Prometheus family with HELP and TYPE, its text
 * fragment), in the order the row gives; the places are unique; every row
 * is shown somewhere; and the evict reasons are the ABI enum's.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

struct fixture {
	struct md__daemon d;
	struct md_engine_ctrl ectrl[2];
	struct md__peer peer[2];
	struct md__peer *peers[2];
	struct md__engine_stats st[2];
	struct md__metrics_view v;
};

static struct fixture *fixture_new(void)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct md__params p;
	md__params_defaults(&p);
	f->d.host = md__host_new(&p);
	f->d.loop = md__loop_new(MD__LOOP_EPOLL, NULL);
	ck_assert_ptr_nonnull(f->d.host);
	ck_assert_ptr_nonnull(f->d.loop);
	for (int i = 0; i < 2; i++) {
		f->peer[i].id = (uint32_t)i + 1;
		snprintf(f->peer[i].name, sizeof(f->peer[i].name), "eng\"%d", i + 1);
		f->peer[i].ectrl = &f->ectrl[i];
		f->peers[i] = &f->peer[i];
		f->st[i].evictions_by_region[MD_REGION_TOOL_OUT] = 3;
		f->st[i].evictions_by_reason[MD_EVICT_ENGINE_BUDGET] = 3;
	}
	f->v = (struct md__metrics_view){ &f->d, f->peers, f->st, 2 };
	return f;
}

static void fixture_free(struct fixture *f)
{
	md__host_free(f->d.host);
	md__loop_free(f->d.loop);
	free(f);
}

static char *render(struct fixture *f, void (*fn)(const struct md__metrics_view *,
						   struct md__sbuf *))
{
	struct md__sbuf b = { 0 };
	fn(&f->v, &b);
	ck_assert(!b.oom);
	ck_assert_uint_gt(b.len, 0);
	char *s = strndup(b.p, b.len);
	md__sbuf_free(&b);
	return s;
}

/* The literal text of a fragment up to its first conversion (or all of it). */
static void literal_head(const char *frag, char *out, size_t cap)
{
	size_t n = 0;
	for (const char *p = frag; *p && n + 1 < cap; p++) {
		if (*p == '%')
			break;
		out[n++] = *p;
	}
	out[n] = 0;
}

/* The literal text after a fragment's last conversion. */
static const char *literal_tail(const char *frag)
{
	const char *last = strrchr(frag, '%');
	if (!last)
		return "";
	last++;
	while (*last && !strchr("diouxXfFeEgGs", *last))
		last++;
	return *last ? last + 1 : last;
}

START_TEST(every_row_is_shown_somewhere)
{
	ck_assert_uint_gt(md__metrics_n, 40);
	for (size_t i = 0; i < md__metrics_n; i++) {
		const struct md__metric *m = &md__metrics[i];
		ck_assert_msg(m->json || m->text || m->prom, "row %zu is shown nowhere", i);
		ck_assert_msg(!m->text == !m->text_at, "row %zu: text and text_at go together", i);
		ck_assert_msg(!m->prom == !m->prom_at, "row %zu: prom and prom_at go together", i);
		if (m->prom)
			ck_assert_msg(m->prom_type && m->help, "%s: TYPE and HELP", m->prom);
		if (m->kind == MD__M_GROUP)
			ck_assert_ptr_nonnull(m->group);
		else if (m->kind == MD__M_LATENCY)
			ck_assert_ptr_nonnull(m->hist);
		else
			ck_assert_ptr_nonnull(m->get);
	}
}
END_TEST

START_TEST(places_are_unique)
{
	for (size_t i = 0; i < md__metrics_n; i++)
		for (size_t j = i + 1; j < md__metrics_n; j++) {
			const struct md__metric *a = &md__metrics[i], *b = &md__metrics[j];
			if (a->json && b->json && a->scope == b->scope)
				ck_assert_str_ne(a->json, b->json);
			if (a->prom && b->prom) {
				ck_assert_str_ne(a->prom, b->prom);
				ck_assert_uint_ne(a->prom_at, b->prom_at);
			}
			if (a->text && b->text && a->scope == b->scope)
				ck_assert_uint_ne(a->text_at, b->text_at);
		}
}
END_TEST

START_TEST(json_has_every_key_in_table_order)
{
	struct fixture *f = fixture_new();
	char *s = render(f, md__metrics_json);
	const char *engines = strstr(s, "},\"engines\":[");
	ck_assert_ptr_nonnull(engines);
	ck_assert_str_eq(s + strlen(s) - 3, "]}\n");
	const char *cur[2] = { s, engines };  /* daemon rows, then the first engine's */
	for (size_t i = 0; i < md__metrics_n; i++) {
		const struct md__metric *m = &md__metrics[i];
		if (!m->json)
			continue;
		char key[80];
		snprintf(key, sizeof(key), ",\"%s\":", m->json);
		const char *at = strstr(cur[m->scope], key);
		ck_assert_msg(at, "stats --json lacks %s (or has it out of order)", key);
		if (m->scope == MD__M_DAEMON)
			ck_assert_msg(at < engines, "%s belongs to the daemon object", m->json);
		cur[m->scope] = at + 1;
	}
	ck_assert_ptr_nonnull(strstr(s, "\"name\":\"eng\\\"2\""));
	free(s);
	fixture_free(f);
}
END_TEST

START_TEST(prometheus_has_every_family_in_order)
{
	struct fixture *f = fixture_new();
	char *s = render(f, md__metrics_prom);
	const char *cur = s;
	for (unsigned at = 1; at <= md__metrics_n; at++)
		for (size_t i = 0; i < md__metrics_n; i++) {
			const struct md__metric *m = &md__metrics[i];
			if (!m->prom || m->prom_at != at)
				continue;
			char head[256], sample[96];
			snprintf(head, sizeof(head), "# HELP %s %s\n# TYPE %s %s\n", m->prom, m->help,
				 m->prom, m->prom_type);
			const char *h = strstr(cur, head);
			ck_assert_msg(h, "metrics lacks the family %s (or has it out of order)",
				      m->prom);
			cur = h + strlen(head);
			/* its first sample follows its head */
			snprintf(sample, sizeof(sample), "%s%s", m->prom,
				 m->scope == MD__M_ENGINE || m->kind == MD__M_GROUP ||
						 m->kind == MD__M_LATENCY ? "{" : " ");
			ck_assert_msg(!strncmp(cur, sample, strlen(sample)), "%s: no sample", m->prom);
			static const char labels[] = "engine=\"1\",name=\"eng\\\"1\"";
			if (m->scope == MD__M_ENGINE)
				ck_assert_msg(!strncmp(cur + strlen(sample), labels, strlen(labels)),
					      "%s: engine labels", m->prom);
		}
	ck_assert_ptr_nonnull(strstr(s, "memdecay_evictions_by_region_total{engine=\"2\",name=\"eng\\\"2\",region=\"tool_out\"} 3\n"));
	ck_assert_ptr_nonnull(strstr(s, "memdecay_evictions_by_reason_total{engine=\"1\",name=\"eng\\\"1\",reason=\"engine_budget\"} 3\n"));
	ck_assert_ptr_nonnull(strstr(s, "memdecay_detaches_total{reason=\"error\"} 0\n"));
	free(s);
	fixture_free(f);
}
END_TEST

static const char *text_rows(const char *cur, int scope)
{
	for (unsigned at = 1; at <= md__metrics_n; at++)
		for (size_t i = 0; i < md__metrics_n; i++) {
			const struct md__metric *m = &md__metrics[i];
			if (m->scope != scope || !m->text || m->text_at != at)
				continue;
			char head[160];
			literal_head(m->text, head, sizeof(head));
			const char *tail = literal_tail(m->text);
			const char *h = strstr(cur, head);
			ck_assert_msg(h, "stats text lacks \"%s\" (row %s, or it is out of order)",
				      head, m->json ? m->json : m->prom);
			cur = h + strlen(head);
			if (*tail) {
				const char *t = strstr(cur, tail);
				ck_assert_msg(t, "stats text lacks \"%s\" after \"%s\"", tail, head);
				cur = t + strlen(tail);
			}
		}
	return cur;
}

START_TEST(text_has_every_fragment_in_order)
{
	struct fixture *f = fixture_new();
	char *s = render(f, md__metrics_text);
	ck_assert(!strncmp(s, "memdecayd instance 0, epoll loop, up ", 37));
	const char *cur = text_rows(s, MD__M_DAEMON);
	for (int i = 0; i < 2; i++) {
		char head[64];
		snprintf(head, sizeof(head), "engine %d (eng\"%d) policy memdecay\n", i + 1, i + 1);
		const char *h = strstr(cur, head);
		ck_assert_msg(h, "no \"%s\"", head);
		cur = text_rows(h + strlen(head), MD__M_ENGINE);
	}
	ck_assert_str_eq(cur, "");
	ck_assert_ptr_nonnull(strstr(s, "  evictions       0 (tool_out=3)\n"
					"  by reason       sequence_budget=0 engine_budget=3 global_budget=0\n"));
	ck_assert_ptr_nonnull(strstr(s, "detaches: eof=0 heartbeat=0 violations=0 shutdown=0 error=0\n"));
	free(s);
	fixture_free(f);
}
END_TEST

START_TEST(evict_reasons_are_the_enum)
{
	ck_assert_str_eq(md__evict_reason_name(0), "none");
	ck_assert_str_eq(md__evict_reason_name(MD_EVICT_SEQUENCE_BUDGET), "sequence_budget");
	ck_assert_str_eq(md__evict_reason_name(MD_EVICT_ENGINE_BUDGET), "engine_budget");
	ck_assert_str_eq(md__evict_reason_name(MD_EVICT_GLOBAL_BUDGET), "global_budget");
	ck_assert_str_eq(md__evict_reason_name(MD_EVICT_REASON_COUNT), "?");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("metrics");
	TCase *t = tcase_create("table");
	tcase_add_test(t, every_row_is_shown_somewhere);
	tcase_add_test(t, places_are_unique);
	tcase_add_test(t, json_has_every_key_in_table_order);
	tcase_add_test(t, prometheus_has_every_family_in_order);
	tcase_add_test(t, text_has_every_fragment_in_order);
	tcase_add_test(t, evict_reasons_are_the_enum);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
