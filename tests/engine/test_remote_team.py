"""Two users on one llama-server slot (a real server): the second user's document takes the slot,
and the first user's next keystroke on its own document must find its prompt again, not decode it
anew. That is the theft a team meets when users outnumber slots (bench.team measures it at 4 and
8 users); what repairs it is the server's RAM prompt cache, consulted when a request names a slot
holding another prompt, which llama-server does only with a non-zero --slot-prompt-similarity.
The test claims no speed: it counts the prompt tokens the server evaluated (its own counters)."""

from __future__ import annotations

import pytest

from engine import CompletionRequest, Engine, EngineConfig
from tests.fixtures import start_llama_server

pytestmark = pytest.mark.model

HEADER = "# Copyright 2025-26 Example Team. SPDX-License-Identifier: Apache-2.0\nfrom __future__ import annotations\n\nimport os\nimport re\n\n"
MINE = HEADER + (
    "def parse_arguments(argv):\n    \"\"\"Read the command line and return the options the tool was started with:\n"
    "    the input files, the output directory, how verbose to be, and whether to overwrite files\n"
    "    that are already there. Unknown options stop the tool with a message.\"\"\"\n"
    "    parser = make_parser()\n    return parser."
)
THEIRS = HEADER + (
    "class Inventory:\n    \"\"\"Items in the warehouse, counted by shelf and by the day they arrived;\n"
    "    an item leaves when it is sold, and the count of each shelf is checked every evening against\n"
    "    the orders of the day.\"\"\"\n\n    def __init__(self, shelves):\n        self."
)
# llama-server saves the slot's prompt to RAM only when less than half of it is kept, so the two
# documents are each more than twice as long as the header they share.


def engine_for(url: str) -> Engine:
    return Engine.load(EngineConfig(model_server=url, model_server_timeout_s=120.0, threads=1))


@pytest.mark.parametrize("similarity,restored", [("0.1", True), ("0", False)])
def test_a_prompt_displaced_by_another_user_comes_back_from_the_ram_cache(similarity, restored):
    server = start_llama_server(slots=1, extra_args=("--slot-prompt-similarity", similarity))
    me, other = engine_for(server.url), engine_for(server.url)
    try:
        mine = CompletionRequest(MINE, "pars", max_tokens=3)
        first = me.complete(mine)
        assert me.complete(CompletionRequest(MINE, "parse", max_tokens=3)).stats.decoded_tokens <= 1
        other.complete(CompletionRequest(THEIRS, "ite", max_tokens=3))  # takes the one slot
        # Another word than the one suggested, so the distributions remembered do not answer it.
        back = me.complete(CompletionRequest(MINE, "opt", max_tokens=3))
        assert back.stats.round_trips >= 1
        if restored:
            # Restored from RAM: at most the prompt's last token and the covering's few tokens.
            assert back.stats.decoded_tokens <= 3, back.stats
        else:
            # Only the shared header was kept: the rest of the prompt is decoded again.
            assert back.stats.decoded_tokens >= first.stats.prompt_tokens // 2, back.stats
        assert back.text.startswith("opt")
    finally:
        me.close()
        other.close()
        server.stop()
