/*
 * md_llama_chat.h — region labels from chat messages (docs/design.md §5) through
 * the model's own chat template (llama_chat_apply_template).  Each message's
 * span of the formatted prompt (role header and separators included) is the
 * difference between the prompt with and without it, so the template's own
 * tokens take the region of their message.
 *
 * Chat formats.  MD_LLAMA_CHAT_TEMPLATE renders through llama.cpp's
 * llama_chat_apply_template (the model's template, a builtin name, or
 * "chatml" when the model has none): SmolLM2 and every ChatML model.
 * MD_LLAMA_CHAT_GEMMA is rendered here, because llama.cpp's builtin "gemma"
 * template merges the system message into the first user turn (the system
 * message would then have no span of its own and its text would take the user
 * region): every message is one turn of its own,
 *   system, user, tool, any other role -> <start_of_turn>user\n{content}<end_of_turn>\n
 *   assistant                          -> <start_of_turn>model\n{content}<end_of_turn>\n
 *   assistant header                   -> <start_of_turn>model\n
 * content verbatim (not trimmed).  The BOS token is not part of the text:
 * tokenize the first message with add_special = 1 (md_llama_tokenize), which
 * prepends it when the vocabulary asks for one (Gemma does, SmolLM2 does not),
 * so it takes the first message's region.
 */
#ifndef MD_LLAMA_CHAT_H
#define MD_LLAMA_CHAT_H

#include <stddef.h>
#include <stdint.h>
#include <llama.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Region id of a built-in name, or -1. */
int md_llama_region_id(const char *name);
const char *md_llama_region_name(int id);
/* Region of a message: an explicit region wins, else its role's; -1 when
 * the explicit name is unknown. */
int md_llama_region_of(const char *role, const char *explicit_region);

enum md_llama_chat_format {
	MD_LLAMA_CHAT_TEMPLATE = 0,        /* llama_chat_apply_template(tmpl) */
	MD_LLAMA_CHAT_GEMMA = 1,           /* Gemma turns, rendered by the adapter */
};

struct md_llama_chat {
	char *tmpl;                        /* model template (or a builtin name) */
	int format;                        /* enum md_llama_chat_format */
	struct llama_chat_message *msgs;
	char **owned;                      /* role, content copies */
	size_t n, cap;
	char *text;                        /* prompt of msgs[0..n), no assistant header */
	int32_t text_len;
};

/* tmpl NULL: detected from the model: a template holding "<start_of_turn>", or
 * no template and general.architecture gemma*, is MD_LLAMA_CHAT_GEMMA;
 * otherwise the model's template, or "chatml" when it has none.  An explicit
 * tmpl overrides: "gemma" selects MD_LLAMA_CHAT_GEMMA, any other string is a
 * template for llama_chat_apply_template ("chatml", a builtin name, jinja). */
int md_llama_chat_init(struct md_llama_chat *c, const struct llama_model *model, const char *tmpl);
/* "gemma" or "template" (enum md_llama_chat_format). */
const char *md_llama_chat_format_name(const struct md_llama_chat *c);
/* The token that ends a turn in this format: <end_of_turn> for Gemma; the
 * vocabulary's end-of-turn token (llama_vocab_eot), else <|im_end|> when it is
 * one token, else the vocabulary's EOS.  LLAMA_TOKEN_NULL when none. */
llama_token md_llama_chat_eot(const struct md_llama_chat *c, const struct llama_model *model);
void md_llama_chat_free(struct md_llama_chat *c);
/* Appends a message; *delta (malloc'd) is the text it adds to the prompt. */
int md_llama_chat_push(struct md_llama_chat *c, const char *role, const char *content,
		       char **delta);
/* The text a message would add, followed by the assistant header when
 * add_ass; the conversation is left as it was.  role NULL: only the header. */
int md_llama_chat_peek(struct md_llama_chat *c, const char *role, const char *content,
		       int add_ass, char **delta);

/* Tokenizes text (special tokens parsed); *out malloc'd. */
int md_llama_tokenize(const struct llama_model *model, const char *text, int add_special,
		      llama_token **out, uint32_t *n);

#ifdef __cplusplus
}
#endif
#endif
