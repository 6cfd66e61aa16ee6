"""A CPU model server for small Hugging Face models that speaks vLLM's chat-completions wire format.

Where vLLM cannot run (no GPU, a laptop, CI), the demo and the end-to-end tests
serve a tiny model with this instead, so the real LLMProxy and LiteLLM see the
same bytes they see from ``vllm serve``:

- ``GET /health`` answers 200 once the model is loaded; ``GET /v1/models`` lists it.
- ``POST /v1/chat/completions`` is OpenAI-compatible (``max_tokens`` /
  ``max_completion_tokens``, ``temperature``, ``top_p``, ``top_k``, ``seed``,
  ``stop``, ``stop_token_ids``, ``ignore_eos``, ``tools`` (handed to the chat
  template), ``stream``), ``n`` must be 1.
- With ``return_token_ids: true`` (vLLM >= 0.10.2) the response also carries the
  top-level ``prompt_token_ids`` and per-choice ``token_ids``, as vLLM's
  ``ChatCompletionResponse`` / ``ChatCompletionResponseChoice`` do; without it both
  are null. Every field vLLM 0.32 sends is sent, null where vLLM's is null
  (``tests/serve/test_vllm_parity.py`` checks it against recorded vLLM responses).
- ``logprobs`` / ``top_logprobs`` (of the raw model distribution, as vLLM's default).
- With ``--tool-call-parser hermes``, a response to a request with ``tools`` is parsed
  for hermes ``<tool_call>`` JSON like vLLM's parser (``serve.hermes``), streamed too.

Token ids follow vLLM: the prompt ids are the chat template rendered with
``add_generation_prompt`` and tokenized without extra special tokens; the
response ids are every generated token, including the EOS that ended the
completion (vLLM keeps the stop token in ``output.token_ids`` and drops it only
from the text) and the tokens that completed a stop string (the text is cut
before the stop string, the ids are not). So ``prompt_token_ids + token_ids``
is exactly what the model saw and produced, which is what SFT trains on.

Generation is greedy at temperature 0 and seeded sampling otherwise (the same
seed gives the same completion); requests are served one at a time under a
lock, which is the right thing on a CPU.

Run it like ``vllm serve``::

    python -m serve.cpu_server --model DIR --port 8000 [--served-model-name NAME] [--max-model-len N]
"""

from __future__ import annotations

import json
import queue
import secrets
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tracebank.serve.adapters import adapter_base
from tracebank.serve.config import CpuServerConfig
from tracebank.serve.errors import ModelLoadError, ServeUsageError
from tracebank.serve.hermes import StreamingToolParser, arguments_as_objects, parse_tool_calls

#: What ``system_fingerprint`` says (vLLM sends ``vllm-<version>-<hash>``).
FINGERPRINT = "tracebank-cpu-server"
#: Tool-call parsers the CPU server knows (vLLM's names).
TOOL_CALL_PARSERS = ("hermes",)


class RequestError(Exception):
    """A request the server refuses; becomes an OpenAI-style error body with ``status``."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param

    def body(self) -> dict[str, Any]:
        kind = {400: "BadRequestError", 404: "NotFoundError"}.get(self.status, "InternalServerError")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True)
class SamplingSpec:
    """The sampling options of one request, already validated."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    logprobs: int | None = None
    """Alternatives per token to report (``top_logprobs``); None when logprobs were not asked for."""


@dataclass
class Generation:
    """The outcome of one completion."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"
    stop_reason: str | int | None = None
    logprobs: list[dict[str, Any]] = field(default_factory=list)


def _message_text(content: Any) -> str:
    """OpenAI content (string, None or a list of parts) as one string, as vLLM's "string" format does."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
                texts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                texts.append(part)
            else:
                raise RequestError("only text content parts are supported", param="messages")
        return "\n".join(texts)
    raise RequestError(f"message content of type {type(content).__name__} is not supported", param="messages")


def normalise_messages(messages: Any) -> list[dict[str, Any]]:
    """Validate chat messages and flatten their content to strings for the chat template."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    out = []
    for msg in messages:
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise RequestError("each message needs a string role", param="messages")
        out.append({**msg, "content": _message_text(msg.get("content"))})
    return out


class ChatModel:
    """A causal LM and its tokenizer, loaded once; renders prompts and generates completions."""

    def __init__(self, config: CpuServerConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if config.threads:
            torch.set_num_threads(config.threads)
        folder = Path(config.model)
        base = adapter_base(folder)
        if base is None and not (folder / "config.json").is_file():
            raise ModelLoadError(
                f"{folder} is not a model folder (no config.json)",
                "pass a local Hugging Face model folder to --model",
            )
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
            self.model = AutoModelForCausalLM.from_pretrained(str(base or folder), dtype=torch.float32)
            if base is not None:
                # A LoRA adapter on its base (what vLLM serves with --enable-lora): merged in memory.
                from peft import PeftModel

                self.model = PeftModel.from_pretrained(self.model, str(folder)).merge_and_unload()
        except Exception as exc:  # transformers raises many types; the user needs one line
            raise ModelLoadError(f"cannot load the model in {folder}: {exc}".splitlines()[0]) from exc
        if not getattr(self.tokenizer, "chat_template", None):
            raise ModelLoadError(
                f"the tokenizer in {folder} has no chat template", "use an instruct/chat model folder"
            )
        self.model.eval()
        self.name = config.model_name
        self.root = str(folder)
        positions = getattr(self.model.config, "max_position_embeddings", None) or 2048
        self.max_model_len = int(config.max_model_len or positions)
        if self.max_model_len > positions:
            raise ServeUsageError(
                f"--max-model-len {self.max_model_len} exceeds the model's {positions} positions"
            )
        self.default_max_tokens = config.default_max_tokens
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self.eos_token_ids = frozenset(int(i) for i in eos_ids)
        # vLLM takes its default sampling from generation_config.json; only what the file sets.
        diff = self.model.generation_config.to_diff_dict()
        self.default_sampling = {k: diff[k] for k in ("temperature", "top_p", "top_k") if k in diff}
        if config.tool_call_parser not in (None, *TOOL_CALL_PARSERS):
            raise ServeUsageError(
                f"unknown --tool-call-parser {config.tool_call_parser!r}",
                f"the CPU server knows {', '.join(TOOL_CALL_PARSERS)}",
            )
        self.tool_call_parser = config.tool_call_parser
        self.lock = threading.Lock()

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: Any = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> tuple[str, list[int]]:
        """The chat template text (with the generation prompt) and its token ids."""
        try:
            text = self.tokenizer.apply_chat_template(
                messages,
                tools=tools or None,
                add_generation_prompt=True,
                tokenize=False,
                **(chat_template_kwargs or {}),
            )
        except Exception as exc:  # jinja errors: a message the template cannot render
            raise RequestError(
                f"the chat template cannot render these messages: {exc}", param="messages"
            ) from exc
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return str(text), [int(i) for i in ids]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))

    def generate(
        self,
        prompt_ids: list[int],
        spec: SamplingSpec,
        on_text: Callable[[str, list[int]], None] | None = None,
    ) -> Generation:
        """Generate one completion; ``on_text(delta, new_ids)`` streams it as it grows."""
        import torch

        result = Generation()
        generator = torch.Generator().manual_seed(
            spec.seed if spec.seed is not None else secrets.randbits(63)
        )
        stop_ids = set(spec.stop_token_ids) | (set() if spec.ignore_eos else set(self.eos_token_ids))
        # Text that could still turn out to start a stop string is held back while streaming.
        hold = max((len(s) for s in spec.stop), default=1) - 1
        sent_chars, sent_ids = 0, 0
        text = ""
        past = None
        inputs = torch.tensor([prompt_ids], dtype=torch.long)
        with torch.inference_mode():
            for _ in range(spec.max_tokens):
                out = self.model(input_ids=inputs, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()
                token = self._pick(logits, spec, generator)
                result.token_ids.append(token)
                if spec.logprobs is not None:
                    result.logprobs.append(self._logprob_entry(logits, result.token_ids, spec))
                if token in stop_ids:
                    # The stop token stays in the ids (as in vLLM) but not in the text.
                    result.finish_reason = "stop"
                    result.stop_reason = None if token in self.eos_token_ids else token
                    text = self.decode(result.token_ids[:-1], spec.skip_special_tokens)
                    break
                text = self.decode(result.token_ids, spec.skip_special_tokens)
                hit = self._find_stop(text, spec.stop, sent_chars)
                if hit is not None:
                    text = text[: hit[0]]
                    result.finish_reason, result.stop_reason = "stop", hit[1]
                    break
                if on_text is not None:
                    # One call per token, as vLLM streams; trailing U+FFFD may be a multi-byte
                    # character still being completed, so it waits, like a possible stop string.
                    safe = max(sent_chars, min(len(text) - hold, len(text.rstrip("\ufffd"))))
                    on_text(text[sent_chars:safe], result.token_ids[sent_ids:])
                    sent_chars, sent_ids = safe, len(result.token_ids)
                inputs = torch.tensor([[token]], dtype=torch.long)
        if not isinstance(result.stop_reason, str):
            # A character whose bytes are still incomplete when generation ends never reaches the
            # text in vLLM (its incremental detokenizer waits for the rest); the ids keep its tokens.
            # Text cut by a stop string was already complete up to the stop string.
            text = text.rstrip("\ufffd")
        result.text = text
        if on_text is not None and (len(text) > sent_chars or len(result.token_ids) > sent_ids):
            on_text(text[sent_chars:], result.token_ids[sent_ids:])
        return result

    def _logprob_entry(self, logits: Any, context: list[int], spec: SamplingSpec) -> dict[str, Any]:
        """vLLM's logprobs entry of the last token of ``context`` (raw log-probabilities)."""
        import torch

        logprobs = torch.log_softmax(logits, dim=-1)
        *before, token = context

        def item(token_id: int) -> dict[str, Any]:
            text = self._token_text(token_id, before)
            return {"token": text, "logprob": float(logprobs[token_id]), "bytes": list(text.encode("utf-8"))}

        top = torch.topk(logprobs, min(spec.logprobs or 0, logprobs.numel())).indices.tolist()
        return {**item(token), "top_logprobs": [item(int(i)) for i in top]}

    def _token_text(self, token_id: int, before: list[int]) -> str:
        """A token's text as vLLM reports it in logprobs.

        A token that ends in part of a multi-byte character decodes to U+FFFD; like vLLM,
        decode it after up to four of the tokens before it and keep what it adds, or ""
        when the character is still incomplete.
        """
        text = str(self.tokenizer.decode([token_id]))
        if not text.endswith("\ufffd"):
            return text
        for size in range(1, min(len(before), 4) + 1):
            context = before[-size:]
            whole = str(self.tokenizer.decode(context + [token_id]))
            if whole.endswith("\ufffd"):
                continue
            clean = len(context)
            while clean > 0 and str(self.tokenizer.decode([context[clean - 1]])).endswith("\ufffd"):
                clean -= 1
            prefix = str(self.tokenizer.decode(context[:clean])) if clean else ""
            if whole.startswith(prefix):
                return whole[len(prefix) :]
            common = 0
            for a, b in zip(prefix, whole, strict=False):
                if a != b:
                    break
                common += 1
            return whole[common:]
        return ""

    @staticmethod
    def _find_stop(text: str, stops: tuple[str, ...], searched: int) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for s in stops:
            # A stop string can only end in the new text, so start one stop-length before it.
            i = text.find(s, max(0, searched - len(s)))
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        return best

    @staticmethod
    def _pick(logits: Any, spec: SamplingSpec, generator: Any) -> int:
        import torch

        if spec.temperature <= 0:
            return int(torch.argmax(logits))
        logits = logits / spec.temperature
        if spec.top_k and spec.top_k > 0:
            kth = torch.topk(logits, min(spec.top_k, logits.numel())).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if spec.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < spec.top_p
            keep[0] = True
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=generator))


def _number(body: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = body.get(key)
    if value is None:
        return default
    whole = not (kind is int and isinstance(value, float) and not value.is_integer())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not whole:
        raise RequestError(f"{key} must be a{'n integer' if kind is int else ' number'}", param=key)
    return kind(value)


def sampling_spec(body: dict[str, Any], model: ChatModel, prompt_len: int) -> SamplingSpec:
    """Validate the request's sampling options against the model's context length."""
    n = _number(body, "n", int, 1)
    if n != 1:
        raise RequestError("the CPU server generates one choice per request (n=1)", param="n")
    room = model.max_model_len - prompt_len
    if room <= 0:
        raise RequestError(
            f"This model's maximum context length is {model.max_model_len} tokens. "
            f"However, your messages resulted in {prompt_len} tokens. "
            "Please reduce the length of the messages.",
            param="messages",
        )
    requested = body.get("max_completion_tokens")
    key = "max_completion_tokens"
    if requested is None:
        requested, key = body.get("max_tokens"), "max_tokens"
    if requested is None:
        max_tokens = min(model.default_max_tokens, room)
    else:
        max_tokens = _number(body, key, int, None)
        if max_tokens < 1:
            raise RequestError(f"{key} must be at least 1", param=key)
        if max_tokens > room:
            raise RequestError(
                f"This model's maximum context length is {model.max_model_len} tokens. However, you "
                f"requested {prompt_len + max_tokens} tokens ({prompt_len} in the messages, {max_tokens} "
                "in the completion). Please reduce the length of the messages or completion.",
                param=key,
            )
    temperature = _number(body, "temperature", float, model.default_sampling.get("temperature", 1.0))
    top_p = _number(body, "top_p", float, model.default_sampling.get("top_p", 1.0))
    top_k = _number(body, "top_k", int, model.default_sampling.get("top_k", 0))
    if temperature < 0 or not 0 < top_p <= 1:
        raise RequestError("temperature must be >= 0 and top_p in (0, 1]")
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
        raise RequestError("stop must be a string or a list of non-empty strings", param="stop")
    stop_ids = body.get("stop_token_ids") or ()
    if not isinstance(stop_ids, (list, tuple)) or not all(isinstance(i, int) for i in stop_ids):
        raise RequestError("stop_token_ids must be a list of integers", param="stop_token_ids")
    seed = _number(body, "seed", int, None)
    top_logprobs = _number(body, "top_logprobs", int, 0)
    if top_logprobs < 0 or top_logprobs > 20:
        raise RequestError("top_logprobs must be between 0 and 20", param="top_logprobs")
    return SamplingSpec(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        stop=tuple(stop),
        stop_token_ids=tuple(stop_ids),
        ignore_eos=bool(body.get("ignore_eos")),
        skip_special_tokens=bool(body.get("skip_special_tokens", True)),
        logprobs=top_logprobs if body.get("logprobs") else None,
    )


@dataclass
class PreparedRequest:
    """A validated chat request: its prompt and sampling, ready to generate."""

    prompt_text: str
    prompt_ids: list[int]
    spec: SamplingSpec
    return_token_ids: bool
    stream: bool
    include_usage: bool
    parse_tools: bool = False
    """Whether the response is parsed for tool calls (tools given, tool_choice auto, a parser on)."""
    request_id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex[:16]}")
    created: int = field(default_factory=lambda: int(time.time()))


def prepare(body: Any, model: ChatModel) -> PreparedRequest:
    """Validate a chat-completions body and render its prompt."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    asked = body.get("model")
    if asked is not None and asked != model.name:
        raise RequestError(
            f"The model `{asked}` does not exist. Valid aliases: {model.name}.", status=404, param="model"
        )
    for unsupported in ("structured_outputs", "response_format", "guided_json", "guided_regex"):
        value = body.get(unsupported)
        if value is not None and value != {"type": "text"}:
            # Ignoring it would answer with text the client did not constrain: refuse instead.
            raise RequestError(f"the CPU server does not support {unsupported}", param=unsupported)
    messages = arguments_as_objects(normalise_messages(body.get("messages")))
    tools = body.get("tools")
    parse_tools = _parses_tools(body, model)
    kwargs = body.get("chat_template_kwargs")
    text, ids = model.render(messages, tools, kwargs if isinstance(kwargs, dict) else None)
    options = body.get("stream_options") or {}
    spec = sampling_spec(body, model, len(ids))
    if parse_tools:
        # As vLLM's hermes parser: the tags may be special tokens, which must stay in the text.
        spec = replace(spec, skip_special_tokens=False)
    return PreparedRequest(
        prompt_text=text,
        prompt_ids=ids,
        spec=spec,
        return_token_ids=bool(body.get("return_token_ids")),
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        parse_tools=parse_tools,
    )


def _parses_tools(body: dict[str, Any], model: ChatModel) -> bool:
    """Whether the response to ``body`` is parsed for tool calls; refuses what the CPU server cannot do."""
    choice = body.get("tool_choice")
    if not body.get("tools") or choice == "none":
        return False
    if choice not in (None, "auto"):
        # vLLM forces these with guided decoding, which the CPU server does not have.
        raise RequestError("the CPU server supports tool_choice 'auto' and 'none' only", param="tool_choice")
    if model.tool_call_parser is None:
        raise RequestError(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
            param="tool_choice",
        )
    return True


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
    }


def completion_body(req: PreparedRequest, gen: Generation, model_name: str) -> dict[str, Any]:
    """The non-streamed response, in vLLM 0.32's ChatCompletionResponse shape (its nulls included)."""
    content: str | None = gen.text
    tool_calls: list[dict[str, Any]] = []
    if req.parse_tools:
        content, tool_calls = parse_tool_calls(gen.text)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    message["reasoning"] = None
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "logprobs": {"content": gen.logprobs} if req.spec.logprobs is not None else None,
        "finish_reason": "tool_calls" if tool_calls else gen.finish_reason,
        "stop_reason": gen.stop_reason,
        "token_ids": list(gen.token_ids) if req.return_token_ids else None,
        "routed_experts": None,
    }
    return {
        "id": req.request_id,
        "object": "chat.completion",
        "created": req.created,
        "model": model_name,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": FINGERPRINT,
        "usage": {**_usage(len(req.prompt_ids), len(gen.token_ids)), "completion_tokens_details": None},
        "prompt_logprobs": None,
        "prompt_token_ids": list(req.prompt_ids) if req.return_token_ids else None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def stream_chunk(
    req: PreparedRequest,
    model_name: str,
    delta: dict[str, Any],
    token_ids: list[int],
    finish_reason: str | None = None,
    stop_reason: Any = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` after the first, in vLLM 0.32's shape."""
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    choice["token_ids"] = list(token_ids) if req.return_token_ids else None
    return {
        "id": req.request_id,
        "object": "chat.completion.chunk",
        "created": req.created,
        "model": model_name,
        "choices": [choice],
    }


def first_chunk(req: PreparedRequest, model_name: str) -> dict[str, Any]:
    """The chunk that opens a stream: the role, and the prompt ids (null unless asked for)."""
    return {
        "id": req.request_id,
        "object": "chat.completion.chunk",
        "created": req.created,
        "model": model_name,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
        "prompt_token_ids": list(req.prompt_ids) if req.return_token_ids else None,
        "prompt_text": None,
    }


def usage_chunk(req: PreparedRequest, model_name: str, completion_tokens: int) -> dict[str, Any]:
    """The last chunk when ``stream_options.include_usage`` is set (no choices)."""
    usage = _usage(len(req.prompt_ids), completion_tokens)
    del usage["prompt_tokens_details"]  # vLLM's streamed usage leaves it out
    return {
        "id": req.request_id,
        "object": "chat.completion.chunk",
        "created": req.created,
        "model": model_name,
        "choices": [],
        "usage": usage,
        "system_fingerprint": FINGERPRINT,
    }


def iter_stream(req: PreparedRequest, model: ChatModel) -> Iterator[str]:
    """SSE lines of a streamed completion, generated on a worker thread under the model lock.

    As vLLM: one chunk per generated token; the last one carries ``finish_reason``, and
    ``system_fingerprint`` unless a usage chunk follows (then that one does).
    """

    def sse(obj: dict[str, Any]) -> str:
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

    yield sse(first_chunk(req, model.name))
    events: queue.Queue[tuple[str, Any]] = queue.Queue()

    def work() -> None:
        try:
            with model.lock:
                gen = model.generate(
                    req.prompt_ids,
                    req.spec,
                    on_text=lambda text, ids: events.put(("piece", (text, list(ids)))),
                )
            events.put(("done", gen))
        except Exception as exc:  # reported in-band: the 200 status line has already gone out
            events.put(("error", exc))

    threading.Thread(target=work, name="cpu-server-generate", daemon=True).start()
    tools = StreamingToolParser() if req.parse_tools else None
    text = ""

    def delta(piece: str) -> dict[str, Any]:
        nonlocal text
        text += piece
        return tools.delta(text) if tools is not None else {"content": piece}

    # One piece is held back so the last one can carry finish_reason, as vLLM's last chunk does.
    held: tuple[dict[str, Any], list[int]] | None = None
    while True:
        kind, value = events.get()
        if kind == "piece":
            if held is not None:
                yield sse(stream_chunk(req, model.name, held[0], held[1]))
            held = (delta(value[0]), value[1])
            continue
        if kind == "error":
            yield sse(RequestError(f"generation failed: {value}", status=500).body())
            yield "data: [DONE]\n\n"
            return
        gen = value
        break
    last_delta, last_ids = held if held is not None else ({}, [])
    finish = "tool_calls" if tools is not None and tools.called else gen.finish_reason
    last = stream_chunk(req, model.name, last_delta, last_ids, finish, gen.stop_reason)
    if not req.include_usage:
        last["system_fingerprint"] = FINGERPRINT
    yield sse(last)
    if req.include_usage:
        yield sse(usage_chunk(req, model.name, len(gen.token_ids)))
    yield "data: [DONE]\n\n"


def create_app(model: ChatModel) -> Any:
    """The FastAPI app serving ``model``."""
    import asyncio

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response, StreamingResponse

    app = FastAPI(title="tracebank CPU model server")

    # Plain Starlette routes: FastAPI would resolve the (postponed) annotations of these local
    # functions against the module globals, where the lazily imported Request does not exist.
    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": model.name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "tracebank",
                        "root": model.root,
                        "parent": None,
                        "max_model_len": model.max_model_len,
                        "permission": [],
                    }
                ],
            }
        )

    async def chat(request: Request) -> Response:
        try:
            try:
                body = await request.json()
            except ValueError as exc:
                raise RequestError(f"the request body is not valid JSON: {exc}") from exc
            req = prepare(body, model)
        except RequestError as err:
            return JSONResponse(err.body(), status_code=err.status)
        if req.stream:
            return StreamingResponse(iter_stream(req, model), media_type="text/event-stream")

        def run() -> Generation:
            with model.lock:
                return model.generate(req.prompt_ids, req.spec)

        gen = await asyncio.to_thread(run)
        return JSONResponse(completion_body(req, gen, model.name))

    app.router.add_route("/health", health, methods=["GET"])
    app.router.add_route("/v1/models", models, methods=["GET"])
    app.router.add_route("/v1/chat/completions", chat, methods=["POST"])
    return app


def parse_args(argv: list[str] | None = None) -> CpuServerConfig:
    """The server's flags: one per CpuServerConfig field."""
    return CpuServerConfig.from_argv(argv, prog="python -m tracebank.serve.cpu_server")


def serve(config: CpuServerConfig) -> None:
    """Load the model and serve it until interrupted (blocking)."""
    import uvicorn

    model = ChatModel(config)
    app = create_app(model)
    print(
        f"tracebank CPU server: {model.name} on http://{config.host}:{config.port}",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning")


def main(argv: list[str] | None = None) -> int:
    from tracebank.core.errors import TracebankError

    try:
        serve(parse_args(argv))
    except TracebankError as err:
        print(f"Error: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
