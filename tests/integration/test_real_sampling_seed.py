"""What sampling_params.sampling_seed does on the real SGLang 0.5.23 server (CPU).

--samples-per-prompt sends each sample with its own seed (synthgen.data.samples.sample_seed). SGLang
honours the seed only when the server runs with ``--enable-deterministic-inference``
(sampling_batch_info.py gathers the seeds only then; otherwise the request is accepted and sampled by
torch.multinomial), and that flag needs a GPU attention backend: on this CPU the server exits at start
("Currently only ['ascend', 'fa3', 'fa4', 'flashinfer', 'intel_xpu', 'triton'] attention backends are
supported for deterministic inference"). Measured here at temperature 1.0 without the flag: the same seed
twice gave two different answers (they agreed on the first 6 of 24 tokens). So on CPU, and on a GPU server
without the flag, a sample drawn at temperature above 0 is not reproduced by its seed; what holds
everywhere, and is tested here, is that the seed is accepted and a greedy recipe (temperature 0) gives
every sample the same answer.
"""

from __future__ import annotations

import pytest

from synthgen.data.samples import sample_seed

pytestmark = pytest.mark.real_sglang

PROMPT = [1, 872, 198, 72, 105, 2, 198, 1, 77, 198]  # any ids of the 2048-token vocabulary


def generate(server, seed: int, temperature: float) -> list[int]:
    params = {"max_new_tokens": 24, "temperature": temperature, "skip_special_tokens": False, "sampling_seed": seed}
    answer = server.post("/generate", {"input_ids": PROMPT, "sampling_params": params})
    assert answer.status_code == 200, answer.text
    return answer.json()["output_ids"]


def test_per_sample_seeds_are_accepted_and_a_greedy_recipe_gives_every_sample_the_same_answer(real_server):
    seeds = [sample_seed(0, "p1", k) for k in range(3)]
    assert all(0 <= s < 2**63 for s in seeds)  # inside SGLang's [-2**63, 2**63 - 1]
    greedy = [generate(real_server, s, 0.0) for s in seeds]
    assert greedy[0] == greedy[1] == greedy[2]
    sampled = generate(real_server, seeds[0], 1.0)
    assert len(sampled) > 0
