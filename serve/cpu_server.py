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
  ``ChatCompletionResponse`` / ``ChatCompletionResponseChoice`` do. Without it the
  two fields are left out (vLLM sends them as null; no client reads the null).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracebank.serve.config import CpuServerConfig
from tracebank.serve.errors import ModelLoadError, ServeUsageError


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


@dataclass
class Generation:
    """The outcome of one completion."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"
    stop_reason: str | int | None = None


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
        if not (folder / "config.json").is_file():
            raise ModelLoadError(
                f"{folder} is not a model folder (no config.json)",
                "pass a local Hugging Face model folder to --model",
            )
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
            self.model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
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
                token = self._pick(out.logits[0, -1].float(), spec, generator)
                result.token_ids.append(token)
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
                    # Trailing U+FFFD may be a multi-byte character still being completed.
                    safe = min(len(text) - hold, len(text.rstrip("\ufffd")))
                    if safe > sent_chars:
                        on_text(text[sent_chars:safe], result.token_ids[sent_ids:])
                        sent_chars, sent_ids = safe, len(result.token_ids)
                inputs = torch.tensor([[token]], dtype=torch.long)
        result.text = text
        if on_text is not None and (len(text) > sent_chars or len(result.token_ids) > sent_ids):
            on_text(text[sent_chars:], result.token_ids[sent_ids:])
        return result

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
    request_id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))


def prepare(body: Any, model: ChatModel) -> PreparedRequest:
    """Validate a chat-completions body and render its prompt."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    asked = body.get("model")
    if asked is not None and asked != model.name:
        raise RequestError(f"The model `{asked}` does not exist.", status=404, param="model")
    messages = normalise_messages(body.get("messages"))
    tools = body.get("tools")
    kwargs = body.get("chat_template_kwargs")
    text, ids = model.render(messages, tools, kwargs if isinstance(kwargs, dict) else None)
    options = body.get("stream_options") or {}
    return PreparedRequest(
        prompt_text=text,
        prompt_ids=ids,
        spec=sampling_spec(body, model, len(ids)),
        return_token_ids=bool(body.get("return_token_ids")),
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
    )


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
    }


def completion_body(req: PreparedRequest, gen: Generation, model_name: str) -> dict[str, Any]:
    """The non-streamed response, in vLLM's ChatCompletionResponse shape."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": gen.text},
        "logprobs": None,
        "finish_reason": gen.finish_reason,
        "stop_reason": gen.stop_reason,
    }
    body: dict[str, Any] = {
        "id": req.request_id,
        "object": "chat.completion",
        "created": req.created,
        "model": model_name,
        "choices": [choice],
        "usage": _usage(len(req.prompt_ids), len(gen.token_ids)),
    }
    if req.return_token_ids:
        choice["token_ids"] = list(gen.token_ids)
        body["prompt_token_ids"] = list(req.prompt_ids)
    return body


def stream_chunk(
    req: PreparedRequest,
    model_name: str,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    token_ids: list[int] | None = None,
    first: bool = False,
    stop_reason: Any = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``, in vLLM's ChatCompletionStreamResponse shape."""
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    if req.return_token_ids and token_ids is not None:
        choice["token_ids"] = list(token_ids)
    chunk: dict[str, Any] = {
        "id": req.request_id,
        "object": "chat.completion.chunk",
        "created": req.created,
        "model": model_name,
        "choices": [choice],
    }
    if req.return_token_ids and first:
        chunk["prompt_token_ids"] = list(req.prompt_ids)
    return chunk


def iter_stream(req: PreparedRequest, model: ChatModel) -> Iterator[str]:
    """SSE lines of a streamed completion, generated on a worker thread under the model lock."""

    def sse(obj: dict[str, Any]) -> str:
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

    yield sse(stream_chunk(req, model.name, {"role": "assistant", "content": ""}, token_ids=[], first=True))
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
    # One piece is held back so the last one can carry finish_reason, as vLLM's last chunk does.
    held: tuple[str, list[int]] | None = None
    while True:
        kind, value = events.get()
        if kind == "piece":
            if held is not None:
                yield sse(stream_chunk(req, model.name, {"content": held[0]}, token_ids=held[1]))
            held = value
            continue
        if kind == "error":
            yield sse(RequestError(f"generation failed: {value}", status=500).body())
            yield "data: [DONE]\n\n"
            return
        gen = value
        break
    text, ids = held if held is not None else ("", [])
    yield sse(
        stream_chunk(
            req,
            model.name,
            {"content": text},
            token_ids=ids,
            finish_reason=gen.finish_reason,
            stop_reason=gen.stop_reason,
        )
    )
    if req.include_usage:
        yield sse(
            {
                "id": req.request_id,
                "object": "chat.completion.chunk",
                "created": req.created,
                "model": model.name,
                "choices": [],
                "usage": _usage(len(req.prompt_ids), len(gen.token_ids)),
            }
        )
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
    from tracebank.warehouse.errors import TracebankError

    try:
        serve(parse_args(argv))
    except TracebankError as err:
        print(f"Error: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
