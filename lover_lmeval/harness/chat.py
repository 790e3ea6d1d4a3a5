"""Whether prompts were chat-templated, and a warning when a checkpoint was trained on the other kind.

A verifier's features are hidden states of its training prompts: a checkpoint trained on chat-templated prompts
(`lover train --apply_chat_template`, recorded as `chat_template` in its metadata) reads other features on plain
prompts, and the other way round, with nothing failing.
"""

from __future__ import annotations

from ..log import log

_MARK = "\x00"  # stands for the user's message when rendering the template's prefix


def is_chat_templated(context: str, tokenizer) -> bool | None:
    """Whether `context` starts as the tokenizer's chat template renders a user turn (None: it has no template)."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": _MARK}], tokenize=False,
                                             add_generation_prompt=True)
    head = rendered.split(_MARK)[0].strip()
    return bool(head) and context.lstrip().startswith(head.splitlines()[0])


def warn_on_prompt_format(contexts: list[str], tokenizer, verifier_meta: dict[str, dict]) -> None:
    """Warn, naming the fix, for each loaded checkpoint whose recorded prompt format differs from this run's."""
    if not contexts or not verifier_meta:
        return
    templated = is_chat_templated(contexts[0], tokenizer)
    for name, meta in verifier_meta.items():
        trained = meta.get("chat_template")
        if templated is None or trained is None or trained == templated:
            continue
        log.warning("verifier %r was trained on %s prompts, but this run's prompts are %s: its scores read other "
                    "features than it learnt from; %s, or retrain it on this run's prompts with `lover train%s`.",
                    name, "chat-templated" if trained else "plain", "chat-templated" if templated else "plain",
                    "add --apply_chat_template" if trained else "drop --apply_chat_template",
                    " --apply_chat_template" if templated else "")
