/*
 * md_llama_chat.c — message spans through llama_chat_apply_template, and the
 * role → region rule of docs/design.md §5.
 */
#include "md_llama_chat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memdecay_abi.h"

int md_llama_region_id(const char *name)
{
	for (unsigned i = 0; i < MD_REGION_BUILTIN_COUNT; i++)
		if (!strcmp(name, md_region_builtin_name(i)))
			return (int)i;
	return -1;
}

const char *md_llama_region_name(int id)
{
	const char *n = id >= 0 ? md_region_builtin_name((unsigned)id) : NULL;

	return n ? n : "?";
}

int md_llama_region_of(const char *role, const char *explicit_region)
{
	if (explicit_region && *explicit_region)
		return md_llama_region_id(explicit_region);
	if (!role)
		return MD_REGION_USER;
	if (!strcmp(role, "system"))
		return MD_REGION_SYSTEM;
	if (!strcmp(role, "assistant"))
		return MD_REGION_ASSISTANT;
	if (!strcmp(role, "tool") || !strcmp(role, "ipython") || !strcmp(role, "function"))
		return MD_REGION_TOOL_OUT;
	return MD_REGION_USER;
}

/* The format a model's own metadata implies (no explicit template). */
static int md__detect_format(const struct llama_model *model, const char *tmpl)
{
	if (tmpl)
		return strstr(tmpl, "<start_of_turn>") ? MD_LLAMA_CHAT_GEMMA : MD_LLAMA_CHAT_TEMPLATE;
	char arch[64];
	if (model && llama_model_meta_val_str(model, "general.architecture", arch, sizeof(arch)) > 0 &&
	    !strncmp(arch, "gemma", 5))
		return MD_LLAMA_CHAT_GEMMA;
	return MD_LLAMA_CHAT_TEMPLATE;
}

int md_llama_chat_init(struct md_llama_chat *c, const struct llama_model *model, const char *tmpl)
{
	memset(c, 0, sizeof(*c));
	if (tmpl) {
		c->format = !strcmp(tmpl, "gemma") ? MD_LLAMA_CHAT_GEMMA : MD_LLAMA_CHAT_TEMPLATE;
	} else {
		tmpl = model ? llama_model_chat_template(model, NULL) : NULL;
		c->format = md__detect_format(model, tmpl);
	}
	if (c->format == MD_LLAMA_CHAT_GEMMA)
		tmpl = "gemma";
	if (!tmpl)
		tmpl = "chatml";
	c->tmpl = strdup(tmpl);
	c->text = strdup("");
	return c->tmpl && c->text ? 0 : -ENOMEM;
}

void md_llama_chat_free(struct md_llama_chat *c)
{
	for (size_t i = 0; i < 2 * c->n; i++)
		free(c->owned[i]);
	free(c->owned);
	free(c->msgs);
	free(c->text);
	free(c->tmpl);
	memset(c, 0, sizeof(*c));
}

const char *md_llama_chat_format_name(const struct md_llama_chat *c)
{
	return c->format == MD_LLAMA_CHAT_GEMMA ? "gemma" : "template";
}

static llama_token md__one_token(const struct llama_model *model, const char *text)
{
	const struct llama_vocab *vocab = llama_model_get_vocab(model);
	llama_token t[2];
	int32_t n = llama_tokenize(vocab, text, (int32_t)strlen(text), t, 2, false, true);
	return n == 1 ? t[0] : LLAMA_TOKEN_NULL;
}

llama_token md_llama_chat_eot(const struct md_llama_chat *c, const struct llama_model *model)
{
	const struct llama_vocab *vocab = llama_model_get_vocab(model);
	if (c->format == MD_LLAMA_CHAT_GEMMA)
		return md__one_token(model, "<end_of_turn>");
	llama_token t = llama_vocab_eot(vocab);
	if (t != LLAMA_TOKEN_NULL)
		return t;
	t = md__one_token(model, "<|im_end|>");
	return t != LLAMA_TOKEN_NULL ? t : llama_vocab_eos(vocab);
}

/* Gemma turns (md_llama_chat.h): each message a turn of its own. */
static int md__format_gemma(const struct md_llama_chat *c, size_t n, int add_ass, char **out,
			    int32_t *len)
{
	size_t cap = 1;
	for (size_t i = 0; i < n; i++)
		cap += strlen(c->msgs[i].content) + 48;
	cap += 32;
	char *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		const char *who = !strcmp(c->msgs[i].role, "assistant") ? "model" : "user";
		at += (size_t)snprintf(buf + at, cap - at, "<start_of_turn>%s\n%s<end_of_turn>\n", who,
				       c->msgs[i].content);
	}
	if (add_ass)
		at += (size_t)snprintf(buf + at, cap - at, "<start_of_turn>model\n");
	if (at >= cap || at > INT32_MAX) {
		free(buf);
		return -EOVERFLOW;
	}
	*out = buf;
	*len = (int32_t)at;
	return 0;
}

static int md__format(const struct md_llama_chat *c, size_t n, int add_ass, char **out,
		      int32_t *len)
{
	if (c->format == MD_LLAMA_CHAT_GEMMA)
		return md__format_gemma(c, n, add_ass, out, len);
	int32_t cap = 256;
	for (size_t i = 0; i < n; i++)
		cap += (int32_t)(2 * (strlen(c->msgs[i].content) + strlen(c->msgs[i].role)) + 64);
	for (int attempt = 0; attempt < 2; attempt++) {
		char *buf = malloc((size_t)cap + 1);
		if (!buf)
			return -ENOMEM;
		int32_t r = llama_chat_apply_template(c->tmpl, c->msgs, n, add_ass, buf, cap);
		if (r < 0) {
			free(buf);
			return -ENOTSUP;  /* template unknown to llama.cpp's builtin list */
		}
		if (r <= cap) {
			buf[r] = '\0';
			*out = buf;
			*len = r;
			return 0;
		}
		free(buf);
		cap = r;
	}
	return -EPROTO;
}

static int md__grow(struct md_llama_chat *c)
{
	if (c->n < c->cap)
		return 0;
	size_t cap = c->cap ? c->cap * 2 : 16;
	struct llama_chat_message *m = realloc(c->msgs, cap * sizeof(*m));
	if (!m)
		return -ENOMEM;
	c->msgs = m;
	char **o = realloc(c->owned, 2 * cap * sizeof(*o));
	if (!o)
		return -ENOMEM;
	c->owned = o;
	c->cap = cap;
	return 0;
}

/* Formats msgs[0..n) (+ header) and returns what follows the current text. */
static int md__delta(struct md_llama_chat *c, size_t n, int add_ass, char **delta,
		     char **full, int32_t *full_len)
{
	char *text;
	int32_t len;
	int rc = md__format(c, n, add_ass, &text, &len);
	if (rc)
		return rc;
	if (len < c->text_len || memcmp(text, c->text, (size_t)c->text_len) != 0) {
		/* A template that rewrites earlier turns has no per-message spans. */
		free(text);
		return -EPROTO;
	}
	*delta = strdup(text + c->text_len);
	if (!*delta) {
		free(text);
		return -ENOMEM;
	}
	if (full) {
		*full = text;
		*full_len = len;
	} else {
		free(text);
	}
	return 0;
}

int md_llama_chat_push(struct md_llama_chat *c, const char *role, const char *content,
		       char **delta)
{
	int rc = md__grow(c);
	if (rc)
		return rc;
	char *r = strdup(role), *t = strdup(content);
	if (!r || !t) {
		free(r);
		free(t);
		return -ENOMEM;
	}
	c->owned[2 * c->n] = r;
	c->owned[2 * c->n + 1] = t;
	c->msgs[c->n].role = r;
	c->msgs[c->n].content = t;
	char *full;
	int32_t len;
	rc = md__delta(c, c->n + 1, 0, delta, &full, &len);
	if (rc) {
		free(r);
		free(t);
		return rc;
	}
	c->n++;
	free(c->text);
	c->text = full;
	c->text_len = len;
	return 0;
}

int md_llama_chat_peek(struct md_llama_chat *c, const char *role, const char *content,
		       int add_ass, char **delta)
{
	int rc = md__grow(c);
	if (rc)
		return rc;
	size_t n = c->n;
	if (role) {
		c->msgs[n].role = role;
		c->msgs[n].content = content ? content : "";
		n++;
	}
	return md__delta(c, n, add_ass, delta, NULL, NULL);
}

int md_llama_tokenize(const struct llama_model *model, const char *text, int add_special,
		      llama_token **out, uint32_t *n)
{
	const struct llama_vocab *vocab = llama_model_get_vocab(model);
	int32_t len = (int32_t)strlen(text);
	int32_t cap = len + 8;
	llama_token *toks = malloc(sizeof(llama_token) * (size_t)cap);
	if (!toks)
		return -ENOMEM;
	int32_t r = llama_tokenize(vocab, text, len, toks, cap, add_special, true);
	if (r < 0) {
		cap = -r;
		llama_token *t2 = realloc(toks, sizeof(llama_token) * (size_t)cap);
		if (!t2) {
			free(toks);
			return -ENOMEM;
		}
		toks = t2;
		r = llama_tokenize(vocab, text, len, toks, cap, add_special, true);
		if (r < 0) {
			free(toks);
			return -EPROTO;
		}
	}
	*out = toks;
	*n = (uint32_t)r;
	return 0;
}
