/*
 * md_llama_chat.h — region labels from chat messages (docs/design.md §5) through
 * the model's own chat template (llama_chat_apply_template).  Each message's
 * span of the formatted prompt (role header and separators included) is the
 * difference between the prompt with and without it, so the template's own
 * tokens take the region of their message.
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

struct md_llama_chat {
	char *tmpl;                        /* model template (or a builtin name) */
	struct llama_chat_message *msgs;
	char **owned;                      /* role, content copies */
	size_t n, cap;
	char *text;                        /* prompt of msgs[0..n), no assistant header */
	int32_t text_len;
};

/* tmpl NULL: the model's template. */
int md_llama_chat_init(struct md_llama_chat *c, const struct llama_model *model, const char *tmpl);
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
