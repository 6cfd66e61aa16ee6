"""Serve a real InMemoryLightningStore with a small eviction threshold over HTTP.

`agl store` builds exactly this server around an InMemoryLightningStore, but
sizes the eviction threshold at 70% of the machine's memory and has no flag to
change it; a test cannot fill gigabytes. Same classes, same code path, a
threshold of a few kilobytes:

    python -m tests.collect.evicting_store PORT THRESHOLD_BYTES
"""

from __future__ import annotations

import asyncio
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def main() -> None:
    from agentlightning.store.client_server import LightningStoreServer
    from agentlightning.store.memory import InMemoryLightningStore

    port, threshold = int(sys.argv[1]), int(sys.argv[2])
    store = InMemoryLightningStore(thread_safe=True, eviction_memory_threshold=threshold)
    server = LightningStoreServer(store, host="127.0.0.1", port=port, launch_mode="asyncio")
    asyncio.run(server.run_forever())


if __name__ == "__main__":
    main()
