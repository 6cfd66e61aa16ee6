"""Constants of the data contract between the stages: defined here once, imported everywhere.

Changing one changes what the warehouse means, so each says who depends on it.
"""

from __future__ import annotations

#: Label of a token that carries no loss (the prompt): transformers' and TRL's ignore index.
IGNORE_INDEX = -100

#: The proxy span that carries the raw vLLM request and response (token ids as LiteLLM copies them).
RAW_LLM_SPAN = "raw_gen_ai_request"
#: LiteLLM's own span of a proxied call (messages, usage, response id, token ids when recorded).
LITELLM_SPAN = "litellm_request"
#: Every span name that is one LLM call; a rollout without any of them has nothing to train on.
LLM_SPAN_NAMES = (RAW_LLM_SPAN, LITELLM_SPAN)
#: Span of an explicit agentlightning annotation (rewards emitted by ``emit_reward``).
ANNOTATION_SPAN = "agentlightning.annotation"
#: Attribute prefix of the v0.3 reward emitter (``agentlightning.reward.0.value`` is the primary).
REWARD_PREFIX = "agentlightning.reward"

#: Version of the silver tables' derivation; a cache built by another version is rebuilt.
# 2: Agent Lightning 1.0 columns (model_version, logprobs, ...); 3: messages gained tool_calls,
# tool_call_id and tools; 4: llm_calls gained token_source (engine | text) and agent.
SILVER_VERSION = 4
#: ``llm_calls.token_source``: the serving engine's ids were recorded, or only the text was (a
#: chat file, a text log): such a call becomes rows only through a tokenizer's chat template.
ENGINE, TEXT = "engine", "text"
